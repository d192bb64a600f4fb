"""``evaluate.py order=...``: choose each question's context of k passages from the retriever's
top candidates (:data:`udcg.theta.ordering.ORDERINGS`), answer it, and compare it with the
retriever-order context (the candidates' first k) of the same question.

The flow, for every ordering but ``retriever``: label the candidates (utility, relevance),
answer and grade the retriever-order contexts, choose each question's passages and order, answer
and grade the chosen contexts. ``theta`` chooses with :meth:`UDCGTheta.best_context`: with
weights given (``theta_weights``), or cross-fitted (``theta_crossfit``: fitted on the
retriever-order contexts of one half of the questions, choosing for the other half, and the
other way round). ``gold_first`` reads the candidates' ``relevant`` labels (answer match, or the
judge's with ``relevance=llm``): an oracle, not a method a system can run.

The comparison (:func:`compare_orders`): both accuracies, the paired difference (ordering -
retriever order) with a bootstrap CI resampling questions, and the mean UDCG-theta probability
of both contexts when a model is at hand (the weights, or the half's cross-fitted model: always
one fitted without the question's outcome).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, correctness, relevance_matrix
from udcg.io.contexts.sources import passages_moved
from udcg.io.joins.utility_sources import get_source
from udcg.pipeline.scoring import crossfit_theta, halves
from udcg.pipeline.stages import missing_steps
from udcg.theta.calibration import bootstrap_ci
from udcg.theta.ordering import (
    ORDERINGS,
    ends_order,
    gold_first_order,
    retriever_order,
    reversed_order,
)

if TYPE_CHECKING:
    from udcg.pipeline.settings import EvaluateSettings
    from udcg.theta import UDCGTheta

#: ``annotate(contexts, steps)``: the contexts with the judge's labels for ``steps`` added.
Annotate = Callable[[list[Context], list[str]], list[Context]]

HEURISTICS: dict[str, Callable[[np.ndarray, int], np.ndarray]] = {
    "retriever": lambda relevant, k: retriever_order(len(relevant), k),
    "reversed": lambda relevant, k: reversed_order(len(relevant), k),
    "ends": lambda relevant, k: ends_order(len(relevant), k),
    "gold_first": gold_first_order,
}


@dataclass
class OrderedRun:
    """The chosen contexts (answered and graded), the retriever-order contexts of the same
    questions, the candidates' labels, and the UDCG-theta probability of both contexts per
    question (None without a model)."""

    chosen: list[Context]
    baseline: list[Context]
    indices: list[np.ndarray]
    chosen_prob: np.ndarray | None
    baseline_prob: np.ndarray | None
    notes: list[str]


def labels(
    contexts: Sequence[Context], judge: str, utility: str
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per context, ``(relevant, utility)`` as 1-D arrays over its passages."""
    rel = relevance_matrix(contexts)
    util = get_source(utility).utilities(contexts, judge)
    return [(np.asarray(r, float), np.asarray(u, float)) for r, u in zip(rel, util, strict=True)]


def pick(context: Context, indices: np.ndarray, order: str) -> Context:
    """``context`` with the passages at ``indices`` in that order, no outcome, run name
    ``RUN, order=ORDER``."""
    run = f"{context.run or ''}, order={order}" if order != "retriever" else context.run
    passages = [context.passages[int(i)] for i in indices]
    return passages_moved(context, replace(context, passages=passages, outcomes={}, run=run))


def _stack(pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    return np.stack([r for r, _ in pairs]), np.stack([u for _, u in pairs])


def run_order_study(
    candidates: list[Context],
    settings: EvaluateSettings,
    annotate: Annotate,
    theta: UDCGTheta | None,
) -> OrderedRun:
    """Label the candidates, answer the retriever-order contexts, choose each question's context
    with ``settings.order`` (module docstring) and answer it."""
    k, key, utility = settings.k, settings.judge_key, settings.utility
    steps = [
        s for s in missing_steps(candidates, key, utility, settings.relevance) if s != "outcomes"
    ]
    if steps:
        candidates = annotate(candidates, steps)
    baseline = annotate(
        [pick(c, np.arange(min(k, len(c.passages))), "retriever") for c in candidates], ["outcomes"]
    )
    pairs = labels(candidates, key, utility)
    models, notes = _models(baseline, settings, theta)
    qids = np.array([c.qid for c in candidates], dtype=object)
    model_of = _model_per_question(models, qids, settings.seed)
    if settings.order == "theta":
        indices = [model_of[i].best_context(r, u, k)[0] for i, (r, u) in enumerate(pairs)]
    else:
        choose = HEURISTICS[settings.order]
        indices = [choose(r, k) for r, _ in pairs]
    chosen = annotate(
        [pick(c, idx, settings.order) for c, idx in zip(candidates, indices, strict=True)],
        ["outcomes"],
    )
    chosen_prob = baseline_prob = None
    if model_of:
        chosen_prob, baseline_prob = (
            _probabilities(model_of, contexts, key, utility) for contexts in (chosen, baseline)
        )
    return OrderedRun(chosen, baseline, indices, chosen_prob, baseline_prob, notes)


def _models(
    baseline: list[Context], settings: EvaluateSettings, theta: UDCGTheta | None
) -> tuple[list[UDCGTheta], list[str]]:
    """``(models, notes)``: the weights given (one model), the two cross-fitted models (fitted
    on the retriever-order contexts of each half), or none. A cross-fit that fails stops
    ``order=theta`` (nothing to choose with) and only leaves the other orderings without
    UDCG-theta probabilities (a note says why)."""
    if theta is not None:
        return [theta], []
    if not settings.theta_crossfit:
        return [], []
    rel, util = _stack(labels(baseline, settings.judge_key, settings.utility))
    qids = np.array([c.qid for c in baseline], dtype=object)
    correct = correctness(baseline, settings.judge_key)
    try:
        return crossfit_theta(rel, util, correct, qids, settings.seed, settings.theta_l2)[1], []
    except UDCGInputError as exc:
        if settings.order == "theta":
            raise UDCGInputError(
                f"cannot cross-fit UDCG-theta on the retriever-order contexts: {exc.reason}",
                field="theta_crossfit",
            ) from None
        return [], [f"ordering: no UDCG-theta probabilities, cross-fitting failed ({exc})"]


def _model_per_question(models: list[UDCGTheta], qids: np.ndarray, seed: int) -> list[UDCGTheta]:
    """Per question, the model that never saw its outcome: the given weights, or the model
    fitted on the other half (:func:`udcg.pipeline.scoring.halves`, as in
    :func:`crossfit_theta`)."""
    if not models:
        return []
    if len(models) == 1:
        return [models[0]] * len(qids)
    out: list[Any] = [None] * len(qids)
    for model, (_, apply) in zip(models, halves(qids, seed), strict=True):
        for i in apply:
            out[int(i)] = model
    return out


def _probabilities(
    model_of: list[UDCGTheta], contexts: list[Context], judge: str, utility: str
) -> np.ndarray:
    return np.array(
        [
            float(model.predict_proba(r[None, :], u[None, :])[0])
            for model, (r, u) in zip(model_of, labels(contexts, judge, utility), strict=True)
        ]
    )


def _difference(chosen: np.ndarray, baseline: np.ndarray) -> float:
    return float(np.mean(chosen) - np.mean(baseline))


def compare_orders(
    run: OrderedRun,
    settings: EvaluateSettings,
) -> dict[str, Any]:
    """The ``ordering`` section of the report: accuracy of the chosen and the retriever-order
    contexts, the paired difference with its bootstrap CI over questions (``n_bootstrap``
    resamples, ``seed``), and both mean UDCG-theta probabilities (None without a model)."""
    key = settings.judge_key
    chosen = correctness(run.chosen, key)
    baseline = correctness(run.baseline, key)
    qids = np.array([c.qid for c in run.chosen], dtype=object)
    diff, low, high = bootstrap_ci(
        _difference,
        chosen,
        baseline,
        groups=qids,
        n_resamples=settings.n_bootstrap,
        seed=settings.seed,
    )
    theta = (
        None if run.chosen_prob is None else "weights" if settings.theta_weights else "cross-fitted"
    )
    return {
        "order": settings.order,
        "description": ORDERINGS[settings.order],
        "candidates": settings.candidates,
        "n_queries": len(qids),
        "accuracy": float(chosen.mean()),
        "retriever_accuracy": float(baseline.mean()),
        "difference": float(diff),
        "difference_ci95": [float(low), float(high)],
        "theta": theta,
        "mean_theta": None if run.chosen_prob is None else float(run.chosen_prob.mean()),
        "retriever_mean_theta": (
            None if run.baseline_prob is None else float(run.baseline_prob.mean())
        ),
        "changed": int(sum(not np.array_equal(idx, np.arange(len(idx))) for idx in run.indices)),
    }
