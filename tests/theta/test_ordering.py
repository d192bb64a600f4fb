"""Context ordering: the assignment optimum against brute force, ties, heuristics by hand."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.special import expit

from udcg.errors import UDCGInputError
from udcg.theta import UDCGTheta
from udcg.theta.ordering import (
    ORDERINGS,
    best_assignment,
    ends_order,
    gold_first_order,
    position_terms,
    retriever_order,
    reversed_order,
)


def brute_force(alpha, beta, rel, u, m):
    """Every ordered choice of m of the candidates, in lexicographic order: the first one with
    the largest sum of ``alpha_i r u + beta_i (1 - r) u`` (computed here, term by term)."""
    perms = np.array(list(itertools.permutations(range(len(rel)), m)), dtype=np.int64)
    if m == 0:
        return perms.reshape(1, 0)[0], 0.0
    r, v = np.asarray(rel)[perms], np.asarray(u)[perms]
    sums = (alpha[:m] * r * v + beta[:m] * (1 - r) * v).sum(axis=1)
    best = sums.max()
    first = int(np.argmax(sums >= best - 1e-9 * (1 + np.abs(sums).max())))
    return perms[first], float(best)


def fitted(alpha, beta, intercept=0.0):
    model = UDCGTheta(k=len(alpha), bias=intercept != 0.0)
    model.alpha_ = np.asarray(alpha, dtype=np.float64)
    model.beta_ = np.asarray(beta, dtype=np.float64)
    model.intercept_ = float(intercept)
    return model


def test_position_terms_by_hand():
    terms = position_terms([2.0, 1.0], [-1.0, -3.0], [1, 0, 0.5], [0.5, 1.0, 1.0])
    expected = [[1.0, 0.5], [-1.0, -3.0], [0.5, -1.0]]  # soft: 0.5*a_i + 0.5*b_i
    np.testing.assert_allclose(terms, expected)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 6])
def test_permutation_optimum_equals_brute_force(k):
    for seed in range(40):
        rng = np.random.default_rng(seed)
        alpha, beta = rng.normal(size=k), rng.normal(size=k)
        rel = (rng.random(k) < 0.5).astype(float)
        u = rng.random(k)
        order, value = best_assignment(alpha, beta, rel, u)
        ref_order, ref_value = brute_force(alpha, beta, rel, u, k)
        assert value == pytest.approx(ref_value, abs=1e-12)
        np.testing.assert_array_equal(order, ref_order)


@pytest.mark.parametrize("n", [1, 3, 5, 7, 8])
def test_subset_optimum_equals_brute_force(n):
    for seed in range(15):
        rng = np.random.default_rng(100 + seed)
        k = int(rng.integers(1, 7))
        alpha, beta = rng.normal(size=k), rng.normal(size=k)
        rel = rng.random(n) if seed % 3 == 0 else (rng.random(n) < 0.4).astype(float)
        u = rng.random(n)
        kk = int(rng.integers(1, k + 1))
        order, value = best_assignment(alpha, beta, rel, u, kk)
        m = min(kk, n)
        ref_order, ref_value = brute_force(alpha, beta, rel, u, m)
        assert order.shape == (m,) and len(set(order.tolist())) == m
        assert value == pytest.approx(ref_value, abs=1e-12)
        np.testing.assert_array_equal(order, ref_order)


def test_ties_go_to_the_lexicographically_smallest_order():
    # coarse values make many exact ties: identical candidates, equal position weights, zeros
    for seed in range(150):
        rng = np.random.default_rng(1000 + seed)
        k, n = int(rng.integers(1, 5)), int(rng.integers(1, 8))
        alpha = rng.integers(-1, 2, size=k).astype(float)
        beta = rng.integers(-1, 2, size=k).astype(float)
        rel = rng.integers(0, 2, size=n).astype(float)
        u = rng.integers(0, 3, size=n) / 2.0
        order, value = best_assignment(alpha, beta, rel, u)
        ref_order, ref_value = brute_force(alpha, beta, rel, u, min(k, n))
        assert value == ref_value
        np.testing.assert_array_equal(order, ref_order)


def test_identical_candidates_keep_the_retriever_order():
    order, value = best_assignment([1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1] * 5, [1.0] * 5)
    np.testing.assert_array_equal(order, [0, 1, 2])
    assert value == 3.0


def test_udcg_theta_best_order_and_context_match_predict_proba():
    for seed in range(20):
        rng = np.random.default_rng(seed)
        k = int(rng.integers(1, 6))
        model = fitted(rng.normal(size=k), rng.normal(size=k), intercept=rng.normal())
        n = int(rng.integers(1, 8))
        rel = (rng.random(n) < 0.5).astype(float)
        u = rng.random(n)

        def proba(order, model=model, rel=rel, u=u, k=k):
            r, v = np.zeros(k), np.zeros(k)  # a context shorter than k is zero-padded
            r[: len(order)], v[: len(order)] = rel[order], u[order]
            return float(model.predict_proba([r], [v])[0])

        order, p = model.best_context(rel, u)
        assert p == pytest.approx(proba(order), abs=1e-12)
        _, ref_value = brute_force(model.alpha_, model.beta_, rel, u, min(k, n))
        assert p == pytest.approx(expit(ref_value + model.intercept_), abs=1e-12)
        if n <= k:
            perm, q = model.best_order(rel, u)
            assert sorted(perm.tolist()) == list(range(n))
            assert q == pytest.approx(proba(perm), abs=1e-12)
            assert q == pytest.approx(p, abs=1e-12)
        else:
            with pytest.raises(UDCGInputError, match="best_context"):
                model.best_order(rel, u)


def test_best_context_shorter_k():
    model = fitted([1.0, 2.0, 3.0], [-1.0, -1.0, -1.0])
    order, p = model.best_context([1, 1, 0, 1], [0.2, 0.9, 1.0, 0.5], k=2)
    # positions 1, 2 weigh 1 and 2: the best helpful passage (0.9) at 2, then 0.5 at 1
    np.testing.assert_array_equal(order, [3, 1])
    assert p == pytest.approx(expit(0.5 + 1.8))


def test_bad_inputs():
    with pytest.raises(UDCGInputError, match="larger than the weights"):
        best_assignment([1.0, 2.0], [0.0, 0.0], [1, 0, 1], [1, 1, 1], k=3)
    with pytest.raises(UDCGInputError, match="outside"):
        best_assignment([1.0], [0.0], [1], [1.5])
    with pytest.raises(UDCGInputError, match="length"):
        best_assignment([1.0], [0.0], [1, 0], [1.0])
    with pytest.raises(UDCGInputError, match="not fitted"):
        UDCGTheta(k=2).best_context([1], [1])


def test_empty_candidates():
    order, value = best_assignment([1.0, 2.0], [0.0, 0.0], [], [])
    assert order.shape == (0,) and value == 0.0


def test_heuristics_by_hand():
    np.testing.assert_array_equal(retriever_order(7, 3), [0, 1, 2])
    np.testing.assert_array_equal(retriever_order(2, 3), [0, 1])
    np.testing.assert_array_equal(reversed_order(7, 3), [2, 1, 0])
    np.testing.assert_array_equal(reversed_order(2, 5), [1, 0])
    np.testing.assert_array_equal(ends_order(5, 5), [0, 2, 4, 3, 1])
    np.testing.assert_array_equal(ends_order(6, 6), [0, 2, 4, 5, 3, 1])
    np.testing.assert_array_equal(ends_order(10, 4), [0, 2, 3, 1])
    np.testing.assert_array_equal(ends_order(1, 3), [0])
    np.testing.assert_array_equal(ends_order(0, 3), np.zeros(0))
    np.testing.assert_array_equal(gold_first_order([0, 1, 0, 1, 1], 4), [1, 3, 4, 0])
    np.testing.assert_array_equal(gold_first_order([0, 0, 0], 2), [0, 1])
    np.testing.assert_array_equal(gold_first_order([0.0, 0.3, 1.0], 5), [1, 2, 0])
    assert set(ORDERINGS) == {"theta", "retriever", "reversed", "ends", "gold_first"}


def test_ends_order_puts_the_best_ranks_at_the_ends():
    for m in range(1, 12):
        order = ends_order(m, m)
        assert sorted(order.tolist()) == list(range(m))
        # rank position: rank 1 first, rank 2 last, rank 3 second, rank 4 second to last, ...
        expected = [None] * m
        front, back = 0, m - 1
        for rank in range(m):
            if rank % 2 == 0:
                expected[front], front = rank, front + 1
            else:
                expected[back], back = rank, back - 1
        assert order.tolist() == expected
