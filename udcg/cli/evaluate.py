"""The door behind ``evaluate.py``: a composed Hydra config in, its options checked before any
work, the evaluation pipeline run with typed arguments, a short summary out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from udcg.cli.common import Outcome
from udcg.cli.hydra_config import build, build_retriever, evaluate_settings, plain, run_job
from udcg.pipeline.compare import show_correlation
from udcg.pipeline.evaluation import GIVEN, evaluate


def run_evaluate(cfg: DictConfig, output_dir: Path) -> tuple[dict[str, Any], list[Path]]:
    """Check the options of ``cfg`` (conf/evaluate.yaml), build its dataset and retriever and
    run the pipeline."""
    settings = evaluate_settings(cfg)
    dataset = build(cfg.dataset, "dataset")
    retriever = None if cfg.retriever.name == GIVEN else build_retriever(cfg.retriever)
    return evaluate(
        dataset,
        retriever,
        settings,
        Path(output_dir),
        stage_id=(plain(cfg.dataset), plain(cfg.retriever)),
        config=plain(cfg),
    )


def show_summary(report: dict[str, Any], files: list[Path]) -> None:
    """Print the setup, each metric's correlation with correctness and the report's files."""
    setup = report["setup"]
    method = report["config"]["correlation"]
    print(
        f"{setup['run']} on {setup['dataset']}: {setup['n_contexts']} contexts, k={setup['k']}, "
        f"judge {setup['judge']}, accuracy {setup['accuracy']:.3f}"
    )
    for row in report["correlations"]:
        value = show_correlation(row[method], row["undefined"])
        print(f"  {row['metric']:<12} {method} {value}")
    print("report: " + ", ".join(str(f) for f in files))


def main(cfg: DictConfig) -> Outcome:
    """Run, print the summary; a user mistake is one line on stderr, exit status 2 (a sweep
    member's failure is listed when the sweep ends)."""
    return run_job("evaluate.py", lambda: show_summary(*run_evaluate(cfg, Path(cfg.output_dir))))
