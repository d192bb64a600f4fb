"""RAG-list ranking metrics: parity with pytrec_eval, with udcg.evaluate, hand-computed cases,
properties and input errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import pytrec_eval
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from udcg import evaluate
from udcg.errors import UDCGInputError
from udcg.metrics import (
    _kernels,
    context_average_precision,
    context_ndcg,
    hits,
    precision,
    reciprocal_rank,
)

L3 = math.log2(3)
ALL = (context_ndcg, context_average_precision, reciprocal_rank, precision, hits)

# --- independent reference: pytrec_eval ------------------------------------------------------


def _random_lists(rng: np.random.Generator, n: int) -> list[list[int]]:
    lists = [
        rng.choice([0, 0, 0, 1, 2, 3], size=int(rng.integers(0, 31))).tolist() for _ in range(n)
    ]
    # always some all-zero lists (judged, nothing relevant) and some empty ones
    lists += [[0] * int(rng.integers(1, 15)) for _ in range(3)] + [[], []]
    return lists


def _as_trec(lists: list[list[int]]) -> tuple[dict, dict]:
    """Qrels judging exactly each list's passages; scores decreasing with position."""
    qrels = {f"q{i}": {f"d{j}": int(g) for j, g in enumerate(row)} for i, row in enumerate(lists)}
    run = {
        f"q{i}": {f"d{j}": float(len(row) - j) for j in range(len(row))}
        for i, row in enumerate(lists)
        if row
    }
    return {q: docs for q, docs in qrels.items() if docs}, run


@pytest.mark.parametrize("seed", range(6))
def test_rag_lists_match_pytrec_eval(seed: int) -> None:
    lists = _random_lists(np.random.default_rng(seed), 80)
    qrels, run = _as_trec(lists)
    ref = pytrec_eval.RelevanceEvaluator(
        qrels, {"ndcg", "map", "recip_rank", "P", "success"}
    ).evaluate(run)
    ours = {
        "ndcg": context_ndcg(lists),
        "map": context_average_precision(lists),
        "recip_rank": reciprocal_rank(lists),
    }
    ours |= {f"P_{k}": precision(lists, k=k) for k in (5, 10, 15, 20, 30)}
    ours |= {f"success_{k}": hits(lists, k=k) for k in (1, 5, 10)}
    nonempty = [i for i, row in enumerate(lists) if row]
    assert set(ref) == {f"q{i}" for i in nonempty}
    assert any(not any(lists[i]) for i in nonempty)  # all-zero lists are compared too
    for name, values in ours.items():
        assert values.dtype == np.float64 and values.shape == (len(lists),)
        for i in nonempty:
            assert values[i] == pytest.approx(ref[f"q{i}"][name], abs=1e-9), (name, i)
        for i, row in enumerate(lists):
            if not row:
                assert values[i] == 0.0, (name, i)


def test_empty_lists_and_empty_batch() -> None:
    for f in ALL:
        assert f([[], [], []]).tolist() == [0.0, 0.0, 0.0]
        assert f([[], [1]], k=3).tolist()[0] == 0.0
        out = f([])
        assert out.dtype == np.float64 and out.shape == (0,)
        assert f(np.zeros((2, 0))).tolist() == [0.0, 0.0]


# --- equality of entry points ----------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_evaluate_dict_path_equals_array_functions(seed: int) -> None:
    lists = _random_lists(np.random.default_rng(100 + seed), 40)
    qrels, run = _as_trec(lists)
    got = evaluate(qrels, run, ["nDCG", "AP", "RR", "P@5", "Hits@5"])
    expected = {
        "nDCG": context_ndcg(lists),
        "AP": context_average_precision(lists),
        "RR": reciprocal_rank(lists),
        "P@5": precision(lists, k=5),
        "Hits@5": hits(lists, k=5),
    }
    assert set(got) == {f"q{i}" for i, row in enumerate(lists) if row}
    for qid, values in got.items():
        i = int(qid[1:])
        for name, ref in expected.items():
            assert values[name] == pytest.approx(ref[i], rel=1e-12, abs=1e-12), (qid, name)


@given(
    st.integers(0, 6).flatmap(
        lambda k: st.lists(st.lists(st.integers(0, 3), min_size=k, max_size=k), max_size=6)
    ),
    st.integers(1, 8),
)
def test_2d_array_equals_ragged_list(rows: list[list[int]], k: int) -> None:
    arr = np.array(rows, dtype=np.float64).reshape(len(rows), -1 if rows else 0)
    for f in ALL:
        np.testing.assert_array_equal(f(arr), f(rows))
        np.testing.assert_array_equal(f(arr, k=k), f(rows, k=k))
        np.testing.assert_array_equal(f(arr.astype(np.int64)), f(rows))


@given(st.lists(st.lists(st.booleans(), max_size=12), max_size=6), st.integers(1, 8))
def test_bool_input_equals_01_floats(rows: list[list[bool]], k: int) -> None:
    floats = [[float(x) for x in row] for row in rows]
    for f in ALL:
        np.testing.assert_array_equal(f(rows), f(floats))
        np.testing.assert_array_equal(f(rows, k=k), f(floats, k=k))
    if rows and len({len(r) for r in rows}) == 1:
        arr = np.array(rows, dtype=bool)
        for f in ALL:
            np.testing.assert_array_equal(f(arr), f(arr.astype(np.float64)))


@given(
    st.integers(1, 5).flatmap(
        lambda k: st.lists(
            st.lists(st.sampled_from([0.0, -0.0, 0.5, 1.0, 2.5]), min_size=k, max_size=k),
            min_size=1,
            max_size=6,
        )
    ),
    st.sampled_from([0.5, 1, 2]),
)
def test_array_fast_paths_equal_the_ragged_path_on_fractional_and_graded_labels(
    rows: list[list[float]], level: float
) -> None:
    arr = np.array(rows)
    np.testing.assert_array_equal(context_ndcg(arr), context_ndcg(rows))
    for f in (context_average_precision, reciprocal_rank, precision, hits):
        np.testing.assert_array_equal(f(arr, rel_level=level), f(rows, rel_level=level))


@given(
    st.sampled_from([1, 3, 7, 8, 12, 40]).flatmap(
        lambda k: st.lists(
            st.lists(st.sampled_from([0, 1, 2, 3, 5, 7, 2.5]), min_size=k, max_size=k),
            min_size=1,
            max_size=8,
        )
    ),
)
def test_ideal_dcg_by_grade_counts_equals_sorting(rows: list[list[float]]) -> None:
    # widths and grades on both sides of the packed-count limit (bits * (top + 1) <= 24)
    gains = np.array(rows, dtype=np.float64)
    by_sort = _kernels.dcg(-np.sort(-gains, axis=1))
    np.testing.assert_array_equal(_kernels.ideal_dcg_of_rows(gains), by_sort)


# --- hand-computed cases ---------------------------------------------------------------------


def test_ndcg_binary_graded_and_cutoff() -> None:
    np.testing.assert_allclose(context_ndcg([[1, 0, 1]]), [(1 + 1 / 2) / (1 + 1 / L3)])
    np.testing.assert_allclose(context_ndcg([[0, 3, 2]]), [(3 / L3 + 2 / 2) / (3 + 2 / L3)])
    np.testing.assert_allclose(context_ndcg([[0.5, 1.0]]), [(0.5 + 1 / L3) / (1 + 0.5 / L3)])
    np.testing.assert_allclose(context_ndcg([[3, 2, 1, 0]]), [1.0])
    assert context_ndcg([[0, 0, 0]]).tolist() == [0.0]
    # k truncates the list; the ideal is that of the truncated list (the context the LLM sees)
    assert context_ndcg([[0, 0, 1]], k=2).tolist() == [0.0]
    np.testing.assert_allclose(context_ndcg([[1, 0, 2]], k=2), [1.0])
    np.testing.assert_allclose(context_ndcg([[0, 1, 2]], k=2), [(1 / L3) / 1])
    # k larger than the list changes nothing
    np.testing.assert_allclose(context_ndcg([[1, 0, 1]], k=10), context_ndcg([[1, 0, 1]]))
    # ragged: each row is its own ideal
    np.testing.assert_allclose(context_ndcg([[0, 1], [2], []]), [1 / L3, 1.0, 0.0])


def test_average_precision_hand_computed() -> None:
    np.testing.assert_allclose(context_average_precision([[1, 0, 1, 0]]), [(1 + 2 / 3) / 2])
    np.testing.assert_allclose(context_average_precision([[0, 2, 0, 3]]), [(1 / 2 + 2 / 4) / 2])
    # AP@k: relevant count of the truncated list
    np.testing.assert_allclose(context_average_precision([[0, 1, 0, 1]], k=2), [0.5])
    assert context_average_precision([[0, 0, 1]], k=2).tolist() == [0.0]
    np.testing.assert_allclose(context_average_precision([[0, 1]], k=10), [0.5])
    assert context_average_precision([[0, 0]]).tolist() == [0.0]


def test_reciprocal_rank_hand_computed() -> None:
    np.testing.assert_allclose(reciprocal_rank([[0, 0, 1, 1], [2], [0, 0], []]), [1 / 3, 1, 0, 0])
    assert reciprocal_rank([[0, 0, 1]], k=2).tolist() == [0.0]
    np.testing.assert_allclose(reciprocal_rank([[0, 0, 1]], k=3), [1 / 3])
    np.testing.assert_allclose(reciprocal_rank([[0, 0, 1]], k=50), [1 / 3])


def test_precision_divides_by_k_even_beyond_the_list() -> None:
    np.testing.assert_allclose(precision([[1, 0, 1]], k=2), [1 / 2])
    np.testing.assert_allclose(precision([[1, 0, 1]], k=3), [2 / 3])
    np.testing.assert_allclose(precision([[1, 0, 1]], k=5), [2 / 5])
    np.testing.assert_allclose(precision([[1, 0, 1], [1]], k=4), [2 / 4, 1 / 4])
    # without k: each list's own length
    np.testing.assert_allclose(precision([[1, 0, 1], [1], [0, 3], []]), [2 / 3, 1, 1 / 2, 0])


def test_hits_hand_computed() -> None:
    assert hits([[0, 0, 1]], k=2).tolist() == [0.0]
    assert hits([[0, 0, 1]], k=3).tolist() == [1.0]
    assert hits([[0, 0, 1]], k=10).tolist() == [1.0]
    assert hits([[0, 0, 2], [0, 0], [1]]).tolist() == [1.0, 0.0, 1.0]


def test_rel_level() -> None:
    labels = [[1, 2, 0, 3]]
    np.testing.assert_allclose(context_average_precision(labels), [(1 + 1 + 3 / 4) / 3])
    np.testing.assert_allclose(
        context_average_precision(labels, rel_level=2), [(1 / 2 + 2 / 4) / 2]
    )
    np.testing.assert_allclose(context_average_precision(labels, rel_level=3), [1 / 4])
    assert context_average_precision(labels, rel_level=4).tolist() == [0.0]
    np.testing.assert_allclose(reciprocal_rank(labels, rel_level=2), [1 / 2])
    np.testing.assert_allclose(reciprocal_rank(labels, rel_level=3), [1 / 4])
    np.testing.assert_allclose(precision(labels, k=2, rel_level=2), [1 / 2])
    np.testing.assert_allclose(precision(labels, rel_level=2), [2 / 4])
    assert hits(labels, k=1, rel_level=2).tolist() == [0.0]
    assert hits(labels, k=2, rel_level=2).tolist() == [1.0]
    # fractional labels: relevant means >= rel_level
    assert hits([[0.5, 0.99]], rel_level=1).tolist() == [0.0]
    assert hits([[0.5, 0.99]], rel_level=0.5).tolist() == [1.0]
    # nDCG is graded: rel_level does not apply, and gains below 1 still count
    assert context_ndcg([[0, 0.5]]).item() == pytest.approx(1 / L3)


@pytest.mark.parametrize("level", [0, -1, 0.0])
def test_rel_level_at_or_below_zero_counts_every_passage_never_the_padding(level) -> None:
    ragged = [[0, 1], [1], [], [0, 0, 0]]
    assert precision(ragged, rel_level=level).tolist() == [1.0, 1.0, 0.0, 1.0]
    assert reciprocal_rank(ragged, rel_level=level).tolist() == [1.0, 1.0, 0.0, 1.0]
    assert hits(ragged, rel_level=level).tolist() == [1.0, 1.0, 0.0, 1.0]
    np.testing.assert_allclose(context_average_precision(ragged, rel_level=level), [1, 1, 0, 1])
    assert precision([[True, False], [True]], rel_level=level).tolist() == [1.0, 1.0]


@pytest.mark.parametrize("level", [float("nan"), float("inf"), "1", None, True, [1]])
@pytest.mark.parametrize("f", ALL[1:], ids=lambda f: f.__name__)
def test_bad_rel_level_raises(f, level) -> None:
    with pytest.raises(UDCGInputError, match="must be a finite number") as err:
        f([[0, 1]], rel_level=level)
    assert err.value.field == "rel_level"


# --- properties ------------------------------------------------------------------------------

grades = st.integers(0, 3)
rows_st = st.lists(grades, max_size=20)
batches = st.lists(rows_st, min_size=1, max_size=6)
cutoffs = st.one_of(st.none(), st.integers(1, 25))


@given(batches, cutoffs, st.integers(1, 3))
def test_values_in_unit_interval(rows: list[list[int]], k: int | None, level: int) -> None:
    for f in ALL:
        out = f(rows, k=k) if f is context_ndcg else f(rows, k=k, rel_level=level)
        assert out.shape == (len(rows),)
        assert ((out >= 0) & (out <= 1)).all(), (f.__name__, out)


@given(st.lists(st.floats(0, 100, allow_subnormal=False), min_size=1, max_size=20))
def test_ndcg_is_one_for_a_sorted_list(gains: list[float]) -> None:
    assume(sum(gains) > 0)
    ordered = sorted(gains, reverse=True)
    assert context_ndcg([ordered]).item() == 1.0
    for k in (1, 3, 30):
        assert context_ndcg([ordered], k=k).item() == 1.0


@given(batches, st.floats(0.01, 1000), cutoffs)
def test_ndcg_invariant_to_scaling_gains(rows: list[list[int]], c: float, k: int | None) -> None:
    scaled = [[c * g for g in row] for row in rows]
    np.testing.assert_allclose(
        context_ndcg(scaled, k=k), context_ndcg(rows, k=k), rtol=1e-9, atol=1e-12
    )


@given(rows_st, st.integers(1, 25), st.randoms(use_true_random=False))
def test_precision_and_hits_invariant_to_order_within_top_k(row: list[int], k: int, rnd) -> None:
    top = row[:k]
    rnd.shuffle(top)
    permuted = top + row[k:]
    for f in (precision, hits):
        assert f([permuted], k=k).tolist() == f([row], k=k).tolist()


@given(rows_st, st.data())
def test_promoting_a_relevant_passage_does_not_hurt_ap_or_rr(row: list[int], data) -> None:
    swaps = [i for i in range(1, len(row)) if row[i] >= 1 and row[i - 1] == 0]
    assume(swaps)
    i = data.draw(st.sampled_from(swaps))
    better = list(row)
    better[i - 1], better[i] = better[i], better[i - 1]
    assert context_average_precision([better]).item() > context_average_precision([row]).item()
    assert reciprocal_rank([better]).item() >= reciprocal_rank([row]).item()


@given(rows_st, st.integers(1, 10))
def test_appending_irrelevant_passages_changes_nothing(row: list[int], extra: int) -> None:
    longer = row + [0] * extra
    for f in (context_ndcg, context_average_precision, reciprocal_rank, hits):
        assert f([longer]).item() == f([row]).item(), f.__name__


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "labels",
    [
        [[1.0, float("nan")]],
        [[0.0], [float("inf")]],
        [[float("-inf")]],
        np.array([[0.0, np.nan]]),
        np.array([[np.inf, 1.0]]),
        [[0, -1]],
        np.array([[1.0, -0.5]]),
        np.zeros((2, 3, 1)),
        np.zeros(3),
        [[[1, 0]]],
        [["a", 1]],
        [[1, None]],
        [[1, {}]],
        "abc",
        5,
    ],
    ids=lambda x: type(x).__name__,
)
@pytest.mark.parametrize("f", ALL, ids=lambda f: f.__name__)
def test_bad_labels_raise(f, labels) -> None:
    with pytest.raises(UDCGInputError):
        f(labels)


@pytest.mark.parametrize(
    "labels", [np.array([["a", "b"]]), np.array([[1, "x"]], dtype=object)], ids=["str", "object"]
)
def test_non_numeric_2d_array_raises_input_error(labels) -> None:
    with pytest.raises(UDCGInputError):
        context_ndcg(labels)


@pytest.mark.parametrize("k", [0, -1, -10, 1.5, "3"])
@pytest.mark.parametrize("f", ALL, ids=lambda f: f.__name__)
def test_bad_k_raises(f, k) -> None:
    with pytest.raises(UDCGInputError) as err:
        f([[1, 0, 1]], k=k)
    assert err.value.field == "k"


@settings(max_examples=20)
@given(st.integers(1, 5))
def test_numpy_integer_k_is_accepted(k: int) -> None:
    assert precision([[1, 0, 1]], k=np.int64(k)).tolist() == precision([[1, 0, 1]], k=k).tolist()


def test_an_ideal_graded_list_scores_at_most_one() -> None:
    # hypothesis found this: the IDCG table and the DCG sum rounded apart by one ulp
    assert context_ndcg([[3, 2, 2, 2, 2, 2]]).item() == 1.0
