"""The door behind ``udcg benchmark`` and the repository's ``evaluate.py``: a composed Hydra
config in, its options checked before any work, the benchmark pipeline (which metric predicts
answers, which retriever to ship) run with typed arguments, a short summary out.

``udcg benchmark ARGS`` and ``python evaluate.py ARGS`` are the same run through
:func:`hydra_main` (config ``udcg/conf/evaluate.yaml``, outputs under the working directory).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from udcg.cli.common import Outcome
from udcg.cli.hydra_config import (
    CONF_DIR,
    build,
    build_retriever,
    evaluate_settings,
    output_folder,
    plain,
    run_hydra,
    run_job,
    sweep_dir,
    tracking_settings,
)
from udcg.pipeline.benchmark import GIVEN, run_benchmark
from udcg.pipeline.metric_table import show_correlation, show_interval
from udcg.pipeline.report import show_forecast
from udcg.pipeline.sweep import current_sweep
from udcg.pipeline.tracking import track_report


def sweep_member(sweep: Path | None) -> dict[str, Any] | None:
    """A sweep member's record for its report: the id of the sweep invocation it runs in
    (:func:`udcg.pipeline.sweep.current_sweep`) and its overrides; None outside a sweep."""
    if sweep is None:
        return None
    return {"id": current_sweep(sweep), "overrides": list(HydraConfig.get().overrides.task)}


def run_evaluate(cfg: DictConfig, output_dir: Path) -> tuple[dict[str, Any], list[Path]]:
    """Check the options of ``cfg`` (udcg/conf/evaluate.yaml), build its dataset and retriever,
    run the pipeline and log the report to the tracker (``tracking=mlflow``), holding
    ``output_dir`` (:func:`udcg.cli.hydra_config.output_folder`: its lock, and a folder another
    member of the same sweep wrote refused)."""
    settings = evaluate_settings(cfg)
    tracking = tracking_settings(cfg)
    with output_folder(Path(output_dir), "output_dir"):
        dataset = build(cfg.dataset, "dataset")
        retriever = None if cfg.retriever.name == GIVEN else build_retriever(cfg.retriever)
        sweep = sweep_dir()
        report, files = run_benchmark(
            dataset,
            retriever,
            settings,
            Path(output_dir),
            stage_id=(plain(cfg.dataset), plain(cfg.retriever)),
            config=plain(cfg),
            sweep=sweep_member(sweep),
        )
        run_id = track_report(tracking, report, files, Path(output_dir), sweep)
    if run_id is not None:
        print(f"tracked: MLflow run {run_id}")
    return report, files


def show_summary(report: dict[str, Any], files: list[Path]) -> None:
    """Print the setup, each metric's correlation with correctness, the ordering against the
    retriever order and the accuracy forecasts (when the run has them) and the report's
    files."""
    setup = report["setup"]
    method = report["config"]["correlation"]
    print(
        f"{setup['run']} on {setup['dataset']}: {setup['n_contexts']} contexts, k={setup['k']}, "
        f"judge {setup['judge']}, accuracy {setup['accuracy']:.3f}"
    )
    for row in report["correlations"]:
        value = show_correlation(row[method], row["undefined"])
        print(f"  {row['metric']:<12} {method} {value}")
    ordering = report.get("ordering")
    if ordering is not None:
        print(
            f"order={ordering['order']}: accuracy {ordering['accuracy']:.3f} vs. retriever order "
            f"{ordering['retriever_accuracy']:.3f} on the same questions, difference "
            f"{ordering['difference']:+.3f} {show_interval(*ordering['difference_ci95'])}"
        )
    for name, entry in report.get("calibration", {}).items():
        forecast, measured, difference = show_forecast(entry["forecast"])
        print(f"forecast by {name}: {forecast} (measured {measured}, difference {difference})")
    print("report: " + ", ".join(str(f) for f in files))


def main(cfg: DictConfig) -> Outcome:
    """Run, print the summary; a user mistake is one line on stderr, exit status 2 (a sweep
    member's failure is listed when the sweep ends)."""
    return run_job("evaluate", lambda: show_summary(*run_evaluate(cfg, Path(cfg.output_dir))))


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="evaluate")
def hydra_main(cfg: DictConfig) -> Outcome:
    """The Hydra application: ``python evaluate.py ARGS`` and ``udcg benchmark ARGS``."""
    return main(cfg)


def command(argv: Sequence[str]) -> int:
    """``udcg benchmark [OVERRIDES]``: Hydra's arguments after the command; the exit status."""
    return run_hydra("benchmark", hydra_main, argv)
