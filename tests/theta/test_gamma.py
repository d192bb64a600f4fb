"""gamma tuning: recovers the generating gamma, agrees with udcg() + correlation(), errors."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit, logit

from udcg.errors import UDCGInputError
from udcg.metrics.udcg import udcg
from udcg.stats import correlation
from udcg.theta import DEFAULT_GRID, GammaResult, tune_gamma


def simulate(n, gamma, seed, k=5, sharpness=15.0):
    """Correctness ~ Bernoulli of a sharpened UDCG_gamma (centred at its median)."""
    rng = np.random.default_rng(seed)
    rel = (rng.random((n, k)) < 0.4).astype(np.float64)
    u = rng.random((n, k))
    z = logit(udcg(rel, u, gamma))
    correct = (rng.random(n) < expit(sharpness * (z - np.median(z)))).astype(np.float64)
    return rel, u, correct


@pytest.mark.parametrize(("true_gamma", "seed"), [(1.0, 0), (0.5, 1)])
def test_recovers_the_generating_gamma(true_gamma, seed):
    rel, u, correct = simulate(20_000, true_gamma, seed)
    result = tune_gamma(rel, u, correct)
    assert isinstance(result, GammaResult)
    assert abs(result.gamma - true_gamma) <= 0.1
    assert result.method == "spearman"
    assert result.train_correlation == np.nanmax(result.correlations)


def test_default_grid_includes_zero_the_paper_default_and_two():
    assert DEFAULT_GRID[0] == 0.0 and DEFAULT_GRID[-1] == 2.0
    assert 1.0 / 3.0 in DEFAULT_GRID
    assert (np.diff(DEFAULT_GRID) > 0).all()


def test_default_grid_holds_clean_decimals():
    """1.95, not 1.9500000000000002: a tuned gamma prints and stores as the user reads it."""
    steps = [g for g in DEFAULT_GRID.tolist() if g != 1.0 / 3.0]
    assert steps == [i / 40 for i in range(81)]
    assert all(len(repr(g)) <= 5 for g in steps)
    assert 1.95 in steps


def test_curve_matches_udcg_and_correlation():
    rel, u, correct = simulate(500, 0.7, seed=2)
    grid = [0.0, 0.25, 0.7, 1.5]
    for method in ("spearman", "kendall", "pearson"):
        result = tune_gamma(rel, u, correct, grid=grid, method=method)
        expected = [correlation(udcg(rel, u, g), correct, method) for g in grid]
        np.testing.assert_allclose(result.correlations, expected, rtol=1e-12)
        assert result.gamma == grid[int(np.argmax(expected))]
        np.testing.assert_array_equal(result.grid, grid)


def test_ragged_and_mapping_inputs_agree_with_per_context_udcg():
    rng = np.random.default_rng(4)
    lengths = rng.integers(0, 6, size=300)
    rel = [(rng.random(n) < 0.5).astype(float).tolist() for n in lengths]
    u = [rng.random(n).tolist() for n in lengths]
    correct = (rng.random(300) < 0.5).astype(float)
    grid = np.array([0.0, 0.5, 1.0])
    result = tune_gamma(rel, u, correct, grid=grid)
    expected = [correlation(udcg(rel, u, g), correct) for g in grid]
    np.testing.assert_allclose(result.correlations, expected, rtol=1e-12)
    keys = [f"q{i}" for i in range(300)]
    as_map = tune_gamma(
        dict(zip(keys, rel, strict=True)),
        dict(zip(keys, u, strict=True)),
        dict(zip(keys, correct, strict=True)),
        grid=grid,
    )
    np.testing.assert_allclose(as_map.correlations, result.correlations, rtol=1e-12)


def test_ties_choose_the_smallest_gamma():
    # no irrelevant passage has utility, so gamma changes nothing: every gamma ties
    rng = np.random.default_rng(6)
    rel = np.ones((200, 3))
    u = rng.random((200, 3))
    correct = (rng.random(200) < u.mean(axis=1)).astype(float)
    result = tune_gamma(rel, u, correct, grid=[1.5, 0.5, 1.0])
    assert result.gamma == 0.5
    assert len(set(result.correlations.tolist())) == 1


def test_errors():
    rel, u, correct = simulate(100, 1.0, seed=3)
    with pytest.raises(UDCGInputError, match=r"undefined for every gamma.*correct is constant"):
        tune_gamma(rel, u, np.ones(100))
    for grid in ([], [[0.5]], [0.5, -1.0], [np.nan], ["x"]):
        with pytest.raises(UDCGInputError, match="grid"):
            tune_gamma(rel, u, correct, grid=grid)
    with pytest.raises(UDCGInputError, match="length mismatch"):
        tune_gamma(rel, u, correct[:-1])
    with pytest.raises(UDCGInputError, match="unknown method"):
        tune_gamma(rel, u, correct, method="cosine")
    with pytest.raises(UDCGInputError, match="outside"):
        tune_gamma(rel, u + 1, correct)
    with pytest.raises(UDCGInputError, match="mappings"):
        tune_gamma({"q": [1]}, {"q": [0.5]}, [1])
    with pytest.raises(UDCGInputError, match="no entry for query 'b'"):
        tune_gamma({"a": [1], "b": [0]}, {"a": [0.5], "b": [0.1]}, {"a": 1})
