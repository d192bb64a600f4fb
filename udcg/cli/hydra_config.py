"""Hydra wiring shared by ``train.py`` and ``evaluate.py``: objects built from ``_target_``
configs with errors that name the option, typed settings for the library, the sweep callback.

Hydra and OmegaConf are imported here and in the two entry points only; the library takes the
typed arguments built below.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.errors import InstantiationException
from hydra.experimental.callback import Callback
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from udcg.errors import UDCGInputError
from udcg.pipeline.evaluation import EvaluateSettings
from udcg.pipeline.sweep import write_summary
from udcg.retrieval import Retriever


def plain(cfg: Any) -> Any:
    """A config node as plain Python containers (resolved); other values unchanged."""
    return OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else cfg


def build(cfg: Any, option: str) -> Any:
    """``instantiate(cfg)``; a missing value or a failing constructor is a UDCGInputError naming
    ``option`` (the config group the user sets), a UDCGInputError from inside passes through."""
    try:
        return instantiate(cfg)
    except MissingMandatoryValue as exc:
        raise UDCGInputError(
            f"set {exc.full_key}=... (no value given)", field=str(exc.full_key)
        ) from None
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, UDCGInputError):
            raise cause from None
        reason = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
        raise UDCGInputError(f"cannot build {option}: {reason}", field=option) from None


def build_retriever(config: Any) -> tuple[str, Retriever]:
    """``(name, retriever)`` from a config with ``name`` and a ``_target_`` to instantiate."""
    spec = dict(plain(config))
    name = spec.pop("name", None)
    if not name or "_target_" not in spec:
        raise UDCGInputError(
            "a retriever config needs 'name' and '_target_' (see conf/retriever/)",
            field="retriever",
        )
    retriever = build(spec, "retriever")
    if not isinstance(retriever, Retriever):
        raise UDCGInputError(
            f"{spec['_target_']} has no retrieve(queries, corpus, k)", field="retriever"
        )
    return str(name), retriever


def evaluate_settings(cfg: DictConfig) -> EvaluateSettings:
    """The typed settings of ``conf/evaluate.yaml``."""
    return EvaluateSettings(
        k=cfg.k,
        judge=cfg.judge,
        judge_options=plain(cfg.judge_options) or {},
        utility=cfg.utility,
        relevance=cfg.relevance,
        grader=cfg.grader,
        max_new_tokens=cfg.max_new_tokens,
        qcare=cfg.qcare,
        ablations=cfg.ablations,
        theta_weights=cfg.theta_weights,
        theta_crossfit=cfg.theta_crossfit,
        correlation=cfg.correlation,
        n_bootstrap=cfg.n_bootstrap,
        seed=cfg.seed,
        cache_dir=Path(cfg.cache_dir),
    )


class SweepSummary(Callback):
    """Hydra callback: write the sweep summary when a multirun ends."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        path = write_summary(Path(config.hydra.sweep.dir))
        if path is not None:
            print(path.read_text())
            print(f"sweep summary: {path}")
