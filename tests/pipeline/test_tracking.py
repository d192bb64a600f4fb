"""Lightning loggers of ``udcg train`` and MLflow tracking of ``udcg benchmark``, read back
through the real packages: MLflow runs through ``MlflowClient`` (search_runs, get_run,
get_metric_history, list_artifacts), TensorBoard event files through tensorboard's reader,
each value compared with what the run wrote itself (history.csv, the weights card,
.hydra/config.yaml, report.json, sweep_summary.json)."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import re
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from udcg.io.contexts.jsonl import write_contexts
from udcg.theta.simulate import simulate_contexts

mlflow = pytest.importorskip("mlflow", reason="needs the 'tracking' extra")


def _benchmark_test_module() -> Any:
    """tests/cli/test_benchmark.py, for its fake judge (loaded from its file: no sys.path
    change)."""
    path = Path(__file__).resolve().parents[1] / "cli" / "test_benchmark.py"
    spec = importlib.util.spec_from_file_location("udcg_tests_cli_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


WordJudge = _benchmark_test_module().WordJudge


def _leaves(tree: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted key, value)`` of every leaf of a nested mapping (an empty mapping is a leaf)."""
    for key, value in tree.items():
        if isinstance(value, Mapping) and value:
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _as_param(value: Any) -> str:
    """How the docs say a parameter is stored: a string as is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def _only_run(uri: str, experiment: str) -> Any:
    client = mlflow.MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    return client, run


@pytest.fixture(scope="module")
def contexts_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Contexts of 5 passages with judge 'sim' labels, as the training tests use."""
    path = tmp_path_factory.mktemp("data") / "contexts.jsonl"
    write_contexts(path, simulate_contexts(60, 5))
    return path


def _train(out: Path, data: Path, *overrides: str) -> int:
    from udcg.cli.train import command

    return command(
        [
            "data=jsonl",
            f"data.path={data}",
            "judge=sim",
            "k=5",
            "n_bootstrap=50",
            "model.val_fraction=0.2",  # a validation split: val_loss and early stopping
            f"hydra.run.dir={out}",
            *overrides,
        ]
    )


def test_train_with_mlflow_logs_the_run_it_wrote(tmp_path: Path, contexts_file: Path) -> None:
    env_before = os.environ.get("MLFLOW_TRACKING_URI")
    out = tmp_path / "run"
    data = tmp_path / ("d" * 120) / ("e" * 120) / "contexts.jsonl"  # a path over 250 characters
    data.parent.mkdir(parents=True)
    data.write_bytes(contexts_file.read_bytes())
    assert _train(out, data, "logger=mlflow") == 0
    assert os.environ.get("MLFLOW_TRACKING_URI") == env_before  # Lightning's setting undone
    client, run = _only_run(f"sqlite:///{out / 'mlflow.db'}", "udcg-train")
    assert run.info.status == "FINISHED" and run.info.run_name == "k5"

    # params: the run's config as Hydra saved it (interpolations left out: resolved in MLflow)
    config = yaml.safe_load((out / ".hydra" / "config.yaml").read_text())
    expected = {
        key: _as_param(value)
        for key, value in _leaves(config)
        if not (isinstance(value, str) and "${" in value)
    }
    assert {key: run.data.params.get(key) for key in expected} == expected
    assert run.data.params["trainer.max_epochs"] == "null"  # resolved from ${trainer.max_epochs}
    assert run.data.params["model.max_epochs"] == "null"
    assert run.data.params["export_dir"] == str(out)
    assert run.data.params["data.path"] == str(data)  # whole: Lightning's logger cuts at 250

    # per-epoch losses: the rows of history.csv, float for float, epoch = step
    with open(out / "history.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) >= 2
    for name in ("train_loss", "val_loss"):
        logged = client.get_metric_history(run.info.run_id, name)
        assert [(m.step, m.value) for m in logged] == [
            (int(row["epoch"]), float(row[name])) for row in rows
        ]

    # held-out comparison and gamma: the weights card's numbers
    card = json.loads((out / "udcg_theta_k5.json").read_text())
    metrics = run.data.metrics
    assert metrics["gamma"] == card["gamma"]
    assert metrics["sizes/test_queries"] == card["sizes"]["test_queries"]
    assert len(card["heldout"]) >= 6
    for row in card["heldout"]:  # "UDCG (gamma=1/3)" is logged as "UDCG _gamma_1_3_"
        name = re.sub(r"[^A-Za-z0-9_\-. ]+", "_", row["metric"])
        for field in ("spearman", "kendall", "pearson"):
            assert metrics[f"heldout/{name}/{field}"] == row[field], (name, field)
        assert metrics[f"heldout/{name}/ci95/0"] == row["ci95"][0]

    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert artifacts == {
        "history.csv",
        "udcg_theta_k5",
        "udcg_theta_k5.json",
        "udcg_theta_k5.png",
        "udcg_theta_k5.safetensors",
    }
    folder = {a.path for a in client.list_artifacts(run.info.run_id, "udcg_theta_k5")}
    assert "udcg_theta_k5/model.safetensors" in folder
    stored = Path(run.info.artifact_uri.removeprefix("file://")) / "udcg_theta_k5.safetensors"
    assert stored.read_bytes() == (out / "udcg_theta_k5.safetensors").read_bytes()
    assert stored.is_relative_to(out / "mlartifacts")  # the store lives in the output dir


def test_train_with_tensorboard_writes_events_and_csv_stays(
    tmp_path: Path, contexts_file: Path
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    assert _train(out, contexts_file, "logger=[csv,tensorboard]") == 0
    events = list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert events
    scalars: dict[str, list[tuple[int, float]]] = {}
    for path in events:
        accumulator = EventAccumulator(str(path))
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            scalars.setdefault(tag, []).extend((e.step, e.value) for e in accumulator.Scalars(tag))
    with open(out / "history.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["epoch", "train_loss", "val_loss"]  # history.csv as before
    train_loss = sorted(scalars["train_loss"])
    assert [step for step, _ in train_loss] == [int(row["epoch"]) for row in rows]
    # TensorBoard stores float32
    assert [v for _, v in train_loss] == pytest.approx(
        [float(row["train_loss"]) for row in rows], rel=1e-6
    )
    assert "heldout/UDCG-theta/spearman" in scalars
    # Lightning's CSVLogger: the same epochs, the exact values
    with open(out / "csv" / "metrics.csv", newline="") as handle:
        logged = [row for row in csv.DictReader(handle) if row["train_loss"]]
    assert [(int(r["step"]), float(r["train_loss"])) for r in logged] == [
        (int(row["epoch"]), float(row["train_loss"])) for row in rows
    ]


@pytest.fixture
def fake_judge(monkeypatch: pytest.MonkeyPatch) -> Any:
    judge = WordJudge()
    monkeypatch.setattr("udcg.judge.load_judge", lambda spec, **options: judge)
    monkeypatch.setattr("udcg.pipeline.benchmark.check_hub_judge", lambda spec: None)
    return judge


def test_a_benchmark_sweep_with_mlflow_logs_each_report(
    tmp_path: Path, fake_judge: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from udcg.cli.benchmark import command

    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "sweep"
    status = command(
        [
            "-m",
            "retriever=bm25,reversed",
            "dataset.limit=8",
            "k=3",
            "judge=fake",
            "n_bootstrap=50",
            f"cache_dir={tmp_path / 'cache'}",
            f"hydra.sweep.dir={sweep}",
            "tracking=mlflow",
        ]
    )
    assert status == 0
    client = mlflow.MlflowClient(f"sqlite:///{sweep / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("udcg-benchmark").experiment_id
    runs = {run.info.run_name: run for run in client.search_runs([experiment])}
    assert set(runs) == {"bm25", "reversed", "sweep summary"}
    summary_run = runs.pop("sweep summary")
    for name, run in runs.items():
        report = json.loads(next(sweep.glob(f"*-{name}/report.json")).read_text())
        assert run.info.status == "FINISHED"
        assert run.data.tags["mlflow.parentRunId"] == summary_run.info.run_id
        expected = {key: _as_param(value) for key, value in _leaves(report["config"])}
        assert run.data.params == expected
        metrics = client.get_run(run.info.run_id).data.metrics
        assert metrics["setup/accuracy"] == report["setup"]["accuracy"]
        assert metrics["setup/n_contexts"] == report["setup"]["n_contexts"]
        for metric, mean in report["means"].items():
            assert metrics[f"means/{metric}"] == mean
        for row in report["correlations"]:
            for field in ("spearman", "kendall", "pearson"):
                key = f"correlations/{row['metric']}/{field}"
                assert metrics.get(key) == row[field], key  # an undefined one is not logged
        for row in report["accuracy_by_gold_position"]:
            position = "none" if row["position"] is None else row["position"]
            assert metrics[f"accuracy_by_gold_position/{position}/accuracy"] == row["accuracy"]
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert artifacts == {"report.json", "report.md", *report["plots"]}

    summary = json.loads((sweep / "sweep_summary.json").read_text())
    metrics = summary_run.data.metrics
    for row in summary["runs"]:
        assert metrics[f"runs/{row['run']}/accuracy"] == row["accuracy"]
        for metric, mean in row["means"].items():
            assert metrics[f"runs/{row['run']}/means/{metric}"] == mean
    taus = {row["metric"]: row["kendall_tau"] for row in summary["ranking_agreement"]}
    assert any(tau is not None for tau in taus.values())
    for metric, tau in taus.items():
        assert metrics.get(f"ranking_agreement/{metric}/kendall_tau") == tau
    assert summary_run.data.params == {
        "sweep_dir": str(sweep),
        "sweep_id": summary["sweep_id"],
        "members": "2",
    }
    artifacts = {a.path for a in client.list_artifacts(summary_run.info.run_id)}
    assert artifacts == {"sweep_summary.json", "sweep_summary.md"}


def test_a_sweep_rerun_into_its_folder_keeps_each_sweeps_members_apart(
    tmp_path: Path, fake_judge: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second sweep (one member) summarises and adopts its own member only; the first
    sweep's summary keeps its children."""
    from udcg.cli.benchmark import command

    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "sweep"
    common = ["k=2", "judge=fake", "n_bootstrap=20", "tracking=mlflow"]
    common += [f"cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={sweep}"]
    assert command(["-m", "retriever=bm25,reversed", "dataset.limit=6", *common]) == 0
    assert command(["-m", "retriever=bm25", "dataset.limit=5", *common]) == 0
    summary = json.loads((sweep / "sweep_summary.json").read_text())
    assert [(r["run"], r["n_contexts"]) for r in summary["runs"]] == [("bm25", 5)]
    client = mlflow.MlflowClient(f"sqlite:///{sweep / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("udcg-benchmark").experiment_id
    runs = sorted(client.search_runs([experiment]), key=lambda r: r.info.start_time)
    summaries = [r for r in runs if r.info.run_name == "sweep summary"]
    children = [
        sorted(
            r.info.run_name for r in runs if r.data.tags.get("mlflow.parentRunId") == s.info.run_id
        )
        for s in summaries
    ]
    assert children == [["bm25", "reversed"], ["bm25"]]
    assert [s.data.params["members"] for s in summaries] == ["2", "1"]
    assert summaries[1].data.params["sweep_id"] == summary["sweep_id"]


def test_a_missing_mlflow_is_one_line_naming_the_extra(
    tmp_path: Path,
    contexts_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from udcg.cli.benchmark import command

    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if not installed
    monkeypatch.chdir(tmp_path)
    assert _train(tmp_path / "t", contexts_file, "logger=mlflow") == 2
    line = "error: needs the 'tracking' extra: pip install 'udcg[tracking]'"
    assert capsys.readouterr().err == f"udcg train: {line}\n"
    assert not (tmp_path / "t" / "udcg_theta_k5.safetensors").exists()  # before any work
    status = command(
        ["tracking=mlflow", "dataset.limit=4", f"hydra.run.dir={tmp_path / 'b'}", "judge=x"]
    )
    assert status == 2
    assert capsys.readouterr().err == f"udcg benchmark: {line}\n"


def test_a_bad_tracking_option_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from udcg.cli.benchmark import command

    monkeypatch.chdir(tmp_path)
    status = command(["tracking=mlflow", "tracking.backend=wandb", f"hydra.run.dir={tmp_path}"])
    assert status == 2
    assert capsys.readouterr().err == (
        "udcg benchmark: error: field 'tracking.backend': must be one of none, mlflow, "
        "got 'wandb'\n"
    )
