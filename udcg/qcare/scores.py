"""Q-CARE metrics of labelled contexts, computed with the core metric functions.

Per context (see :mod:`udcg.qcare.coverage` and :mod:`udcg.qcare.generator`)::

    r_j        = |{s : passage j covers s}| / |SQ|   (binary: 1[j covers any s])
    C-Prec@k   = (1/k) * sum_j r_j          C-nDCG@k = DCG(g(r)) / IDCG(g(r))
    Completeness   = |{s covered by the answer}| / |SQ|
    Conciseness    = |{f relevant to a covered s}| / |F|
    Verifiableness = |{f supported by one of the first k chunks}| / |F|

A value is missing (masked) when its labels are absent, when one of the labels it needs is
``null`` (a check without a usable answer), or when it is undefined (no sub-queries for
Completeness, no claims for Conciseness and Verifiableness); ``missing[metric]`` counts each
reason. Labels may come from the judge or from humans: only the structure matters.

Coverage labels are the booleans ``passages[].covers[s]`` (``coverage="boolean"``, the
default) or, with ``coverage="fractional"``, the numbers in [0, 1] of
``passages[].covers_prob[s]``: the judge's P(Yes), or the share of annotators who said the
chunk covers s (a ``null`` beside a yes/no ``covers`` label, a text-route label or a value the
server only bounded, counts as 0 or 1); then ``r_j`` is the mean of the chunk's fractions
over SQ. C-nDCG's gain ``g``
is ``linear`` (default) or ``exponential`` (see :mod:`udcg.qcare.coverage`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context
from udcg.qcare.coverage import GAINS, c_ndcg, c_precision
from udcg.qcare.coverage import coverage as coverage_gains
from udcg.qcare.generator import completeness, conciseness, verifiableness
from udcg.validation import one_of

RETRIEVAL_METRICS = ("C-Prec", "C-nDCG")
GENERATOR_METRICS = ("Completeness", "Conciseness", "Verifiableness")
METRICS = RETRIEVAL_METRICS + GENERATOR_METRICS
NO_LABELS = "no labels"
NO_FRACTIONS = "no covers_prob"
#: Where coverage labels are read from: ``covers`` (booleans) or ``covers_prob`` (in [0, 1]).
COVERAGE_LABELS = ("boolean", "fractional")
UNUSABLE = "a check without a usable answer"


@dataclass
class QCareScores:
    """``values[metric]``: a masked float64 array, one entry per context (masked = missing);
    ``missing[metric]``: why entries are missing, counted.

    Examples:
        A context without coverage labels is missing, and says why:

        >>> from udcg.io.contexts.model import Context, Passage
        >>> scores = qcare_scores([Context("q1", [Passage("d1")])])
        >>> scores.values["C-Prec"].tolist(), dict(scores.missing["C-Prec"]), scores.means()
        ([None], {'no labels': 1}, {'C-Prec': None, 'C-nDCG': None})
    """

    values: dict[str, np.ma.MaskedArray]
    missing: dict[str, Counter]

    def means(self) -> dict[str, float | None]:
        """Mean of the defined values of each metric (None when none is defined)."""
        out: dict[str, float | None] = {}
        for name, values in self.values.items():
            mean = values.mean() if values.size else np.ma.masked
            out[name] = None if mean is np.ma.masked else float(mean)
        return out

    def notes(self) -> list[str]:
        """One line per group of metrics missing for the same contexts: how many and why.

        Examples:
            >>> from udcg.io.contexts.model import Context, Passage
            >>> qcare_scores([Context("q1", [Passage("d1")])]).notes()
            ['C-Prec and C-nDCG missing for 1 of 1 contexts (no labels 1)']
        """
        groups: dict[str, list[str]] = {}
        for name, why in self.missing.items():
            if why:
                reasons = ", ".join(f"{r} {c}" for r, c in sorted(why.items()))
                total = len(self.values[name])
                counts = f"{sum(why.values())} of {total} contexts ({reasons})"
                groups.setdefault(counts, []).append(name)
        out = []
        for counts, names in groups.items():
            listed = f"{', '.join(names[:-1])} and {names[-1]}" if len(names) > 1 else names[0]
            out.append(f"{listed} missing for {counts}")
        return out


def _grid(value: Any, depth: int, kind: type = bool) -> tuple[Any, bool]:
    """``(grid with nulls as 0, has_null)`` for a nested label list of ``depth``, its values
    converted by ``kind`` (``bool``; ``float`` for fractions)."""
    if depth == 0:
        return (kind(0), True) if value is None else (kind(value), False)
    items = [_grid(v, depth - 1, kind) for v in value]
    return [g for g, _ in items], any(n for _, n in items)


def _is_fraction(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0


def _fractions(passage: Any) -> Any:
    """A passage's ``covers_prob``, a ``null`` where its ``covers`` holds a yes/no label read
    as 0 or 1 (a text-route label, or a value the server only bounded)."""
    soft, hard = passage.extra.get("covers_prob"), passage.covers
    if not (isinstance(soft, list) and isinstance(hard, list) and len(soft) == len(hard)):
        return soft
    pairs = zip(soft, hard, strict=True)
    return [float(h) if s is None and isinstance(h, bool) else s for s, h in pairs]


def _coverage_labels(
    ctx: Context, fractional: bool, k: int | None
) -> tuple[list[list[Any]], str | None]:
    """The ``[chunk][sub-query]`` coverage labels of the context's first ``k`` chunks (all for
    None: a label below rank k is never read) and why they cannot be used."""
    key = "covers_prob" if fractional else "covers"
    rows = [_fractions(p) if fractional else p.covers for p in ctx.passages[:k]]
    if ctx.subqueries is None or None in rows:
        return [], NO_FRACTIONS if fractional else NO_LABELS
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != len(ctx.subqueries):
            raise UDCGInputError(
                f"must be a list of {len(ctx.subqueries)} labels, one per sub-query",
                field=f"passages[{i}].{key}",
                **ctx.location(),
            )
        if fractional:
            for s, value in enumerate(row):
                if value is not None and not _is_fraction(value):
                    raise UDCGInputError(
                        f"must be a number in [0, 1] or null, got {value!r}",
                        field=f"passages[{i}].{key}[{s}]",
                        **ctx.location(),
                    )
    grid, has_null = _grid(rows, 2, float if fractional else bool)
    return grid, UNUSABLE if has_null else None


def _answer_labels(
    ctx: Context, model: str, k: int | None
) -> tuple[dict[str, Any], dict[str, str | None]]:
    """Grids of the three answer checks and, per grid, why it cannot be used (or None).
    ``subquery_covered`` needs no claims; the claim grids need them, and ``claim_support``
    keeps the first ``k`` chunks (a claim supported only below rank k is not verifiable at k)."""
    outcome = ctx.outcomes.get(model, {})
    has_claims = outcome.get("claims") is not None
    grids: dict[str, Any] = {}
    reasons: dict[str, str | None] = {}
    for name, depth in (("subquery_covered", 1), ("claim_relevance", 2), ("claim_support", 2)):
        value = outcome.get(name)
        if value is None or (depth == 2 and not has_claims):
            grids[name], reasons[name] = [], NO_LABELS
            continue
        if name == "claim_support" and k is not None:
            value = [row[:k] for row in value]
        grids[name], has_null = _grid(value, depth)
        reasons[name] = UNUSABLE if has_null else None
    if reasons["subquery_covered"] != NO_LABELS:
        _check_widths(ctx, model, grids)
    return grids, reasons


def _check_widths(ctx: Context, model: str, grids: dict[str, Any]) -> None:
    """Refuse, at the context, a ``claim_relevance`` row whose number of sub-query columns is
    not that of ``subquery_covered``."""
    n_sub = len(grids["subquery_covered"])
    for f, row in enumerate(grids["claim_relevance"]):
        if len(row) != n_sub:
            raise UDCGInputError(
                f"has {len(row)} sub-query columns but subquery_covered has {n_sub} "
                f"sub-queries (qid {ctx.qid!r})",
                field=f"outcomes.{model}.claim_relevance[{f}]",
                **ctx.location(),
            )


def _check_model(contexts: Sequence[Context], model: str) -> None:
    """Refuse an ``answers_from`` that no context has an outcome for (a misspelt model)."""
    if contexts and not any(model in c.outcomes for c in contexts):
        present = sorted({m for c in contexts for m in c.outcomes})
        found = f"models with an outcome: {', '.join(present)}" if present else "no outcomes"
        raise UDCGInputError(
            f"no context has outcomes.{model} ({found})",
            field="answers_from",
            path=contexts[0].location()["path"],
        )


def _finish(
    values: np.ma.MaskedArray, reasons: Sequence[str | None], undefined: str | None
) -> tuple[np.ma.MaskedArray, Counter]:
    """Mask the contexts with a reason; count reasons and the library's undefined cases."""
    blocked = np.array([r is not None for r in reasons], dtype=bool)
    lib_mask = np.ma.getmaskarray(values) & ~blocked
    counts = Counter(r for r in reasons if r is not None)
    if undefined is not None and lib_mask.any():
        counts[undefined] += int(lib_mask.sum())
    data = np.ma.getdata(values).astype(np.float64)
    return np.ma.MaskedArray(data, mask=blocked | np.ma.getmaskarray(values)), counts


def qcare_scores(
    contexts: Sequence[Context],
    answers_from: str | None = None,
    k: int | None = None,
    binary: bool = False,
    *,
    gain: str = "linear",
    coverage: str = "boolean",
) -> QCareScores:
    """The five Q-CARE metrics of each context (retrieval ones only without
    ``answers_from``); ``k`` truncates the retrieved lists, ``binary`` uses binary r_j,
    ``gain`` is C-nDCG's (``linear`` or ``exponential``) and ``coverage`` says which labels
    give r_j: ``boolean`` (``covers``) or ``fractional`` (``covers_prob``, in [0, 1]).

    Examples:
        Chunk gains r = (0.5, 1); the answer covers 1 of 2 sub-queries with one claim,
        relevant to it and supported by chunk 2:

        >>> from udcg.io.contexts.model import Context, Passage
        >>> answer = {"claims": ["Austen wrote Emma."], "subquery_covered": [True, False],
        ...           "claim_relevance": [[True, False]], "claim_support": [[False, True]]}
        >>> passages = [Passage("d1", covers=[True, False]), Passage("d2", covers=[True, True])]
        >>> ctx = Context("q1", passages, subqueries=["who", "when"], outcomes={"m": answer})
        >>> means = qcare_scores([ctx], answers_from="m").means()
        >>> {name: round(value, 4) for name, value in means.items()}
        {'C-Prec': 0.75, 'C-nDCG': 0.8597, 'Completeness': 0.5,
         'Conciseness': 1.0, 'Verifiableness': 1.0}

        Fractional coverage (two of four annotators say chunk 1 covers "who"):

        >>> passages = [Passage("d1", extra={"covers_prob": [0.5, 0.0]}),
        ...             Passage("d2", extra={"covers_prob": [1.0, 1.0]})]
        >>> ctx = Context("q1", passages, subqueries=["who", "when"])
        >>> qcare_scores([ctx], coverage="fractional").means()["C-Prec"]
        0.625
    """
    one_of(gain, "gain", GAINS)
    one_of(coverage, "coverage", COVERAGE_LABELS)
    values: dict[str, np.ma.MaskedArray] = {}
    missing: dict[str, Counter] = {}
    labelled = [_coverage_labels(c, coverage == "fractional", k) for c in contexts]
    r = coverage_gains([grid for grid, _ in labelled], binary=binary)
    reasons = [reason for _, reason in labelled]
    retrieval = (("C-Prec", lambda: c_precision(r, k)), ("C-nDCG", lambda: c_ndcg(r, k, gain)))
    for name, compute in retrieval:
        raw = np.ma.MaskedArray(compute() if len(r) else np.zeros(0))
        values[name], missing[name] = _finish(raw, reasons, None)
    if answers_from is None:
        return QCareScores(values, missing)
    _check_model(contexts, answers_from)
    answer = [_answer_labels(c, answers_from, k) for c in contexts]

    def reason(*names: str) -> list[str | None]:
        return [next((why[n] for n in names if why[n] is not None), None) for _, why in answer]

    covered = [g["subquery_covered"] for g, _ in answer]
    computed = {
        "Completeness": (completeness(covered), reason("subquery_covered"), "no sub-queries"),
        "Conciseness": (
            conciseness(
                [
                    [] if why["subquery_covered"] == NO_LABELS else g["claim_relevance"]
                    for g, why in answer
                ],
                covered,
            ),
            reason("claim_relevance", "subquery_covered"),
            "no claims",
        ),
        "Verifiableness": (
            verifiableness([g["claim_support"] for g, _ in answer]),
            reason("claim_support"),
            "no claims",
        ),
    }
    for name, (raw, why, undefined) in computed.items():
        values[name], missing[name] = _finish(raw, why, undefined)
    return QCareScores(values, missing)
