"""A score depends on its own list only: bit for bit the same alone, in any batch, in any input
form, and exactly 1.0 for a list in its ideal order (``==`` on floats, never isclose).

Random runs come from seeded numpy over several shapes: list lengths on both sides of numpy's
pairwise-summation blocks (8, 128) and of the codebook and table widths (16, 255), tied scores,
graded and negative relevance, queries the qrels do not judge and judged queries the run does
not retrieve for.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import udcg
from udcg.io.weights.files import ThetaWeights
from udcg.metrics import (
    context_average_precision,
    context_ndcg,
    hits,
    precision,
    reciprocal_rank,
)
from udcg.metrics import udcg as udcg_score
from udcg.qcare.coverage import c_ndcg, c_precision, coverage
from udcg.qcare.generator import completeness, conciseness, verifiableness

#: every measure udcg.evaluate supports, at several cutoffs and levels
TREC_MEASURES = [
    "nDCG",
    "nDCG@1",
    "nDCG@3",
    "nDCG@10",
    "nDCG@20",
    "AP",
    "AP@5",
    "AP(rel=2)",
    "RR",
    "RR@3",
    "RR(rel=2)",
    "P@1",
    "P@5",
    "P@10",
    "P(rel=2)@5",
    "R",
    "R@10",
    "R(rel=3)@20",
    "Hits@1",
    "Hits@5",
    "Hits(rel=2)@10",
    "HitCount@5",
    "HitCount@20",
    "UDCG@1",
    "UDCG@3",
    "UDCG@10",
    "UDCG(gamma=0.5)@5",
    "UDCG(gamma=0)@20",
    "UDCG(rel=2)@5",
    "UDCGtheta@3",
    "UDCGtheta@10",
]
THETA_KS = (3, 10)

#: (queries, longest list, grades): short lists, the 8-wide and 16-wide edges, long lists
SHAPES = [(60, 6, 1), (60, 12, 3), (50, 20, 2), (40, 40, 4), (20, 140, 3), (8, 300, 1)]


def _random_case(
    rng: np.random.Generator, n_queries: int, longest: int, top: int, shortest: int = 0
) -> tuple[dict, dict, dict]:
    """``(qrels, run, abstain_probs)``: some run queries unjudged, some judged queries
    unretrieved, tied scores, grades -1..top, judged documents the run misses."""
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    probs: dict[str, dict[str, float]] = {}
    for i in range(n_queries):
        qid = f"q{i}"
        n = int(rng.integers(shortest, longest + 1))
        docs = [f"d{j}" for j in rng.permutation(n + 5)[:n]]
        if n:
            scores = rng.integers(0, max(2, n // 2), size=n).astype(float)  # many ties
            if rng.random() < 0.5:
                scores += rng.random(n).round(2)
            run[qid] = dict(zip(docs, scores.tolist(), strict=True))
            probs[qid] = {d: float(rng.choice([0.0, 1.0, rng.random()])) for d in docs}
        if rng.random() < 0.85:  # judged; the others are left out of the qrels
            pool = docs + [f"x{j}" for j in range(int(rng.integers(0, 6)))]
            judged = [d for d in pool if rng.random() < 0.8] or pool[:1] or ["x"]
            qrels[qid] = {d: int(rng.integers(-1, top + 1)) for d in judged}
    qrels["judged-only"] = {"a": 1, "b": 2}
    return qrels, run, probs


def _theta_weights() -> list[ThetaWeights]:
    rng = np.random.default_rng(7)
    return [
        ThetaWeights(rng.normal(size=k), rng.normal(size=k), float(rng.normal()), True)
        for k in THETA_KS
    ]


def _evaluate(qrels: dict, run: dict, probs: dict, measures: list[str]) -> dict:
    return udcg.evaluate(
        qrels,
        run,
        measures,
        utilities=probs,
        utility_field="abstain_prob",
        weights=_theta_weights(),
    )


def _measures_for(shortest: int) -> list[str]:
    """UDCGtheta@k needs k ranked documents for every scored query."""
    if shortest >= max(THETA_KS):
        return TREC_MEASURES
    return [m for m in TREC_MEASURES if not m.startswith("UDCGtheta")]


def _same_bits(got: dict, want: dict) -> None:
    for qid, values in got.items():
        for name, value in values.items():
            assert value == want[qid][name], (qid, name, value, want[qid][name])


@pytest.mark.parametrize("shortest", [0, 10])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_each_query_alone_equals_the_batch_bit_for_bit(shape: tuple, shortest: int) -> None:
    n_queries, longest, top = shape
    rng = np.random.default_rng(n_queries * 1000 + longest + shortest)
    qrels, run, probs = _random_case(rng, n_queries, max(longest, shortest), top, shortest)
    measures = _measures_for(shortest)
    batch = _evaluate(qrels, run, probs, measures)
    assert set(batch) == {q for q in run if q in qrels}
    for qid in batch:
        alone = _evaluate({qid: qrels[qid]}, {qid: run[qid]}, probs, measures)
        _same_bits(alone, batch)
        # the other queries' qrels do not count either
        _same_bits(_evaluate(qrels, {qid: run[qid]}, probs, measures), batch)
    # any sub-batch, in any order (query codes follow the dict order)
    for _ in range(3):
        chosen = rng.permutation(list(run))[: int(rng.integers(1, len(run) + 1))]
        _same_bits(_evaluate(qrels, {q: run[q] for q in chosen}, probs, measures), batch)


def test_run_and_qrels_files_give_the_bits_of_dicts(tmp_path: Path) -> None:
    qrels, run, _ = _random_case(np.random.default_rng(11), 80, 40, 3)
    measures = [m for m in TREC_MEASURES if not m.startswith("UDCG")]
    qrels_path, run_path = tmp_path / "qrels", tmp_path / "run"
    qrels_path.write_text(
        "".join(f"{q} 0 {d} {g}\n" for q, docs in qrels.items() for d, g in docs.items())
    )
    lines = []
    for q in sorted(run, reverse=True):  # not the order of the dicts
        ranked = sorted(run[q].items(), key=lambda item: (-item[1], item[0]))
        lines += [f"{q} Q0 {d} {r} {s!r} t\n" for r, (d, s) in enumerate(ranked, 1)]
    run_path.write_text("".join(lines))
    _same_bits(udcg.evaluate(qrels_path, run_path, measures), udcg.evaluate(qrels, run, measures))


@pytest.mark.parametrize("top", [1, 2, 3, 7])
def test_a_run_in_ideal_order_scores_exactly_one(top: int) -> None:
    rng = np.random.default_rng(top)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for i in range(300):
        n = int(rng.integers(1, 60))
        grades = rng.integers(0, top + 1, size=n)
        grades[0] = max(grades[0], 1)
        qrels[f"q{i}"] = {f"d{j}": int(g) for j, g in enumerate(grades)}
        order = np.argsort(-grades, kind="stable")
        run[f"q{i}"] = {f"d{j}": float(n - r) for r, j in enumerate(order)}
    names = ["nDCG", "nDCG@1", "nDCG@3", "nDCG@5", "nDCG@10", "nDCG@20", "nDCG@100"]
    got = udcg.evaluate(qrels, run, names)
    assert {v for values in got.values() for v in values.values()} == {1.0}


# --- the RAG-list array path -----------------------------------------------------------------

WIDTHS = [1, 3, 7, 8, 9, 15, 16, 17, 31, 127, 128, 129, 255, 256, 300]


def _lists(rng: np.random.Generator, n: int, longest: int, top: int) -> list[list[float]]:
    return [
        rng.integers(0, top + 1, size=int(rng.integers(0, longest + 1))).astype(float).tolist()
        for _ in range(n)
    ]


def _scorers(k: int | None) -> dict[str, object]:
    """Each array metric of graded labels as ``f(lists)`` -> one value per list."""

    def with_utility(gamma: float):
        def score(rows: list) -> np.ndarray:
            rel = [[min(g, 1.0) for g in row] for row in rows]
            u = [[(0.6180339887 * i + 0.1 * g) % 1.0 for i, g in enumerate(row)] for row in rows]
            return udcg_score(rel, u, gamma)

        return score

    def coverage_scores(f):
        def score(rows: list) -> np.ndarray:
            top = max((max(row, default=0) for row in rows), default=0) or 1
            return f([[g / top for g in row] for row in rows], k)

        return score

    return {
        "context_ndcg": lambda rows: context_ndcg(rows, k=k),
        "context_ap": lambda rows: context_average_precision(rows, k=k),
        "context_ap_rel2": lambda rows: context_average_precision(rows, k=k, rel_level=2),
        "rr": lambda rows: reciprocal_rank(rows, k=k),
        "precision": lambda rows: precision(rows, k=k),
        "hits": lambda rows: hits(rows, k=k),
        "udcg": with_utility(1 / 3),
        "udcg_gamma": with_utility(0.7),
        "c_precision": coverage_scores(c_precision),
        "c_ndcg": coverage_scores(c_ndcg),
    }


@pytest.mark.parametrize("k", [None, 1, 5, 10, 20])
@pytest.mark.parametrize("top", [1, 3])
def test_array_metrics_alone_equal_the_batch_bit_for_bit(k: int | None, top: int) -> None:
    rng = np.random.default_rng(top * 100 + (k or 0))
    for width in WIDTHS:
        rows = _lists(rng, 12, width, top)
        # the same top gain in every scorer's batch and alone: C-Prec normalises by it
        rows.append([float(top)])
        for name, f in _scorers(k).items():
            batch = f(rows)
            for i, row in enumerate(rows[:-1]):
                alone = f([row, [float(top)]])[0]
                assert alone == batch[i], (name, width, row, alone, batch[i])


@pytest.mark.parametrize("top", [1, 3])
def test_2d_arrays_equal_ragged_lists_bit_for_bit(top: int) -> None:
    rng = np.random.default_rng(top)
    for width in WIDTHS:
        dense = rng.integers(0, top + 1, size=(9, width)).astype(float)
        ragged = [row.tolist() for row in dense] + [[1.0] * (width + 5)]  # wider padding
        u = rng.random((9, width))
        u_ragged = [row.tolist() for row in u] + [[0.5] * (width + 5)]
        rel = np.minimum(dense, 1.0)
        for k in (None, 1, 4, 10):
            for f in (context_ndcg, context_average_precision, reciprocal_rank, precision, hits):
                assert (f(dense, k=k) == f(ragged, k=k)[:9]).all(), (f.__name__, width, k)
                assert (f(dense.astype(np.int64), k=k) == f(dense, k=k)).all()
            r = dense / top
            r_ragged = [row.tolist() for row in r] + [[1.0] * (width + 5)]
            for f in (c_ndcg, c_precision):
                assert (f(r, k=k) == f(r_ragged, k=k)[:9]).all(), (f.__name__, width, k)
        rel_ragged = [row.tolist() for row in rel] + [[1.0] * (width + 5)]
        for gamma in (0.0, 1 / 3, 2.0):
            dense_scores = udcg_score(rel, u, gamma)
            assert (dense_scores == udcg_score(rel_ragged, u_ragged, gamma)[:9]).all()
            assert (dense_scores == udcg_score(rel.astype(bool), u, gamma)).all()
            for i in range(9):
                assert udcg_score(rel[i : i + 1], u[i : i + 1], gamma)[0] == dense_scores[i]


@pytest.mark.parametrize("width", WIDTHS)
def test_ideal_lists_score_exactly_one_in_any_batch(width: int) -> None:
    rng = np.random.default_rng(width)
    for top in (1, 2, 3, 10):
        rows = [sorted(r, reverse=True) for r in _lists(rng, 20, width, top) if any(r)]
        rows += [[float(top)] + [1.0] * (width - 1)]
        for k in (None, 1, 3, 10):
            assert set(context_ndcg(rows, k=k).tolist()) == {1.0}, (top, k)
            ideal = np.array(sorted(rng.integers(0, top + 1, size=width), reverse=True))
            if ideal.any():
                assert context_ndcg(ideal[None, :], k=k)[0] == 1.0
        graded = [[g / top for g in row] for row in rows]
        assert set(c_ndcg(graded).tolist()) == {1.0}


def test_generator_and_coverage_values_depend_on_their_own_query() -> None:
    rng = np.random.default_rng(5)
    covers, claims, support, covered = [], [], [], []
    for _ in range(40):
        k, s, f = (int(x) for x in rng.integers(0, 12, size=3))
        covers.append(rng.random((k, s)) < 0.3)
        covered.append((rng.random(s) < 0.5).tolist())
        claims.append((rng.random((f, s)) < 0.4).tolist() if s else [[] for _ in range(f)])
        support.append((rng.random((f, k)) < 0.4).tolist())
    covers = [c.tolist() for c in covers]
    r = coverage(covers)
    values = {
        "completeness": completeness(covered),
        "conciseness": conciseness(claims, covered),
        "verifiableness": verifiableness(support),
        "c_precision": c_precision(r),
        "c_ndcg": c_ndcg(r),
    }
    for i in range(len(covers)):
        r_alone = coverage([covers[i]])
        assert np.array_equal(r_alone[0], r[i])
        alone = {
            "completeness": completeness([covered[i]]),
            "conciseness": conciseness([claims[i]], [covered[i]]),
            "verifiableness": verifiableness([support[i]]),
            "c_precision": c_precision(r_alone),
            "c_ndcg": c_ndcg(r_alone),
        }
        for name, got in alone.items():
            want = values[name][i]
            if np.ma.is_masked(want):
                assert np.ma.is_masked(got[0]), (name, i)
            else:
                assert got[0] == want, (name, i, got[0], want)


def test_property_tests_draw_the_same_examples_on_every_run() -> None:
    """tests/conftest.py loads a profile that derives examples from each test, keeps no
    database, checks no timing and prints a failing example's reproduce blob."""
    from hypothesis import HealthCheck, settings

    if os.environ.get("HYPOTHESIS_PROFILE", "repeatable") != "repeatable":
        pytest.skip("another hypothesis profile was asked for")
    profile = settings.default
    assert profile.derandomize and profile.database is None and profile.deadline is None
    assert profile.print_blob and HealthCheck.too_slow in profile.suppress_health_check


@pytest.mark.parametrize("k", [1, 3, 5, 10, 17])
def test_udcg_theta_of_a_context_alone_equals_the_batch_bit_for_bit(k: int) -> None:
    from udcg.theta import UDCGTheta

    rng = np.random.default_rng(k)
    model = UDCGTheta(k)
    model.alpha_, model.beta_, model.intercept_ = rng.normal(size=k), rng.normal(size=k), 0.3
    rel, u = rng.random((101, k)) < 0.5, rng.random((101, k))
    batch = model.predict_proba(rel, u)
    for i in range(len(rel)):
        assert model.predict_proba(rel[i : i + 1], u[i : i + 1])[0] == batch[i]
        assert model.predict_proba(rel[i : i + 1].tolist(), u[i : i + 1].tolist())[0] == batch[i]
