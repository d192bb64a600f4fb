"""train.py and evaluate.py as a user runs them: every option checked before any work, a
mistake is exactly one line on stderr naming the option typed, exit status 2; warnings are one
line; a sweep goes on past a failed member and lists the failures at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from udcg.io.contexts.jsonl import Context, Passage, write_contexts
from udcg.theta.simulate import simulate_contexts as simulate

REPO = Path(__file__).resolve().parents[2]
NQ_SOURCE = (
    "the Lost in the Middle NQ-open oracle file (nq-open-oracle.jsonl.gz in qa_data/ of "
    "github.com/nelson-liu/lost-in-the-middle)"
)


def run(script: str, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """``python SCRIPT ARGS`` from the repository root, offline."""
    return subprocess.run(
        [sys.executable, script, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=300,
    )


def assert_one_line_error(done: subprocess.CompletedProcess, line: str) -> None:
    """Exit status 2 and ``line`` alone on stderr: no traceback, no Hydra banner."""
    assert done.stderr.splitlines() == [line], done.stderr
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "Error executing job" not in done.stderr


# one line per bad option: (script, overrides, the line on stderr)
BAD_OPTIONS = {
    "k=abc": (
        "train.py",
        ["k=abc"],
        "train.py: error: field 'k': must be a positive integer, got 'abc'",
    ),
    "k=-1": (
        "train.py",
        ["k=-1"],
        "train.py: error: field 'k': must be a positive integer, got -1",
    ),
    "k=1.5": (
        "train.py",
        ["k=1.5"],
        "train.py: error: field 'k': must be a positive integer, got 1.5",
    ),
    "k=0": ("train.py", ["k=0"], "train.py: error: field 'k': must be a positive integer, got 0"),
    "evaluate k=abc": (
        "evaluate.py",
        ["k=abc"],
        "evaluate.py: error: field 'k': must be a positive integer, got 'abc'",
    ),
    "evaluate k=0": (
        "evaluate.py",
        ["k=0"],
        "evaluate.py: error: field 'k': must be a positive integer, got 0",
    ),
    "missing data file": (
        "train.py",
        ["data=jsonl", "data.path=missing.jsonl"],
        "train.py: error: missing.jsonl: no such file",
    ),
    "test_fraction": (
        "train.py",
        ["test_fraction=1.5"],
        "train.py: error: field 'test_fraction': must be a number strictly between 0 and 1, "
        "got 1.5",
    ),
    "test_fraction before the data": (
        "train.py",
        ["test_fraction=0", "data=jsonl", "data.path=missing.jsonl"],
        "train.py: error: field 'test_fraction': must be a number strictly between 0 and 1, got 0",
    ),
    "correlation": (
        "train.py",
        ["correlation=foo"],
        "train.py: error: field 'correlation': must be one of spearman, kendall, pearson, "
        "got 'foo'",
    ),
    "n_bootstrap": (
        "train.py",
        ["n_bootstrap=0"],
        "train.py: error: field 'n_bootstrap': must be a positive integer, got 0",
    ),
    "seed": (
        "train.py",
        ["seed=abc"],
        "train.py: error: field 'seed': must be an integer, got 'abc'",
    ),
    "gamma_grid": (
        "train.py",
        ["gamma_grid=[1,-2]"],
        "train.py: error: field 'gamma_grid': position 1: gamma must be finite and >= 0, got -2.0",
    ),
    "utility": (
        "train.py",
        ["utility=nope"],
        "train.py: error: field 'utility': unknown utility source 'nope'; known: abstention, "
        "answer_likelihood",
    ),
    "model.l2": (
        "train.py",
        ["model.l2=-1"],
        "train.py: error: field 'model.l2': must be finite and >= 0, got -1",
    ),
    "trainer.max_epochs": (
        "train.py",
        ["trainer.max_epochs=0"],
        "train.py: error: field 'trainer.max_epochs': expected a positive integer, got 0",
    ),
    "evaluate correlation": (
        "evaluate.py",
        ["correlation=foo"],
        "evaluate.py: error: field 'correlation': must be one of spearman, kendall, pearson, "
        "got 'foo'",
    ),
    "relevance": (
        "evaluate.py",
        ["relevance=x"],
        "evaluate.py: error: field 'relevance': must be one of string, llm, got 'x'",
    ),
    "grader": (
        "evaluate.py",
        ["grader=x"],
        "evaluate.py: error: field 'grader': must be one of span, llm, got 'x'",
    ),
    "qcare": (
        "evaluate.py",
        ["qcare=maybe"],
        "evaluate.py: error: field 'qcare': must be true or false, got 'maybe'",
    ),
    "dataset.limit": (
        "evaluate.py",
        ["dataset.limit=0"],
        "evaluate.py: error: field 'dataset.limit': must be a positive integer, got 0",
    ),
    "evaluate utility": (
        "evaluate.py",
        ["utility=nope"],
        "evaluate.py: error: field 'utility': unknown utility source 'nope'; known: abstention, "
        "answer_likelihood",
    ),
    "unknown dataset option": (
        "evaluate.py",
        ["+dataset.foo=1"],
        "evaluate.py: error: field 'dataset': cannot build dataset: TypeError: demo_source() got "
        "an unexpected keyword argument 'foo'",
    ),
    "BM25 k1": (
        "evaluate.py",
        ["retriever=bm25", "retriever.k1=-1"],
        "evaluate.py: error: field 'retriever.k1': must be finite and >= 0, got -1",
    ),
    "BM25 method": (
        "evaluate.py",
        ["retriever=bm25", "+retriever.method=okapi"],
        "evaluate.py: error: field 'retriever.method': must be one of robertson, lucene, atire, "
        "bm25l, bm25+, got 'okapi'",
    ),
    "k larger than the corpus": (
        "evaluate.py",
        ["k=1000"],
        "evaluate.py: error: field 'k': k=1000 is larger than the corpus (420 passages)",
    ),
    "unknown judge offline": (
        "evaluate.py",
        ["judge=nosuch/model"],
        "evaluate.py: error: field 'judge': 'nosuch/model' is not a local path and not in the "
        "Hugging Face cache, and offline mode is on (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE): "
        "give a local path or download the model first",
    ),
    "evaluate order": (
        "evaluate.py",
        ["order=nope"],
        "evaluate.py: error: field 'order': must be one of theta, retriever, reversed, ends, "
        "gold_first, got 'nope'",
    ),
    "order=theta without weights": (
        "evaluate.py",
        ["order=theta"],
        "evaluate.py: error: field 'theta_weights': order=theta needs UDCG-theta weights: set "
        "theta_weights=... (train.py) or theta_crossfit=true",
    ),
    "appended train option": (
        "train.py",
        ["+test_fractoin=0.5"],  # what Hydra's message for test_fractoin=0.5 advises
        "train.py: error: field 'test_fractoin': no such option (did you mean test_fraction?)",
    ),
    "appended evaluate option": (
        "evaluate.py",
        ["+theta_weight=w.safetensors"],
        "evaluate.py: error: field 'theta_weight': no such option (did you mean theta_weights?)",
    ),
    "train calibration": (
        "train.py",
        ["calibration=isotonic"],
        "train.py: error: field 'calibration': must be one of none, temperature, platt, got "
        "'isotonic'",
    ),
}


@pytest.fixture(scope="module")
def bad_option_runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Every BAD_OPTIONS case, a few at a time (each pays the interpreter start-up)."""
    tmp = tmp_path_factory.mktemp("bad")

    def one(item: tuple[int, str]) -> subprocess.CompletedProcess:
        i, name = item
        script, overrides, _ = BAD_OPTIONS[name]
        out = tmp / str(i)
        extra = [f"cache_dir={out / 'cache'}"] if script == "evaluate.py" else []
        return run(script, *overrides, *extra, f"hydra.run.dir={out}")

    with ThreadPoolExecutor(max_workers=4) as pool:
        done = pool.map(one, enumerate(BAD_OPTIONS))
        return dict(zip(BAD_OPTIONS, done, strict=True))


@pytest.mark.parametrize("name", list(BAD_OPTIONS))
def test_a_bad_option_is_one_line_naming_it(bad_option_runs: dict, name: str) -> None:
    assert_one_line_error(bad_option_runs[name], BAD_OPTIONS[name][2])


@pytest.mark.parametrize(
    ("door", "prog"),
    [
        (["train.py"], "train.py"),
        (["evaluate.py"], "evaluate.py"),
        (["-m", "udcg", "train"], "udcg train"),
        (["-m", "udcg", "benchmark"], "udcg benchmark"),
    ],
)
def test_a_negative_seed_is_one_line_naming_it(tmp_path: Path, door: list[str], prog: str) -> None:
    extra = [f"cache_dir={tmp_path / 'cache'}"] if door[-1] in ("evaluate.py", "benchmark") else []
    done = run(*door, "seed=-1", *extra, f"hydra.run.dir={tmp_path}")
    assert_one_line_error(
        done, f"{prog}: error: field 'seed': must be a non-negative integer, got -1"
    )


def test_a_file_that_fails_while_read_is_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    done = run("train.py", "data=jsonl", f"data.path={empty}", f"hydra.run.dir={tmp_path}")
    assert_one_line_error(done, f"train.py: error: {empty}: empty file: no contexts")


def test_nq_open_without_its_file_says_where_it_comes_from(tmp_path: Path) -> None:
    path = tmp_path / "nq-open-oracle.jsonl.gz"
    done = run(
        "evaluate.py",
        "dataset=nq_open",
        f"dataset.path={path}",
        f"cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={tmp_path}",
    )
    assert_one_line_error(
        done,
        f"evaluate.py: error: {path}: no such file; dataset=nq_open reads {NQ_SOURCE}: "
        "download it and set dataset.path=...",
    )


def test_few_contexts_per_parameter_warn_and_undefined_correlations_say_why(
    tmp_path: Path,
) -> None:
    """k=10 on the demo: 20 weights on 42 training contexts; Precision is constant."""
    done = run("train.py", "k=10", "n_bootstrap=50", f"hydra.run.dir={tmp_path}")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "train.py: warning: UDCG-theta fits 20 parameters on 42 contexts (2.1 contexts per "
        "parameter, fewer than 20): its weights may not generalise; use more queries or a "
        "smaller k"
    ]
    rows = {line.split("  ")[0].strip(): line for line in done.stdout.splitlines()}
    assert rows["Precision"].split() == ["Precision", "undefined", "(metric", "is", "constant)"]
    assert "nan" not in done.stdout
    card = json.loads((tmp_path / "udcg_theta_k10.json").read_text())
    precision = next(row for row in card["heldout"] if row["metric"] == "Precision")
    assert precision["undefined"] == "metric is constant"


# ------------------------------------------------------------------------------- sweeps


def _annotated(path: Path, n: int = 24, run: str | None = None) -> None:
    """Contexts of 3 passages with the judge 'm' labels (relevance, utility, outcome), of the
    run ``run``."""
    rng = np.random.default_rng(0)
    contexts = []
    for i in range(n):
        passages = [
            Passage(doc_id=f"d{j}", relevant=bool(rng.random() < 0.5), abstain_prob={"m": p})
            for j, p in enumerate(rng.random(3).tolist())
        ]
        outcomes = {"m": {"correct": i % 3 == 0}}
        contexts.append(Context(f"q{i}", passages, outcomes=outcomes, run=run))
    write_contexts(path, contexts)


def test_train_sweep_goes_on_past_a_failed_member(tmp_path: Path) -> None:
    data = tmp_path / "contexts.jsonl"
    write_contexts(data, simulate(40, 3))
    sweep = tmp_path / "sweep"
    done = run(
        "train.py",
        "-m",
        "k=7,3",
        "data=jsonl",
        f"data.path={data}",
        "judge=sim",
        "n_bootstrap=50",
        f"hydra.sweep.dir={sweep}",
    )
    error = (
        "error: field 'data': 0 contexts from 0 queries have k=7 and judge 'sim' labels "
        "(240 list size != 7); a train/held-out split by query needs at least 4 queries"
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"train.py: {error}",
        "train.py: 1 of 2 sweep members failed:",
        f"  #0 k=7 data=jsonl data.path={data} judge=sim n_bootstrap=50: {error}",
    ]
    assert (sweep / "1-k3" / "udcg_theta_k3.safetensors").is_file()


def test_evaluate_sweep_goes_on_past_a_failed_member(tmp_path: Path) -> None:
    data = tmp_path / "in.jsonl"
    _annotated(data)
    sweep = tmp_path / "sweep"
    done = run(
        "evaluate.py",
        "-m",
        "k=4,3",
        "dataset=jsonl",
        f"dataset.path={data}",
        "retriever=given",
        "judge=m",
        "n_bootstrap=50",
        f"cache_dir={tmp_path / 'cache'}",
        f"hydra.sweep.dir={sweep}",
    )
    error = "error: field 'k': no context has k=4 passages"
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"evaluate.py: {error}",
        "evaluate.py: 1 of 2 sweep members failed:",
        f"  #0 k=4 dataset=jsonl dataset.path={data} retriever=given judge=m n_bootstrap=50 "
        f"cache_dir={tmp_path / 'cache'}: {error}",
    ]
    summary = json.loads((sweep / "sweep_summary.json").read_text())
    assert [r["run"] for r in summary["runs"]] == ["given"]
    assert "sweep summary:" in done.stdout


@pytest.mark.parametrize("script", ["train.py", "evaluate.py"])
def test_sweep_members_sharing_an_output_folder_are_refused(tmp_path: Path, script: str) -> None:
    """``export_dir=`` / ``output_dir=`` the same for every member: the second member would
    replace the first's weights or report, so it is refused; ``${hydra:job.num}`` in the
    option gives each its own folder."""
    data = tmp_path / "in.jsonl"
    if script == "train.py":
        write_contexts(data, simulate(40, 3))
        options, option = ["k=3", "data=jsonl", "judge=sim", "seed=0,1"], "export_dir"
        kept = "udcg_theta_k3.json"
    else:
        _annotated(data)
        options = ["dataset=jsonl", "retriever=given", "judge=m", "seed=0,1"]
        options, option, kept = (
            [*options, f"cache_dir={tmp_path / 'cache'}"],
            "output_dir",
            "report.json",
        )
    common = ["-m", *options, f"{'data' if script == 'train.py' else 'dataset'}.path={data}"]
    common += ["n_bootstrap=20"]
    shared = tmp_path / "shared"
    done = run(script, *common, f"{option}={shared}", f"hydra.sweep.dir={tmp_path / 's1'}")
    assert done.returncode == 2
    refusal = (
        f"{shared}: field '{option}': member #0 of this sweep wrote here: each member needs its "
        f"own folder (leave {option} and hydra.sweep.subdir at their defaults, or put "
        "${hydra:job.num} in them)"
    )
    assert done.stderr.splitlines()[0] == f"{script}: error: {refusal}"
    assert (shared / kept).is_file()  # member #0's, kept
    own = f"{option}={tmp_path / 'own'}/${{hydra:job.num}}"
    done = run(script, *common, own, f"hydra.sweep.dir={tmp_path / 's2'}")
    assert done.returncode == 0, done.stderr
    assert all((tmp_path / "own" / num / kept).is_file() for num in ("0", "1"))
    # a rerun of the same sweep into the shared folder is refused again, not by the old record
    done = run(script, *common, f"{option}={shared}", f"hydra.sweep.dir={tmp_path / 's1'}")
    assert done.returncode == 2 and refusal in done.stderr


def test_sweep_members_sharing_their_own_folder_or_after_a_failure(tmp_path: Path) -> None:
    """A ``hydra.sweep.subdir`` two members share is refused as a shared ``output_dir`` is; a
    member that failed before writing claims nothing, so the next one runs."""
    good = tmp_path / "in.jsonl"
    _annotated(good)
    common = ["-m", "dataset=jsonl", "retriever=given", "judge=m", "n_bootstrap=20"]
    common.append(f"cache_dir={tmp_path / 'cache'}")
    paths = f"dataset.path={tmp_path / 'missing.jsonl'},{good}"
    done = run("evaluate.py", *common, paths, f"output_dir={tmp_path / 'shared'}",
               f"hydra.sweep.dir={tmp_path / 's1'}")  # fmt: skip
    assert done.returncode == 2  # #0 failed (no such file), #1 ran
    assert (tmp_path / "shared" / "report.json").is_file()
    assert "1 of 2 sweep members failed" in done.stderr and "wrote here" not in done.stderr
    shared_subdir = "hydra.sweep.subdir=${retriever.name}"
    done = run("evaluate.py", *common, f"dataset.path={good},{good}",
               f"hydra.sweep.dir={tmp_path / 's2'}", shared_subdir)  # fmt: skip
    assert done.returncode == 2
    assert "member #0 of this sweep wrote here" in done.stderr


def test_a_sweep_over_given_runs_names_members_by_their_run(tmp_path: Path) -> None:
    """``retriever=given`` members are named by the run their contexts carry (a TREC run's
    file name, or what ``udcg annotate`` kept), not ``given #1``, ``given #2``."""
    paths = []
    for name in ("bm25-v2", "splade"):
        paths.append(tmp_path / f"{name}.jsonl")
        _annotated(paths[-1], run=name)
    _annotated(tmp_path / "plain.jsonl")  # no run: "given"
    sweep = tmp_path / "sweep"
    done = run(
        "evaluate.py",
        "-m",
        f"dataset.path={','.join(str(p) for p in [*paths, tmp_path / 'plain.jsonl'])}",
        "dataset=jsonl",
        "retriever=given",
        "judge=m",
        "n_bootstrap=50",
        f"cache_dir={tmp_path / 'cache'}",
        f"hydra.sweep.dir={sweep}",
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((sweep / "sweep_summary.json").read_text())
    assert [r["run"] for r in summary["runs"]] == ["bm25-v2", "splade", "given"]


def test_a_hydra_command_inside_the_callers_hydra_context(capsys) -> None:
    """``main(["benchmark", ...])`` called inside the caller's own ``initialize``/``compose``
    runs, and the caller's Hydra state is as it was after."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from udcg.cli.hydra_config import CONF_DIR
    from udcg.cli.main import main

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        mine = GlobalHydra.instance().hydra
        assert main(["benchmark", "--help"]) == 0
        assert GlobalHydra.instance().hydra is mine
        assert compose("evaluate").k == compose("evaluate").k  # still usable
    assert "Benchmark retrieval metrics" in capsys.readouterr().out


@pytest.mark.parametrize("path", ["-", "/dev/stdin"])
def test_a_sweep_reads_standard_input_once_for_every_member(tmp_path: Path, path: str) -> None:
    """``cat ctx.jsonl | train.py -m ... data.path=-`` (or ``/dev/stdin``): the sweep reads
    the pipe once, so each member fits on the same piped contexts."""
    data = tmp_path / "contexts.jsonl"
    write_contexts(data, simulate(40, 3))
    argv = [sys.executable, "train.py", "-m", "k=3", "model.l2=0,0.5", "data=jsonl",
            f"data.path={path}", "judge=sim", "n_bootstrap=20"]  # fmt: skip
    argv.append(f"hydra.sweep.dir={tmp_path / 's'}")
    done = subprocess.run(argv, cwd=REPO, input=data.read_bytes(), capture_output=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    assert len(list((tmp_path / "s").glob("*/udcg_theta_k3.safetensors"))) == 2
