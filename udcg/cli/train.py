"""The door behind ``udcg train`` and the repository's ``train.py``: a composed Hydra config
in, its options checked before any work, the training pipeline run with typed arguments, the
held-out comparison and the exported files out.

``udcg train k=5`` and ``python train.py k=5`` are the same run: both go through
:func:`hydra_main` (configs in ``udcg/conf``, outputs in ``outputs/train/k5/<time>/`` under the
working directory).
"""

from __future__ import annotations

import contextlib
import csv
import importlib
import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from udcg.cli.common import Outcome
from udcg.cli.hydra_config import (
    CONF_DIR,
    as_option,
    build,
    output_folder,
    plain,
    run_hydra,
    run_job,
    train_settings,
)
from udcg.errors import UDCGInputError
from udcg.pipeline.context_scores import (
    file_labels_made_by,
    file_values_made_by,
    made_by_spec,
)
from udcg.pipeline.metric_table import format_table
from udcg.pipeline.settings import TrainSettings
from udcg.pipeline.tracking import flat_params, mlflow_uri_kept
from udcg.pipeline.training import TrainReport, log_run, train
from udcg.theta import UDCGTheta

#: loggers whose package comes with an extra: class name -> the module to import first, so a
#: missing one is the one-line "needs the 'tracking' extra" error
LOGGER_MODULES = {"MLFlowLogger": "mlflow", "TensorBoardLogger": "tensorboard"}
#: the key of a logger config that names udcg's own per-epoch history file, not a logger
HISTORY_KEY = "history_csv"


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


def _targets(cfg: DictConfig | None) -> dict[str, DictConfig]:
    """The entries of a group of named objects (``logger``, ``callbacks``) that have a
    ``_target_``, by name."""
    if cfg is None:
        return {}
    return {
        str(name): node
        for name, node in cfg.items()
        if isinstance(node, DictConfig) and "_target_" in node
    }


def build_loggers(cfg: DictConfig) -> list[Any]:
    """The Lightning loggers of ``cfg.logger`` (each named entry with a ``_target_``); a
    logger whose package is missing is the one-line error naming its extra."""
    loggers = []
    for name, node in _targets(cfg.get("logger")).items():
        module = LOGGER_MODULES.get(str(node._target_).rpartition(".")[2])
        if module is not None:
            importlib.import_module(module)  # ModuleNotFoundError: needs the 'tracking' extra
        loggers.append(build(node, f"logger.{name}"))
    return loggers


def build_callbacks(cfg: DictConfig) -> list[Any]:
    """The Lightning callbacks of ``cfg.callbacks`` (each named entry with a ``_target_``)."""
    nodes = _targets(cfg.get("callbacks"))
    return [build(node, f"callbacks.{name}") for name, node in nodes.items()]


def build_trainer(cfg: DictConfig) -> Any:
    """The ``lightning.Trainer`` partial of ``cfg.trainer`` (without udcg's ``verbose``), its
    options checked against the Trainer's signature now."""
    trainer = build(cfg.trainer, "trainer", drop=("verbose",))
    func = getattr(trainer, "func", trainer)
    try:
        inspect.signature(func).bind_partial(**getattr(trainer, "keywords", {}))
    except TypeError as exc:
        raise UDCGInputError(f"cannot build trainer: {exc}", field="trainer") from None
    return trainer


def run_params(cfg: DictConfig) -> dict[str, str]:
    """The run's config as flat parameters (``model.l2``: ``0.0``) for the loggers."""
    return flat_params(plain(cfg))


def _data_makers(data: DictConfig, settings: TrainSettings) -> dict[str, str | None]:
    """The fingerprints of the judges that made the utilities and the LLM relevance labels of
    a contexts file (``data=jsonl``), as its manifest records them; None for other data or
    without a record. A ``precomputed:FILE`` judge whose file did not make the utilities is
    refused (:func:`udcg.pipeline.context_scores.made_by_spec`)."""
    path = data.get("path")
    if not isinstance(path, str):
        return {"judge_fingerprint": None, "relevance_fingerprint": None}
    made = file_values_made_by(path, settings.judge_key, settings.utility)
    made_by_spec(settings.judge, settings.judge_key, made, path)
    return {
        "judge_fingerprint": made,
        "relevance_fingerprint": file_labels_made_by(path),
    }


def run_train(cfg: DictConfig) -> TrainReport:
    """Check the options of ``cfg`` (udcg/conf/train.yaml), build the model, data, Trainer,
    callbacks and loggers, train, export, write the history and log the run, holding
    ``export_dir`` (:func:`udcg.cli.hydra_config.output_folder`: its lock, and a folder another
    member of the same sweep wrote refused)."""
    with output_folder(Path(cfg.export_dir), "export_dir"):
        return _train_run(cfg)


def _train_run(cfg: DictConfig) -> TrainReport:
    settings = train_settings(cfg)
    model = build_model(cfg)
    trainer = build_trainer(cfg)
    callbacks = build_callbacks(cfg)
    loggers = build_loggers(cfg)
    export_dir = Path(cfg.export_dir)
    mlflow_used = any(type(lg).__name__ == "MLFlowLogger" for lg in loggers)
    data = build(cfg.data, "data")
    with mlflow_uri_kept() if mlflow_used else contextlib.nullcontext():
        report = train(
            data,
            model,
            settings,
            export_dir,
            trainer=trainer,
            logger=loggers or None,
            callbacks=callbacks,
            **_data_makers(cfg.data, settings),
        )
        artifacts = [
            p for p in (report.weights_path, report.plot_path, report.model_dir) if p is not None
        ]
        if report.weights_path is not None:
            artifacts.insert(1, report.weights_path.with_suffix(".json"))
        history = cfg.logger.get(HISTORY_KEY) if cfg.get("logger") is not None else None
        if history:
            write_history(export_dir / history, model.history_)
            artifacts.append(export_dir / history)
        log_run(loggers, report, run_params(cfg), settings.utility, artifacts)
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
