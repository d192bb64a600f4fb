"""Tests for udcg.stats: correlations with accuracy, query bootstrap, paired test, system tau."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats as sps

from udcg import stats
from udcg.errors import UDCGInputError

SCIPY = {
    "spearman": lambda x, y: sps.spearmanr(x, y)[0],
    "kendall": lambda x, y: sps.kendalltau(x, y, variant="b")[0],
    "pearson": lambda x, y: sps.pearsonr(x, y)[0],
}


def _related(n: int, seed: int, noise: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    correct = (rng.random(n) < 0.5).astype(float)
    return correct + noise * rng.normal(size=n), correct


# ------------------------------------------------------------------ point estimates


@pytest.mark.parametrize("method", stats.METHODS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_correlation_matches_scipy(method: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    metric = rng.normal(size=200)
    # ties on both sides: binary correctness and a rounded metric
    correct = (metric + rng.normal(size=200) > 0).astype(int)
    rounded = np.round(metric, 1)
    for x in (metric, rounded):
        got = stats.correlation(x, correct, method=method)
        assert got == pytest.approx(SCIPY[method](x, correct), abs=1e-12)


def test_correlation_accepts_lists_and_bools() -> None:
    got = stats.correlation([0.1, 0.4, 0.3, 0.9], [False, True, False, True], method="pearson")
    assert got == pytest.approx(sps.pearsonr([0.1, 0.4, 0.3, 0.9], [0, 1, 0, 1])[0], abs=1e-12)


@pytest.mark.parametrize("method", stats.METHODS)
def test_correlation_constant_input_is_nan(method: str) -> None:
    assert math.isnan(stats.correlation([0.3, 0.3, 0.3], [0, 1, 1], method=method))
    assert math.isnan(stats.correlation([0.1, 0.2, 0.3], [1, 1, 1], method=method))


# ------------------------------------------------------------------ resampled statistics


@pytest.mark.parametrize("method", stats.METHODS)
def test_weighted_resample_equals_statistic_on_duplicated_sample(method: str) -> None:
    rng = np.random.default_rng(5)
    n = 300
    x = np.round(rng.normal(size=n), 1)  # ties
    y = (x + rng.normal(size=n) > 0).astype(float)
    groups = rng.integers(0, 60, size=n)
    codes, n_groups = stats.query_groups(groups, n, "metric")
    counts = stats.resample_counts(n_groups, 8, np.random.default_rng(11))
    assert (counts.sum(axis=1) == n_groups).all()
    weights = counts[:, codes].astype(float)
    (got,) = stats._resample_statistics([x], y, weights, method)
    for b in range(counts.shape[0]):
        idx = np.repeat(np.arange(n), counts[b][codes])
        assert got[b] == pytest.approx(SCIPY[method](x[idx], y[idx]), abs=1e-12)


def test_weighted_ranks_match_rankdata_on_duplicates() -> None:
    x = np.array([3.0, 1.0, 3.0, 2.0, 1.0])
    w = np.array([[2.0, 1.0, 0.0, 3.0, 1.0]])
    ranks = stats._weighted_ranks(x, w)[0]
    dup = np.repeat(x, w[0].astype(int))
    expected = dict(zip(dup.tolist(), sps.rankdata(dup).tolist(), strict=True))
    for i in np.flatnonzero(w[0]):
        assert ranks[i] == expected[x[i]]


# ------------------------------------------------------------------ bootstrap CI


@pytest.mark.parametrize("method", stats.METHODS)
def test_bootstrap_strong_relation_ci_above_zero(method: str) -> None:
    x, y = _related(400, seed=1, noise=0.5)
    res = stats.bootstrap_correlation(x, y, method=method, n_resamples=300)
    assert res.estimate == pytest.approx(SCIPY[method](x, y), abs=1e-12)
    assert 0.0 < res.low < res.estimate < res.high
    assert res.n == 400 and res.n_groups == 400 and res.n_resamples == 300
    assert res.n_undefined == 0 and res.method == method


@pytest.mark.parametrize("method", stats.METHODS)
def test_bootstrap_independent_noise_ci_covers_zero(method: str) -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(size=400)
    y = (rng.random(400) < 0.5).astype(float)
    res = stats.bootstrap_correlation(x, y, method=method, n_resamples=300)
    assert res.low < 0.0 < res.high
    assert res.high - res.low < 0.5


def test_bootstrap_deterministic_for_seed_and_differs_across_seeds() -> None:
    x, y = _related(300, seed=3)
    groups = np.arange(300) // 3
    first = stats.bootstrap_correlation(x, y, groups, n_resamples=200, seed=42)
    again = stats.bootstrap_correlation(x, y, groups, n_resamples=200, seed=42)
    other = stats.bootstrap_correlation(x, y, groups, n_resamples=200, seed=43)
    assert first == again
    assert (first.low, first.high) != (other.low, other.high)
    assert first.estimate == other.estimate


def test_bootstrap_confidence_level_widens_interval() -> None:
    x, y = _related(300, seed=4)
    narrow = stats.bootstrap_correlation(x, y, n_resamples=400, confidence=0.5)
    wide = stats.bootstrap_correlation(x, y, n_resamples=400, confidence=0.99)
    assert wide.low < narrow.low < narrow.high < wide.high


@pytest.mark.parametrize("method", stats.METHODS)
def test_group_resampling_keeps_query_contexts_together(method: str) -> None:
    # Every query has m identical contexts. Resampling queries then gives, resample by resample,
    # the same statistics as resampling the one-context-per-query data with the same seed,
    # while resampling contexts independently gives a much narrower (overconfident) interval.
    rng = np.random.default_rng(8)
    n_queries, m = 80, 5
    xq = np.round(rng.normal(size=n_queries), 2)
    yq = (xq + 1.5 * rng.normal(size=n_queries) > 0).astype(float)
    x, y = np.repeat(xq, m), np.repeat(yq, m)
    groups = np.repeat(np.arange(n_queries), m)
    by_query = stats.bootstrap_correlation(x, y, groups, method=method, n_resamples=300, seed=1)
    single = stats.bootstrap_correlation(xq, yq, method=method, n_resamples=300, seed=1)
    by_context = stats.bootstrap_correlation(x, y, method=method, n_resamples=300, seed=1)
    assert by_query.n_groups == n_queries and by_context.n_groups == n_queries * m
    assert by_query.low == pytest.approx(single.low, abs=1e-12)
    assert by_query.high == pytest.approx(single.high, abs=1e-12)
    width_query = by_query.high - by_query.low
    width_context = by_context.high - by_context.low
    assert width_context < 0.7 * width_query  # about 1/sqrt(5) expected


def test_group_labels_and_context_order_do_not_matter() -> None:
    x, y = _related(240, seed=9)
    ids = np.arange(240) // 4
    labels = np.array([f"q{i:03d}" for i in ids])
    perm = np.random.default_rng(0).permutation(240)
    base = stats.bootstrap_correlation(x, y, ids, n_resamples=200)
    shuffled = stats.bootstrap_correlation(x[perm], y[perm], labels[perm], n_resamples=200)
    assert shuffled.n_groups == base.n_groups == 60
    assert shuffled.low == pytest.approx(base.low, abs=1e-12)
    assert shuffled.high == pytest.approx(base.high, abs=1e-12)


def test_bootstrap_counts_undefined_resamples() -> None:
    # Only one query has a wrong answer: resamples that miss it have constant correctness.
    x = np.linspace(0.0, 1.0, 20)
    y = np.ones(20)
    y[0] = 0.0
    res = stats.bootstrap_correlation(x, y, groups=np.arange(20) // 2, n_resamples=500)
    # P(query 0 never drawn in 10 draws) = 0.9**10 ~ 0.35
    assert 100 < res.n_undefined < 250
    assert math.isfinite(res.low) and math.isfinite(res.high)


@pytest.mark.parametrize("method", stats.METHODS)
def test_resamples_with_constant_float_metric_are_undefined(method: str) -> None:
    # The metric is 0.1 everywhere except in query 0. A weighted mean of 0.1s is not exactly
    # 0.1 in floating point, so undefined resamples must be detected, not left to 0/0.
    n_queries, m = 12, 3
    groups = np.repeat(np.arange(n_queries), m)
    x = np.full(n_queries * m, 0.1)
    x[:m] = [0.7, 0.9, 0.2]
    y = (np.arange(n_queries * m) % 2).astype(float)
    res = stats.bootstrap_correlation(x, y, groups, method=method, n_resamples=400, seed=3)
    counts = stats.resample_counts(n_queries, 400, np.random.default_rng(3))
    assert res.n_undefined == int((counts[:, 0] == 0).sum()) > 50


def test_bootstrap_constant_metric_all_undefined() -> None:
    res = stats.bootstrap_correlation(np.ones(10), np.arange(10) % 2, n_resamples=50)
    assert math.isnan(res.estimate) and math.isnan(res.low) and math.isnan(res.high)
    assert res.n_undefined == 50


def test_results_are_frozen() -> None:
    res = stats.bootstrap_correlation([0.1, 0.5, 0.2, 0.9], [0, 1, 0, 1], n_resamples=10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.estimate = 0.0  # type: ignore[misc]


# ------------------------------------------------------------------ paired test


@pytest.mark.parametrize("method", stats.METHODS)
def test_paired_test_better_metric_is_significant(method: str) -> None:
    rng = np.random.default_rng(12)
    n = 300
    correct = (rng.random(n) < 0.5).astype(float)
    metric_a = correct + 0.3 * rng.normal(size=n)
    metric_b = rng.normal(size=n)
    groups = np.arange(n) // 3
    res = stats.paired_bootstrap_test(
        metric_a, metric_b, correct, groups, method=method, n_resamples=300
    )
    assert res.p_value < 0.05
    assert res.estimate_a == pytest.approx(SCIPY[method](metric_a, correct), abs=1e-12)
    assert res.estimate_b == pytest.approx(SCIPY[method](metric_b, correct), abs=1e-12)
    assert res.difference == pytest.approx(res.estimate_a - res.estimate_b, abs=1e-15)
    assert 0.0 < res.low < res.difference < res.high
    # reversed roles: B is not better than A
    rev = stats.paired_bootstrap_test(
        metric_b, metric_a, correct, groups, method=method, n_resamples=300
    )
    assert rev.p_value > 0.95


def test_paired_test_same_metric_is_not_significant() -> None:
    x, y = _related(200, seed=13)
    res = stats.paired_bootstrap_test(x, x, y, n_resamples=200)
    assert res.difference == 0.0 and res.low == 0.0 and res.high == 0.0
    assert res.p_value == 1.0


def test_paired_test_smoothed_p_value() -> None:
    x, y = _related(200, seed=14, noise=0.2)
    noise = np.random.default_rng(0).normal(size=200)
    res = stats.paired_bootstrap_test(x, noise, y, n_resamples=99)
    assert res.p_value == pytest.approx(1 / 100)  # no resample has d <= 0: (0 + 1) / (99 + 1)


def test_paired_test_uses_same_resamples_and_is_deterministic() -> None:
    x, y = _related(150, seed=15)
    noise = np.random.default_rng(1).normal(size=150)
    groups = np.arange(150) // 3
    res = stats.paired_bootstrap_test(x, noise, y, groups, n_resamples=200, seed=5)
    assert res == stats.paired_bootstrap_test(x, noise, y, groups, n_resamples=200, seed=5)
    # pairing: B = A + constant shift has the same ranks, so every resampled difference is 0
    shifted = stats.paired_bootstrap_test(x, x + 10.0, y, groups, n_resamples=200, seed=5)
    assert shifted.low == pytest.approx(0.0, abs=1e-12)
    assert shifted.high == pytest.approx(0.0, abs=1e-12)


# ------------------------------------------------------------------ system level


def test_system_kendall_matches_scipy_and_rankings() -> None:
    metric = {"bm25": 0.41, "dense": 0.55, "hybrid": 0.60, "random": 0.05, "splade": 0.52}
    accuracy = {"bm25": 0.30, "dense": 0.44, "hybrid": 0.43, "random": 0.10, "splade": 0.40}
    res = stats.system_kendall(metric, accuracy)
    names = list(metric)
    ref = sps.kendalltau([metric[s] for s in names], [accuracy[s] for s in names])
    assert res.tau == pytest.approx(ref[0], abs=1e-12)
    assert res.p_value == pytest.approx(ref[1], abs=1e-12)
    assert res.n_systems == 5
    assert res.ranking_by_metric == ["hybrid", "dense", "splade", "bm25", "random"]
    assert res.ranking_by_accuracy == ["dense", "hybrid", "splade", "bm25", "random"]


def test_system_kendall_ties_means_equal_but_for_rounding() -> None:
    """Two systems whose mean metrics are one value summed in two orders tie: no tau."""
    metric = {"x": (0.1 + 0.2 + 0.3) / 3, "y": (0.3 + 0.2 + 0.1) / 3}
    assert metric["x"] != metric["y"]
    assert np.isnan(stats.system_kendall(metric, {"x": 2 / 3, "y": 1 / 3}).tau)


def test_system_kendall_perfect_and_reversed() -> None:
    metric = {"a": 3.0, "b": 2.0, "c": 1.0, "d": 0.0}
    assert stats.system_kendall(metric, {"d": 0.1, "c": 0.2, "b": 0.3, "a": 0.4}).tau == 1.0
    assert stats.system_kendall(metric, {"a": 0.1, "b": 0.2, "c": 0.3, "d": 0.4}).tau == -1.0


def test_system_kendall_ties_break_by_name() -> None:
    res = stats.system_kendall({"b": 1.0, "a": 1.0, "c": 0.5}, {"b": 0.2, "a": 0.1, "c": 0.3})
    assert res.ranking_by_metric == ["a", "b", "c"]
    assert res.tau == pytest.approx(sps.kendalltau([1.0, 1.0, 0.5], [0.2, 0.1, 0.3])[0])


def test_system_kendall_errors() -> None:
    with pytest.raises(UDCGInputError, match="only in metric_by_system: x") as err:
        stats.system_kendall({"a": 1.0, "x": 2.0}, {"a": 1.0, "y": 2.0})
    assert "only in accuracy_by_system: y" in str(err.value)
    assert err.value.field == "accuracy_by_system"
    with pytest.raises(UDCGInputError, match="at least 2 systems") as err:
        stats.system_kendall({"a": 1.0}, {"a": 0.5})
    assert err.value.field == "metric_by_system"
    with pytest.raises(UDCGInputError, match="NaN") as err:
        stats.system_kendall({"a": 1.0, "b": math.nan}, {"a": 0.5, "b": 0.2})
    assert err.value.field == "metric_by_system"
    with pytest.raises(UDCGInputError, match="expected a number") as err:
        stats.system_kendall({"a": 1.0, "b": 2.0}, {"a": 0.5, "b": "high"})
    assert err.value.field == "accuracy_by_system"
    with pytest.raises(UDCGInputError, match="mapping") as err:
        stats.system_kendall([1.0, 2.0], {"a": 0.5, "b": 0.2})  # type: ignore[arg-type]


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    "call",
    [
        lambda m, c, **kw: stats.correlation(m, c, **kw),
        lambda m, c, **kw: stats.bootstrap_correlation(m, c, n_resamples=5, **kw),
        lambda m, c, **kw: stats.paired_bootstrap_test(m, m, c, n_resamples=5, **kw),
    ],
    ids=["correlation", "bootstrap", "paired"],
)
class TestVectorValidation:
    def test_length_mismatch(self, call) -> None:
        with pytest.raises(UDCGInputError, match="length mismatch") as err:
            call([0.1, 0.2, 0.3], [1, 0])
        assert err.value.field == "correct"

    def test_empty(self, call) -> None:
        with pytest.raises(UDCGInputError, match="empty") as err:
            call([], [])
        assert err.value.field in {"metric", "metric_a"}

    def test_nan_and_inf(self, call) -> None:
        with pytest.raises(UDCGInputError, match="position 1: NaN") as err:
            call([0.1, 0.2, 0.3], [1, math.nan, 0])
        assert err.value.field == "correct"
        with pytest.raises(UDCGInputError, match="position 2: NaN or infinite") as err:
            call([0.1, 0.2, math.inf], [1, 0, 0])
        assert err.value.field in {"metric", "metric_a"}

    def test_fewer_than_two(self, call) -> None:
        with pytest.raises(UDCGInputError, match="fewer than 2"):
            call([0.1], [1])

    def test_unknown_method(self, call) -> None:
        with pytest.raises(UDCGInputError, match="unknown method 'tau'") as err:
            call([0.1, 0.2, 0.3], [1, 0, 1], method="tau")
        assert err.value.field == "method"

    def test_not_one_dimensional(self, call) -> None:
        with pytest.raises(UDCGInputError, match="1-D"):
            call([[0.1, 0.2], [0.3, 0.4]], [[1, 0], [0, 1]])

    def test_not_numbers(self, call) -> None:
        with pytest.raises(UDCGInputError, match="numbers"):
            call(["a", "b", "c"], [1, 0, 1])


def test_paired_length_mismatch_between_metrics() -> None:
    with pytest.raises(UDCGInputError, match="metric_a has 3 values but metric_b has 2") as err:
        stats.paired_bootstrap_test([0.1, 0.2, 0.3], [0.1, 0.2], [1, 0, 1])
    assert err.value.field == "metric_b"


def test_groups_validation() -> None:
    x, y = [0.1, 0.2, 0.3, 0.4], [0, 1, 0, 1]
    with pytest.raises(UDCGInputError, match="length mismatch") as err:
        stats.bootstrap_correlation(x, y, groups=[1, 2, 3])
    assert err.value.field == "groups"
    with pytest.raises(UDCGInputError, match="at least 2") as err:
        stats.bootstrap_correlation(x, y, groups=["q", "q", "q", "q"])
    assert err.value.field == "groups"
    with pytest.raises(UDCGInputError, match="NaN") as err:
        stats.bootstrap_correlation(x, y, groups=[1.0, math.nan, 2.0, 2.0])
    assert err.value.field == "groups"
    with pytest.raises(UDCGInputError, match="1-D") as err:
        stats.bootstrap_correlation(x, y, groups=[[1, 2], [3, 4]])
    assert err.value.field == "groups"


def test_option_validation() -> None:
    x, y = [0.1, 0.2, 0.3, 0.4], [0, 1, 0, 1]
    for bad in (0, -5, 2.5, True):
        with pytest.raises(UDCGInputError) as err:
            stats.bootstrap_correlation(x, y, n_resamples=bad)
        assert err.value.field == "n_resamples"
    for bad in (0.0, 1.0, 1.5, "0.9"):
        with pytest.raises(UDCGInputError) as err:
            stats.paired_bootstrap_test(x, x, y, n_resamples=5, confidence=bad)
        assert err.value.field == "confidence"


@pytest.mark.parametrize("seed", [-1, 1.5, "7", True])
def test_a_bad_seed_is_one_line(seed: object) -> None:
    x, y = np.arange(8.0), np.array([0, 1] * 4)
    with pytest.raises(UDCGInputError, match="field 'seed'"):
        stats.bootstrap_correlation(x, y, groups=np.arange(8), seed=seed)
    with pytest.raises(UDCGInputError, match="field 'seed'"):
        stats.paired_bootstrap_test(x, x[::-1], y, np.arange(8), seed=seed)


def test_a_masked_array_with_entries_masked_is_refused() -> None:
    x = np.ma.array([1.0, 2.0, 3.0, 4.0], mask=[False, False, True, False])
    with pytest.raises(UDCGInputError, match="field 'metric': a masked array with 1 masked"):
        stats.correlation(x, [0, 1, 1, 0])
