"""Crafted weights folders through every door that loads weights (``udcg weights show`` and
``calibrate``, ``udcg score``, ``udcg order``, ``udcg trec``, evaluate's ``theta_weights``, the
Python API): alpha and beta swapped in the safetensors file, with the card's SHA-256 kept (a
mismatch) or removed (nothing to check against). Each is refused in one line, exit 2; with
``--allow-unverified`` a card without a hash loads, and a warning says the weights are unchecked.
Card strings with escape sequences reach the terminal escaped, in errors too."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from udcg.cli.main import main as udcg
from udcg.errors import UDCGInputError, UDCGWarning
from udcg.io.contexts.jsonl import write_contexts
from udcg.pipeline.benchmark import load_theta
from udcg.theta import UDCGTheta
from udcg.theta.simulate import simulate_contexts as simulate

ALPHA, BETA = [1.5, 0.75, 0.25], [-2.0, -1.0, -0.5]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """Contexts of k=3 judged by ``sim`` (with outcomes), a TREC qrels/run/utilities triple,
    and a weights folder of k=3 fitted with judge ``sim``."""
    contexts = tmp_path / "c.jsonl"
    write_contexts(contexts, simulate(12, 3, seed=2))
    run, qrels, utilities = tmp_path / "run.trec", tmp_path / "qrels.trec", tmp_path / "u.tsv"
    docs = [(f"q{q}", f"d{d}") for q in range(3) for d in range(4)]
    run.write_text("".join(f"{q} Q0 {d} {i} {9 - i} r\n" for i, (q, d) in enumerate(docs)))
    qrels.write_text("".join(f"{q} 0 {d} {int(d in ('d0', 'd2'))}\n" for q, d in docs))
    utilities.write_text("".join(f"{q}\t{d}\t0.25\n" for q, d in docs))
    model = UDCGTheta(3)
    model.alpha_, model.beta_, model.intercept_ = np.array(ALPHA), np.array(BETA), 0.0
    folder = model.save_pretrained(tmp_path / "theta", card={"judge_model": "sim"})
    return {"contexts": contexts, "run": run, "qrels": qrels, "utilities": utilities, "w": folder}


def drop_hash(folder: Path) -> None:
    """Remove ``weights_sha256`` from the folder's config.json, and the card's digest, which
    covers it: a card that verifies nothing."""
    config = json.loads((folder / "config.json").read_text())
    del config["weights_sha256"], config["card_sha256"]
    (folder / "config.json").write_text(json.dumps(config))


def swap(folder: Path, keep_hash: bool) -> None:
    """Swap the alpha and beta tensors of the folder; keep the card's (now wrong) SHA-256, or
    remove it."""
    path = folder / "model.safetensors"
    tensors = st_load(path.read_bytes())
    tensors["alpha"], tensors["beta"] = tensors["beta"], tensors["alpha"]
    path.write_bytes(st_save(tensors, metadata={"format": "udcg-theta"}))
    if not keep_hash:
        drop_hash(folder)


#: each door that loads weights: its arguments (``{name}``: a path of ``files``)
DOORS: dict[str, list[str]] = {
    "weights show": ["weights", "show", "{w}"],
    "weights calibrate": ["weights", "calibrate", "{w}", "{contexts}", "-o", "{tmp}/cal"],
    "score": ["score", "{contexts}", "--judge", "sim", "--weights", "{w}"],
    "order": ["order", "{contexts}", "-o", "{tmp}/ordered.jsonl", "--weights", "{w}"],
    "trec": [
        *["trec", "{qrels}", "{run}", "-m", "UDCGtheta@3"],
        *["--utilities", "{utilities}", "--weights", "{w}"],
    ],
}


def _args(door: str, files: dict[str, Path], *extra: str) -> list[str]:
    given = {**{k: str(v) for k, v in files.items()}, "tmp": str(files["w"].parent)}
    return [arg.format(**given) for arg in DOORS[door]] + list(extra)


@pytest.mark.parametrize("keep_hash", [True, False], ids=["hash kept", "hash removed"])
@pytest.mark.parametrize("door", list(DOORS))
def test_swapped_tensors_are_refused_in_one_line(
    files: dict[str, Path], capsys, door: str, keep_hash: bool
) -> None:
    swap(files["w"], keep_hash)
    assert udcg(_args(door, files)) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    reason = "SHA-256 differs" if keep_hash else "records no weights_sha256"
    assert line.startswith(f"udcg {door.split()[0]}: error: ") and reason in line
    assert "Traceback" not in captured.err


@pytest.mark.parametrize("keep_hash", [True, False], ids=["hash kept", "hash removed"])
def test_swapped_tensors_are_refused_by_the_api_and_evaluate(
    files: dict[str, Path], keep_hash: bool
) -> None:
    swap(files["w"], keep_hash)
    reason = "SHA-256 differs" if keep_hash else "records no weights_sha256"
    loaders: list[Callable[[], object]] = [
        lambda: UDCGTheta.from_pretrained(files["w"]),
        lambda: UDCGTheta.load(files["w"]),
        lambda: load_theta(str(files["w"]), 3, "abstention"),
    ]
    for load in loaders:
        with pytest.raises(UDCGInputError, match=reason):
            load()


@pytest.mark.parametrize("door", list(DOORS))
def test_allowed_unverified_weights_load_with_a_warning(
    files: dict[str, Path], capsys, door: str
) -> None:
    drop_hash(files["w"])
    assert udcg(_args(door, files, "--allow-unverified")) == 0, capsys.readouterr().err
    warnings = [
        line for line in capsys.readouterr().err.splitlines() if "unverified weights" in line
    ]
    assert warnings and warnings[0].startswith(f"udcg {door.split()[0]}: warning: ")


def test_allowed_unverified_weights_are_used_as_the_file_holds_them(
    files: dict[str, Path],
) -> None:
    swap(files["w"], keep_hash=False)
    with pytest.warns(UDCGWarning, match="unverified weights"):
        model = UDCGTheta.from_pretrained(files["w"], allow_unverified=True)
    assert model.alpha_.tolist() == BETA and model.beta_.tolist() == ALPHA
    with pytest.warns(UDCGWarning, match="unverified weights"):
        loaded, _ = load_theta(str(files["w"]), 3, "abstention", allow_unverified=True)
    assert loaded.alpha_.tolist() == BETA


def test_escape_sequences_of_a_card_reach_errors_escaped(tmp_path: Path, capsys) -> None:
    """The card's judge names the field a missing value is reported under: the error line
    shows it escaped, not as a terminal command."""
    model = UDCGTheta(3)
    model.alpha_, model.beta_, model.intercept_ = np.array(ALPHA), np.array(BETA), 0.0
    judge = "\x1b]0;title\x07\x1b[2J"
    folder = model.save_pretrained(tmp_path / "theta", card={"judge_model": judge})
    contexts = tmp_path / "c.jsonl"
    write_contexts(contexts, simulate(2, 3))
    assert (
        udcg(["order", str(contexts), "-o", str(tmp_path / "o.jsonl"), "--weights", str(folder)])
        == 2
    )
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err
    assert r"\x1b]0;title\x07\x1b[2J" in err
