"""The evaluation pipeline behind ``evaluate.py``: check the configuration, retrieve, annotate
through the judge, score every metric, correlate with accuracy, write the report."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from udcg.errors import UDCGInputError
from udcg.judge.base import Judge
from udcg.pipeline import correlate, report
from udcg.pipeline.datasets import Dataset
from udcg.pipeline.scoring import score_contexts
from udcg.pipeline.stages import (
    StageCache,
    annotate_contexts,
    missing_steps,
    needs_coverage,
    retrieve_contexts,
    stage_key,
)
from udcg.retrieval import build_retriever, check_depth
from udcg.utility_sources import check_fitted_on, get_source

GIVEN = "given"


def load_dataset(cfg: DictConfig) -> Dataset:
    """The configured dataset, with an error naming the key on a bad path or option."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate
    from omegaconf.errors import MissingMandatoryValue

    try:
        return instantiate(cfg.dataset)
    except MissingMandatoryValue as exc:
        raise UDCGInputError(
            f"set {exc.full_key}=... (no value given)", field=str(exc.full_key)
        ) from None
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, UDCGInputError):
            raise cause from None
        raise UDCGInputError(f"cannot load the dataset: {exc}", field="dataset") from None


def load_theta(path: str | None, k: int, utility: str) -> Any:
    """UDCG-theta weights for k and the utility source (another k or source, or a bad file:
    an error), or None without a path."""
    if not path:
        return None
    from udcg.theta import UDCGTheta

    model = UDCGTheta.load(path, k=k)
    check_fitted_on(model.card_, utility, "utility=")
    return model


def connect_judge(cfg: DictConfig) -> Judge:
    """The cached judge; a server judge gets one probe call, so an unreachable one stops the
    run here."""
    from udcg.judge import load_judge
    from udcg.judge.cached import CachedJudge

    options = OmegaConf.to_container(cfg.judge_options, resolve=True) or {}
    try:
        inner = load_judge(cfg.judge, **options)
        if cfg.judge.startswith("openai:"):
            inner.generate([[{"role": "user", "content": "Reply OK."}]], max_new_tokens=1)
    except UDCGInputError:
        raise
    except Exception as exc:  # any backend failure: connection refused, bad model, ...
        raise UDCGInputError(
            f"judge {cfg.judge!r} is not usable: {type(exc).__name__}: {exc}", field="judge"
        ) from None
    return CachedJudge(inner, Path(cfg.cache_dir) / "judge.sqlite")


def _run_name(name: str, retriever: Any) -> str:
    position = getattr(retriever, "position", None)  # GoldAt: one run name per position
    return name if position is None else f"{name}@{position}"


def _progress():
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} stages"),
        TimeElapsedColumn(),
        disable=not sys.stderr.isatty(),
    )


def evaluate(cfg: DictConfig, output_dir: Path) -> tuple[dict[str, Any], list[Path]]:
    """Run the pipeline for ``cfg`` (conf/evaluate.yaml); returns the report and its files."""
    get_source(cfg.utility)  # an unknown source fails here, naming the known ones
    k = cfg.k
    dataset = load_dataset(cfg)
    given = cfg.retriever.name == GIVEN
    if given != (dataset.contexts is not None):
        raise UDCGInputError(
            "dataset holds retrieved contexts: use retriever=given"
            if not given
            else "retriever=given needs retrieved contexts (dataset=jsonl, reference or trec)",
            field="retriever",
        )
    theta = load_theta(cfg.theta_weights, k, cfg.utility)
    cache = StageCache(cfg.cache_dir)
    judge: Judge | None = None
    with _progress() as bar:
        task = bar.add_task("retrieve", total=4)
        if given:
            name, contexts = GIVEN, dataset.contexts
        else:
            check_depth(k, dataset.corpus)
            name, retriever = build_retriever(cfg.retriever)
            name = _run_name(name, retriever)
            key = stage_key(
                OmegaConf.to_container(cfg.dataset), OmegaConf.to_container(cfg.retriever), k
            )
            contexts = cache.run(
                "retrieve", key, lambda: retrieve_contexts(dataset, name, retriever, k)
            )
        bar.update(task, advance=1, description="annotate")
        steps = missing_steps(contexts, cfg.judge, cfg.utility, cfg.relevance)
        if steps or (cfg.qcare and needs_coverage(contexts)):
            judge = connect_judge(cfg)
            key = stage_key(
                [c.to_json() for c in contexts],
                judge.fingerprint,
                steps,
                cfg.relevance,
                cfg.grader,
                cfg.max_new_tokens,
                cfg.qcare,
            )
            contexts = cache.run(
                "annotate",
                key,
                lambda: annotate_contexts(
                    contexts,
                    judge,
                    steps,
                    cfg.relevance,
                    cfg.grader,
                    cfg.max_new_tokens,
                    cfg.qcare,
                ),
            )
        judge_name = judge.name if judge is not None else cfg.judge
        bar.update(task, advance=1, description="score")
        table = score_contexts(
            contexts,
            k,
            judge_name,
            cfg.utility,
            theta,
            cfg.correlation,
            cfg.seed,
            cfg.ablations,
            cfg.theta_crossfit,
        )
        bar.update(task, advance=1, description="correlate")
        args = (table.scores, table.correct, table.qids, cfg.correlation, cfg.n_bootstrap, cfg.seed)
        result = {
            "setup": {
                "dataset": dataset.name,
                "run": name,
                "k": k,
                "judge": judge_name,
                "utility": cfg.utility,
                "n_contexts": len(table.correct),
                "n_queries": len(set(table.qids.tolist())),
                "accuracy": float(table.correct.mean()),
                "cached_stages": cache.hits,
            },
            "config": OmegaConf.to_container(cfg, resolve=True),
            "means": {m: float(np.mean(v)) for m, v in table.scores.items()},
            "tuned_gammas": table.gammas,
            "crossfit_theta_weights": [
                {"alpha": m.alpha_.tolist(), "beta": m.beta_.tolist()} for m in table.theta_models
            ],
            "correlations": correlate.correlations(*args),
            "paired_tests": correlate.paired_tests(*args),
            "accuracy_by_gold_position": correlate.accuracy_by_gold_position(
                table.relevant, table.correct
            ),
            "notes": dataset.notes + table.notes,
        }
        bar.update(task, advance=1, description="report")
        if theta is None and table.theta_models:
            theta = table.theta_models[0]  # the plot shows the weights fitted on half 1
        files = report.write_report(result, output_dir, theta)
    return result, files
