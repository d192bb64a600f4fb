"""Per-context arrays for the metrics, extracted from :class:`~udcg.io.contexts.model.Context`.

Each helper names the field it needs; the first context without it raises
:class:`~udcg.errors.UDCGInputError` located at the line the context was read from (or by its
index and qid for contexts built in memory).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from udcg.errors import UDCGInputError
from udcg.io.contexts.checks import short
from udcg.io.contexts.model import Context

__all__ = [
    "abstain_probs",
    "answer_probs",
    "correctness",
    "coverage_matrices",
    "judge_probs",
    "relevance_matrix",
]


def _missing(ctx: Context, index: int, name: str, hint: str = "") -> UDCGInputError:
    where = (
        f"qid {short(ctx.qid)}"
        if ctx.source is not None
        else f"context {index}, qid {short(ctx.qid)}"
    )
    if ctx.run is not None:
        where += f", run {short(ctx.run)}"
    return UDCGInputError(f"missing ({where}){hint}", field=name, **ctx.location())


def relevance_matrix(contexts: Iterable[Context], unit: bool = False) -> list[np.ndarray]:
    """Per context, a float64 array of passage relevance (``true`` -> 1.0, graded as given).

    Every passage needs ``relevant``; the first one without it raises
    :class:`~udcg.errors.UDCGInputError` naming ``passages[i].relevant``. With ``unit`` (for
    UDCG and UDCG-theta, which take relevance in [0, 1]) a grade above 1 is such an error too.

    Examples:
        >>> from udcg.io.contexts.model import Context, Passage
        >>> p1 = Passage("d1", relevant=True, abstain_prob={"m": 0.25}, answer_prob={"m": 0.5})
        >>> p2 = Passage("d2", relevant=0.5, abstain_prob={"m": 0.75}, answer_prob={"m": 0.1})
        >>> contexts = [Context("q1", [p1, p2], outcomes={"m": {"correct": True}})]
        >>> [row.tolist() for row in relevance_matrix(contexts)]
        [[1.0, 0.5]]
    """
    out = []
    for n, ctx in enumerate(contexts):
        values = [p.relevant for p in ctx.passages]
        if None in values:
            raise _missing(ctx, n, f"passages[{values.index(None)}].relevant")
        row = np.array(values, dtype=np.float64)
        if unit and (row > 1.0).any():
            i = int(np.argmax(row > 1.0))
            raise UDCGInputError(
                f"grade {values[i]!r} is above 1: UDCG takes relevance in [0, 1] "
                "(true/false or a fraction)",
                field=f"passages[{i}].relevant",
                **ctx.location(),
            )
        out.append(row)
    return out


def abstain_probs(contexts: Iterable[Context], model: str) -> list[np.ndarray]:
    """Per context, a float64 array of P(abstain) of ``model`` for each passage.

    Every passage needs ``abstain_prob[model]``; the first one without it raises
    :class:`~udcg.errors.UDCGInputError` naming ``passages[i].abstain_prob.<model>``.

    Examples:
        >>> from udcg.io.contexts.model import Context, Passage
        >>> p1 = Passage("d1", relevant=True, abstain_prob={"m": 0.25}, answer_prob={"m": 0.5})
        >>> p2 = Passage("d2", relevant=0.5, abstain_prob={"m": 0.75}, answer_prob={"m": 0.1})
        >>> contexts = [Context("q1", [p1, p2], outcomes={"m": {"correct": True}})]
        >>> [row.tolist() for row in abstain_probs(contexts, "m")]
        [[0.25, 0.75]]
    """
    return judge_probs(contexts, model, "abstain_prob")


def answer_probs(contexts: Iterable[Context], model: str) -> list[np.ndarray]:
    """Per context, a float64 array of ``model``'s answer likelihood for each passage.

    Every passage needs ``answer_prob[model]``; the first one without it raises
    :class:`~udcg.errors.UDCGInputError` naming ``passages[i].answer_prob.<model>``.

    Examples:
        >>> from udcg.io.contexts.model import Context, Passage
        >>> p1 = Passage("d1", relevant=True, abstain_prob={"m": 0.25}, answer_prob={"m": 0.5})
        >>> p2 = Passage("d2", relevant=0.5, abstain_prob={"m": 0.75}, answer_prob={"m": 0.1})
        >>> contexts = [Context("q1", [p1, p2], outcomes={"m": {"correct": True}})]
        >>> [row.tolist() for row in answer_probs(contexts, "m")]
        [[0.5, 0.1]]
    """
    return judge_probs(contexts, model, "answer_prob")


def judge_probs(contexts: Iterable[Context], model: str, key: str) -> list[np.ndarray]:
    """Per context, a float64 array of ``passage.<key>[model]`` (``key`` in
    :data:`~udcg.io.contexts.model.JUDGE_PROB_KEYS`); a missing value names
    ``passages[i].<key>.<model>``.

    Examples:
        >>> from udcg.io.contexts.model import Context, Passage
        >>> p1 = Passage("d1", relevant=True, abstain_prob={"m": 0.25}, answer_prob={"m": 0.5})
        >>> p2 = Passage("d2", relevant=0.5, abstain_prob={"m": 0.75}, answer_prob={"m": 0.1})
        >>> contexts = [Context("q1", [p1, p2], outcomes={"m": {"correct": True}})]
        >>> [row.tolist() for row in judge_probs(contexts, "m", "answer_prob")]
        [[0.5, 0.1]]
        >>> try:
        ...     judge_probs(contexts, "qwen", "abstain_prob")
        ... except UDCGInputError as error:
        ...     print(error.field, error.reason)
        passages[0].abstain_prob.qwen missing (context 0, qid 'q1'); models present: m
    """
    out = []
    for n, ctx in enumerate(contexts):
        try:
            out.append(np.array([getattr(p, key)[model] for p in ctx.passages], dtype=np.float64))
        except KeyError:
            i = next(i for i, p in enumerate(ctx.passages) if model not in getattr(p, key))
            models = sorted(getattr(ctx.passages[i], key))
            hint = f"; models present: {', '.join(models)}" if models else ""
            raise _missing(ctx, n, f"passages[{i}].{key}.{model}", hint) from None
    return out


def correctness(contexts: Iterable[Context], model: str) -> np.ndarray:
    """A float64 vector (1.0 correct, 0.0 wrong) of ``outcomes[model].correct``, one per context.

    A context without it raises :class:`~udcg.errors.UDCGInputError` naming
    ``outcomes.<model>.correct``.

    Examples:
        >>> from udcg.io.contexts.model import Context, Passage
        >>> p1 = Passage("d1", relevant=True, abstain_prob={"m": 0.25}, answer_prob={"m": 0.5})
        >>> p2 = Passage("d2", relevant=0.5, abstain_prob={"m": 0.75}, answer_prob={"m": 0.1})
        >>> contexts = [Context("q1", [p1, p2], outcomes={"m": {"correct": True}})]
        >>> correctness(contexts, "m").tolist()
        [1.0]
    """
    out = []
    for n, ctx in enumerate(contexts):
        value = ctx.outcomes.get(model, {}).get("correct")
        if value is None:
            models = sorted(m for m, o in ctx.outcomes.items() if o.get("correct") is not None)
            hint = f"; models with a judged outcome: {', '.join(models)}" if models else ""
            raise _missing(ctx, n, f"outcomes.{model}.correct", hint)
        out.append(value)
    return np.array(out, dtype=np.float64)


def coverage_matrices(contexts: Iterable[Context]) -> list[np.ndarray]:
    """Per context, a boolean ``[k, n_subqueries]`` array: passage i covers sub-query s.

    Needs ``subqueries`` on the context and ``covers`` on every passage, without ``null``
    entries (checks that gave no usable answer).

    Examples:
        >>> from udcg.io.contexts.model import Context, Passage
        >>> passages = [Passage("d1", covers=[True, False]), Passage("d2", covers=[False, False])]
        >>> coverage_matrices([Context("q1", passages, subqueries=["who", "when"])])[0].tolist()
        [[True, False], [False, False]]
    """
    out = []
    for n, ctx in enumerate(contexts):
        if ctx.subqueries is None:
            raise _missing(ctx, n, "subqueries")
        rows = [p.covers for p in ctx.passages]
        if None in rows:
            raise _missing(ctx, n, f"passages[{rows.index(None)}].covers")
        unanswered = [i for i, row in enumerate(rows) if None in row]
        if unanswered:
            raise _missing(
                ctx, n, f"passages[{unanswered[0]}].covers", ": a check without a usable answer"
            )
        matrix = np.zeros((len(rows), len(ctx.subqueries)), dtype=bool)
        if rows:
            matrix[:] = rows
        out.append(matrix)
    return out
