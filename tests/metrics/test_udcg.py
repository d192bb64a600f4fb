"""UDCG, its per-position terms and passage utility."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from udcg.errors import UDCGInputError
from udcg.metrics.ranking import precision
from udcg.metrics.udcg import udcg, udcg_terms, utility

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
REFERENCE = DATA / "udcg-official-sample" / "dataset_with_udcg.json"
MODEL = "meta-llama/Llama-3.2-3B-Instruct"


def scalar_udcg(rel: list[float], u: list[float], gamma: float) -> float:
    """Independent per-passage formula, written from the paper's definition."""
    if not rel:
        return 0.0
    score = 0.0
    for r, x in zip(rel, u, strict=True):
        score += r * x - gamma * (1 - r) * x
    return 1.0 / (1.0 + math.exp(-score / len(rel)))


unit = st.floats(0.0, 1.0, allow_nan=False)
passage = st.tuples(st.booleans(), unit)
ragged_lists = st.lists(st.lists(passage, max_size=8), max_size=6)
nonempty_list = st.lists(passage, min_size=1, max_size=10)
gammas = st.floats(0.0, 3.0, allow_nan=False)


def split(lists: list[list[tuple[bool, float]]]) -> tuple[list[list[bool]], list[list[float]]]:
    return [[r for r, _ in q] for q in lists], [[u for _, u in q] for q in lists]


# --- reference parity -----------------------------------------------------------------------


def test_reference_sample_parity() -> None:
    if not REFERENCE.exists():
        pytest.skip(f"reference UDCG sample not found at {REFERENCE} (shared data absent)")
    items = json.loads(REFERENCE.read_text())
    rel = [[p["is_relevant"] for p in item["passages"]] for item in items]
    prob = [[p["models_info"][MODEL]["no_res_prob"] for p in item["passages"]] for item in items]
    stored = np.array([item["udcg"][MODEL] for item in items])
    assert len(items) > 0

    got = udcg(rel, utility(abstain_prob=prob), gamma=0.333)
    np.testing.assert_allclose(got, stored, rtol=0, atol=1e-6)

    # same through log-probabilities
    logprob = [np.log(p) for p in prob]
    got_log = udcg(rel, utility(abstain_logprob=logprob), gamma=0.333)
    np.testing.assert_allclose(got_log, stored, rtol=0, atol=1e-6)

    # the check is sharp enough to see gamma = 1/3 instead of 0.333
    assert np.abs(udcg(rel, utility(abstain_prob=prob)) - stored).max() > 1e-6


@settings(max_examples=150)
@given(ragged_lists, gammas)
def test_matches_scalar_loop(lists: list[list[tuple[bool, float]]], gamma: float) -> None:
    rel, u = split(lists)
    got = udcg(rel, u, gamma=gamma)
    want = [
        scalar_udcg([float(r) for r in q_rel], q_u, gamma)
        for q_rel, q_u in zip(rel, u, strict=True)
    ]
    assert got.shape == (len(lists),)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


@given(st.lists(st.lists(st.tuples(unit, unit), max_size=6), max_size=5), gammas)
def test_graded_relevance_matches_scalar_loop(
    lists: list[list[tuple[float, float]]], gamma: float
) -> None:
    rel = [[r for r, _ in q] for q in lists]
    u = [[x for _, x in q] for q in lists]
    want = [scalar_udcg(q_rel, q_u, gamma) for q_rel, q_u in zip(rel, u, strict=True)]
    np.testing.assert_allclose(udcg(rel, u, gamma=gamma), want, rtol=0, atol=1e-12)


def test_hand_computed() -> None:
    # (1*0.9 - 0.5*0.6 + 0) / 3 = 0.2
    got = udcg([[True, False, False]], [[0.9, 0.6, 0.0]], gamma=0.5)
    assert got[0] == pytest.approx(1 / (1 + math.exp(-0.2)), abs=1e-15)
    # default gamma is 1/3: (0.6 - 0.6/3) / 2 = 0.2
    assert udcg([[1, 0]], [[0.6, 0.6]])[0] == pytest.approx(1 / (1 + math.exp(-0.2)))


def test_empty_list_is_exactly_zero() -> None:
    got = udcg([[], [True]], [[], [0.0]])
    assert got[0] == 0.0
    assert got[1] == 0.5
    assert udcg(np.zeros((2, 0)), np.zeros((2, 0))).tolist() == [0.0, 0.0]
    assert udcg([], []).shape == (0,)


# --- properties -----------------------------------------------------------------------------


@given(nonempty_list, gammas)
def test_in_open_unit_interval(lst: list[tuple[bool, float]], gamma: float) -> None:
    rel, u = split([lst])
    value = udcg(rel, u, gamma=gamma)[0]
    assert 0.0 < value < 1.0


@given(nonempty_list, gammas, st.integers(0, 9), unit)
def test_more_relevant_utility_never_lowers(
    lst: list[tuple[bool, float]], gamma: float, pos: int, bump: float
) -> None:
    rel, u = split([lst])
    i = pos % len(lst)
    rel[0][i] = True
    higher = [list(u[0])]
    higher[0][i] = min(1.0, u[0][i] + bump)
    before, after = udcg(rel, u, gamma=gamma)[0], udcg(rel, higher, gamma=gamma)[0]
    assert after >= before
    if higher[0][i] > u[0][i] + 1e-9:
        assert after > before


@given(nonempty_list, st.lists(unit, min_size=10, max_size=10))
def test_gamma_zero_ignores_distractors(lst: list[tuple[bool, float]], other: list[float]) -> None:
    rel, u = split([lst])
    changed = [[x if r else other[i] for i, (r, x) in enumerate(zip(rel[0], u[0], strict=True))]]
    base = udcg(rel, u, gamma=0.0)[0]
    assert udcg(rel, changed, gamma=0.0)[0] == pytest.approx(base, abs=1e-15)
    helpful = sum(x for r, x in zip(rel[0], u[0], strict=True) if r) / len(lst)
    assert base == pytest.approx(1 / (1 + math.exp(-helpful)), abs=1e-12)


def test_gamma_positive_penalises_distractors() -> None:
    assert udcg([[1, 0]], [[0.5, 0.9]], gamma=1.0)[0] < udcg([[1, 0]], [[0.5, 0.0]], gamma=1.0)[0]


@given(st.integers(1, 5), st.integers(0, 6), st.data())
def test_dict_2d_and_ragged_agree(n: int, k: int, data: st.DataObject) -> None:
    rel = data.draw(
        st.lists(st.lists(st.booleans(), min_size=k, max_size=k), min_size=n, max_size=n)
    )
    u = data.draw(st.lists(st.lists(unit, min_size=k, max_size=k), min_size=n, max_size=n))
    from_lists = udcg(rel, u)
    from_arrays = udcg(np.array(rel, dtype=bool).reshape(n, k), np.array(u).reshape(n, k))
    qids = [f"q{i}" for i in range(n)]
    # the utility mapping is in reverse order: values follow relevant's key order
    from_dicts = udcg(
        dict(zip(qids, rel, strict=True)), dict(zip(reversed(qids), reversed(u), strict=True))
    )
    np.testing.assert_array_equal(from_lists, from_arrays)
    np.testing.assert_array_equal(from_lists, from_dicts)


# --- udcg_terms -----------------------------------------------------------------------------


def test_terms_hand_computed_and_padded() -> None:
    helpful, distracting = udcg_terms([[1, 0, 0.25], [True]], [[0.8, 0.4, 1.0], [0.5]])
    np.testing.assert_allclose(helpful, [[0.8, 0.0, 0.25], [0.5, 0.0, 0.0]])
    np.testing.assert_allclose(distracting, [[0.0, 0.4, 0.75], [0.0, 0.0, 0.0]])


@given(ragged_lists)
def test_terms_split_utility(lists: list[list[tuple[bool, float]]]) -> None:
    rel, u = split(lists)
    helpful, distracting = udcg_terms(rel, u)
    width = max((len(q) for q in u), default=0)
    padded = np.array([q + [0.0] * (width - len(q)) for q in u]).reshape(len(u), width)
    np.testing.assert_allclose(helpful + distracting, padded, rtol=0, atol=1e-15)
    assert (helpful >= 0).all()
    assert (distracting >= 0).all()


# --- utility --------------------------------------------------------------------------------


@given(st.lists(st.lists(st.floats(1e-300, 1.0), max_size=6), max_size=5))
def test_utility_prob_and_logprob_agree(prob: list[list[float]]) -> None:
    from_prob = utility(abstain_prob=prob)
    from_log = utility(abstain_logprob=[[math.log(p) for p in q] for q in prob])
    assert isinstance(from_prob, list)
    assert len(from_prob) == len(from_log) == len(prob)
    for a, b, q in zip(from_prob, from_log, prob, strict=True):
        assert a.shape == b.shape == (len(q),)
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


def test_utility_structures() -> None:
    arr = utility(abstain_prob=np.array([[0.0, 0.25], [1.0, 0.5]]))
    assert isinstance(arr, np.ndarray)
    np.testing.assert_array_equal(arr, [[1.0, 0.75], [0.0, 0.5]])
    ragged = utility(abstain_prob=[[0.25], [], [0.5, 1.0]])
    assert [r.tolist() for r in ragged] == [[0.75], [], [0.5, 0.0]]
    mapped = utility(abstain_logprob={"a": [0.0], "b": [math.log(0.5), -1e-20]})
    assert list(mapped) == ["a", "b"]
    assert mapped["a"].tolist() == [0.0]
    np.testing.assert_allclose(mapped["b"], [0.5, 1e-20], rtol=1e-12)


def test_utility_from_tiny_logprob_keeps_precision() -> None:
    # 1 - exp(-1e-20) is 0 in float64; -expm1 keeps it
    assert utility(abstain_logprob=[[-1e-20]])[0][0] == pytest.approx(1e-20, rel=1e-12)


# --- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"abstain_prob": [[0.5]], "abstain_logprob": [[-1.0]]}],
    ids=["neither", "both"],
)
def test_utility_needs_exactly_one_input(kwargs: dict) -> None:
    with pytest.raises(UDCGInputError, match="exactly one"):
        utility(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"abstain_prob": [[0.5, 1.5]]}, "abstain_prob"),
        ({"abstain_prob": [[-0.1]]}, "abstain_prob"),
        ({"abstain_prob": [[float("nan")]]}, "abstain_prob"),
        ({"abstain_prob": np.array([[np.inf]])}, "abstain_prob"),
        ({"abstain_prob": np.array([0.5])}, "abstain_prob"),
        ({"abstain_prob": [["x"]]}, "abstain_prob"),
        ({"abstain_logprob": [[-0.5], [0.1]]}, "abstain_logprob"),
        ({"abstain_logprob": [[-np.inf]]}, "abstain_logprob"),
        ({"abstain_logprob": [[float("nan")]]}, "abstain_logprob"),
    ],
)
def test_utility_rejects_bad_values(kwargs: dict, field: str) -> None:
    with pytest.raises(UDCGInputError) as err:
        utility(**kwargs)
    assert err.value.field == field


@pytest.mark.parametrize(
    ("relevant", "util", "field", "match"),
    [
        ([[1, 0]], [[0.5]], "utility", "row 0"),
        ([[1], [0]], [[0.5]], "utility", "2 queries"),
        (np.ones((2, 3)), np.ones((2, 2)), "utility", "passages"),
        ([[1, 2]], [[0.5, 0.5]], "relevant", "outside"),
        ([[-1]], [[0.5]], "relevant", "outside"),
        ([[1]], [[1.5]], "utility", "outside"),
        ([[1]], [[-0.5]], "utility", "outside"),
        ([[1]], [[float("nan")]], "utility", "NaN"),
        ([[float("nan")]], [[0.5]], "relevant", "NaN"),
        (np.ones(3), np.ones(3), "relevant", "2-D"),
        ({"a": [1]}, [[0.5]], "utility", "both be mappings"),
        ([[1]], {"a": [0.5]}, "relevant", "both be mappings"),
        ({"a": [1]}, {"b": [0.5]}, "utility", "'a'"),
        ({"a": [1]}, {"a": [0.5], "b": [0.5]}, "utility", "'b'"),
    ],
)
def test_udcg_rejects_bad_inputs(relevant, util, field: str, match: str) -> None:
    with pytest.raises(UDCGInputError, match=match) as err:
        udcg(relevant, util)
    assert err.value.field == field
    with pytest.raises(UDCGInputError):
        udcg_terms(relevant, util)


def test_dataframes_count_as_their_rows() -> None:
    pd = pytest.importorskip("pandas")
    rel, u = [[1, 0, 1], [0, 0, 1]], [[0.5, 0.2, 0.9], [0.1, 0.4, 0.3]]
    columns = ["p1", "p2", "p3"]
    frames = pd.DataFrame(rel, columns=columns), pd.DataFrame(u, columns=columns)
    np.testing.assert_array_equal(udcg(*frames), udcg(rel, u))
    np.testing.assert_array_equal(utility(abstain_prob=frames[1]), 1 - np.array(u))
    assert precision(frames[0]).tolist() == precision(rel).tolist()
    assert precision(pd.Series([[0, 1], [1]])).tolist() == [0.5, 1.0]  # a Series of lists


@pytest.mark.parametrize("gamma", [-0.1, float("nan"), float("inf"), "0.3", None, True])
def test_udcg_rejects_bad_gamma(gamma) -> None:
    with pytest.raises(UDCGInputError) as err:
        udcg([[1]], [[0.5]], gamma=gamma)
    assert err.value.field == "gamma"


def test_udcg_accepts_numpy_gamma() -> None:
    a = udcg([[1, 0]], [[0.5, 0.5]], gamma=np.float32(0.5))
    b = udcg([[1, 0]], [[0.5, 0.5]], gamma=0.5)
    np.testing.assert_allclose(a, b)
    assert udcg([[0]], [[1.0]], gamma=2)[0] == pytest.approx(1 / (1 + math.exp(2)))


def test_array_fast_path_agrees_with_the_general_path_and_still_rejects_bad_values() -> None:
    from udcg.metrics._arrays import in_unit_interval

    rng = np.random.default_rng(5)
    rel = rng.random((50, 4)) < 0.4
    u = rng.random((50, 4))
    by_rows = udcg([list(r) for r in rel], [list(x) for x in u])  # ragged-list path
    np.testing.assert_array_equal(udcg(rel, u), by_rows)
    np.testing.assert_array_equal(udcg(rel.astype(float), u), by_rows)
    assert in_unit_interval(np.array([0.0, 1.0, 0.5]))
    for bad in (-0.0, -1e-300, 1.0 + 1e-16 * 3, math.nan, math.inf):
        assert not in_unit_interval(np.array([0.5, bad]))
    assert in_unit_interval(u[:, ::2])  # strided views are read in place
    assert not in_unit_interval(u.astype(np.float32))  # other dtypes: the caller's full check
    signed_zero = u.copy()
    signed_zero[0, 0] = -0.0  # valid, taken by the full check
    assert udcg(rel, signed_zero)[0] == pytest.approx(udcg(rel, np.abs(signed_zero))[0])
    for value, message in ((math.nan, "NaN or infinite"), (1.5, "outside")):
        broken = u.copy()
        broken[3, 2] = value
        with pytest.raises(UDCGInputError, match=message):
            udcg(rel, broken)


def test_masked_entries_are_refused_and_an_unmasked_array_scores_as_its_data() -> None:
    """A mask hides values the metrics would read as they are (a masked position used to add
    to the sum whatever it held): refused, naming the input; without masked entries, the
    values of the data."""
    from udcg import metrics
    from udcg.metrics.coverage import coverage_gain

    rel = np.ma.array([[1.0, 0.0, 1.0]], mask=[[False, False, True]])
    u = np.ma.array([[0.5, 0.2, np.nan]], mask=[[False, False, True]])
    with pytest.raises(UDCGInputError, match=r"field 'relevant': a masked array with 1 masked"):
        metrics.udcg(rel, u)
    with pytest.raises(UDCGInputError, match="masked array"):
        metrics.context_ndcg(np.ma.array([[0.0, 3.0, 1.0]], mask=[[False, True, False]]))
    with pytest.raises(UDCGInputError, match="masked array"):
        coverage_gain(np.ma.array([0.5, 0.2], mask=[False, True]))
    plain = np.array([[1.0, 0.0, 1.0]]), np.array([[0.5, 0.2, 0.9]])
    whole = np.ma.array(plain[0]), np.ma.array(plain[1])
    assert metrics.udcg(*whole).tolist() == metrics.udcg(*plain).tolist()


@pytest.mark.parametrize("bad", [[np.nan, 0.5], [5.0], [-1.0], [np.inf]])
def test_coverage_gain_refuses_values_outside_the_unit_interval(bad: list[float]) -> None:
    from udcg.metrics.coverage import coverage_gain

    with pytest.raises(UDCGInputError, match="field 'coverage_values'"):
        coverage_gain(bad, "exponential")
