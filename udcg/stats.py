"""Agreement between a retrieval metric and end-to-end accuracy.

Query level: Spearman rho, Kendall tau-b or Pearson r between per-context metric values and
correctness, with percentile bootstrap confidence intervals that resample *queries* (all contexts
of a drawn query come along; a query drawn twice contributes its contexts twice), and a paired
bootstrap test of "metric A correlates better with correctness than metric B".

System level: Kendall tau-b between the ranking of retrievers by mean metric and by mean accuracy.

A correlation is undefined (``nan``) when either vector is constant. Point estimates then return
``nan``; the bootstrap functions skip undefined resamples and report how many there were.

Implementation: a bootstrap resample is a vector of draw counts per query, so every context gets
an integer weight (its query's count). Pearson and Spearman are computed as weighted statistics
over all resamples at once, which equals the statistic on the explicitly duplicated sample;
Kendall loops over resamples with :func:`scipy.stats.kendalltau` on the duplicated sample.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

import numpy as np

from udcg.errors import UDCGInputError
from udcg.metrics._arrays import unmasked
from udcg.validation import float_vector, nonnegative_int, query_codes, show

Method = Literal["spearman", "kendall", "pearson"]
METHODS: tuple[str, ...] = ("spearman", "kendall", "pearson")

# Upper bound on the number of float64 cells in one [resamples, contexts] block (about 32 MiB).
_BLOCK_CELLS = 1 << 22


@dataclass(frozen=True)
class CorrelationResult:
    """A correlation with its percentile bootstrap confidence interval.

    ``n`` contexts in ``n_groups`` queries; ``n_undefined`` of the ``n_resamples`` resamples had a
    constant vector and were left out of the interval (``low``/``high`` are ``nan`` if all were).

    Examples:
        Two queries of constant correctness: a resample that draws one of them twice is
        undefined; one that draws both gives back the full sample's estimate:

        >>> r = bootstrap_correlation([1, 2, 3, 4], [0, 0, 1, 1], groups=["a", "a", "b", "b"])
        >>> round(r.low, 4), round(r.high, 4), r.n_groups, 0 < r.n_undefined < r.n_resamples
        (0.8944, 0.8944, 2, True)
    """

    estimate: float
    low: float
    high: float
    method: str
    n: int
    n_groups: int
    n_resamples: int
    n_undefined: int


@dataclass(frozen=True)
class PairedTestResult:
    """Paired bootstrap comparison of two metrics against the same correctness labels.

    ``difference = estimate_a - estimate_b``; ``low``/``high`` is the percentile interval of the
    resampled difference; ``p_value = (#{d* <= 0} + 1) / (n_defined + 1)`` is the one-sided p for
    H1 "A correlates better than B", over the ``n_resamples - n_undefined`` defined resamples.

    Examples:
        >>> t = paired_bootstrap_test([0, 0, 1, 1], [1, 2, 3, 4], [0, 0, 1, 1], n_resamples=200)
        >>> t.estimate_a, round(t.difference, 4), 0 < t.p_value <= 1
        (1.0, 0.1056, True)
    """

    estimate_a: float
    estimate_b: float
    difference: float
    low: float
    high: float
    p_value: float
    method: str
    n_resamples: int
    n_undefined: int


@dataclass(frozen=True)
class SystemAgreement:
    """Kendall tau-b between two rankings of systems; rankings list system names best first.

    Examples:
        >>> a = system_kendall({"x": 0.1, "y": 0.2}, {"x": 0.5, "y": 0.7})
        >>> a.tau, a.ranking_by_metric, a.ranking_by_accuracy
        (1.0, ['y', 'x'], ['y', 'x'])
    """

    tau: float
    p_value: float
    n_systems: int
    ranking_by_metric: list[str]
    ranking_by_accuracy: list[str]


# --------------------------------------------------------------------------------------------
# validation


def scipy_stats() -> ModuleType:
    """:mod:`scipy.stats`, imported on first use: it takes most of a second to import, which
    commands that never test or correlate need not pay.

    Examples:
        >>> scipy_stats().__name__
        'scipy.stats'
    """
    from scipy import stats

    return stats


def _as_vector(
    values: Any, name: str, length: int | None = None, length_of: str = ""
) -> np.ndarray:
    """A finite float64 1-D array with at least 2 values (``length`` values when given); a
    masked array with entries masked is refused."""
    out = float_vector(unmasked(values, name), name, length, length_of)
    if out.size == 0:
        raise UDCGInputError("empty input", field=name)
    if out.size < 2:
        raise UDCGInputError("fewer than 2 values; a correlation needs at least 2", field=name)
    return out


def _check_method(method: str) -> str:
    if method not in METHODS:
        raise UDCGInputError(
            f"unknown method {method!r}; expected one of {', '.join(METHODS)}", field="method"
        )
    return method


def _check_options(n_resamples: int, confidence: float, seed: int | None = None) -> None:
    if seed is not None:
        nonnegative_int(seed, "seed")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)):
        raise UDCGInputError(
            f"expected an integer, got {type(n_resamples).__name__}", field="n_resamples"
        )
    if n_resamples < 1:
        raise UDCGInputError(f"must be at least 1, got {n_resamples}", field="n_resamples")
    if not (isinstance(confidence, (int, float)) and 0.0 < float(confidence) < 1.0):
        raise UDCGInputError(
            f"must be a number strictly between 0 and 1, got {show(confidence)}", field="confidence"
        )


def query_groups(groups: Any, n: int, ref_name: str) -> tuple[np.ndarray, int]:
    """``(codes, n_groups)``: :func:`udcg.validation.query_codes` and the number of queries,
    which must be at least 2 for a resample of queries to vary.

    Examples:
        >>> codes, n_groups = query_groups(["q2", "q1", "q2"], 3, "metric")
        >>> codes.tolist(), n_groups
        ([1, 0, 1], 2)
    """
    codes = query_codes(groups, n, ref_name)
    n_groups = int(codes.max()) + 1 if n else 0
    if n_groups < 2:
        raise UDCGInputError(
            "all contexts belong to one query; resampling queries needs at least 2", field="groups"
        )
    return codes, n_groups


# --------------------------------------------------------------------------------------------
# point estimates


def _is_constant(x: np.ndarray) -> bool:
    return bool(x.max() == x.min())


# scipy's pearsonr warns when ||x - mean(x)|| < eps^0.75 |mean(x)| ("nearly constant")
_NEARLY_CONSTANT = np.finfo(np.float64).eps ** 0.75


def _centred_norm(x: np.ndarray) -> tuple[np.ndarray, float, float]:
    """``(x - mean, ||x - mean||, mean)``, the norm scaled as :func:`scipy.stats.pearsonr`
    computes it."""
    mean = np.mean(x, axis=-1, keepdims=True)
    dev = x - mean
    scale = np.max(np.abs(dev), axis=-1, keepdims=True)
    norm = scale * np.linalg.norm(dev / scale, axis=-1, keepdims=True)
    return dev, float(norm[0]), float(mean[0])


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    """:func:`scipy.stats.pearsonr`'s statistic on non-constant vectors. A nearly constant
    vector (twice scipy's threshold, so that no borderline one is left) gets scipy's own
    arithmetic here, which draws no NearConstantInputWarning; the others go to scipy."""
    xm, x_norm, x_mean = _centred_norm(x)
    ym, y_norm, y_mean = _centred_norm(y)
    limit = 2.0 * _NEARLY_CONSTANT
    if x_norm >= limit * abs(x_mean) and y_norm >= limit * abs(y_mean):
        return float(scipy_stats().pearsonr(x, y)[0])
    r = float(np.clip(np.dot(xm / x_norm, ym / y_norm), -1.0, 1.0))
    return float(np.round(r)) if x.shape[0] == 2 else r


def _point(x: np.ndarray, y: np.ndarray, method: str) -> float:
    """The scipy statistic; ``nan`` when either vector is constant.

    Avoids scipy's RuntimeWarnings without a warnings filter (one would not be thread-safe):
    constant vectors are answered before scipy, nearly constant ones get Pearson r computed
    here as scipy does, and numpy's floating-point warnings are off for the call
    (``np.errstate`` is local to the thread)."""
    if _is_constant(x) or _is_constant(y):
        return math.nan
    with np.errstate(all="ignore"):
        if method == "spearman":
            value = scipy_stats().spearmanr(x, y)[0]
        elif method == "kendall":
            value = scipy_stats().kendalltau(x, y, variant="b")[0]
        else:
            value = _pearson(x, y)
    return float(value)


def correlation(metric: Any, correct: Any, method: Method = "spearman") -> float:
    """Correlation between per-context metric values and end-to-end correctness.

    ``spearman``: rho = Pearson r of the average ranks; ``kendall``: tau-b =
    (P - Q) / sqrt((P + Q + T_x)(P + Q + T_y)); ``pearson``: r = cov(x, y) / (sd(x) sd(y)).
    Returns ``nan`` when either vector is constant (the correlation is undefined).

    Examples:
        Ranks (1, 2, 3, 4) against (1.5, 1.5, 3.5, 3.5): rho = 4 / (sqrt(5) * 2); tau-b has
        P = 4, Q = 0 and 2 pairs tied in correctness: 4 / sqrt(4 * 6):

        >>> round(correlation([1, 2, 3, 4], [0, 0, 1, 1]), 4)
        0.8944
        >>> round(correlation([1, 2, 3, 4], [0, 0, 1, 1], method="kendall"), 4)
        0.8165
        >>> correlation([1, 1, 1], [0, 1, 0])
        nan
    """
    method = _check_method(method)
    x = _as_vector(metric, "metric")
    y = _as_vector(correct, "correct", x.shape[0], "metric")
    return _point(x, y, method)


# --------------------------------------------------------------------------------------------
# bootstrap machinery


def resample_counts(n_groups: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """``[n_resamples, n_groups]`` int counts: how often each query was drawn (n_groups draws).

    Examples:
        >>> counts = resample_counts(3, 5, np.random.default_rng(0))
        >>> counts.shape, counts.sum(axis=1).tolist()
        ((5, 3), [3, 3, 3, 3, 3])
    """
    draws = rng.integers(0, n_groups, size=(n_resamples, n_groups))
    flat = draws + n_groups * np.arange(n_resamples, dtype=np.int64)[:, None]
    return np.bincount(flat.ravel(), minlength=n_resamples * n_groups).reshape(
        n_resamples, n_groups
    )


def _weighted_ranks(x: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Average ranks of ``x`` in each weighted sample: ``[b, n]`` for ``weights`` ``[b, n]``.

    With W_<(v) the total weight of values below v and W_=(v) that of values equal to v, the
    average rank is W_<(v) + (W_=(v) + 1) / 2, as ``rankdata`` gives on the duplicated sample.
    """
    order = np.argsort(x, kind="stable")
    xs = x[order]
    n = x.shape[0]
    new_block = np.empty(n, dtype=bool)
    new_block[0] = True
    new_block[1:] = xs[1:] != xs[:-1]
    block_id = np.cumsum(new_block) - 1
    starts = np.flatnonzero(new_block)
    ends = np.append(starts[1:], n)  # exclusive
    before = np.empty(n, dtype=np.int64)
    upto = np.empty(n, dtype=np.int64)
    before[order] = starts[block_id]
    upto[order] = ends[block_id]
    cum = np.zeros((weights.shape[0], n + 1), dtype=np.float64)
    np.cumsum(weights[:, order], axis=1, out=cum[:, 1:])
    return (cum[:, before] + cum[:, upto] + 1.0) / 2.0


def _weighted_pearson(x: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted Pearson r per row: sum w dx dy / sqrt(sum w dx^2 * sum w dy^2).

    ``x``/``y`` are ``[n]`` or ``[b, n]``; means are weighted per row.
    """
    total = weights.sum(axis=1)
    mx = (weights * x).sum(axis=1) / total
    my = (weights * y).sum(axis=1) / total
    dx = x - mx[:, None]
    dy = y - my[:, None]
    wdx = weights * dx
    sxy = (wdx * dy).sum(axis=1)
    sxx = (wdx * dx).sum(axis=1)
    syy = (weights * dy * dy).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = sxy / np.sqrt(sxx * syy)
    return np.clip(r, -1.0, 1.0)


def _constant_rows(values: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Rows whose present entries all share one value."""
    hi = np.where(present, values, -np.inf).max(axis=1)
    lo = np.where(present, values, np.inf).min(axis=1)
    return hi == lo


def _resample_statistics(
    xs: list[np.ndarray], y: np.ndarray, weights: np.ndarray, method: str
) -> list[np.ndarray]:
    """Statistic of each ``x`` in ``xs`` against ``y`` for each weight row; ``nan`` if undefined.

    ``weights`` is ``[b, n]`` with non-negative integer counts per context.
    """
    present = weights > 0
    y_const = _constant_rows(np.broadcast_to(y, weights.shape), present)
    outs = []
    for x in xs:
        undefined = y_const | _constant_rows(np.broadcast_to(x, weights.shape), present)
        if method == "kendall":
            out = np.full(weights.shape[0], np.nan)
            reps = weights.astype(np.int64)
            for b in np.flatnonzero(~undefined):
                idx = np.repeat(np.arange(x.shape[0]), reps[b])
                out[b] = scipy_stats().kendalltau(x[idx], y[idx], variant="b")[0]
        elif method == "spearman":
            out = _weighted_pearson(
                _weighted_ranks(x, weights), _weighted_ranks(y, weights), weights
            )
        else:
            out = _weighted_pearson(x, y, weights)
        out[undefined] = np.nan
        outs.append(out)
    return outs


def _bootstrap(
    xs: list[np.ndarray],
    y: np.ndarray,
    codes: np.ndarray,
    n_groups: int,
    method: str,
    n_resamples: int,
    seed: int | None,
) -> list[np.ndarray]:
    """Resampled statistics (``[n_resamples]`` each, ``nan`` where undefined) for each x."""
    rng = np.random.default_rng(seed)
    counts = resample_counts(n_groups, n_resamples, rng)
    n = y.shape[0]
    block = max(1, _BLOCK_CELLS // max(n, 1))
    parts: list[list[np.ndarray]] = [[] for _ in xs]
    for start in range(0, n_resamples, block):
        weights = counts[start : start + block][:, codes].astype(np.float64)
        for part, stat in zip(parts, _resample_statistics(xs, y, weights, method), strict=True):
            part.append(stat)
    return [np.concatenate(part) for part in parts]


def percentile_interval(values: np.ndarray, confidence: float) -> tuple[float, float]:
    """The central ``confidence`` percentile interval of the defined (non-NaN) ``values``;
    ``(nan, nan)`` when none is defined.

    Examples:
        >>> low, high = percentile_interval(np.append(np.arange(101.0), np.nan), 0.9)
        >>> round(low, 4), round(high, 4)
        (5.0, 95.0)
    """
    defined = values[~np.isnan(values)]
    if defined.size == 0:
        return math.nan, math.nan
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(defined, [alpha, 1.0 - alpha])
    return float(low), float(high)


# --------------------------------------------------------------------------------------------
# public bootstrap API


def bootstrap_correlation(
    metric: Any,
    correct: Any,
    groups: Any = None,
    method: Method = "spearman",
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int | None = 0,
) -> CorrelationResult:
    """Correlation with a percentile bootstrap CI that resamples queries.

    Each resample draws ``n_groups`` query ids with replacement and keeps all contexts of every
    drawn query (``groups[i]`` = query id of context i; ``None``: each context is its own query).
    CI = [q_{a/2}, q_{1-a/2}] of the defined resampled statistics, a = 1 - confidence.

    Examples:
        >>> r = bootstrap_correlation([0.2, 0.4, 0.6, 0.9], [0, 1, 0, 1], method="pearson")
        >>> r.method, r.n, r.n_groups, r.low <= r.high
        ('pearson', 4, 4, True)
    """
    method = _check_method(method)
    x = _as_vector(metric, "metric")
    y = _as_vector(correct, "correct", x.shape[0], "metric")
    _check_options(n_resamples, confidence, seed)
    codes, n_groups = query_groups(groups, x.shape[0], "metric")
    (dist,) = _bootstrap([x], y, codes, n_groups, method, int(n_resamples), seed)
    low, high = percentile_interval(dist, confidence)
    return CorrelationResult(
        estimate=_point(x, y, method),
        low=low,
        high=high,
        method=method,
        n=int(x.shape[0]),
        n_groups=n_groups,
        n_resamples=int(n_resamples),
        n_undefined=int(np.isnan(dist).sum()),
    )


def paired_bootstrap_test(
    metric_a: Any,
    metric_b: Any,
    correct: Any,
    groups: Any = None,
    method: Method = "spearman",
    n_resamples: int = 1000,
    seed: int | None = 0,
    confidence: float = 0.95,
) -> PairedTestResult:
    """Paired bootstrap test of H1 "metric A correlates better with correctness than B".

    A and B are evaluated on the same query resamples; d* = corr*(A) - corr*(B);
    p = (#{d* <= 0} + 1) / (n_defined + 1); CI of the difference as in the percentile bootstrap.

    Examples:
        A orders correctness perfectly (tau-b 1), B has tau-b 4 / sqrt(4 * 6) (see
        :func:`correlation`):

        >>> t = paired_bootstrap_test([0, 0, 1, 1], [1, 2, 3, 4], [0, 0, 1, 1], method="kendall")
        >>> round(t.estimate_a, 4), round(t.estimate_b, 4), round(t.difference, 4)
        (1.0, 0.8165, 0.1835)
    """
    method = _check_method(method)
    a = _as_vector(metric_a, "metric_a")
    b = _as_vector(metric_b, "metric_b", a.shape[0], "metric_a")
    y = _as_vector(correct, "correct", a.shape[0], "metric_a")
    _check_options(n_resamples, confidence, seed)
    codes, n_groups = query_groups(groups, a.shape[0], "metric_a")
    dist_a, dist_b = _bootstrap([a, b], y, codes, n_groups, method, int(n_resamples), seed)
    diff = dist_a - dist_b
    defined = diff[~np.isnan(diff)]
    p_value = (float(np.count_nonzero(defined <= 0.0)) + 1.0) / (defined.size + 1.0)
    low, high = percentile_interval(diff, confidence)
    est_a, est_b = _point(a, y, method), _point(b, y, method)
    return PairedTestResult(
        estimate_a=est_a,
        estimate_b=est_b,
        difference=est_a - est_b,
        low=low,
        high=high,
        p_value=p_value,
        method=method,
        n_resamples=int(n_resamples),
        n_undefined=int(diff.size - defined.size),
    )


# --------------------------------------------------------------------------------------------
# system level


def _system_values(values: Mapping[str, float], name: str) -> dict[str, float]:
    if not isinstance(values, Mapping):
        raise UDCGInputError(
            f"expected a mapping of system name to value, got {type(values).__name__}", field=name
        )
    out: dict[str, float] = {}
    for system, value in values.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise UDCGInputError(
                f"system {system!r}: expected a number, got {show(value)}", field=name
            ) from None
        if not math.isfinite(number):
            raise UDCGInputError(f"system {system!r}: NaN or infinite value", field=name)
        out[system] = number
    return out


def _best_first(values: Mapping[str, float]) -> list[str]:
    """System names by decreasing value; ties keep the order of ``sorted(str(name))``."""
    return sorted(values, key=lambda s: (-values[s], str(s)))


#: Significant digits means keep before systems are ranked by them (:func:`rank_ready`).
RANK_DIGITS = 12


def rank_ready(values: Any) -> np.ndarray:
    """``values`` rounded to :data:`RANK_DIGITS` significant digits, so that means equal but
    for the order of their sums (0.1 + 0.2 + 0.3 and 0.3 + 0.2 + 0.1, over three) tie when
    ranked; NaN, infinities and 0 unchanged.

    Examples:
        >>> a, b = (0.1 + 0.2 + 0.3) / 3, (0.3 + 0.2 + 0.1) / 3
        >>> bool(a == b), bool(rank_ready(a) == rank_ready(b))
        (False, True)
    """
    x = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(x) & (x != 0)
    safe = np.where(finite, np.abs(x), 1.0)
    scale = 10.0 ** (RANK_DIGITS - 1 - np.floor(np.log10(safe)))
    return np.where(finite, np.round(x * scale) / scale, x)


def system_kendall(
    metric_by_system: Mapping[str, float], accuracy_by_system: Mapping[str, float]
) -> SystemAgreement:
    """Kendall tau-b between ranking systems by mean metric and by mean accuracy.

    ``p_value`` is scipy's two-sided p for tau-b = 0. ``tau`` and ``p_value`` are ``nan`` when all
    systems tie on either side.

    Examples:
        Of the 3 pairs, (dense, hybrid) is the one ordered differently: (2 - 1) / 3:

        >>> metric = {"bm25": 0.3, "dense": 0.5, "hybrid": 0.6}
        >>> accuracy = {"bm25": 0.4, "dense": 0.6, "hybrid": 0.55}
        >>> round(system_kendall(metric, accuracy).tau, 4)
        0.3333
    """
    metric = _system_values(metric_by_system, "metric_by_system")
    accuracy = _system_values(accuracy_by_system, "accuracy_by_system")
    only_metric = [s for s in metric if s not in accuracy]
    only_accuracy = [s for s in accuracy if s not in metric]
    if only_metric or only_accuracy:
        parts = []
        if only_metric:
            parts.append(f"only in metric_by_system: {', '.join(map(str, only_metric[:5]))}")
        if only_accuracy:
            parts.append(f"only in accuracy_by_system: {', '.join(map(str, only_accuracy[:5]))}")
        raise UDCGInputError(
            "system names differ (" + "; ".join(parts) + ")", field="accuracy_by_system"
        )
    if len(metric) < 2:
        raise UDCGInputError(
            f"need at least 2 systems to compare rankings, got {len(metric)}",
            field="metric_by_system",
        )
    systems = list(metric)
    x = rank_ready([metric[s] for s in systems])  # means equal but for rounding tie
    y = rank_ready([accuracy[s] for s in systems])
    if _is_constant(x) or _is_constant(y):
        tau, p_value = math.nan, math.nan
    else:
        res = scipy_stats().kendalltau(x, y, variant="b")
        tau, p_value = float(res[0]), float(res[1])
    return SystemAgreement(
        tau=tau,
        p_value=p_value,
        n_systems=len(systems),
        ranking_by_metric=_best_first(metric),
        ranking_by_accuracy=_best_first(accuracy),
    )
