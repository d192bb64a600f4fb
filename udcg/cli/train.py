"""The door behind ``train.py``: a composed Hydra config in, the training pipeline run with
typed arguments, the held-out comparison and the exported files out."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from omegaconf import DictConfig

from udcg.cli.hydra_config import build
from udcg.errors import UDCGInputError
from udcg.pipeline.compare import format_table
from udcg.pipeline.training import TrainReport, train


def write_history(path: Path, history: dict[str, list[float]]) -> None:
    """One CSV row per epoch of the estimator's ``history_``."""
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["epoch", *history])
        for epoch, values in enumerate(zip(*history.values(), strict=False), start=1):
            writer.writerow([epoch, *values])


def run_train(cfg: DictConfig) -> TrainReport:
    """Build the model and data of ``cfg`` (conf/train.yaml), train, export, write the history."""
    model = build(cfg.model, "model")
    report = train(
        build(cfg.data, "data"),
        model,
        judge=cfg.judge,
        utility=cfg.utility,
        test_fraction=cfg.test_fraction,
        seed=cfg.seed,
        method=cfg.correlation,
        n_resamples=cfg.n_bootstrap,
        gamma_grid=cfg.gamma_grid,
        export_dir=Path(cfg.export_dir),
    )
    if cfg.logger.history_csv:
        write_history(Path(cfg.export_dir) / cfg.logger.history_csv, model.history_)
    return report


def main(cfg: DictConfig) -> int:
    """Train and print the comparison; a user mistake is one line on stderr and exit status 2."""
    try:
        report = run_train(cfg)
    except UDCGInputError as exc:
        print(f"train.py: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"UDCG-theta k={report.k}, judge {report.judge}: trained on {report.n_train} contexts "
        f"({report.n_train_queries} queries), held out {report.n_test} contexts "
        f"({report.n_test_queries} queries); tuned gamma = {report.gamma:.3f}"
    )
    print(format_table(report.rows))
    print(f"weights: {report.weights_path}\nplot:    {report.plot_path}")
    return 0
