"""udcg score: reuse fitted UDCG-theta weights, score contexts, means per run and k."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from udcg import metrics
from udcg.cli.score import main
from udcg.io.contexts.jsonl import write_contexts
from udcg.theta import UDCGTheta
from udcg.theta.simulate import simulate_contexts as simulate


@pytest.fixture
def fitted(tmp_path: Path) -> Path:
    contexts = simulate(40, 3, seed=3)
    rel = np.array([[p.relevant for p in c.passages] for c in contexts], dtype=float)
    u = np.array([[1 - p.abstain_prob["sim"] for p in c.passages] for c in contexts])
    correct = np.array([c.outcomes["sim"]["correct"] for c in contexts], dtype=float)
    path = tmp_path / "w.safetensors"
    UDCGTheta(3, val_fraction=0.0).fit(rel, u, correct).save(path, card={"utility": "abstention"})
    return path


def test_scores_match_the_library(tmp_path: Path, fitted: Path, capsys) -> None:
    contexts = simulate(5, 3, seed=9) + simulate(2, 4, seed=1)
    data, out = tmp_path / "c.jsonl", tmp_path / "scores.jsonl"
    write_contexts(data, contexts)
    assert main([str(data), "--judge", "sim", "--weights", str(fitted), "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == len(contexts)
    model = UDCGTheta.load(fitted, k=3)
    first = contexts[0]
    rel = [[p.relevant for p in first.passages]]
    u = [[1 - p.abstain_prob["sim"] for p in first.passages]]
    assert rows[0]["UDCG-theta"] == pytest.approx(model.predict_proba(rel, u)[0], abs=1e-12)
    assert rows[0]["UDCG"] == pytest.approx(metrics.udcg(rel, u)[0], abs=1e-12)
    # contexts of another k are left empty, and the user is told
    assert rows[-1]["UDCG-theta"] is None and rows[-1]["UDCG"] is not None
    assert "do not have k=3 passages" in capsys.readouterr().err


def test_missing_judge_is_a_clear_error(tmp_path: Path, capsys) -> None:
    data = tmp_path / "c.jsonl"
    write_contexts(data, simulate(2, 3))
    assert main([str(data), "--judge", "other"]) == 2
    err = capsys.readouterr().err
    assert f"{data}:1" in err and "abstain_prob.other" in err and "Traceback" not in err


def test_answer_likelihood_utility_source(tmp_path: Path, fitted: Path, capsys) -> None:
    contexts = simulate(6, 3, seed=4)
    moved = [
        replace(
            c,
            passages=[
                replace(p, abstain_prob={}, answer_prob={"sim": 1 - p.abstain_prob["sim"]})
                for p in c.passages
            ],
        )
        for c in contexts
    ]
    ref, alt = tmp_path / "ref.jsonl", tmp_path / "alt.jsonl"
    write_contexts(ref, contexts)
    write_contexts(alt, moved)
    outs = [tmp_path / "ref-scores.jsonl", tmp_path / "alt-scores.jsonl"]
    assert main([str(ref), "--judge", "sim", "--out", str(outs[0])]) == 0
    args = [str(alt), "--judge", "sim", "--utility", "answer_likelihood"]
    assert main([*args, "--out", str(outs[1])]) == 0
    assert "utility answer_likelihood" in capsys.readouterr().out
    # u = answer_prob here equals u = 1 - abstain_prob there: the same UDCG values
    first, second = ([json.loads(x)["UDCG"] for x in o.read_text().splitlines()] for o in outs)
    assert first == second
    u = [[p.answer_prob["sim"] for p in moved[0].passages]]
    rel = [[p.relevant for p in moved[0].passages]]
    assert second[0] == pytest.approx(metrics.udcg(rel, u)[0], abs=1e-12)
    # the abstention field is not read for this source
    assert main([str(ref), "--judge", "sim", "--utility", "answer_likelihood"]) == 2
    assert "answer_prob.sim" in capsys.readouterr().err
    # weights fitted on the reference source are refused for another one
    assert main([*args, "--weights", str(fitted)]) == 2
    err = capsys.readouterr().err
    assert (
        "fitted with utility source 'abstention', not 'answer_likelihood'" in err
        and "Traceback" not in err
    )


def test_means_per_run_and_k(tmp_path: Path, capsys) -> None:
    runs = {
        ("bm25", 3): simulate(6, 3, seed=1),
        ("dense", 3): simulate(5, 3, seed=2),
        ("bm25", 5): simulate(4, 5, seed=3),
    }
    contexts = [replace(c, run=run) for (run, _), cs in runs.items() for c in cs]
    write_contexts(tmp_path / "c.jsonl", contexts)
    assert main([str(tmp_path / "c.jsonl"), "--judge", "sim"]) == 0
    lines = capsys.readouterr().out.splitlines()
    table = {tuple(line.split("\t")[:2]): line.split("\t") for line in lines[2:]}
    assert lines[1].split("\t")[:5] == ["run", "k", "n", "UDCG", "nDCG"]
    for (run, k), group in [*runs.items(), (("all", ""), contexts)]:
        rel = [[float(p.relevant) for p in c.passages] for c in group]
        u = [[1 - p.abstain_prob["sim"] for p in c.passages] for c in group]
        row = table[(run, str(k))]
        assert row[2] == str(len(group))
        assert float(row[3]) == pytest.approx(metrics.udcg(rel, u).mean(), abs=5e-5)
        assert float(row[4]) == pytest.approx(metrics.context_ndcg(rel).mean(), abs=5e-5)


def test_a_context_given_twice_is_refused_at_its_line(tmp_path: Path, capsys) -> None:
    """A repeated context (qid, run and passages) would count twice in the means; other
    passages for the same query and run are another context."""
    contexts = simulate(3, 3, per_query=2, seed=4)
    other = replace(contexts[1], passages=contexts[0].passages)  # q0, r1, the passages of r0
    data = tmp_path / "c.jsonl"
    write_contexts(data, [*contexts, other])
    assert main([str(data), "--judge", "sim"]) == 0
    write_contexts(data, [*contexts, other, replace(contexts[3], outcomes={})])
    assert main([str(data), "--judge", "sim"]) == 2
    err = capsys.readouterr().err
    assert f"{data}:8: field 'qid': a second context with the same qid, run and passages" in err
    assert "(qid 'q1', run 'r1', first at line 4): it would count twice in the means" in err


@pytest.fixture
def folder(tmp_path: Path, fitted: Path) -> Path:
    """The weights of ``fitted`` as a folder fitted with judge 'sim', mode first_token."""
    path = tmp_path / "theta"
    card = {"judge_model": "sim", "abstention_mode": "first_token"}
    UDCGTheta.load(fitted).save_pretrained(path, card=card)
    return path


def _edit_config(folder: Path, **entries) -> None:
    """The card as udcg would have written it with these entries (its digest restamped)."""
    from udcg.io.weights.files import card_digest

    config = {**json.loads((folder / "config.json").read_text()), **entries}
    (folder / "config.json").write_text(json.dumps({**config, "card_sha256": card_digest(config)}))


@pytest.mark.parametrize(
    ("field", "edit", "extra", "message"),
    [
        ("k", {}, [], "field 'k': the weights were fitted with k 3, not '5'"),
        ("judge", {"judge_model": "other"}, [], "with judge 'other', not 'sim'"),
        ("mode", {}, ["--mode", "sequence"], "abstention mode 'first_token', not 'sequence'"),
        ("prompt", "one character", [], "field 'prompt': the weights were fitted with prompt"),
        (
            "utility",
            {"utility": "answer_likelihood"},
            [],
            "utility source 'answer_likelihood', not 'abstention'",
        ),
    ],
)
def test_mismatches_are_refused_and_can_be_allowed(
    tmp_path: Path, folder: Path, capsys, field, edit, extra, message
) -> None:
    from udcg.judge.prompts import ABSTAIN_SYSTEM, ABSTAIN_USER, prompt_record

    if edit == "one character":
        edit = {"prompt": prompt_record(ABSTAIN_SYSTEM.replace("NO-RESPONSE", "NO RESPONSE"))}
        assert edit["prompt"]["user"] == ABSTAIN_USER
    _edit_config(folder, **edit)
    data = tmp_path / "c.jsonl"
    write_contexts(data, simulate(8, 5 if field == "k" else 3, seed=4))
    args = [str(data), "--judge", "sim", "--weights", str(folder), *extra]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert f"(--allow-mismatch {field} to use them anyway)" in err
    out = tmp_path / "s.jsonl"
    assert main([*args, "--allow-mismatch", field, "--out", str(out)]) == 0
    assert "allowed on purpose" in capsys.readouterr().err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(any(n.startswith(f"field '{field}'") for n in r["weights_overrides"]) for r in rows)
    if field != "k":
        assert all(r["UDCG-theta"] is not None for r in rows)


def test_matching_folder_scores_without_overrides(tmp_path: Path, folder: Path) -> None:
    data = tmp_path / "c.jsonl"
    write_contexts(data, simulate(8, 3, seed=4))
    out = tmp_path / "s.jsonl"
    args = [str(data), "--judge", "sim", "--weights", str(folder), "--mode", "first_token"]
    assert main([*args, "--out", str(out)]) == 0
    assert all("weights_overrides" not in json.loads(x) for x in out.read_text().splitlines())


def test_weights_with_a_calibration_add_the_recalibrated_column(
    tmp_path: Path, fitted: Path, capsys
) -> None:
    contexts = simulate(60, 3, seed=5)
    rel = np.array([[p.relevant for p in c.passages] for c in contexts], dtype=float)
    u = np.array([[1 - p.abstain_prob["sim"] for p in c.passages] for c in contexts])
    correct = np.array([c.outcomes["sim"]["correct"] for c in contexts], dtype=float)
    model = UDCGTheta.load(fitted, k=3)
    model.calibrate(rel, u, correct, method="platt")
    calibrated = tmp_path / "calibrated.safetensors"
    model.save(calibrated)
    data, out = tmp_path / "c.jsonl", tmp_path / "scores.jsonl"
    write_contexts(data, contexts)
    assert main([str(data), "--judge", "sim", "--weights", str(calibrated), "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    expected = model.predict_proba(rel, u, calibrated=True)
    got = [r["UDCG-theta (recalibrated)"] for r in rows]
    np.testing.assert_allclose(got, expected, atol=1e-12)
    assert not np.allclose(got, [r["UDCG-theta"] for r in rows])
    lines = capsys.readouterr().out.splitlines()
    header, all_row = lines[1], lines[-1]
    assert header.split("\t")[-2:] == ["UDCG-theta", "UDCG-theta (recalibrated)"]
    assert all_row.split("\t")[-1] == f"{expected.mean():.4f}"
    # weights without a calibration: no such column
    plain = tmp_path / "plain.jsonl"
    assert main([str(data), "--judge", "sim", "--weights", str(fitted), "--out", str(plain)]) == 0
    assert "UDCG-theta (recalibrated)" not in json.loads(plain.read_text().splitlines()[0])
    # what made the scores is recorded beside them: the contexts, the judge, the options
    from udcg.io.manifests import file_sha256, manifest_path

    made = json.loads(manifest_path(out).read_text())
    assert made["input_sha256"] == file_sha256(data)
    card = json.loads(calibrated.with_suffix(".json").read_text())
    assert {k: made[k] for k in ("format", "judge", "utility", "weights_sha256")} == {
        "format": "udcg-score/1", "judge": "sim", "utility": "abstention",
        "weights_sha256": card["weights_sha256"],
    }  # fmt: skip
    assert made["card_sha256"] == card["card_sha256"]  # the calibration is in the card
    assert made["gamma"] == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    "argv",
    [
        ["score", "{data}", "--judge", "smollm2-135m", "--out", "{out}"],
        ["qcare", "score", "{data}", "--out", "{out}"],
    ],
    ids=["score", "qcare score"],
)
def test_an_unwritable_manifest_is_refused_before_the_output(
    tmp_path: Path, argv: list[str]
) -> None:
    """A folder where ``OUT.manifest.json`` goes is refused before ``OUT`` is written."""
    import udcg
    from udcg.cli.main import main as udcg_main

    data, out = tmp_path / "c.jsonl", tmp_path / "s.jsonl"
    write_contexts(data, list(udcg.demo_contexts())[:5])
    (tmp_path / "s.jsonl.manifest.json").mkdir()
    assert udcg_main([a.format(data=data, out=out) for a in argv]) == 2
    assert not out.exists()


def test_unverified_weights_are_recorded_by_what_was_read(tmp_path: Path, fitted: Path) -> None:
    """Weights whose card records no digests (``--allow-unverified``) are recorded in the
    manifest by the SHA-256 of the file and the card's entries as read: other weights, another
    record."""
    from udcg.io.manifests import file_sha256, manifest_path

    data = tmp_path / "c.jsonl"
    write_contexts(data, simulate(6, 3, seed=2))
    records = []
    for alpha in (1.0, 2.0):
        weights = UDCGTheta.load(fitted)
        weights.alpha_ = np.full(3, alpha)
        path = tmp_path / f"w{alpha}.safetensors"
        weights.save(path, card={"utility": "abstention"})
        card = json.loads(path.with_suffix(".json").read_text())
        del card["weights_sha256"], card["card_sha256"]
        path.with_suffix(".json").write_text(json.dumps(card))
        out = tmp_path / f"s{alpha}.jsonl"
        argv = [str(data), "--judge", "sim", "--weights", str(path), "--allow-unverified"]
        assert main([*argv, "--out", str(out)]) == 0
        made = json.loads(manifest_path(out).read_text())
        assert made["weights_sha256"] == file_sha256(path)
        records.append(made["card_sha256"])
    assert records[0] == records[1]  # the same card entries; the weights differ


@pytest.mark.parametrize(
    "command",
    [
        ["score", "c.jsonl", "--judge", "sim"],
        ["order", "c.jsonl", "-o", "o.jsonl"],
        ["report", "c.jsonl", "--judge", "sim", "-o", "r"],
    ],
)
def test_weights_given_twice_are_refused_not_replaced(command: list[str], capsys) -> None:
    from udcg.cli.main import main as udcg_main

    with pytest.raises(SystemExit) as info:
        udcg_main([*command, "--weights", "w3", "--weights", "w5"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (
        f"udcg {command[0]}: error: argument --weights: given twice ('w3', then 'w5'): "
        "this command takes one"
    )
