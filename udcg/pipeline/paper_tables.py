"""UDCG's Table 1 and Table 2 (Trappolini et al. 2025) as analyses of the benchmark pipeline.

* :func:`distractor_study` (Table 1): each question's gold passage among ``weak`` or ``hard``
  distractors (:class:`udcg.retrieval.Distractors`, same passage, same position), annotated
  like ``udcg benchmark`` does (utility, relevance, outcome, eRAG labels);
* :func:`selection_study` (Table 2): the base retriever's top ``candidates`` (25) are labelled
  once (utility, relevance, eRAG), then each question's context is the top k of them by
  binary relevance, by utility or by eRAG label (:func:`select_contexts`; ties by the
  retriever's rank), next to the retriever's own top k, and answered.

:func:`compare_conditions` reports, per condition, the accuracy, the share of contexts holding
a relevant passage, the share answered wrong without one, and the mean of every metric of
:func:`udcg.pipeline.scoring.score_table` (the ones fitted per run left out), each with a 95%
percentile bootstrap interval resampling questions, and each condition's paired difference
with a reference condition (same resampled questions).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, correctness, relevance_matrix
from udcg.io.joins.utility_sources import get_source
from udcg.judge.base import Judge
from udcg.labels.erag import erag_labels
from udcg.pipeline.datasets import Dataset
from udcg.pipeline.metric_table import RELEVANT_AT
from udcg.pipeline.scoring import FITTED_PER_RUN, score_table
from udcg.pipeline.settings import EvaluateSettings
from udcg.pipeline.stages import (
    StageCache,
    annotate_stage,
    missing_steps,
    retrieve_contexts,
    stage_key,
)
from udcg.retrieval import Distractors, Retriever
from udcg.retrieval.base import retriever_identity

#: How :func:`select_contexts` scores the candidates.
SELECT_BY = {
    "relevance": "binary relevance (answer match, or the judge's with relevance=llm)",
    "utility": "the judge's passage utility u = 1 - P(abstain) (or the answer likelihood)",
    "erag": "the eRAG label: the judge answers correctly from the passage alone",
}
#: The columns every condition gets before the metrics.
OUTCOME_COLUMNS = ("accuracy", "with relevant", "wrong without relevant")


def selection_order(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k highest ``scores``, highest first; ties keep the retriever's order.

    Examples:
        >>> selection_order(np.array([0.2, 0.9, 0.2, 0.9]), 3).tolist()
        [1, 3, 0]
    """
    return np.argsort(-np.asarray(scores, dtype=float), kind="stable")[:k]


def _selection_scores(candidates: Sequence[Context], by: str, judge: str, utility: str) -> list:
    if by == "relevance":
        return [np.asarray(r) >= RELEVANT_AT for r in relevance_matrix(candidates)]
    if by == "utility":
        return get_source(utility).utilities(candidates, judge)
    rows = erag_labels(candidates, judge)
    for ctx, row in zip(candidates, rows, strict=True):
        if np.isnan(row).any():
            raise UDCGInputError(
                f"passage {int(np.argmax(np.isnan(row)))} has no eRAG label of {judge!r}",
                field="erag",
                **ctx.location(),
            )
    return rows


def select_contexts(
    candidates: Sequence[Context], by: str, k: int, judge: str, utility: str = "abstention"
) -> list[Context]:
    """Per question, the k of its candidates best by ``by`` (:data:`SELECT_BY`), best first
    (:func:`selection_order`), without outcome, run ``select_by=BY``.

    Examples:
        >>> from udcg.io.contexts.jsonl import Passage
        >>> passages = [Passage(f"d{i}", relevant=i == 2, abstain_prob={"m": p})
        ...             for i, p in enumerate([0.1, 0.9, 0.5])]
        >>> pool = [Context("q1", passages)]
        >>> [p.doc_id for p in select_contexts(pool, "relevance", 2, "m")[0].passages]
        ['d2', 'd0']
        >>> [p.doc_id for p in select_contexts(pool, "utility", 2, "m")[0].passages]
        ['d0', 'd2']
    """
    if by not in SELECT_BY:
        raise UDCGInputError(
            f"must be one of {', '.join(SELECT_BY)}, got {by!r}", field="select_by"
        )
    scores = _selection_scores(candidates, by, judge, utility)
    return [
        replace(
            ctx,
            passages=[ctx.passages[int(i)] for i in selection_order(row, k)],
            outcomes={},
            run=f"select_by={by}",
        )
        for ctx, row in zip(candidates, scores, strict=True)
    ]


def _columns(
    contexts: Sequence[Context], k: int, judge: str, utility: str, seed: int
) -> dict[str, np.ndarray]:
    """Per context: correctness, holds a relevant passage, wrong without one, then every
    metric of :func:`score_table` not fitted per run."""
    table = score_table(contexts, k, judge, utility, seed=seed)
    correct = correctness(contexts, judge).astype(float)
    holds = np.array([(np.asarray(r) >= RELEVANT_AT).any() for r in relevance_matrix(contexts)])
    columns = {
        "accuracy": correct,
        "with relevant": holds.astype(float),
        "wrong without relevant": ((correct == 0) & ~holds).astype(float),
    }
    columns.update(
        {
            name: np.asarray(v, float)
            for name, v in table.scores.items()
            if name not in FITTED_PER_RUN
        }
    )
    return columns


def _aligned(conditions: Mapping[str, Sequence[Context]]) -> dict[str, list[Context]]:
    """Each condition's contexts in one question order; every condition needs exactly one
    context per question, for the same questions."""
    orders = {}
    for name, contexts in conditions.items():
        by_qid = {c.qid: c for c in contexts}
        if len(by_qid) != len(contexts):
            raise UDCGInputError(f"condition {name!r} has several contexts for one question")
        orders[name] = by_qid
    qids = [list(o) for o in orders.values()]
    if any(set(q) != set(qids[0]) for q in qids):
        raise UDCGInputError("the conditions do not hold the same questions")
    return {name: [o[q] for q in qids[0]] for name, o in orders.items()}


def _interval(values: np.ndarray, draws: np.ndarray) -> list[float]:
    """``[mean, low, high]``: the mean and its 95% percentile interval over ``draws``."""
    means = values[draws].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return [float(values.mean()), float(low), float(high)]


def compare_conditions(
    conditions: Mapping[str, Sequence[Context]],
    k: int,
    judge: str,
    utility: str = "abstention",
    reference: str | None = None,
    n_bootstrap: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Per condition ``{"n", "values": {column: [mean, low, high]}}`` (module docstring), and
    with ``reference`` each other condition's paired difference (condition - reference, same
    bootstrap resamples of the questions) in ``"differences"``.

    Examples:
        >>> from udcg.io.contexts.jsonl import Passage
        >>> def ctx(qid, rel, correct):
        ...     passages = [Passage("d", relevant=rel, abstain_prob={"m": 0.5})]
        ...     return Context(qid, passages, outcomes={"m": {"correct": correct}})
        >>> a = [ctx("q1", True, True), ctx("q2", False, False)]
        >>> b = [ctx("q2", False, False), ctx("q1", True, False)]
        >>> out = compare_conditions({"a": a, "b": b}, 1, "m", reference="a", n_bootstrap=50)
        >>> out["conditions"]["a"]["values"]["accuracy"][0], out["differences"]["b"]["accuracy"][0]
        (0.5, -0.5)
    """
    aligned = _aligned(conditions)
    columns = {name: _columns(c, k, judge, utility, seed) for name, c in aligned.items()}
    n = len(next(iter(aligned.values())))
    draws = np.random.default_rng(seed).integers(0, n, size=(n_bootstrap, n))
    out: dict[str, Any] = {
        "n_questions": n,
        "k": k,
        "judge": judge,
        "n_bootstrap": n_bootstrap,
        "seed": seed,
        "conditions": {
            name: {"n": n, "values": {c: _interval(v, draws) for c, v in cols.items()}}
            for name, cols in columns.items()
        },
    }
    if reference is not None:
        base = columns[reference]
        out["reference"] = reference
        out["differences"] = {
            name: {c: _interval(v - base[c], draws) for c, v in cols.items() if c in base}
            for name, cols in columns.items()
            if name != reference
        }
    return out


def _labelled(
    cache: StageCache,
    contexts: list[Context],
    judge: Judge,
    settings: EvaluateSettings,
    erag: bool,
    outcomes: bool = True,
) -> list[Context]:
    """The contexts with the labels the studies need, through the cached annotate stage."""
    key = settings.judge_key
    steps = missing_steps(
        contexts, key, settings.utility, settings.relevance, erag, settings.outcome
    )
    if not outcomes:
        steps = [s for s in steps if s != "outcomes"]
    return annotate_stage(cache, contexts, judge, steps, settings) if steps else contexts


def distractor_study(
    dataset: Dataset,
    base: Retriever,
    settings: EvaluateSettings,
    judge: Judge,
    cache: StageCache,
    erag: bool = True,
) -> dict[str, list[Context]]:
    """Table 1's annotated contexts: ``{"weak": [...], "hard": [...]}`` (module docstring),
    k = ``settings.k``, the gold position cycling 1..k over the questions."""
    out = {}
    fingerprint = dataset.fingerprint()
    for kind in ("weak", "hard"):
        retriever = Distractors(base, kind, seed=settings.seed)
        key = stage_key(
            "distractors",
            kind,
            fingerprint,
            retriever_identity(base),
            settings.k,
            settings.seed,
        )
        contexts = cache.run(
            "retrieve",
            key,
            lambda r=retriever, kind=kind: retrieve_contexts(
                dataset, f"distractors={kind}", r, settings.k
            ),
        )
        out[kind] = _labelled(cache, contexts, judge, settings, erag)
    return out


def selection_study(
    dataset: Dataset,
    base: Retriever,
    settings: EvaluateSettings,
    judge: Judge,
    cache: StageCache,
    candidates: int = 25,
    by: Sequence[str] = tuple(SELECT_BY),
    name: str = "retriever",
) -> dict[str, list[Context]]:
    """Table 2's annotated contexts: ``{name: the base's top k, "select_by=BY": ...}`` (module
    docstring); the candidates' labels are computed once and shared by every selection."""
    k = settings.k
    if candidates < k:
        raise UDCGInputError(f"must be at least k={k}, got {candidates}", field="candidates")
    key = stage_key("candidates", dataset.fingerprint(), name, retriever_identity(base), candidates)
    pool = cache.run("retrieve", key, lambda: retrieve_contexts(dataset, name, base, candidates))
    pool = _labelled(cache, pool, judge, settings, "erag" in by, outcomes=False)
    top = [replace(c, passages=c.passages[:k], outcomes={}) for c in pool]
    out = {name: _labelled(cache, top, judge, settings, "erag" in by)}
    for b in by:
        chosen = select_contexts(pool, b, k, settings.judge_key, settings.utility)
        out[f"select_by={b}"] = _labelled(cache, chosen, judge, settings, "erag" in by)
    return out


def _cell(values: Sequence[float]) -> str:
    mean, low, high = values
    return f"{mean:.3f} [{low:.2f}, {high:.2f}]"


def markdown(result: Mapping[str, Any], columns: Sequence[str] | None = None) -> str:
    """The comparison as a Markdown table: one row per column (``columns``: all), one column
    per condition, then each condition's difference with the reference.

    Examples:
        >>> result = {"conditions": {"a": {"n": 2, "values": {"accuracy": [0.5, 0.0, 1.0]}}},
        ...           "differences": {}}
        >>> print(markdown(result))
        | | a |
        | --- | ---: |
        | accuracy | 0.500 [0.00, 1.00] |
    """
    conditions = result["conditions"]
    differences = result.get("differences", {})
    reference = result.get("reference")
    names = list(conditions)
    rows = columns or list(next(iter(conditions.values()))["values"])
    header = ["", *names, *(f"{d} - {reference}" for d in differences)]
    lines = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1)]
    for row in rows:
        cells = [_cell(conditions[n]["values"][row]) for n in names]
        cells += [_cell(differences[d][row]) if row in differences[d] else "" for d in differences]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
