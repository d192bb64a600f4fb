"""``udcg compare`` on the shipped example run and a noisier copy of it: the output formats agree
with udcg.trec.compare, systems are named after their files, and user mistakes exit 2 with one
line."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from udcg.cli.compare import main, system_name
from udcg.io.formats.trec import read_trec_run
from udcg.trec import compare

TREC = Path(__file__).resolve().parents[2] / "examples" / "trec"
QRELS, RUN = TREC / "qrels.trec", TREC / "run.trec"


@pytest.fixture(scope="module")
def noisy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example run with Gaussian noise on its scores, as ``noisy.trec.gz``."""
    run = read_trec_run(RUN)
    scores = run.scores + np.random.default_rng(0).normal(0, 2, size=len(run))
    lines = [
        f"{q} Q0 {d} 0 {float(s)!r} noisy\n"
        for q, d, s in zip(run.qids.to_pylist(), run.doc_ids.to_pylist(), scores, strict=True)
    ]
    path = tmp_path_factory.mktemp("compare") / "noisy.trec.gz"
    path.write_bytes(gzip.compress("".join(lines).encode()))
    return path


def _run(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    status = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def test_markdown_names_systems_after_their_files(capsys, noisy: Path) -> None:
    status, out, err = _run(capsys, QRELS, RUN, noisy, "-m", "nDCG@10", "-m", "AP")
    assert (status, err) == (0, "")
    report = compare(QRELS, {"run": RUN, "noisy": noisy}, ["nDCG@10", "AP"])
    assert out == report.to_markdown()
    assert out.splitlines()[0] == "| | system | nDCG@10 | AP |"
    assert out.splitlines()[2].startswith("| a | run | ")
    assert out.splitlines()[3].startswith("| b | noisy | ")


def test_json_equals_the_api(capsys, noisy: Path) -> None:
    args = ["--test", "randomization", "--n-resamples", "2000", "--seed", "4", "--alpha", "0.1"]
    status, out, _ = _run(capsys, QRELS, RUN, noisy, *args, "--names", "A", "B", "--format", "json")
    assert status == 0
    expected = compare(
        QRELS,
        {"A": RUN, "B": noisy},
        ["nDCG@10", "AP", "RR", "P@10"],
        test="randomization",
        n_resamples=2000,
        seed=4,
        alpha=0.1,
    )
    assert json.loads(out) == expected.to_dict()


def test_latex_baseline_and_no_correction(capsys, noisy: Path) -> None:
    args = [QRELS, RUN, noisy, RUN, "--names", "bm25,noisy,copy", "-m", "AP"]
    status, out, _ = _run(
        capsys, *args, "--baseline", "noisy", "--correction", "none", "--format", "latex"
    )
    assert status == 0
    assert out.startswith(r"\begin{table}") and "with the baseline 'noisy'" in out
    assert "uncorrected p $\\le$ 0.05" in out


def test_system_names() -> None:
    assert system_name("runs/bm25.trec.gz") == "bm25"
    assert system_name("dense.run") == "dense"
    assert system_name("rerank") == "rerank"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--baseline", "nope"], "field 'baseline': unknown system 'nope'; known: run, noisy"),
        (["--names", "x"], "field 'names': 1 names for 2 runs"),
        (["--names", "x", "--names", "x"], "duplicate system name 'x'"),
        (["--alpha", "2"], "field 'alpha': must be a number strictly between 0 and 1"),
        (["--seed", "-1"], "field 'seed': must be a non-negative integer, got -1"),
        (
            ["--seed", "-1", "--test", "randomization"],
            "field 'seed': must be a non-negative integer, got -1",
        ),
    ],
)
def test_user_mistakes_exit_2_with_one_line(capsys, noisy: Path, args, message) -> None:
    status, out, err = _run(capsys, QRELS, RUN, noisy, *args)
    assert (status, out) == (2, "")
    assert err.startswith("udcg compare: error: ") and message in err
    assert err.count("\n") == 1


def test_one_run_and_a_repeated_file_are_errors(capsys) -> None:
    status, _, err = _run(capsys, QRELS, RUN)
    assert status == 2 and "need at least 2 runs to compare, got 1" in err
    status, _, err = _run(capsys, QRELS, RUN, RUN)
    assert status == 2 and "duplicate system name 'run'" in err and "--names" in err


def test_module_entry_point(noisy: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "udcg.cli.compare", QRELS, RUN, noisy, "--baseline", "x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert (
        done.stderr
        == "udcg compare: error: field 'baseline': unknown system 'x'; known: run, noisy\n"
    )
