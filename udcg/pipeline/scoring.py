"""Every metric, per context, from annotated contexts of one list size k."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from udcg import metrics
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, correctness, relevance_matrix
from udcg.io.joins.utility_sources import get_source
from udcg.labels.erag import erag_labels
from udcg.pipeline.fit_size import warn_if_few_contexts
from udcg.pipeline.metric_table import classic_metrics, erag_metrics
from udcg.qcare.scores import RETRIEVAL_METRICS, qcare_scores
from udcg.theta import UDCGTheta, UDCGThetaConvergenceWarning, split_by_query, tune_gamma

# metrics fitted on the outcomes of the run they score (each half on the other half): fine
# for query-level correlations, but each run gets its own gamma or weights, so their means
# do not compare across the runs of a sweep
FITTED_PER_RUN = ("UDCG-gamma", "UDCG-theta (cross-fitted)")


@dataclass
class ScoreTable:
    """Per-context metric values and correctness; ``notes`` say what was skipped and why."""

    qids: np.ndarray
    runs: list[str]
    relevant: np.ndarray
    utility: np.ndarray
    correct: np.ndarray
    scores: dict[str, np.ndarray]
    gammas: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    theta_models: list[UDCGTheta] = field(default_factory=list)  # cross-fitted, one per half


def halves(qids: np.ndarray, seed: int) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """``((fit, apply), (fit, apply))``: the two halves of the queries, each fitted on once and
    scored with what the other half fitted."""
    first, second = split_by_query(qids, 0.5, seed)
    return (first, second), (second, first)


def crossfit_gamma(
    relevant: np.ndarray,
    utility: np.ndarray,
    correct: np.ndarray,
    qids: np.ndarray,
    method: str,
    seed: int,
) -> tuple[np.ndarray, list[float]]:
    """UDCG-gamma without peeking: split queries in two halves, tune gamma on each half
    (:func:`udcg.theta.tune_gamma`) and score the other half with it."""
    values = np.full(len(correct), np.nan)
    gammas = []
    for fit, apply in halves(qids, seed):
        tuned = tune_gamma(relevant[fit], utility[fit], correct[fit], method=method)
        gammas.append(float(tuned.gamma))
        values[apply] = metrics.udcg(relevant[apply], utility[apply], tuned.gamma)
    return values, gammas


def crossfit_theta(
    relevant: np.ndarray,
    utility: np.ndarray,
    correct: np.ndarray,
    qids: np.ndarray,
    seed: int,
    l2: float = 0.0,
) -> tuple[np.ndarray, list[UDCGTheta]]:
    """UDCG-theta without peeking: fit :class:`udcg.theta.UDCGTheta` (k = list size, no bias,
    penalty ``l2``, all of the half: with ``l2=0`` plain logistic regression on the 2k UDCG
    terms) on each half of the queries and score the other half with it."""
    values = np.full(len(correct), np.nan)
    splits = halves(qids, seed)
    models = [UDCGTheta(relevant.shape[1], l2=l2, val_fraction=0.0, seed=seed) for _ in splits]
    smallest = min(len(fit) for fit, _ in splits)
    warn_if_few_contexts(smallest, models[0], "UDCG-theta (cross-fitted on each half)")
    for model, (fit, apply) in zip(models, splits, strict=True):
        # one warning for both halves, below
        model.fit(
            relevant[fit], utility[fit], correct[fit], groups=qids[fit], warn_unconverged=False
        )
        values[apply] = model.predict_proba(relevant[apply], utility[apply])
    stuck = sum(not m.converged_ for m in models)
    if stuck:
        advice = "raise theta_l2" if l2 else "set a small penalty, e.g. theta_l2=0.01"
        warnings.warn(
            f"UDCG-theta (cross-fitted) did not converge on {stuck} of 2 halves: its weights "
            f"may diverge and its probabilities be over-confident; {advice}",
            UDCGThetaConvergenceWarning,
            stacklevel=2,
        )
    return values, models


def _erag_scores(
    contexts: Sequence[Context], judge: str, notes: list[str]
) -> dict[str, np.ndarray]:
    """eRAG's metrics (:func:`udcg.pipeline.metric_table.erag_metrics`) when every passage
    has an eRAG label of ``judge``; else none, with a note saying why."""
    labels = np.stack(erag_labels(contexts, judge))
    missing = int(np.isnan(labels).sum())
    if missing == labels.size:
        notes.append("eRAG skipped: no eRAG labels (set erag=true)")
        return {}
    if missing:
        notes.append(
            f"eRAG skipped: {missing} of {labels.size} passages have no eRAG label "
            "(unparsable grades of grader=llm)"
        )
        return {}
    return erag_metrics(labels)


def _coverage_scores(
    contexts: Sequence[Context], k: int, gain: str, notes: list[str]
) -> dict[str, np.ndarray]:
    """C-Prec and C-nDCG as ``udcg qcare score`` computes them, NaN where a context's labels
    cannot be used (a check without a usable answer), counted in a note; none when fewer than
    two contexts have usable labels (no correlation)."""
    found = qcare_scores(contexts, k=k, gain=gain)
    missing = found.missing["C-Prec"]
    n = sum(missing.values())
    if n:
        reasons = ", ".join(f"{why} {count}" for why, count in sorted(missing.items()))
        missing_for = f"missing for {n} of {len(contexts)} contexts ({reasons})"
        if len(contexts) - n < 2:
            notes.append(f"C-Prec and C-nDCG skipped: {missing_for}")
            return {}
        notes.append(
            f"C-Prec and C-nDCG {missing_for}: their means and correlations are over the others"
        )
    return {name: found.values[name].filled(np.nan) for name in RETRIEVAL_METRICS}


def score_table(
    contexts: Sequence[Context],
    k: int,
    judge: str,
    utility: str = "abstention",
    theta: UDCGTheta | None = None,
    method: str = "spearman",
    seed: int = 0,
    ablations: bool = False,
    theta_crossfit: bool = False,
    theta_l2: float = 0.0,
    qcare_gain: str = "linear",
) -> ScoreTable:
    """UDCG (gamma 1/3), UDCG-gamma (cross-fitted), UDCG-theta (with ``theta``), C-Prec and
    C-nDCG (with coverage labels; C-nDCG's gain is ``qcare_gain``), nDCG, MAP, MRR, Precision
    and Hits for contexts of size k, and eRAG's (:data:`udcg.pipeline.metric_table.ERAG_METRICS`)
    when every passage has an eRAG label of ``judge`` (``udcg benchmark erag=true``).

    ``theta_crossfit`` (without ``theta``) fits UDCG-theta on each half of the queries and
    scores the other half (:func:`crossfit_theta`, penalty ``theta_l2``). ``ablations`` adds the
    UDCG paper's two: ``UDCG w/o distraction`` (gamma = 0, irrelevant passages ignored) and
    ``UDCG w/o utility`` (u_i = 1: binary relevance in place of utility).
    """
    notes = []
    theta_models: list[UDCGTheta] = []
    kept = [c for c in contexts if len(c.passages) == k]
    if len(kept) < len(contexts):
        notes.append(
            f"{len(contexts) - len(kept)} contexts without exactly k={k} passages left out"
        )
    if not kept:
        raise UDCGInputError(f"no context has k={k} passages", field="k")
    relevant = np.stack(relevance_matrix(kept))
    util = np.stack(get_source(utility).utilities(kept, judge))
    correct = correctness(kept, judge)
    qids = np.array([c.qid for c in kept], dtype=object)
    scores: dict[str, np.ndarray] = {"UDCG": metrics.udcg(relevant, util)}
    if ablations:
        scores["UDCG w/o distraction"] = metrics.udcg(relevant, util, 0.0)
        scores["UDCG w/o utility"] = metrics.udcg(relevant, np.ones_like(util))
    gammas: list[float] = []
    try:
        scores["UDCG-gamma"], gammas = crossfit_gamma(relevant, util, correct, qids, method, seed)
    except UDCGInputError as exc:
        notes.append(f"UDCG-gamma skipped: cross-fitting gamma failed ({exc})")
    if theta is not None:
        scores["UDCG-theta"] = theta.predict_proba(relevant, util)
    elif theta_crossfit:
        try:
            scores["UDCG-theta (cross-fitted)"], theta_models = crossfit_theta(
                relevant, util, correct, qids, seed, theta_l2
            )
        except UDCGInputError as exc:
            notes.append(f"UDCG-theta skipped: cross-fitting failed ({exc})")
    else:
        notes.append(
            "UDCG-theta skipped: no weights (train them with train.py and set theta_weights, "
            "or set theta_crossfit=true)"
        )
    if all(
        c.subqueries is not None and all(p.covers is not None for p in c.passages) for c in kept
    ):
        scores.update(_coverage_scores(kept, k, qcare_gain, notes))
    else:
        notes.append("C-Prec and C-nDCG skipped: no coverage labels (set qcare=true)")
    scores.update(classic_metrics(relevant, hits=True))
    scores.update(_erag_scores(kept, judge, notes))
    runs = [c.run or "" for c in kept]
    return ScoreTable(qids, runs, relevant, util, correct, scores, gammas, notes, theta_models)
