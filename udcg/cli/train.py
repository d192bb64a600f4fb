"""The door behind ``udcg train`` and the repository's ``train.py``: a composed Hydra config
in, its options checked before any work, the training pipeline run with typed arguments, the
held-out comparison and the exported files out.

``udcg train k=5`` and ``python train.py k=5`` are the same run: both go through
:func:`hydra_main` (configs in ``udcg/conf``, outputs in ``outputs/train/k5/<time>/`` under the
working directory).
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import hydra
from omegaconf import DictConfig

from udcg.cli.common import Outcome
from udcg.cli.hydra_config import CONF_DIR, as_option, build, run_hydra, run_job, train_settings
from udcg.errors import UDCGInputError
from udcg.pipeline.metric_table import format_table
from udcg.pipeline.training import TrainReport, train
from udcg.theta import UDCGTheta


def write_history(path: Path, history: dict[str, list[float]]) -> None:
    """One CSV row per epoch of the estimator's ``history_``."""
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["epoch", *history])
        for epoch, values in enumerate(zip(*history.values(), strict=False), start=1):
            writer.writerow([epoch, *values])


def build_model(cfg: DictConfig) -> UDCGTheta:
    """The model of ``cfg.model`` with its parameters checked now (fit would check them after
    the data is read), errors naming the option (``model.l2``, ``trainer.max_epochs``)."""
    model = build(cfg.model, "model")
    try:
        model._check_params()  # the estimator's own checks, run before any work
    except UDCGInputError as exc:
        raise as_option(exc, cfg.model, "model") from None
    return model


def run_train(cfg: DictConfig) -> TrainReport:
    """Check the options of ``cfg`` (udcg/conf/train.yaml), build the model and data, train,
    export, write the history."""
    settings = train_settings(cfg)
    model = build_model(cfg)
    report = train(build(cfg.data, "data"), model, settings, Path(cfg.export_dir))
    if cfg.logger.history_csv:
        write_history(Path(cfg.export_dir) / cfg.logger.history_csv, model.history_)
    return report


def show_report(report: TrainReport) -> None:
    """Print the sizes, the tuned gamma, the held-out comparison and the exported files."""
    print(
        f"UDCG-theta k={report.k}, judge {report.judge}: trained on {report.n_train} contexts "
        f"({report.n_train_queries} queries), held out {report.n_test} contexts "
        f"({report.n_test_queries} queries); tuned gamma = {report.gamma:.3f}"
    )
    print(format_table(report.rows))
    if report.calibration is not None:
        print(f"calibration: {report.calibration}, on the held-out queries (stored in the card)")
    print(f"weights: {report.weights_path}\nplot:    {report.plot_path}")
    print(f"folder:  {report.model_dir} (UDCGTheta.from_pretrained, udcg weights show)")


def main(cfg: DictConfig) -> Outcome:
    """Train and print the comparison; a user mistake is one line on stderr, exit status 2
    (a sweep member's failure is listed when the sweep ends)."""
    return run_job("train", lambda: show_report(run_train(cfg)))


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="train")
def hydra_main(cfg: DictConfig) -> Outcome:
    """The Hydra application: ``python train.py ARGS`` and ``udcg train ARGS``."""
    return main(cfg)


def command(argv: Sequence[str]) -> int:
    """``udcg train [OVERRIDES]``: Hydra's arguments after the command; the exit status."""
    return run_hydra("train", hydra_main, argv)
