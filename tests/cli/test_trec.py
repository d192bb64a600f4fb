"""``python -m udcg.trec`` on the shipped example: output formats agree with udcg.evaluate, and
user mistakes exit 2 with one located line instead of a traceback."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import udcg.cli.trec
from udcg import evaluate, evaluate_table
from udcg.io.weights.files import ThetaWeights, write_weights

TREC = Path(__file__).resolve().parents[2] / "examples" / "trec"
QRELS, RUN = TREC / "qrels.trec", TREC / "run.trec"
MEASURES = ["nDCG@10", "AP", "RR", "P@5", "Hits@5"]
DEFAULT = ["nDCG@10", "AP", "RR", "P@10"]
UTILITY = ["nDCG@10", "UDCG@5", "UDCG(gamma=0.5)@3", "UDCGtheta@5"]


def _write_utilities(path: Path) -> Path:
    """P(abstain) for every (query, document) of the example run but q0's 8th (d131)."""
    rng = np.random.default_rng(0)
    lines = [line.split() for line in RUN.read_text().splitlines()]
    assert lines[7][:4] == ["q0", "Q0", "d131", "8"]
    kept = lines[:7] + lines[8:]
    path.write_text("".join(f"{q}\t{d}\t{rng.random()!r}\n" for q, _, d, *_ in kept))
    return path


def _write_weights(path: Path) -> Path:
    rng = np.random.default_rng(1)
    write_weights(path, ThetaWeights(rng.normal(size=5), rng.normal(size=5)))
    return path


def _each(flag: str, values: list[str]) -> list[str]:
    """``flag`` before each value: ``-m A -m B``."""
    return [item for value in values for item in (flag, value)]


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess]:
    """Every command-line case, started at once (each pays the interpreter start-up)."""
    tmp = tmp_path_factory.mktemp("trec")
    bad_run = tmp / "bad_run.trec"
    bad_run.write_text("q0 Q0 d1 1 2.5 t\nq0 Q0 d2 2\n")
    utilities = _write_utilities(tmp / "u.tsv")
    weights = _write_weights(tmp / "theta_k5.safetensors")
    with_utilities = ["--utilities", utilities, "--weights", weights]
    cases = {
        "utility_q": [QRELS, RUN, *_each("-m", UTILITY), "-q", *with_utilities],
        "utility_json": [QRELS, RUN, "-m", ",".join(UTILITY), "--format", "json", *with_utilities],
        "theta_no_weights": [QRELS, RUN, "-m", "UDCGtheta@5", "--utilities", utilities],
        "missing_utility": [QRELS, RUN, "-m", "UDCG@10", "--utilities", utilities],
        "default": [QRELS, RUN],
        "text_q": [*_each("-m", MEASURES), QRELS, RUN, "-q"],
        "json_q": [QRELS, RUN, "-m", " ".join(MEASURES), "-q", "--format", "json"],
        "csv_q": [QRELS, RUN, "-m", ",".join(MEASURES), "-q", "--format", "csv"],
        "missing_run": [QRELS, tmp / "nope.run"],
        "bad_run": [QRELS, bad_run],
        "unknown_measure": [QRELS, RUN, "-m", "AP", "-m", "nDGC@10"],
    }
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "udcg.trec", *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, args in cases.items()
    }
    done = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=60)
        done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    done["paths"] = {"bad_run": bad_run, "utilities": utilities, "weights": weights}
    return done


def _text_rows(stdout: str) -> list[tuple[str, str, str]]:
    rows = [tuple(line.split("\t")) for line in stdout.splitlines()]
    assert all(len(r) == 3 for r in rows), stdout
    return [(m.strip(), q, v) for m, q, v in rows]


def _ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout


def test_default_measures_text_means(cli) -> None:
    assert udcg.cli.trec.DEFAULT_MEASURES == DEFAULT
    rows = _text_rows(_ok(cli["default"]))
    ours = evaluate(QRELS, RUN, DEFAULT)
    assert len(ours) == 50
    # no per-query rows: one mean per measure, then the query count
    assert [(m, q) for m, q, _ in rows] == [(m, "all") for m in DEFAULT] + [("num_q", "all")]
    assert rows[-1][2] == str(len(ours))
    for m, _, v in rows[:-1]:
        expected = np.mean([values[m] for values in ours.values()])
        assert float(v) == pytest.approx(expected, abs=5e-5), m
        assert v == f"{expected:.4f}"


def test_per_query_text_rows(cli) -> None:
    rows = _text_rows(_ok(cli["text_q"]))
    ours = evaluate(QRELS, RUN, MEASURES)
    per_query = [r for r in rows if r[1] != "all"]
    assert len(per_query) == len(ours) * len(MEASURES)
    assert {q for _, q, _ in per_query} == set(ours)
    for m, q, v in per_query:
        assert float(v) == pytest.approx(ours[q][m], abs=5e-5), (m, q)
    means = {m: float(v) for m, q, v in rows if q == "all" and m != "num_q"}
    assert list(means) == MEASURES
    assert rows[-1] == ("num_q", "all", str(len(ours)))


def test_json_means_equal_evaluate_exactly(cli) -> None:
    table = evaluate_table(QRELS, RUN, MEASURES)
    ours = evaluate(QRELS, RUN, MEASURES)
    payload = json.loads(_ok(cli["json_q"]))
    assert payload == {"mean": table.mean(), "num_queries": len(ours), "per_query": ours}
    assert list(payload["mean"]) == MEASURES
    for m, v in payload["mean"].items():
        assert v == pytest.approx(np.mean([values[m] for values in ours.values()]), abs=1e-12)


def test_csv_header_and_rows(cli) -> None:
    rows = list(csv.reader(io.StringIO(_ok(cli["csv_q"]))))
    assert rows[0] == ["measure", "qid", "value"]
    ours = evaluate(QRELS, RUN, MEASURES)
    body = rows[1:]
    assert len(body) == len(ours) * len(MEASURES) + len(MEASURES)
    per_query = [r for r in body if r[1] != "all"]
    for m, q, v in per_query:
        assert float(v) == ours[q][m], (m, q)
    means = {m: float(v) for m, q, v in body if q == "all"}
    assert means == evaluate_table(QRELS, RUN, MEASURES).mean()


def test_utility_measures_rows_like_the_others(cli) -> None:
    paths = cli["paths"]
    kwargs = {"utilities": paths["utilities"], "weights": paths["weights"]}
    ours = evaluate(QRELS, RUN, UTILITY, **kwargs)
    rows = _text_rows(_ok(cli["utility_q"]))
    per_query = [r for r in rows if r[1] != "all"]
    assert len(per_query) == len(ours) * len(UTILITY)
    for m, q, v in per_query:
        assert v == f"{ours[q][m]:.4f}", (m, q)
    assert [m for m, q, _ in rows if q == "all"] == [*UTILITY, "num_q"]
    payload = json.loads(_ok(cli["utility_json"]))
    assert payload == {
        "mean": evaluate_table(QRELS, RUN, UTILITY, **kwargs).mean(),
        "num_queries": len(ours),
    }


def test_utility_measures_say_what_is_missing(cli) -> None:
    _assert_user_error(cli["theta_no_weights"], "UDCGtheta@5", "--weights")
    _assert_user_error(
        cli["missing_utility"],
        f"{cli['paths']['utilities']}: field 'utilities': no utility for query 'q0' "
        "document 'd131'",
    )


def _assert_user_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.startswith("udcg trec: error:"), result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stdout == ""
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)


def test_missing_file(cli) -> None:
    _assert_user_error(cli["missing_run"], "nope.run")


def test_malformed_run_line_is_located(cli) -> None:
    _assert_user_error(cli["bad_run"], f"{cli['paths']['bad_run']}:2")


def test_unknown_measure(cli) -> None:
    _assert_user_error(cli["unknown_measure"], "nDGC@10")


# --- in process (fast): udcg.trec.main returns the exit status ---------------------------------


def test_main_json_means(capsys: pytest.CaptureFixture[str]) -> None:
    assert udcg.cli.trec.main([str(QRELS), str(RUN), "-m", "AP,P@5", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    payload = json.loads(captured.out)
    table = evaluate_table(QRELS, RUN, ["AP", "P@5"])
    assert payload == {"mean": table.mean(), "num_queries": len(table.qids)}


def _main_error(capsys: pytest.CaptureFixture[str], argv: list, *needles: str) -> None:
    assert udcg.cli.trec.main([str(a) for a in argv]) == 2
    captured = capsys.readouterr()
    _assert_user_error(subprocess.CompletedProcess(argv, 2, captured.out, captured.err), *needles)


def test_main_user_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    _main_error(capsys, [tmp_path / "nope.qrels", RUN], "nope.qrels")
    bad_qrels = tmp_path / "q.trec"
    bad_qrels.write_text("q0 0 d1 1\nq0 0 d2\n")
    _main_error(capsys, [bad_qrels, RUN], f"{bad_qrels}:2")
    bad_score = tmp_path / "bad_score.trec"
    bad_score.write_text("q0 Q0 d1 1 2.5 t\nq0 Q0 d2 2 2.0 t\nq0 Q0 d3 3 high t\n")
    _main_error(capsys, [QRELS, bad_score], f"{bad_score}:3", "high")
    _main_error(capsys, [QRELS, RUN, "-m", "P"], "P@10")
    _main_error(capsys, [QRELS, RUN, "-m", "UDCG@5"], "--utilities")
    _main_error(capsys, [QRELS, RUN, "-m", "hits@5"], "HitCount@5", "Hits@5")
    with pytest.raises(SystemExit) as exit_:  # argparse: usage and one line naming the choices
        udcg.cli.trec.main([str(QRELS), str(RUN), "--utility", "p"])
    assert exit_.value.code == 2
    assert "abstention" in capsys.readouterr().err.splitlines()[-1]
    _main_error(capsys, ["-", RUN, "--utilities", "-"], "standard input")
    _main_error(capsys, [QRELS, RUN, "-m", "P@0"], "P@0")
