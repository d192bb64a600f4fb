"""Paired, two-sided significance tests on per-query differences, the paired bootstrap
confidence interval of the mean difference, and Holm's correction.

Each test takes ``differences``, an ``[n_queries, n_columns]`` array whose column j holds the
per-query values of one system minus those of another (one comparison), and returns one p-value
per column for H0 "the mean difference is 0". The resampling tests draw their resamples from one
generator seeded with ``seed`` and apply the same resamples to every column, so a column's
p-value does not depend on the other columns given with it.

A column of zero differences (two systems with equal values on every query) has p = 1 in every
test. In the resampling tests a resampled statistic within ``1e-9 * sum_i |v_i|`` of the
observed one (v: the values the weights apply to) counts as reaching it, so floating-point
rounding cannot drop an arrangement that equals the observed one.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from udcg.errors import UDCGInputError
from udcg.stats import percentile_interval, resample_counts

TESTS: tuple[str, ...] = ("t", "randomization", "bootstrap")

_TIES = 1e-9
_BLOCK_CELLS = 1 << 20  # resample weights drawn at once (8 MiB of float64)


def _matrix(differences: np.ndarray) -> np.ndarray:
    """``differences`` as a finite float64 ``[n_queries, n_columns]`` array, n_queries >= 2."""
    d = np.asarray(differences, dtype=np.float64)
    d = d[:, None] if d.ndim == 1 else d
    if d.ndim != 2:
        raise UDCGInputError(f"expected a 1-D or 2-D array, got {d.ndim}-D", field="differences")
    if d.shape[0] < 2:
        raise UDCGInputError(
            f"a paired test needs at least 2 queries, got {d.shape[0]}", field="differences"
        )
    if not np.isfinite(d).all():
        raise UDCGInputError("NaN or infinite difference", field="differences")
    return d


def t_test(differences: np.ndarray) -> np.ndarray:
    """Paired Student's t-test: t = mean(d) / (sd(d) / sqrt(n)), sd with n - 1 degrees of
    freedom, p = 2 * P(T_{n-1} >= |t|), as ``scipy.stats.ttest_rel``. A column of one repeated
    difference has sd = 0: p = 1 when it is 0 (scipy: NaN), else p = 0 (t infinite; scipy
    warns and gives about 0).

    Examples:
        d = (0.1, 0.3): t = 0.2 / (0.1414 / sqrt(2)) = 2 on 1 degree of freedom (a Cauchy
        law), p = 1 - 2 atan(2) / pi:

        >>> t_test(np.array([0.1, 0.3])).round(4).tolist()
        [0.2952]
    """
    d = _matrix(differences)
    constant = (d == d[0]).all(axis=0)
    p = np.where(d[0] == 0, 1.0, 0.0)
    if not constant.all():
        from scipy.special import stdtr  # the t CDF, without importing scipy.stats

        varying = d[:, ~constant]
        n = varying.shape[0]
        t = varying.mean(axis=0) / np.sqrt(varying.var(axis=0, ddof=1) / n)
        p[~constant] = 2.0 * stdtr(n - 1, -np.abs(t))
    return p


def _all_signs(start: int, rows: int, n: int) -> np.ndarray:
    """Sign vectors ``start .. start + rows - 1`` of the 2^n, as rows of +-1 (bit i of the
    vector's number is the sign of query i)."""
    numbers = np.arange(start, start + rows, dtype=np.int64)[:, None]
    return 1.0 - 2.0 * ((numbers >> np.arange(n)) & 1)


def _random_signs(rng: np.random.Generator, rows: int, n: int) -> np.ndarray:
    """``rows`` vectors of n independent fair signs."""
    return np.where(rng.random((rows, n)) < 0.5, 1.0, -1.0)


def _draw_counts(rng: np.random.Generator, rows: int, n: int) -> np.ndarray:
    """``rows`` bootstrap resamples as float counts: how often each of n queries was drawn in n
    draws with replacement (:func:`udcg.stats.resample_counts`)."""
    return resample_counts(n, rows, rng).astype(np.float64)


def _reaching(
    weights: Callable[[int, int], np.ndarray], total: int, values: np.ndarray, target: np.ndarray
) -> np.ndarray:
    """Per column, how many of ``total`` weight vectors w give |w . values| >= target minus
    the tie tolerance; ``weights(start, rows)`` yields the vectors a block at a time."""
    threshold = target - _TIES * np.abs(values).sum(axis=0)
    block = max(1, _BLOCK_CELLS // values.shape[0])
    count = np.zeros(values.shape[1], dtype=np.int64)
    for start in range(0, total, block):
        rows = min(block, total - start)
        count += (np.abs(weights(start, rows) @ values) >= threshold).sum(axis=0)
    return count


def randomization_test(
    differences: np.ndarray, n_resamples: int = 10000, seed: int | None = 0
) -> np.ndarray:
    """Paired randomization (permutation) test: under H0 the two values of a query are
    exchangeable, so each difference's sign is a fair coin. With S = |sum_i d_i| and sign
    vectors s, p = #{s : |sum_i s_i d_i| >= S} / 2^n over all 2^n vectors (exact) when
    2^n <= n_resamples, else p = (#{b : |sum_i s_bi d_i| >= S} + 1) / (n_resamples + 1) over
    ``n_resamples`` random sign vectors.

    Examples:
        Only the all-plus and all-minus of the 2^3 sign vectors reach |0.5 + 0.5 + 0.5|:

        >>> randomization_test(np.array([0.5, 0.5, 0.5])).tolist()
        [0.25]
    """
    d = _matrix(differences)
    n = d.shape[0]
    observed = np.abs(d.sum(axis=0))
    if 2**n <= n_resamples:  # every sign vector: the exact p
        hits = _reaching(lambda start, rows: _all_signs(start, rows, n), 2**n, d, observed)
        return hits / 2.0**n
    rng = np.random.default_rng(seed)
    hits = _reaching(lambda _, rows: _random_signs(rng, rows, n), n_resamples, d, observed)
    return (hits + 1.0) / (n_resamples + 1.0)


def bootstrap_test(
    differences: np.ndarray, n_resamples: int = 10000, seed: int | None = 0
) -> np.ndarray:
    """Paired bootstrap test (shift method): the differences are centred, z_i = d_i - mean(d),
    so that H0 holds; each of ``n_resamples`` resamples draws n queries with replacement, and
    p = (#{b : |mean(z*_b)| >= |mean(d)|} + 1) / (n_resamples + 1).

    Examples:
        Equal differences centre to 0, so no resample reaches the mean 0.5: p = 1 / (99 + 1):

        >>> bootstrap_test(np.array([0.5, 0.5, 0.5]), n_resamples=99).tolist()
        [0.01]
    """
    d = _matrix(differences)
    n = d.shape[0]
    centred = d - d.mean(axis=0)
    rng = np.random.default_rng(seed)
    # sum of the resampled z = counts . z, compared with n |mean(d)| = |sum(d)|
    hits = _reaching(
        lambda _, rows: _draw_counts(rng, rows, n), n_resamples, centred, np.abs(d.sum(axis=0))
    )
    return (hits + 1.0) / (n_resamples + 1.0)


def bootstrap_interval(
    differences: np.ndarray,
    confidence: float = 0.95,
    n_resamples: int = 10000,
    seed: int | None = 0,
) -> np.ndarray:
    """Paired percentile bootstrap confidence interval of each column's mean difference:
    ``n_resamples`` resamples draw n queries with replacement (the same resamples for every
    column, and the same as :func:`bootstrap_test` draws for this ``seed``), and the interval is
    the central ``confidence`` quantile range of the resampled means (computed a column at a
    time, so a column's interval does not depend on the columns given with it). Returns
    ``[2, n_columns]``: the lower bounds, then the upper bounds.

    Examples:
        Resampled means of (0, 1) are 0, 0.5 or 1 (1/4, 1/2, 1/4): the 95% range is [0, 1]:

        >>> bootstrap_interval(np.array([0.0, 1.0]), n_resamples=1000).tolist()
        [[0.0], [1.0]]
    """
    d = _matrix(differences)
    n = d.shape[0]
    columns = np.ascontiguousarray(d.T)
    rng = np.random.default_rng(seed)
    block = max(1, _BLOCK_CELLS // n)
    sums = []
    for start in range(0, n_resamples, block):
        counts = _draw_counts(rng, min(block, n_resamples - start), n)
        sums.append(np.stack([counts @ column for column in columns], axis=1))
    means = np.concatenate(sums) / float(n)
    return np.array([percentile_interval(column, confidence) for column in means.T]).T


def paired_test(
    differences: np.ndarray, test: str = "t", n_resamples: int = 10000, seed: int | None = 0
) -> np.ndarray:
    """The p-value of each column by ``test``: ``t``, ``randomization`` or ``bootstrap``.

    Examples:
        Two columns (comparisons); one of zero differences has p = 1:

        >>> paired_test(np.array([[0.5, 0.0], [0.5, 0.0], [0.5, 0.0]]), "randomization").tolist()
        [0.25, 1.0]
    """
    if test == "t":
        return t_test(differences)
    if test == "randomization":
        return randomization_test(differences, n_resamples, seed)
    if test == "bootstrap":
        return bootstrap_test(differences, n_resamples, seed)
    raise UDCGInputError(f"unknown test {test!r}; expected one of {', '.join(TESTS)}", field="test")


def holm(p_values: np.ndarray) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values: with p_(1) <= ... <= p_(m),
    adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)); H_(i) is rejected at level alpha iff
    adj_(i) <= alpha, which controls the family-wise error rate at alpha.

    Examples:
        Sorted: 3 * 0.01, 2 * 0.03, then max(0.06, 1 * 0.04):

        >>> holm(np.array([0.01, 0.04, 0.03])).round(4).tolist()
        [0.03, 0.06, 0.06]
    """
    p = np.asarray(p_values, dtype=np.float64)
    order = np.argsort(p, kind="stable")
    m = len(p)
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * p[order]))
    return adjusted
