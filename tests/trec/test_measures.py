"""Measure names: pytrec_eval's names as aliases (equal values), HitCount against ranx's hits,
the refused ranx spelling ``hits@k``, and the UDCG measures' parameters."""

from __future__ import annotations

import numpy as np
import pytest
import pytrec_eval

from udcg import evaluate
from udcg.errors import UDCGInputError
from udcg.trec.measures import Measure, parse_measure, parse_measures

#: pytrec_eval name -> our canonical name
PYTREC = {
    "ndcg_cut_10": "nDCG@10",
    "ndcg": "nDCG",
    "map": "AP",
    "map_cut_100": "AP@100",
    "recip_rank": "RR",
    "P_10": "P@10",
    "recall_100": "R@100",
    "success_10": "Hits@10",
}


def _case(seed: int) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for q in range(50):
        docs = [f"d{i}" for i in rng.choice(150, size=int(rng.integers(1, 120)), replace=False)]
        run[f"q{q}"] = {d: float(rng.integers(0, 5)) for d in docs}  # ties
        judged = rng.choice(docs, size=int(rng.integers(1, 30)))
        qrels[f"q{q}"] = {str(d): int(rng.choice([0, 1, 2])) for d in judged}
    return qrels, run


@pytest.mark.parametrize(("alias", "canonical"), PYTREC.items())
def test_pytrec_eval_names_are_aliases(alias: str, canonical: str) -> None:
    assert str(parse_measure(alias)) == canonical
    assert parse_measure(alias) == parse_measure(canonical)


def test_pytrec_eval_names_give_pytrec_eval_values() -> None:
    qrels, run = _case(0)
    ours = evaluate(qrels, run, list(PYTREC))
    ref = pytrec_eval.RelevanceEvaluator(qrels, set(PYTREC)).evaluate(run)
    for qid, values in ref.items():
        for alias, canonical in PYTREC.items():
            assert ours[qid][canonical] == pytest.approx(values[alias], abs=1e-12), (qid, alias)


def test_hit_count_is_the_number_of_relevant_documents_in_the_top_k() -> None:
    qrels = {"q": {"a": 1, "b": 2, "c": 0, "e": 1}}
    run = {"q": {"a": 5.0, "b": 4.0, "c": 3.0, "d": 2.0, "e": 1.0}}
    got = evaluate(qrels, run, ["HitCount@2", "HitCount@4", "HitCount", "HitCount(rel=2)@5"])
    assert got == {
        "q": {"HitCount@2": 2.0, "HitCount@4": 2.0, "HitCount": 3.0, "HitCount(rel=2)@5": 1.0}
    }


def test_hit_count_equals_ranx_hits_without_ties() -> None:
    ranx = pytest.importorskip("ranx")
    qrels, run = _case(1)
    rng = np.random.default_rng(2)
    run = {q: {d: s + rng.random() * 1e-3 for d, s in docs.items()} for q, docs in run.items()}
    ours = evaluate(qrels, run, ["HitCount@10", "Hits@10"])
    judged = ranx.Qrels(qrels)
    theirs = ranx.evaluate(judged, ranx.Run(run), ["hits@10", "hit_rate@10"], return_mean=False)
    qids = list(judged.get_query_ids())  # ranx's order
    np.testing.assert_allclose([ours[q]["HitCount@10"] for q in qids], theirs["hits@10"])
    np.testing.assert_allclose([ours[q]["Hits@10"] for q in qids], theirs["hit_rate@10"])
    assert parse_measure("hit_rate@10") == parse_measure("Hits@10")


@pytest.mark.parametrize("name", ["hits@10", "hits"])
def test_ranx_hits_spelling_is_refused_naming_both_measures(name: str) -> None:
    with pytest.raises(UDCGInputError) as err:
        parse_measure(name)
    message = str(err.value)
    assert "HitCount@" in message and "Hits@" in message and len(message.splitlines()) == 1
    assert parse_measure("Hits@10") == parse_measure("HITS@10") == parse_measure("success@10")


def test_udcg_measure_parameters() -> None:
    m = parse_measure("UDCG(gamma=0.5)@5")
    assert (m.name, m.cutoff, m.gamma, str(m)) == ("UDCG", 5, 0.5, "UDCG(gamma=0.5)@5")
    assert parse_measure("UDCG@5").gamma == pytest.approx(1 / 3)
    assert parse_measure("UDCG@5") == Measure("UDCG", 5) == parse_measure(str(Measure("UDCG", 5)))
    assert str(parse_measure("UDCG(rel=2, gamma=0)@3")) == "UDCG(rel=2,gamma=0.0)@3"
    assert parse_measure("UDCG-theta@5") == parse_measure("UDCGtheta@5") == Measure("UDCGtheta", 5)
    assert parse_measures(["UDCG@5", "udcg@5", "UDCG(gamma=0.3333333333333333)@5"]) == [
        Measure("UDCG", 5)
    ]


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("UDCG", "UDCG needs a cutoff"),
        ("UDCGtheta", "UDCGtheta needs a cutoff"),
        ("UDCG(gamma=-1)@5", "gamma must be a finite number >= 0"),
        ("UDCG(gamma=nan)@5", "gamma must be a finite number >= 0"),
        ("UDCG(gamma=1,gamma=2)@5", "gamma is given twice"),
        ("UDCGtheta(gamma=1)@5", "UDCGtheta accepts rel"),
        ("nDCG(gamma=1)@5", "nDCG takes none"),
        ("UDCG@0", "the cutoff must be at least 1"),
        ("ndcg_cut_0", "the cutoff must be at least 1"),  # was nDCG@0 = 0
        ("ndcg_cut", "unknown measure"),
    ],
)
def test_bad_measures(name: str, fragment: str) -> None:
    with pytest.raises(UDCGInputError, match="measures") as err:
        parse_measure(name)
    assert fragment in str(err.value)
