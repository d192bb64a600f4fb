"""Q-CARE coverage gains, C-Prec and C-nDCG."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from udcg.errors import UDCGInputError
from udcg.qcare.coverage import c_ndcg, c_precision, coverage

L3 = math.log2(3)


def scalar_c_ndcg(r: list[float], k: int | None = None) -> float:
    """Independent per-position formula: DCG of the list over DCG of its sorted copy."""
    r = r if k is None else r[:k]
    dcg = sum(x / math.log2(i + 2) for i, x in enumerate(r))
    idcg = sum(x / math.log2(i + 2) for i, x in enumerate(sorted(r, reverse=True)))
    return dcg / idcg if idcg > 0 else 0.0


# --- coverage -------------------------------------------------------------------------------


def test_coverage_graded_and_binary_hand_computed() -> None:
    covers = [[[1, 0, 0], [True, True, False], [0, 0, 0]]]
    graded = coverage(covers)
    assert isinstance(graded, list)
    np.testing.assert_allclose(graded[0], [1 / 3, 2 / 3, 0.0])
    assert coverage(covers, binary=True)[0].tolist() == [1.0, 1.0, 0.0]


def test_coverage_zero_subqueries_zero_chunks_single_chunk() -> None:
    out = coverage([[[], []], [], [[False, True]]])
    assert [r.tolist() for r in out] == [[0.0, 0.0], [], [0.5]]
    out = coverage([[[], []], [], [[False, True]]], binary=True)
    assert [r.tolist() for r in out] == [[0.0, 0.0], [], [1.0]]
    # a 3-D array with no sub-query axis
    np.testing.assert_array_equal(coverage(np.zeros((2, 3, 0), dtype=bool)), np.zeros((2, 3)))


def test_coverage_3d_array_gives_2d_array() -> None:
    cube = np.array([[[1, 1], [0, 1]], [[0, 0], [1, 0]]], dtype=bool)
    out = coverage(cube)
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, [[1.0, 0.5], [0.0, 0.5]])
    np.testing.assert_array_equal(coverage(cube, binary=True), [[1.0, 1.0], [0.0, 1.0]])
    # same values from the equivalent ragged input
    ragged = coverage(cube.tolist())
    np.testing.assert_array_equal(np.stack(ragged), out)


def test_coverage_ragged_sizes_per_query() -> None:
    out = coverage([[[1, 0, 1, 1]], [[1], [0], [1]]])
    assert out[0].tolist() == [0.75]
    assert out[1].tolist() == [1.0, 0.0, 1.0]


@given(
    st.lists(
        st.integers(0, 4).flatmap(
            lambda s: st.lists(st.lists(st.booleans(), min_size=s, max_size=s), max_size=5)
        ),
        max_size=5,
    )
)
def test_coverage_properties(covers: list[list[list[bool]]]) -> None:
    graded, binary = coverage(covers), coverage(covers, binary=True)
    for q, g, b in zip(covers, graded, binary, strict=True):
        assert g.shape == b.shape == (len(q),)
        for chunk, gj, bj in zip(q, g, b, strict=True):
            assert gj == pytest.approx(sum(chunk) / max(len(chunk), 1))
            assert bj == float(any(chunk))
        assert ((g >= 0) & (g <= b)).all()


# --- C-Prec ---------------------------------------------------------------------------------


def test_c_precision_hand_computed() -> None:
    r = [[1.0, 0.5, 0.0], [0.25], [], [0.0, 0.0]]
    np.testing.assert_allclose(c_precision(r), [0.5, 0.25, 0.0, 0.0])
    # k larger than the list: missing chunks count 0, divide by k
    np.testing.assert_allclose(c_precision(r, k=4), [1.5 / 4, 0.25 / 4, 0.0, 0.0])
    # k smaller: truncate
    np.testing.assert_allclose(c_precision(r, k=1), [1.0, 0.25, 0.0, 0.0])
    np.testing.assert_allclose(c_precision(np.array([[0.5, 0.5]])), [0.5])


# --- C-nDCG ---------------------------------------------------------------------------------


def test_c_ndcg_hand_computed() -> None:
    r = [[0.0, 0.5, 1.0], [0.5], [0.0, 0.0, 0.0], [], [1.0, 0.0]]
    dcg = 0.5 / L3 + 1.0 / 2.0
    idcg = 1.0 + 0.5 / L3
    want = [dcg / idcg, 1.0, 0.0, 0.0, 1.0]
    np.testing.assert_allclose(c_ndcg(r), want, rtol=0, atol=1e-15)


def test_c_ndcg_cutoff_truncates_list_first() -> None:
    # the top-1 list has no gain: the ideal is a re-ordering of the chunks the LLM sees
    assert c_ndcg([[0.0, 1.0]], k=1).tolist() == [0.0]
    assert c_ndcg([[0.5, 1.0]], k=1).tolist() == [1.0]
    # k larger than the list changes nothing
    np.testing.assert_allclose(c_ndcg([[0.0, 0.5, 1.0]], k=10), c_ndcg([[0.0, 0.5, 1.0]]))


def test_c_ndcg_binary_gains() -> None:
    # (1 + 1/2) / (1 + 1/log2(3))
    got = c_ndcg([[1.0, 0.0, 1.0]])
    assert got[0] == pytest.approx((1 + 0.5) / (1 + 1 / L3), abs=1e-15)


def test_pipeline_from_covers() -> None:
    covers = [[[0, 0], [1, 0], [1, 1]], [[0, 0]]]
    r = coverage(covers)
    np.testing.assert_allclose(c_precision(r), [0.5, 0.0])
    np.testing.assert_allclose(c_ndcg(r)[0], scalar_c_ndcg([0.0, 0.5, 1.0]))


# no subnormals: scaling one by c < 1 underflows to 0, which is not a property of C-nDCG
gains = st.lists(st.floats(0.0, 1.0, allow_nan=False, allow_subnormal=False), max_size=8)


@given(st.lists(gains, max_size=5), st.one_of(st.none(), st.integers(1, 10)))
def test_values_in_unit_interval_and_match_scalar(r: list[list[float]], k: int | None) -> None:
    prec, nd = c_precision(r, k=k), c_ndcg(r, k=k)
    assert prec.shape == nd.shape == (len(r),)
    assert ((prec >= 0) & (prec <= 1 + 1e-12)).all()
    assert ((nd >= 0) & (nd <= 1 + 1e-12)).all()
    np.testing.assert_allclose(nd, [scalar_c_ndcg(q, k) for q in r], rtol=0, atol=1e-12)


@given(gains.filter(lambda r: max(r, default=0) > 0))
def test_c_ndcg_is_one_when_sorted(r: list[float]) -> None:
    assert c_ndcg([sorted(r, reverse=True)])[0] == 1.0


@given(gains, st.randoms(use_true_random=False), st.one_of(st.none(), st.integers(8, 12)))
def test_c_precision_permutation_invariant(r: list[float], rnd, k: int | None) -> None:
    shuffled = list(r)
    rnd.shuffle(shuffled)
    np.testing.assert_allclose(c_precision([shuffled], k=k), c_precision([r], k=k), atol=1e-12)


@given(gains, st.floats(1e-3, 1.0))
def test_c_ndcg_scale_invariant(r: list[float], c: float) -> None:
    np.testing.assert_allclose(c_ndcg([[c * x for x in r]]), c_ndcg([r]), rtol=0, atol=1e-9)


# --- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("covers", "match"),
    [
        ([[[1, 1.5]]], "query 0, chunks row 0, sub-queries column 1"),
        ([[[1]], [[2]]], "query 1"),
        ([[[float("nan")]]], r"not a boolean or a number in \[0, 1\]"),
        ([[[-0.25]]], "not a boolean"),
        ([[[1, 0], [1]]], "query 0"),  # chunks with different sub-query counts
        ([[True, False]], "query 0: expected"),  # per-chunk flags instead of a matrix
        ([[["yes"]]], "query 0"),
        (np.ones((2, 2), dtype=bool), "3-D"),
        (5, "list of per-query"),
        (np.full((1, 1, 1), 1.5), "not a boolean"),
    ],
)
def test_coverage_rejects_bad_covers(covers, match: str) -> None:
    with pytest.raises(UDCGInputError, match=match) as err:
        coverage(covers)
    assert err.value.field == "covers"


@pytest.mark.parametrize("metric", [c_precision, c_ndcg])
@pytest.mark.parametrize(
    ("values", "k", "field"),
    [
        ([[0.5, 1.5]], None, "coverage_values"),
        ([[-0.1]], None, "coverage_values"),
        ([[float("nan")]], None, "coverage_values"),
        (np.ones((1, 1, 1)), None, "coverage_values"),
        ([[0.5]], 0, "k"),
        ([[0.5]], -1, "k"),
        ([[0.5]], 1.5, "k"),
        ([[0.5]], True, "k"),
    ],
)
def test_ranking_metrics_reject_bad_inputs(metric, values, k, field: str) -> None:
    with pytest.raises(UDCGInputError) as err:
        metric(values, k=k)
    assert err.value.field == field
