"""Do two query types rank the retrievers alike? Spearman agreement per metric, with a
bootstrap CI over queries.

For N retrievers (the contexts' ``run``) and two query types A and B (close- and open-ended,
say), each metric ranks the retrievers by their mean over the queries of type A and,
separately, over the queries of type B; the agreement is Spearman's rho between the two
vectors of means (average ranks for ties)::

    m_T[r] = mean over queries q of type T of metric(r, q)     rho = Spearman(m_A, m_B)

The CI is a percentile bootstrap: each resample draws the queries of A with replacement
(|A| draws) and, independently, those of B, recomputes both vectors of means (every retriever,
and every metric, on the same drawn queries) and rho. A resample in which one side ranks
every retriever alike has no rho; it is skipped and counted (``undefined``).

Metrics: ``C-Prec`` and ``C-nDCG`` from coverage labels (:func:`udcg.qcare.qcare_scores`),
and the classic ``nDCG``, ``P`` and ``AP`` of the list from ``passages[].relevant``
(:mod:`udcg.metrics.ranking`; the mean of ``AP`` is MAP). A metric value that is missing
(a context without coverage labels, a ``null`` check) is left out of its retriever's mean.

Queries: the query type of a context is a string, read from a key of its ``extra``
(``--type-field``, ``query_type`` by default) or from a mapping ``qid -> type`` (``--types
FILE``). A query takes part when every retriever has exactly one context for it; the others
are dropped and counted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, relevance_matrix
from udcg.io.files import PathType, check_input, numbered_lines
from udcg.metrics.ranking import context_average_precision, context_ndcg, precision
from udcg.qcare.scores import qcare_scores
from udcg.stats import percentile_interval, rank_ready, resample_counts, scipy_stats
from udcg.validation import nonnegative_int

__all__ = [
    "MEASURES",
    "RankingAgreement",
    "markdown_table",
    "query_types",
    "rank_agreement",
    "ranking_agreement",
    "read_query_types",
]

#: The metrics ranked, coverage-aware first.
MEASURES = ("C-Prec", "C-nDCG", "nDCG", "P", "AP")
_COVERAGE = ("C-Prec", "C-nDCG")


@dataclass(frozen=True)
class RankingAgreement:
    """One metric's agreement between the rankings of two query types.

    ``means[type][run]`` is the metric's mean over that type's queries; ``ranking[type]`` the
    runs best first; ``rho`` Spearman's rho of the two vectors of means (``nan`` when one
    side ties every run), ``low``/``high`` its percentile bootstrap interval over
    ``resamples`` resamples, ``undefined`` of which had no rho.

    Examples:
        >>> row = RankingAgreement("nDCG", ("close", "open"), {"close": 3, "open": 2},
        ...     {"close": {"a": 0.5, "b": 0.25}, "open": {"a": 0.75, "b": 0.5}},
        ...     1.0, 1.0, 1.0, 10, 0)
        >>> row.ranking["open"], row.to_json()["rho"]
        (['a', 'b'], 1.0)
    """

    measure: str
    types: tuple[str, str]
    queries: dict[str, int]
    means: dict[str, dict[str, float]]
    rho: float
    low: float
    high: float
    resamples: int
    undefined: int

    @property
    def ranking(self) -> dict[str, list[str]]:
        """Runs best first per type (ties in name order; a run without values last)."""

        def key(run: str, means: Mapping[str, float]) -> tuple[float, str]:
            value = means[run]
            return (math.inf if math.isnan(value) else -value, run)

        return {t: sorted(m, key=lambda r, m=m: key(r, m)) for t, m in self.means.items()}

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (NaN as ``null``)."""

        def num(value: float) -> float | None:
            return None if math.isnan(value) else value

        return {
            "measure": self.measure,
            "types": list(self.types),
            "queries": self.queries,
            "means": {t: {r: num(v) for r, v in m.items()} for t, m in self.means.items()},
            "ranking": self.ranking,
            "rho": num(self.rho),
            "low": num(self.low),
            "high": num(self.high),
            "resamples": self.resamples,
            "undefined": self.undefined,
        }


def _rowwise_spearman(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman's rho of matching rows of ``a`` and ``b`` (``[n, runs]``); NaN for a row in
    which either side is constant or holds a NaN."""
    rank = scipy_stats().rankdata
    ra, rb = rank(rank_ready(a), axis=1), rank(rank_ready(b), axis=1)  # rounding ties
    ra -= ra.mean(axis=1, keepdims=True)
    rb -= rb.mean(axis=1, keepdims=True)
    den = np.sqrt((ra * ra).sum(axis=1) * (rb * rb).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = (ra * rb).sum(axis=1) / den
    bad = (den == 0) | np.isnan(a).any(axis=1) | np.isnan(b).any(axis=1)
    return np.where(bad, np.nan, np.clip(rho, -1.0, 1.0))


def _weighted_means(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``[resamples, runs]`` means of ``values`` (``[runs, queries]``, NaN = missing) with the
    draw counts ``[resamples, queries]`` as weights; NaN where a run has no drawn value."""
    present = ~np.isnan(values)
    total = counts @ np.where(present, values, 0.0).T
    weight = counts @ present.T.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(weight > 0, total / weight, np.nan)


def _matrix(values: Any, name: str) -> np.ndarray:
    out = np.asarray(values, dtype=np.float64)
    if out.ndim != 2 or out.shape[1] == 0:
        raise UDCGInputError(
            "expected a [runs, queries] matrix with at least one query", field=name
        )
    return out


def rank_agreement(
    values_a: Any,
    values_b: Any,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int | None = 0,
) -> tuple[float, float, float, int]:
    """``(rho, low, high, undefined)``: Spearman's rho between the runs' means over the
    queries of A (``values_a``, ``[runs, queries of A]``) and of B, with its percentile
    bootstrap interval (queries of each type drawn with replacement, ``seed`` fixes the
    draws) and the number of resamples without a rho. NaN values are missing.

    Examples:
        Three runs; their means are (0.2, 0.5, 0.9) on A and (0.1, 0.6, 0.4) on B:

        >>> a = [[0.1, 0.3], [0.4, 0.6], [0.8, 1.0]]
        >>> b = [[0.1], [0.6], [0.4]]
        >>> rho, low, high, undefined = rank_agreement(a, b, n_resamples=200)
        >>> round(rho, 4), low <= rho <= high
        (0.5, True)
    """
    a, b = _matrix(values_a, "values_a"), _matrix(values_b, "values_b")
    if a.shape[0] != b.shape[0] or a.shape[0] < 2:
        raise UDCGInputError(
            f"need the same runs (at least 2) on both sides, got {a.shape[0]} and {b.shape[0]}",
            field="values_b",
        )
    if n_resamples < 1:
        raise UDCGInputError(f"must be >= 1, got {n_resamples}", field="n_resamples")
    if not 0.0 < confidence < 1.0:
        raise UDCGInputError(f"must be in (0, 1), got {confidence}", field="confidence")
    full_a = _weighted_means(a, np.ones((1, a.shape[1])))
    full_b = _weighted_means(b, np.ones((1, b.shape[1])))
    rho = float(_rowwise_spearman(full_a, full_b)[0])
    rng = np.random.default_rng(seed)
    draws = []
    for start in range(0, n_resamples, 256):  # bounded memory per block
        size = min(256, n_resamples - start)
        ma = _weighted_means(a, resample_counts(a.shape[1], size, rng).astype(np.float64))
        mb = _weighted_means(b, resample_counts(b.shape[1], size, rng).astype(np.float64))
        draws.append(_rowwise_spearman(ma, mb))
    rhos = np.concatenate(draws)
    low, high = percentile_interval(rhos, confidence)
    return rho, low, high, int(np.isnan(rhos).sum())


def query_types(
    contexts: Sequence[Context], source: str | Mapping[str, str] = "query_type"
) -> list[str]:
    """The query type of each context: ``extra[source]`` when ``source`` is a key, else
    ``source[qid]``; a missing or non-string type is a located error, and so is a query whose
    contexts disagree on its type.

    Examples:
        >>> from udcg.io.contexts.model import Passage
        >>> contexts = [Context("q1", [], extra={"query_type": "open"}), Context("q2", [])]
        >>> query_types(contexts, {"q1": "open", "q2": "close"})
        ['open', 'close']
        >>> query_types(contexts)
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'query_type': missing (qid 'q2'); ...
    """
    out: list[str] = []
    seen: dict[str, str] = {}
    for ctx in contexts:
        if isinstance(source, str):
            value = ctx.extra.get(source)
            where = {"field": source, **ctx.location()}
        else:
            value = source.get(ctx.qid)
            where = {"field": "types", **ctx.location()}
        if value is None:
            raise UDCGInputError(
                f"missing (qid {ctx.qid!r}); every context needs a query type "
                "(a string such as close or open)",
                **where,
            )
        if not isinstance(value, str) or not value.strip():
            raise UDCGInputError(
                f"query type must be a non-empty string, got {value!r} (qid {ctx.qid!r})",
                **where,
            )
        if seen.setdefault(ctx.qid, value) != value:
            raise UDCGInputError(
                f"qid {ctx.qid!r} has two query types: {seen[ctx.qid]!r} and {value!r}", **where
            )
        out.append(value)
    return out


def read_query_types(path: PathType) -> dict[str, str]:
    """``qid -> query type`` from a JSON object (``{"q1": "close", ...}``) or from lines
    ``QID<TAB>TYPE`` (blank lines and lines starting with ``#`` skipped); a malformed line,
    an empty type or a qid given twice with two types is an error naming file and line.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder) / "types.tsv"
        ...     _ = path.write_text("# qid type\\nq1\\tclose\\n17\\topen\\n")
        ...     read_query_types(path)
        {'q1': 'close', '17': 'open'}
    """
    check_input(path)
    lines = list(numbered_lines(path))
    text = "".join(line for _, line in lines).strip()
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise UDCGInputError(f"malformed JSON: {exc}", path=path) from None
        bad = [q for q, t in obj.items() if not isinstance(t, str) or not t.strip()]
        if bad:
            raise UDCGInputError(
                f"qid {bad[0]!r}: the query type must be a non-empty string", path=path
            )
        return dict(obj)
    out: dict[str, str] = {}
    for number, line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.rstrip("\r\n").split("\t")
        if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
            raise UDCGInputError(
                "expected QID<TAB>TYPE (two tab-separated columns)", path=path, line=number
            )
        qid, kind = parts[0].strip(), parts[1].strip()
        if out.setdefault(qid, kind) != kind:
            raise UDCGInputError(
                f"qid {qid!r} has two query types: {out[qid]!r} and {kind!r}",
                path=path,
                line=number,
            )
    if not out:
        raise UDCGInputError("empty file: no query types", path=path)
    return out


def _metric_values(
    contexts: Sequence[Context],
    measure: str,
    k: int | None,
    gain: str,
    coverage: str,
    binary: bool,
) -> np.ndarray:
    """Per-context values of one measure, NaN where missing."""
    if measure in _COVERAGE:
        scores = qcare_scores(contexts, None, k, binary, gain=gain, coverage=coverage)
        return np.ma.filled(scores.values[measure].astype(np.float64), np.nan)
    kernels: dict[str, Callable[..., np.ndarray]] = {
        "nDCG": context_ndcg,
        "P": precision,
        "AP": context_average_precision,
    }
    labels = relevance_matrix(contexts)
    if not labels:
        return np.zeros(0)
    return np.asarray(kernels[measure](labels, k), dtype=np.float64)


def ranking_agreement(
    contexts: Sequence[Context],
    types: str | Mapping[str, str] = "query_type",
    *,
    pair: Sequence[str] | None = None,
    measures: Sequence[str] = MEASURES,
    k: int | None = None,
    gain: str = "linear",
    coverage: str = "boolean",
    binary: bool = False,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int | None = 0,
) -> tuple[list[RankingAgreement], dict[str, int]]:
    """Per measure, the agreement of the retrieval rankings on two query types, and the
    number of queries dropped per type (not retrieved by every run).

    ``types`` gives each context's query type (see :func:`query_types`); ``pair`` names the
    two types to compare (default: the two found; an error when there are more). Each
    ``run`` is a retriever and needs at most one context per query. ``k``, ``gain``,
    ``coverage`` and ``binary`` are those of :func:`udcg.qcare.qcare_scores` (``k`` also cuts
    the classic metrics). The same ``seed`` gives the same intervals.

    Examples:
        Two runs, one close and one open query: run a is better on both by every metric:

        >>> from udcg.io.contexts.model import Passage
        >>> def ctx(qid, run, hit, kind):
        ...     p = [Passage("d1", relevant=hit, covers=[hit]), Passage("d2", relevant=False,
        ...          covers=[False])]
        ...     return Context(qid, p, run=run, subqueries=["s"], extra={"query_type": kind})
        >>> contexts = [ctx("q1", "a", True, "close"), ctx("q1", "b", False, "close"),
        ...             ctx("q2", "a", True, "open"), ctx("q2", "b", False, "open")]
        >>> rows, dropped = ranking_agreement(contexts, n_resamples=20)
        >>> [(r.measure, r.rho) for r in rows][:2], rows[0].ranking, dropped
        ([('C-Prec', 1.0), ('C-nDCG', 1.0)], {'close': ['a', 'b'], 'open': ['a', 'b']}, {})
    """
    unknown = [m for m in measures if m not in MEASURES]
    if unknown or not measures:
        raise UDCGInputError(
            f"unknown measure {unknown[0] if unknown else '(none)'!r}; expected some of "
            f"{', '.join(MEASURES)}",
            field="measure",
        )
    kinds = query_types(contexts, types)
    found = sorted(set(kinds))
    if pair is None:
        if len(found) != 2:
            raise UDCGInputError(
                f"found {len(found)} query types ({', '.join(found)}); name the two to compare",
                field="types",
            )
        pair = found
    if len(pair) != 2 or pair[0] == pair[1] or any(t not in found for t in pair):
        raise UDCGInputError(
            f"need two different query types among {', '.join(found)}, got {list(pair)}",
            field="types",
        )
    cells: dict[tuple[str, str], int] = {}
    for i, ctx in enumerate(contexts):
        if ctx.run is None:
            raise UDCGInputError(
                "missing: the retrievers to rank are told apart by run",
                field="run",
                **ctx.location(),
            )
        if (ctx.run, ctx.qid) in cells:
            raise UDCGInputError(
                f"a second context for qid {ctx.qid!r} in run {ctx.run!r}; "
                "each run needs one context per query",
                field="qid",
                **ctx.location(),
            )
        cells[(ctx.run, ctx.qid)] = i
    runs = sorted({run for run, _ in cells})
    if len(runs) < 2:
        raise UDCGInputError(f"need at least 2 runs to rank, got {len(runs)}", field="run")
    type_of = {ctx.qid: kind for ctx, kind in zip(contexts, kinds, strict=True)}
    qids = {t: sorted(q for q, kind in type_of.items() if kind == t) for t in pair}
    kept = {t: [q for q in qs if all((r, q) in cells for r in runs)] for t, qs in qids.items()}
    dropped = {t: len(qids[t]) - len(kept[t]) for t in pair if len(qids[t]) > len(kept[t])}
    for t in pair:
        if not kept[t]:
            raise UDCGInputError(
                f"no query of type {t!r} was retrieved by every run", field="types"
            )
    used = [cells[(r, q)] for t in pair for q in kept[t] for r in runs]
    subset = [contexts[i] for i in used]
    # one seed for every measure: each resample draws the same queries for all of them
    draws_seed = (
        int(np.random.default_rng().integers(2**62))
        if seed is None
        else nonnegative_int(seed, "seed")
    )
    rows = []
    for measure in measures:
        flat = _metric_values(subset, measure, k, gain, coverage, binary)
        sides, start = [], 0
        for t in pair:
            size = len(kept[t]) * len(runs)
            sides.append(flat[start : start + size].reshape(len(kept[t]), len(runs)).T)
            start += size
        rho, low, high, undefined = rank_agreement(
            sides[0], sides[1], n_resamples, confidence, draws_seed
        )
        means = {
            t: dict(
                zip(runs, _weighted_means(v, np.ones((1, v.shape[1])))[0].tolist(), strict=True)
            )
            for t, v in zip(pair, sides, strict=True)
        }
        rows.append(
            RankingAgreement(
                measure,
                (pair[0], pair[1]),
                {t: len(kept[t]) for t in pair},
                means,
                rho,
                low,
                high,
                n_resamples,
                undefined,
            )
        )
    return rows, dropped


def markdown_table(rows: Sequence[RankingAgreement], confidence: float = 0.95) -> str:
    """The agreement rows as a Markdown table.

    Examples:
        >>> row = RankingAgreement("nDCG", ("close", "open"), {"close": 3, "open": 2},
        ...     {"close": {"a": 0.5, "b": 0.25}, "open": {"a": 0.75, "b": 0.5}},
        ...     1.0, 0.5, 1.0, 10, 2)
        >>> print(markdown_table([row]))
        | measure | Spearman rho | 95% CI | queries (close / open) | undefined resamples |
        | --- | --- | --- | --- | --- |
        | nDCG | 1.000 | [0.500, 1.000] | 3 / 2 | 2 of 10 |
    """
    if not rows:
        return ""
    a, b = rows[0].types
    level = f"{100 * confidence:g}%"

    def cell(value: float) -> str:
        return "n/a" if math.isnan(value) else f"{value:.3f}"

    lines = [
        f"| measure | Spearman rho | {level} CI | queries ({a} / {b}) | undefined resamples |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        lines.append(
            f"| {row.measure} | {cell(row.rho)} | [{cell(row.low)}, {cell(row.high)}] | "
            f"{row.queries[a]} / {row.queries[b]} | {row.undefined} of {row.resamples} |"
        )
    return "\n".join(lines)
