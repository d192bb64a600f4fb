"""Agreement between judge labels and human labels, through the metrics they produce.

Human labels come in the same structure as the judge's (a contexts JSONL with
``subqueries``, ``passages[].covers`` and ``outcomes[MODEL]`` claims and checks). Contexts
are matched by ``(qid, run)``. A human file may label only some checks: with ``fill=True``
every label it lacks is taken from the judge's context when both describe the same
sub-queries, passages and claims (as in the reference study, where humans did not label
claim relevance); a passage's ``covers`` and ``covers_prob`` are filled only when the human
labelled neither; what was filled is counted.

For each metric and split (the value of a context field such as ``run``, or of an extra key
such as ``split``; all contexts in one split by default), the Pearson and Spearman
correlations between the judge-based and the human-based per-context values, over the
contexts where both are defined (``nan`` below 3 pairs or when either side is constant).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from udcg.errors import UDCGInputError
from udcg.io.contexts.checks import short
from udcg.io.contexts.jsonl import ANSWER_LABELS, CONTEXT_KEYS, Context
from udcg.io.contexts.model import by_key
from udcg.qcare.scores import METRICS, qcare_scores
from udcg.stats import correlation

ALL = "all"


@dataclass(frozen=True)
class AgreementRow:
    """One metric in one split: pairs used, Pearson r and Spearman rho (nan if undefined).

    Examples:
        >>> row = AgreementRow("all", "C-Prec", n=2, pearson=float("nan"), spearman=float("nan"))
        >>> row.metric, row.n, row.pearson
        ('C-Prec', 2, nan)
    """

    split: str
    metric: str
    n: int
    pearson: float
    spearman: float


def _same_passages(a: Context, b: Context) -> bool:
    """One retrieved list: as many passages, none of whose ``doc_id`` or ``text`` differs at
    its rank where both give one (a human file may name passages by id only)."""
    return len(a.passages) == len(b.passages) and _difference(a, b) is None


def _difference(human: Context, judge: Context) -> tuple[int, str, str, str] | None:
    """The first ``(rank, field, human's, judge's)`` of two lists of one length that differ."""
    for i, (mine, theirs) in enumerate(zip(human.passages, judge.passages, strict=True)):
        for name in ("doc_id", "text"):
            a, b = getattr(mine, name), getattr(theirs, name)
            if a is not None and b is not None and a != b:
                return i, name, a, b
    return None


def _check_same_list(human: Context, judge: Context) -> None:
    """Refuse a human context whose retrieved list is not the judge's: another length, or a
    passage whose ``doc_id`` or ``text`` (where both give one) differs at the same rank."""
    where = {"qid": human.qid, "run": human.run}
    if len(human.passages) != len(judge.passages):
        raise UDCGInputError(
            f"{len(human.passages)} passages, the judge's context {where} has "
            f"{len(judge.passages)}: agreement compares labels of one retrieved list",
            field="passages",
            **human.location(),
        )
    found = _difference(human, judge)
    if found is not None:
        i, name, a, b = found
        raise UDCGInputError(
            f"differs from the judge's context {where} at this rank ({short(a)} against "
            f"{short(b)}): agreement compares labels of one retrieved list",
            field=f"passages[{i}].{name}",
            **human.location(),
        )


def _qid_run(ctx: Context) -> tuple[str, str | None]:
    return ctx.qid, ctx.run


def fill_labels(human: Context, judge: Context, model: str | None) -> tuple[Context, Counter]:
    """``human`` with the labels it lacks taken from ``judge`` where both label the same
    things; returns the new context and the count of filled fields by name.

    Examples:
        >>> from udcg.io.contexts.model import Context, Passage
        >>> human = Context("q1", [Passage(text="a")], run="r")
        >>> judge = Context("q1", [Passage(text="a", covers=[True])], run="r", subqueries=["s"])
        >>> filled, counts = fill_labels(human, judge, model=None)
        >>> filled.subqueries, filled.passages[0].covers, dict(counts)
        (['s'], [True], {'subqueries': 1, 'covers': 1})
    """
    filled: Counter = Counter()
    if not _same_passages(human, judge):
        return human, filled
    passages = list(human.passages)
    subqueries = human.subqueries
    if subqueries is None and judge.subqueries is not None:
        subqueries = judge.subqueries
        filled["subqueries"] += 1
    if subqueries == judge.subqueries:
        for i, (mine, theirs) in enumerate(zip(passages, judge.passages, strict=True)):
            if mine.covers is None and "covers_prob" not in mine.extra:
                if theirs.covers is not None:
                    mine = replace(mine, covers=theirs.covers)
                    filled["covers"] += 1
                if "covers_prob" in theirs.extra:
                    mine = replace(
                        mine, extra={**mine.extra, "covers_prob": theirs.extra["covers_prob"]}
                    )
                    filled["covers_prob"] += 1
                passages[i] = mine
    outcomes = dict(human.outcomes)
    if model is not None and model in judge.outcomes:
        mine, theirs = dict(outcomes.get(model, {})), judge.outcomes[model]
        claim_labels = (
            f"{n}{t}" for n in ("claim_relevance", "claim_support") for t in ("", "_prob")
        )
        if "claims" not in mine and "claims" in theirs and not any(n in mine for n in claim_labels):
            mine["claims"] = theirs["claims"]
            filled["claims"] += 1
        if mine.get("claims") == theirs.get("claims") and subqueries == judge.subqueries:
            for name in ANSWER_LABELS:
                if mine.get(name) is None and theirs.get(name) is not None:
                    mine[name] = theirs[name]
                    filled[name] += 1
        outcomes[model] = mine
    return replace(human, subqueries=subqueries, passages=passages, outcomes=outcomes), filled


def as_fractions(ctx: Context) -> Context:
    """``ctx`` with ``covers_prob`` taken from the boolean ``covers`` (1.0 and 0.0, null kept)
    on the passages that have no ``covers_prob``: a yes/no label is a probability of 0 or 1.

    Examples:
        >>> from udcg.io.contexts.model import Context, Passage
        >>> ctx = as_fractions(Context("q1", [Passage("d1", covers=[True, None])]))
        >>> ctx.passages[0].extra["covers_prob"]
        [1.0, None]
    """
    passages = [
        p
        if "covers_prob" in p.extra or p.covers is None
        else replace(
            p,
            extra={**p.extra, "covers_prob": [None if c is None else float(c) for c in p.covers]},
        )
        for p in ctx.passages
    ]
    return replace(ctx, passages=passages)


def _split_of(ctx: Context, split_by: str | None) -> str:
    if split_by is None:
        return ALL
    value = getattr(ctx, split_by) if split_by in CONTEXT_KEYS else ctx.extra.get(split_by)
    if isinstance(value, list | dict):
        raise UDCGInputError(
            f"holds a {type(value).__name__}: split by a field holding a text or a number "
            "(run, an extra key such as split)",
            field=split_by,
            **ctx.location(),
        )
    if value is None:
        raise UDCGInputError(
            f"missing: needed to split contexts (qid {ctx.qid!r})",
            field=split_by,
            **ctx.location(),
        )
    return str(value)


def _pair(a: np.ma.MaskedArray, b: np.ma.MaskedArray, method: Any) -> tuple[int, float]:
    both = ~(np.ma.getmaskarray(a) | np.ma.getmaskarray(b))
    n = int(both.sum())
    if n < 3:
        return n, math.nan
    return n, correlation(np.ma.getdata(a)[both], np.ma.getdata(b)[both], method)


def agreement(
    judge_contexts: Sequence[Context],
    human_contexts: Sequence[Context],
    answers_from: str | None = None,
    split_by: str | None = None,
    k: int | None = None,
    binary: bool = False,
    fill: bool = True,
    *,
    gain: str = "linear",
    coverage: str = "boolean",
) -> tuple[list[AgreementRow], Counter]:
    """Per split and metric, how well judge-based metrics agree with human-based ones.
    Returns the rows and the count of labels filled from the judge. ``k``, ``binary``,
    ``gain`` and ``coverage`` are :func:`~udcg.qcare.scores.qcare_scores`'s, on both sides;
    with ``coverage="fractional"`` a side's boolean ``covers`` count as 0 and 1 where it has
    no ``covers_prob`` (:func:`as_fractions`: a judge's yes/no against the annotators' mean).

    Examples:
        C-Prec per query (judge 0.5, 1, 0; human 0.5, 1, 0.5): r = 0.25 / (0.7071 * 0.4082);
        C-nDCG (1, 1, 0 against 1, 1, 0.63) is one line, r = 1:

        >>> from udcg.io.contexts.model import Context, Passage
        >>> def labelled(qid, covers):  # two passages, one sub-query
        ...     passages = [Passage(text=t, covers=[c]) for t, c in zip("ab", covers)]
        ...     return Context(qid, passages, run="r", subqueries=["s"])
        >>> judge = [labelled("q1", [True, False]), labelled("q2", [True, True]),
        ...          labelled("q3", [False, False])]
        >>> human = judge[:2] + [labelled("q3", [False, True])]
        >>> rows, filled = agreement(judge, human)
        >>> [(row.split, row.metric, row.n, round(row.pearson, 4)) for row in rows]
        [('all', 'C-Prec', 3, 0.866), ('all', 'C-nDCG', 3, 1.0)]
    """
    judge_of = by_key(judge_contexts, _qid_run, "the same qid and run in the judge-labelled file")
    pairs: list[tuple[Context, Context]] = []
    filled: Counter = Counter()
    humans = by_key(human_contexts, _qid_run, "the same qid and run in the human-labelled file")
    for human in humans.values():
        judge = judge_of.get((human.qid, human.run))
        if judge is None:
            raise UDCGInputError(
                f"no judge-labelled context with qid {human.qid!r} and run {human.run!r}",
                field="qid",
                **human.location(),
            )
        _check_same_list(human, judge)
        if fill:
            human, more = fill_labels(human, judge, answers_from)
            filled.update(more)
        pairs.append((judge, human))
    options = {"gain": gain, "coverage": coverage}
    if coverage == "fractional":
        pairs = [(as_fractions(j), as_fractions(h)) for j, h in pairs]
    judged = qcare_scores([j for j, _ in pairs], answers_from, k, binary, **options)
    humans = qcare_scores([h for _, h in pairs], answers_from, k, binary, **options)
    splits = np.array([_split_of(h, split_by) for _, h in pairs], dtype=object)
    rows = []
    for split in sorted(set(splits)):
        chosen = splits == split
        for metric in METRICS:
            if metric not in judged.values:
                continue
            a, b = judged.values[metric][chosen], humans.values[metric][chosen]
            n, pearson = _pair(a, b, "pearson")
            rows.append(AgreementRow(split, metric, n, pearson, _pair(a, b, "spearman")[1]))
    return rows, filled


def krippendorff_alpha(values: Any) -> float:
    """Krippendorff's alpha for nominal labels: ``values[coder][unit]``, ``nan`` where a
    coder did not label a unit. Units with fewer than two labels are not pairable and left
    out; ``alpha = 1 - D_o / D_e`` with the observed disagreement ``D_o`` from the
    coincidence matrix ``o[c][k] = sum_u pairs(c, k in u) / (m_u - 1)`` and the expected
    ``D_e`` from its margins; ``nan`` when ``D_e`` is 0 (a single value everywhere).

    Examples:
        Krippendorff's (2011) reliability data, 4 coders and 12 units, nominal alpha 0.743:

        >>> nan = float("nan")
        >>> data = [[1, 2, 3, 3, 2, 1, 4, 1, 2, nan, nan, nan],
        ...         [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, nan, 3],
        ...         [nan, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, nan],
        ...         [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, nan]]
        >>> round(krippendorff_alpha(data), 3)
        0.743
    """
    table = np.asarray(values, dtype=np.float64)
    if table.ndim != 2:
        raise ValueError("values must be a [coders, units] matrix")
    categories = np.unique(table[~np.isnan(table)])
    index = {value: i for i, value in enumerate(categories)}
    coincidence = np.zeros((len(categories), len(categories)))
    for unit in table.T:
        labels = unit[~np.isnan(unit)]
        if len(labels) < 2:
            continue
        counts = np.zeros(len(categories))
        for value in labels:
            counts[index[value]] += 1
        pairs = np.outer(counts, counts) - np.diag(counts)
        coincidence += pairs / (len(labels) - 1)
    margins = coincidence.sum(axis=1)
    n = margins.sum()
    if n < 2:
        return math.nan
    observed = coincidence.sum() - np.trace(coincidence)
    expected = (n * n - (margins * margins).sum()) / (n - 1)
    return math.nan if expected == 0 else float(1.0 - observed / expected)


@dataclass(frozen=True)
class AnnotatorAgreement:
    """Agreement between the annotators of the coverage labels
    (``passages[].extra["covers_by_annotator"]``): Krippendorff's alpha over the
    (query, chunk, sub-query) units, and per pair of annotators the Pearson and Spearman
    correlations of C-Prec and C-nDCG per query (``split`` names the pair), the statistic the
    release reports between judge and humans.

    Examples:
        >>> AnnotatorAgreement(alpha=1.0, units=4, annotators=("a", "b"), rows=[]).annotators
        ('a', 'b')
    """

    alpha: float
    units: int
    annotators: tuple[str, ...]
    rows: list[AgreementRow]


def _annotator_context(ctx: Context, name: str) -> Context | None:
    labels = [p.extra.get("covers_by_annotator", {}).get(name) for p in ctx.passages]
    if not ctx.passages or any(label is None for label in labels):
        return None
    passages = [
        replace(p, covers=list(label)) for p, label in zip(ctx.passages, labels, strict=True)
    ]
    return replace(ctx, passages=passages)


def annotator_agreement(
    contexts: Sequence[Context], k: int | None = None, binary: bool = False, *, gain: str = "linear"
) -> AnnotatorAgreement:
    """Human-vs-human agreement on coverage (see :class:`AnnotatorAgreement`); ``k``,
    ``binary`` and ``gain`` are :func:`~udcg.qcare.scores.qcare_scores`'s.

    Examples:
        Two annotators of three one-chunk queries agree on two of the three labels:

        >>> from udcg.io.contexts.model import Context, Passage
        >>> def ctx(qid, a, b):
        ...     extra = {"covers_by_annotator": {"A": [a], "B": [b]}}
        ...     return Context(qid, [Passage("1", extra=extra)], subqueries=["s"])
        >>> result = annotator_agreement([ctx("q1", True, True), ctx("q2", False, False),
        ...                               ctx("q3", True, False)])
        >>> result.annotators, result.units, round(result.alpha, 4)
        (('A', 'B'), 3, 0.4444)
        >>> [(row.split, row.metric, row.n, round(row.pearson, 3)) for row in result.rows]
        [('A vs B', 'C-Prec', 3, 0.5), ('A vs B', 'C-nDCG', 3, 0.5)]
    """
    names = tuple(
        dict.fromkeys(
            name
            for c in contexts
            for p in c.passages
            for name in p.extra.get("covers_by_annotator", {})
        )
    )
    units: list[list[float]] = []
    for ctx in contexts:
        for p in ctx.passages:
            labels = p.extra.get("covers_by_annotator", {})
            width = max((len(v) for v in labels.values()), default=0)
            for s in range(width):
                unit = []
                for name in names:
                    value = labels.get(name)
                    label = None if value is None or s >= len(value) else value[s]
                    unit.append(math.nan if label is None else float(label))
                units.append(unit)
    table = np.array(units, dtype=np.float64).T if units else np.zeros((len(names), 0))
    pairable = int((np.sum(~np.isnan(table), axis=0) >= 2).sum()) if units else 0
    alpha = krippendorff_alpha(table) if pairable else math.nan
    rows = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            both = [
                (ca, cb)
                for ca, cb in (
                    (_annotator_context(c, a), _annotator_context(c, b)) for c in contexts
                )
                if ca is not None and cb is not None
            ]
            left = qcare_scores([x for x, _ in both], None, k, binary, gain=gain)
            right = qcare_scores([y for _, y in both], None, k, binary, gain=gain)
            for metric in left.values:
                n, pearson = _pair(left.values[metric], right.values[metric], "pearson")
                spearman = _pair(left.values[metric], right.values[metric], "spearman")[1]
                rows.append(AgreementRow(f"{a} vs {b}", metric, n, pearson, spearman))
    return AnnotatorAgreement(alpha, pairable, names, rows)
