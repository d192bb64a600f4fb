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
from udcg.io.contexts.jsonl import ANSWER_LABELS, CONTEXT_KEYS, Context
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
    return [p.text for p in a.passages] == [p.text for p in b.passages]


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
        if "claims" not in mine and "claims" in theirs:
            mine["claims"] = theirs["claims"]
            filled["claims"] += 1
        if mine.get("claims") == theirs.get("claims") and subqueries == judge.subqueries:
            for name in ANSWER_LABELS:
                if mine.get(name) is None and theirs.get(name) is not None:
                    mine[name] = theirs[name]
                    filled[name] += 1
        outcomes[model] = mine
    return replace(human, subqueries=subqueries, passages=passages, outcomes=outcomes), filled


def _split_of(ctx: Context, split_by: str | None) -> str:
    if split_by is None:
        return ALL
    value = getattr(ctx, split_by) if split_by in CONTEXT_KEYS else ctx.extra.get(split_by)
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
    ``gain`` and ``coverage`` are :func:`~udcg.qcare.scores.qcare_scores`'s, on both sides.

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
    by_key = {(c.qid, c.run): c for c in judge_contexts}
    pairs: list[tuple[Context, Context]] = []
    filled: Counter = Counter()
    for human in human_contexts:
        judge = by_key.get((human.qid, human.run))
        if judge is None:
            raise UDCGInputError(
                f"no judge-labelled context with qid {human.qid!r} and run {human.run!r}",
                field="qid",
                **human.location(),
            )
        if fill:
            human, more = fill_labels(human, judge, answers_from)
            filled.update(more)
        pairs.append((judge, human))
    options = {"gain": gain, "coverage": coverage}
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
