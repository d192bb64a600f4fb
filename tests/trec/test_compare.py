"""udcg.compare: p-values equal scipy's (and ranx's t-test), the randomization test is exact on
small query sets, Holm's correction by hand, the paired bootstrap intervals by hand, a missing
query scores 0, and the report tables."""

from __future__ import annotations

import itertools
import json
import warnings

import numpy as np
import pytest
from scipy import stats as sps

from udcg.errors import UDCGInputError, UDCGWarning
from udcg.trec import ComparisonReport, compare
from udcg.trec.engine import evaluate
from udcg.trec.significance import (
    bootstrap_interval,
    bootstrap_test,
    holm,
    randomization_test,
    t_test,
)

MEASURES = ["nDCG@10", "AP", "RR", "P@5"]


def _case(n_queries: int, n_systems: int, seed: int = 0) -> tuple[dict, dict[str, dict]]:
    """Random qrels (every query has a relevant document) and runs with distinct scores."""
    rng = np.random.default_rng(seed)
    qrels = {}
    for q in range(n_queries):
        grades = rng.integers(0, 3, size=15)
        grades[0] = max(grades[0], 1)
        qrels[f"q{q}"] = {f"d{i}": int(g) for i, g in enumerate(grades)}
    runs = {
        f"s{s}": {
            q: {
                f"d{i}": float(rng.normal() + 0.3 * s * qrels[q].get(f"d{i}", 0)) for i in range(20)
            }
            for q in qrels
        }
        for s in range(n_systems)
    }
    return qrels, runs


def _values(qrels: dict, run: dict, measure: str) -> np.ndarray:
    """Per-query values in sorted qid order, 0 for a judged query the run misses."""
    per_query = evaluate(qrels, run, [measure])
    return np.array([per_query.get(q, {measure: 0.0})[measure] for q in sorted(qrels)])


@pytest.fixture(scope="module")
def case() -> tuple[dict, dict[str, dict]]:
    return _case(30, 3)


def test_t_test_equals_scipy_ttest_rel(case) -> None:
    qrels, runs = case
    report = compare(qrels, runs, MEASURES, test="t", correction=None)
    assert report.systems == ["s0", "s1", "s2"] and report.n_queries == 30
    assert len(report.comparisons) == 3 * len(MEASURES)
    for c in report.comparisons:
        a, b = _values(qrels, runs[c.system], c.measure), _values(qrels, runs[c.other], c.measure)
        assert c.p_value == pytest.approx(sps.ttest_rel(a, b).pvalue, abs=1e-9)
        assert c.p_corrected == c.p_value
        assert c.significant == (c.p_value <= 0.05)
        assert c.difference == pytest.approx(a.mean() - b.mean(), abs=1e-12)
        assert report.means[c.system][c.measure] == pytest.approx(a.mean(), abs=1e-12)


def test_t_test_equals_ranx(case) -> None:
    ranx = pytest.importorskip("ranx")
    qrels, runs = case
    names = {"nDCG@10": "ndcg@10", "AP": "map"}
    ours = compare(qrels, runs, list(names), test="t", correction=None)
    theirs = ranx.compare(
        ranx.Qrels(qrels),
        [ranx.Run(run, name=name) for name, run in runs.items()],
        list(names.values()),
        stat_test="student",
        max_p=0.05,
    )
    for c in ours.comparisons:
        ranx_p = theirs.comparisons[c.system, c.other][names[c.measure]]["p_value"]
        assert c.p_value == pytest.approx(ranx_p, abs=1e-9)
        assert ours.means[c.system][c.measure] == pytest.approx(
            theirs.results[c.system][names[c.measure]], abs=1e-9
        )


def test_a_missing_query_scores_zero_and_unjudged_queries_are_ignored(case) -> None:
    qrels, runs = case
    partial = {q: docs for q, docs in runs["s2"].items() if q not in ("q3", "q17")}
    partial["unjudged"] = {"d1": 1.0}
    with pytest.warns(UDCGWarning, match="'partial' ranks no document for 2 of the 30") as seen:
        report = compare(qrels, {"s0": runs["s0"], "partial": partial}, ["AP"], correction=None)
    assert len(seen) == 1  # s0 ranks every judged query
    assert report.unranked == {"s0": 0, "partial": 2} == report.to_dict()["unranked"]
    assert "does not rank score 0 (trec_eval -c): 'partial' 2." in report.legend()
    ap = _values(qrels, partial, "AP")
    assert ap[sorted(qrels).index("q3")] == 0.0
    assert report.n_queries == 30
    assert report.means["partial"]["AP"] == pytest.approx(ap.mean(), abs=1e-12)
    expected = sps.ttest_rel(ap, _values(qrels, runs["s0"], "AP")).pvalue
    assert report.comparison("partial", "s0", "AP").p_value == pytest.approx(expected, abs=1e-9)


def _exact_permutation_p(a: np.ndarray, b: np.ndarray) -> float:
    """scipy's exact paired permutation test of |mean(a - b)| (all 2^n sign flips)."""
    return sps.permutation_test(
        (a, b),
        lambda x, y, axis: np.abs(np.mean(x - y, axis=axis)),
        permutation_type="samples",
        vectorized=True,
        n_resamples=np.inf,
        alternative="greater",
    ).pvalue


def test_randomization_is_exact_for_small_query_sets() -> None:
    qrels, runs = _case(10, 3, seed=1)
    report = compare(qrels, runs, MEASURES, test="randomization", n_resamples=2**10)
    for c in report.comparisons:
        a, b = _values(qrels, runs[c.system], c.measure), _values(qrels, runs[c.other], c.measure)
        assert c.p_value == pytest.approx(_exact_permutation_p(a, b), abs=1e-12)


def test_randomization_by_hand() -> None:
    # |sum of +-1 +-1 +-1| >= 3 for 2 of the 8 sign vectors; zero differences always tie
    assert randomization_test(np.array([[1.0, 0.0]] * 3)).tolist() == [0.25, 1.0]
    # rounding: 0.1 + 0.2 - 0.3 in another order must still reach the observed sum
    assert randomization_test(np.array([0.1, 0.2, -0.3]))[0] == 1.0


def test_random_randomization_approximates_the_exact_p_and_is_seeded() -> None:
    rng = np.random.default_rng(5)
    d = rng.normal(0.3, 1.0, size=(16, 3))
    exact = randomization_test(d, n_resamples=2**16)
    sampled = randomization_test(d, n_resamples=20000, seed=7)
    assert np.abs(sampled - exact).max() < 0.015
    assert (randomization_test(d, n_resamples=20000, seed=7) == sampled).all()
    assert (randomization_test(d, n_resamples=20000, seed=8) != sampled).any()
    # a column's p does not depend on the columns beside it
    assert randomization_test(d[:, 1], n_resamples=20000, seed=7)[0] == sampled[1]


def test_bootstrap_approximates_its_exact_distribution() -> None:
    d = np.array([[0.5, 0.0], [0.2, 0.1], [-0.1, 0.3], [0.4, -0.2]])
    n = len(d)
    z = d - d.mean(axis=0)
    draws = np.array(list(itertools.product(range(n), repeat=n)))  # all n^n equally likely
    exact = (np.abs(z[draws].sum(axis=1)) >= np.abs(d.sum(axis=0)) - 1e-12).mean(axis=0)
    sampled = bootstrap_test(d, n_resamples=40000, seed=3)
    assert np.abs(sampled - exact).max() < 0.01
    assert (bootstrap_test(d, n_resamples=40000, seed=3) == sampled).all()
    # constant differences: no resample reaches them, p = 1 / (B + 1); zero differences: p = 1
    assert bootstrap_test(np.array([[0.2, 0.0]] * 5), n_resamples=99).tolist() == [0.01, 1.0]


def test_zero_differences_give_p_one_without_warnings(case) -> None:
    qrels, runs = case
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert t_test(np.zeros((4, 2))).tolist() == [1.0, 1.0]
        # one repeated non-zero difference: sd = 0, t infinite (scipy warns, gives about 0)
        assert t_test(np.array([[0.2, 0.0, 0.1]] * 5 + [[0.2, 0.0, 0.3]])).tolist()[:2] == [0, 1]
        for test in ("t", "randomization", "bootstrap"):
            report = compare(qrels, {"a": runs["s0"], "b": runs["s0"]}, ["AP"], test=test)
            assert report.comparisons[0].p_value == 1.0
            assert not report.comparisons[0].significant


def test_holm_by_hand() -> None:
    # sorted: 0.005 * 4 = 0.02, 0.01 * 3 = 0.03, 0.03 * 2 = 0.06, max(0.04 * 1, 0.06) = 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6, 0.01]) == pytest.approx([1.0, 1.0, 0.03])
    assert holm([0.02]) == pytest.approx([0.02])


def test_holm_is_applied_per_measure(case) -> None:
    qrels, runs = case
    report = compare(qrels, runs, MEASURES, test="t")
    for m in MEASURES:
        tests = [c for c in report.comparisons if c.measure == m]
        assert len(tests) == 3
        adjusted = holm([c.p_value for c in tests])
        assert [c.p_corrected for c in tests] == pytest.approx(adjusted.tolist(), abs=1e-15)
        assert [c.significant for c in tests] == [bool(p <= 0.05) for p in adjusted]


def test_baseline_tests_each_system_against_it(case) -> None:
    qrels, runs = case
    report = compare(qrels, runs, ["AP"], baseline="s1")
    assert [(c.system, c.other) for c in report.comparisons] == [("s0", "s1"), ("s2", "s1")]
    assert "with the baseline 's1'" in report.to_markdown()
    with pytest.raises(UDCGInputError, match="unknown system 'nope'; known: s0, s1, s2"):
        compare(qrels, runs, ["AP"], baseline="nope")


def _good_and_bad() -> tuple[dict, dict[str, dict]]:
    """A run that ranks the relevant documents first, one that ranks them last, one between."""
    qrels = {f"q{q}": {f"d{i}": int(i < 3) for i in range(10)} for q in range(20)}
    good = {q: {d: float(10 - i) for i, d in enumerate(docs)} for q, docs in qrels.items()}
    bad = {q: {d: float(i) for i, d in enumerate(docs)} for q, docs in qrels.items()}
    return qrels, {"bad": bad, "good_run": good, "same": good}


def test_tables_mark_the_systems_beaten() -> None:
    qrels, runs = _good_and_bad()
    report = compare(qrels, runs, ["nDCG@10", "P@5"], test="randomization", seed=3)
    assert report.beats("good_run", "nDCG@10") == ["bad"]
    assert report.beats("bad", "nDCG@10") == []
    flipped = report.comparison("bad", "good_run", "P@5")
    assert flipped.difference < 0 and flipped.significant
    markdown = report.to_markdown(digits=3)
    assert f"| a | bad | {report.means['bad']['nDCG@10']:.3f} | 0.000 |" in markdown
    # good_run gains the same on every query: a zero-width interval
    assert "| b | good_run | 1.000ᵃ (+0.575 [+0.575, +0.575], p<0.001)† | 0.600ᵃ (+0.600 " in (
        markdown
    )
    assert "| c | same | 1.000ᵃ (+0.575 [+0.575, +0.575], p<0.001)† | 0.600ᵃ " in markdown
    assert "paired randomization test, two-sided, p <= 0.05 after Holm's correction" in markdown
    assert "the difference to the first system 'bad', its 95% paired bootstrap" in markdown
    latex = report.to_latex()
    assert (
        r"b & good\_run & 1.0000$^{a}$ $(+0.5750\;[+0.5750, +0.5750],\;p<0.0001)^{\dagger}$ & "
        in latex
    )
    assert r"a & bad & 0.4" in latex and r"0.0000 \\" in latex
    assert latex.startswith(r"\begin{table}") and r"\caption{Superscripts" in latex
    for level, shown in ((0.995, "99.5%"), (0.975, "97.5%"), (0.9, "90%")):
        legend = compare(qrels, runs, ["P@5"], confidence=level, seed=3).to_markdown()
        assert f"its {shown} paired bootstrap" in legend


def test_exports(case) -> None:
    qrels, runs = case
    report = compare(qrels, runs, ["AP", "RR"], test="bootstrap", n_resamples=500, seed=1)
    data = json.loads(report.to_json())
    assert data == report.to_dict()
    assert data["test"] == "bootstrap" and data["n_resamples"] == 500 and data["seed"] == 1
    assert data["means"]["s1"]["RR"] == report.means["s1"]["RR"]
    assert len(data["comparisons"]) == 6 and set(data["comparisons"][0]) == {
        "measure",
        "system",
        "other",
        "difference",
        "ci_low",
        "ci_high",
        "p_value",
        "p_corrected",
        "significant",
    }
    pytest.importorskip("pandas")
    frame = report.to_dataframe()
    assert len(frame) == 6
    assert frame["p_value"].tolist() == [c.p_value for c in report.comparisons]
    assert frame["ci_low"].tolist() == [c.ci_low for c in report.comparisons]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"runs": {"only": {}}}, "at least 2 systems"),
        ({"test": "wilcoxon"}, "must be one of t, randomization, bootstrap"),
        ({"alpha": 1.5}, "strictly between 0 and 1"),
        ({"correction": "bonferroni"}, "must be one of holm"),
        ({"n_resamples": 0}, "positive integer"),
        ({"confidence": 1.0}, "field 'confidence': must be a number strictly between 0 and 1"),
        ({"utilities": ["u1", "u2"]}, "field 'utilities': 2 utility sources for 3 systems"),
        ({"measures": ["nDGC@10"]}, "unknown measure"),
        ({"qrels": {"q0": {"d0": 1}}}, "judge 1 query; a paired test needs at least 2"),
    ],
)
def test_user_mistakes(case, kwargs: dict, match: str) -> None:
    qrels, runs = case
    args = {"qrels": qrels, "runs": runs, "measures": ["AP"]} | kwargs
    with pytest.raises(UDCGInputError, match=match):
        compare(args.pop("qrels"), args.pop("runs"), args.pop("measures"), **args)


def test_table_edge_cases() -> None:
    qrels, runs = _good_and_bad()
    report = compare(qrels, {"bad|worse": runs["bad"], "good": runs["good_run"]}, ["P@5"])
    assert "| a | bad\\|worse | 0.0000 |" in report.to_markdown()
    assert report.comparison("good", "bad|worse", "P@5").difference == pytest.approx(0.6)
    with pytest.raises(UDCGInputError, match="no comparison of 'good' with 'good'"):
        report.comparison("good", "good", "P@5")
    with pytest.raises(UDCGInputError, match="field 'digits': must be at least 0"):
        report.to_latex(digits=-1)
    many = ComparisonReport(
        **(report.to_dict() | {"systems": [f"s{i}" for i in range(27)], "comparisons": []})
    )
    with pytest.raises(UDCGInputError, match="at most 26 systems"):
        many.to_markdown()


def test_bootstrap_interval_by_hand() -> None:
    """The percentile interval of the means of resampled queries, drawn as n indices per
    resample from the seeded generator; the same resamples for every column."""
    d = np.random.default_rng(5).normal(0.1, 1.0, size=(40, 3))
    low, high = bootstrap_interval(d, 0.9, n_resamples=2000, seed=11)
    draws = np.random.default_rng(11).integers(0, 40, size=(2000, 40))
    means = d[draws].mean(axis=1)  # [2000, 3]
    want = np.quantile(means, [0.05, 0.95], axis=0)
    assert np.abs(np.array([low, high]) - want).max() <= 1e-12
    alone = bootstrap_interval(d[:, 1], 0.9, n_resamples=2000, seed=11)
    assert np.abs(alone[:, 0] - [low[1], high[1]]).max() <= 1e-12
    assert bootstrap_interval(np.zeros((5, 1))).tolist() == [[0.0], [0.0]]


def test_intervals_in_the_report(case) -> None:
    qrels, runs = case
    report = compare(qrels, runs, MEASURES, n_resamples=3000, seed=2, confidence=0.8)
    assert report.confidence == 0.8 and report.reference == "s0"
    for c in report.comparisons:
        a, b = (_values(qrels, runs[s], c.measure) for s in (c.system, c.other))
        low, high = bootstrap_interval(a - b, 0.8, 3000, 2)[:, 0]
        assert (c.ci_low, c.ci_high) == pytest.approx((low, high), abs=1e-12)
        assert c.ci_low <= c.difference <= c.ci_high
        flipped = report.comparison(c.other, c.system, c.measure)
        assert (flipped.ci_low, flipped.ci_high) == (-c.ci_high, -c.ci_low)
    wider = compare(qrels, runs, ["AP"], n_resamples=3000, seed=2, confidence=0.99)
    narrow, wide = (r.comparison("s1", "s0", "AP") for r in (report, wider))
    assert wide.ci_low < narrow.ci_low and wide.ci_high > narrow.ci_high
