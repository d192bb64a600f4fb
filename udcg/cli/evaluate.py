"""The door behind ``evaluate.py``: a composed Hydra config in, the evaluation pipeline run with
typed arguments, a short summary out."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from udcg.cli.hydra_config import build, build_retriever, evaluate_settings, plain
from udcg.errors import UDCGInputError
from udcg.pipeline.evaluation import GIVEN, evaluate


def run_evaluate(cfg: DictConfig, output_dir: Path) -> tuple[dict[str, Any], list[Path]]:
    """Build the dataset and retriever of ``cfg`` (conf/evaluate.yaml) and run the pipeline."""
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


def main(cfg: DictConfig) -> int:
    """Run, print the summary; a user mistake is one line on stderr and exit status 2."""
    try:
        report, files = run_evaluate(cfg, Path(cfg.output_dir))
    except UDCGInputError as exc:
        print(f"evaluate.py: error: {exc}", file=sys.stderr)
        return 2
    setup = report["setup"]
    method = cfg.correlation
    print(
        f"{setup['run']} on {setup['dataset']}: {setup['n_contexts']} contexts, k={setup['k']}, "
        f"judge {setup['judge']}, accuracy {setup['accuracy']:.3f}"
    )
    for row in report["correlations"]:
        value = "n/a" if row[method] is None else f"{row[method]:+.3f}"
        print(f"  {row['metric']:<12} {method} {value}")
    print("report: " + ", ".join(str(f) for f in files))
    return 0
