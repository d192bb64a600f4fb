"""Q-CARE generator metrics: completeness, conciseness, verifiableness."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from udcg.errors import UDCGInputError
from udcg.qcare.generator import completeness, conciseness, verifiableness

T, F = True, False


def assert_masked(got: np.ma.MaskedArray, values: list[float | None]) -> None:
    """``None`` marks an entry that must be missing (masked)."""
    assert isinstance(got, np.ma.MaskedArray)
    assert got.dtype == np.float64
    assert got.shape == (len(values),)
    assert got.mask.tolist() == [v is None for v in values]
    assert np.isfinite(got.data).all()
    for g, v in zip(got.filled(-1.0), values, strict=True):
        if v is not None:
            assert g == pytest.approx(v, abs=1e-15)


# --- completeness ---------------------------------------------------------------------------


def test_completeness_hand_computed() -> None:
    got = completeness([[T, F, T], [], [1], [0, 0]])
    assert_masked(got, [2 / 3, None, 1.0, 0.0])
    assert got.mask.sum() == 1
    assert got.mean() == pytest.approx((2 / 3 + 1.0 + 0.0) / 3)


def test_completeness_array_input_and_full_mask() -> None:
    got = completeness(np.array([[T, T], [F, T]]))
    assert_masked(got, [1.0, 0.5])
    assert got.mask.shape == (2,)  # a real mask even when nothing is missing
    assert got.mask.sum() == 0


def test_all_missing_mean_is_masked() -> None:
    got = completeness([[], []])
    assert got.mask.sum() == 2
    assert got.mean() is np.ma.masked


# --- conciseness ----------------------------------------------------------------------------


def test_conciseness_hand_computed() -> None:
    covered = [[T, F], [T, F], [], [F, T, T], [T]]
    relevance = [
        [[T, F], [F, T], [F, F]],  # one claim on a covered sub-query, one on an uncovered one
        [],  # no claims: missing
        [[], []],  # claims but no sub-queries: 0, defined
        [[T, F, F], [T, F, F]],  # claims relevant only to uncovered sub-queries
        [[T], [T], [F]],  # duplicate claims count twice
    ]
    got = conciseness(relevance, covered)
    assert_masked(got, [1 / 3, None, 0.0, 0.0, 2 / 3])
    assert got.mask.sum() == 1


def test_conciseness_claim_relevant_to_several_subqueries_counts_once() -> None:
    got = conciseness([[[T, T, F], [F, F, T]]], [[T, T, F]])
    assert_masked(got, [0.5])


def test_conciseness_array_inputs() -> None:
    relevance = np.array([[[T, F], [F, T]], [[F, F], [T, T]]])
    covered = np.array([[F, T], [F, F]])
    assert_masked(conciseness(relevance, covered), [0.5, 0.0])
    assert_masked(conciseness(relevance.tolist(), covered.tolist()), [0.5, 0.0])


def test_conciseness_zero_claims_given_as_empty_matrix() -> None:
    got = conciseness([np.zeros((0, 4), dtype=bool), [[T]]], [[T, F], [T]])
    assert_masked(got, [None, 1.0])


# --- verifiableness -------------------------------------------------------------------------


def test_verifiableness_hand_computed() -> None:
    support = [
        [[F, F, F], [T, F, F], [F, T, T]],
        [],  # no claims: missing
        [[], []],  # claims but no chunks: nothing supported
        [[T, F], [T, F]],  # duplicates count twice
    ]
    got = verifiableness(support)
    assert_masked(got, [2 / 3, None, 0.0, 1.0])
    assert got.mask.sum() == 1
    assert got.mean() == pytest.approx((2 / 3 + 0.0 + 1.0) / 3)


def test_verifiableness_array_input() -> None:
    assert_masked(verifiableness(np.array([[[1, 0], [0, 0]]])), [0.5])


def test_empty_batch() -> None:
    assert completeness([]).shape == (0,)
    assert conciseness([], []).shape == (0,)
    assert verifiableness([]).shape == (0,)


# --- against an independent scalar loop -----------------------------------------------------


@st.composite
def query_labels(draw: st.DrawFn) -> tuple[list[bool], list[list[bool]], list[list[bool]]]:
    n_sub = draw(st.integers(0, 4))
    n_claims = draw(st.integers(0, 4))
    n_chunks = draw(st.integers(0, 4))
    covered = draw(st.lists(st.booleans(), min_size=n_sub, max_size=n_sub))
    flags = st.lists(st.booleans(), min_size=n_sub, max_size=n_sub)
    relevance = draw(st.lists(flags, min_size=n_claims, max_size=n_claims))
    flags = st.lists(st.booleans(), min_size=n_chunks, max_size=n_chunks)
    support = draw(st.lists(flags, min_size=n_claims, max_size=n_claims))
    return covered, relevance, support


@given(st.lists(query_labels(), max_size=6))
def test_match_scalar_loop(queries) -> None:
    covered = [q[0] for q in queries]
    relevance = [q[1] for q in queries]
    support = [q[2] for q in queries]
    want_comp, want_conc, want_ver = [], [], []
    for cov, rel, sup in queries:
        want_comp.append(sum(cov) / len(cov) if cov else None)
        on_topic = [any(r and c for r, c in zip(claim, cov, strict=True)) for claim in rel]
        want_conc.append(sum(on_topic) / len(rel) if rel else None)
        want_ver.append(sum(any(claim) for claim in sup) / len(sup) if sup else None)
    assert_masked(completeness(covered), want_comp)
    assert_masked(conciseness(relevance, covered), want_conc)
    assert_masked(verifiableness(support), want_ver)


# --- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("relevance", "covered", "field", "match"),
    [
        ([[[T, F]]], [[T, F], [T]], "claim_relevance", "1 queries but subquery_covered has 2"),
        ([[[T]], [[T, F]]], [[T], [T]], "claim_relevance", "query 1: .* 2 sub-query columns"),
        ([[[T], [F]]], [[]], "claim_relevance", "query 0"),
        ([[[T, 0.5]]], [[T, F]], "claim_relevance", "query 0, claims row 0"),
        ([[[T], [T, F]]], [[T]], "claim_relevance", "query 0"),
        ([[T, F]], [[T, F]], "claim_relevance", "query 0: expected"),
        ([[[T, F]]], [[T, 2]], "subquery_covered", "query 0, position 1"),
        ([[[T, F]]], [[T, float("nan")]], "subquery_covered", "NaN"),
    ],
)
def test_conciseness_rejects_bad_inputs(relevance, covered, field: str, match: str) -> None:
    with pytest.raises(UDCGInputError, match=match) as err:
        conciseness(relevance, covered)
    assert err.value.field == field


@pytest.mark.parametrize(
    ("covered", "match"),
    [
        ([[T], [0.5]], "query 1, position 0"),
        ([[T], [-1]], "query 1"),
        (np.ones(3), "2-D"),
        ([[[T]]], "1-D"),
    ],
)
def test_completeness_rejects_bad_inputs(covered, match: str) -> None:
    with pytest.raises(UDCGInputError, match=match) as err:
        completeness(covered)
    assert err.value.field == "subquery_covered"


@pytest.mark.parametrize(
    ("support", "match"),
    [
        ([[[T]], [[T, 3]]], "query 1, claims row 0, chunks column 1"),
        ([[[T, F], [T]]], "query 0"),
        ([[T, F]], "query 0: expected"),
        (np.ones((2, 2)), "3-D"),
        (None, "list of per-query"),
    ],
)
def test_verifiableness_rejects_bad_inputs(support, match: str) -> None:
    with pytest.raises(UDCGInputError, match=match) as err:
        verifiableness(support)
    assert err.value.field == "claim_support"
