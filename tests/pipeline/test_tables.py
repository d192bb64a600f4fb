"""UDCG's Table 1 and Table 2 as analyses: weak vs hard distractors, top-k selection by
relevance, utility or eRAG, and the per-condition comparison with bootstrap intervals."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, Passage
from udcg.judge.base import Judge
from udcg.pipeline.datasets import Dataset
from udcg.pipeline.paper_tables import (
    compare_conditions,
    distractor_study,
    markdown,
    select_contexts,
    selection_study,
)
from udcg.pipeline.settings import EvaluateSettings
from udcg.pipeline.stages import StageCache
from udcg.retrieval import BM25Retriever, Distractors, GoldAt, Query

WORDS = ["river", "castle", "violin", "harbour", "glacier", "orchard", "lantern", "meadow"]


def _dataset(n_queries: int = 6) -> Dataset:
    """Question i asks for 'answer i'; its gold passage holds it; other passages share the
    question's words (hard distractors) or not (weak ones)."""
    corpus, queries = [], []
    for i in range(n_queries):
        topic = f"{WORDS[i % len(WORDS)]} {WORDS[(i + 3) % len(WORDS)]}"
        gold = len(corpus)
        corpus.append(Passage(f"g{i}", text=f"The {topic} story ends with answer{i}."))
        for j in range(3):
            corpus.append(Passage(f"h{i}-{j}", text=f"The {topic} story, part {j}, says nothing."))
        queries.append(
            Query(f"q{i}", f"Which {topic} story?", [f"answer{i}"], relevant=frozenset({gold}))
        )
    for j in range(12):
        corpus.append(Passage(f"w{j}", text=f"Unrelated filler text number {j}."))
    return Dataset("toy", queries, corpus)


class ToyJudge(Judge):
    """Answers with the answer token of its first document that holds one (another question's
    gold passage misleads it), else NO-RESPONSE; P(abstain) 0.1 for a passage on the
    question's topic with an answer token, 0.6 for one on the topic without, 0.9 otherwise."""

    name = fingerprint = "toy"

    def __init__(self) -> None:
        self.calls = 0

    def abstain_prob(self, questions, passages, mode="first_token") -> np.ndarray:
        self.calls += len(passages)
        topics = [q.removeprefix("Which ").removesuffix(" story?") for q in questions]
        return np.array(
            [
                (0.1 if "answer" in p else 0.6) if t in p else 0.9
                for t, p in zip(topics, passages, strict=True)
            ]
        )

    def generate(self, prompts: Sequence, max_new_tokens: int = 64) -> list[str]:
        self.calls += len(prompts)
        out = []
        for m in prompts:
            words = [w.strip(".,") for w in m[-1]["content"].split()]
            found = [w for w in words if w.startswith("answer")]
            out.append(found[0] if found else "NO-RESPONSE")
        return out


def test_weak_and_hard_distractors_hold_the_same_gold_passage_at_the_same_place() -> None:
    data = _dataset()
    hard = Distractors(BM25Retriever(), "hard").retrieve(data.queries, data.corpus, 4)
    weak = Distractors(BM25Retriever(), "weak", seed=3).retrieve(data.queries, data.corpus, 4)
    again = Distractors(BM25Retriever(), "weak", seed=3).retrieve(data.queries, data.corpus, 4)
    gold_at = GoldAt(BM25Retriever()).retrieve(data.queries, data.corpus, 4)
    for i, (q, h, w) in enumerate(zip(data.queries, hard, weak, strict=True)):
        position = i % 4  # cycles 1..k
        (gold,) = q.relevant
        assert h.indices[position] == w.indices[position] == gold
        assert np.array_equal(h.indices, gold_at[i].indices)
        others = [int(x) for j, x in enumerate(w.indices) if j != position]
        assert len(set(others)) == 3 and not set(others) & q.relevant
        # hard: the topic's own passages; weak: drawn from the whole corpus
        assert all(
            data.corpus[int(x)].doc_id.startswith("h") for x in np.delete(h.indices, position)
        )
    assert all(np.array_equal(a.indices, b.indices) for a, b in zip(weak, again, strict=True))
    with pytest.raises(UDCGInputError, match=r"field 'retriever\.kind'"):
        Distractors(BM25Retriever(), "medium")
    crowded = [Query("qx", "Which river story?", relevant=frozenset({0, 1}))]
    with pytest.raises(UDCGInputError, match="fewer than k - 1 = 2"):
        Distractors(BM25Retriever(), "weak").retrieve(crowded, data.corpus[:3], 3)


def _pool() -> list[Context]:
    labels = [  # (relevant, P(abstain), eRAG label) of candidates 0..4, in retriever order
        (False, 0.2, 0),
        (True, 0.5, 1),
        (False, 0.1, 1),
        (True, 0.9, 0),
        (False, 0.2, 0),
    ]
    passages = [
        Passage(f"d{i}", relevant=r, abstain_prob={"m": a}, extra={"erag": {"m": e}})
        for i, (r, a, e) in enumerate(labels)
    ]
    return [Context("q1", passages, outcomes={"m": {"correct": True}})]


@pytest.mark.parametrize(
    ("by", "expected"),
    [
        ("relevance", ["d1", "d3", "d0"]),  # relevant first, ties in retriever order
        ("utility", ["d2", "d0", "d4"]),  # u = 0.9, 0.8, 0.8: d0 before d4
        ("erag", ["d1", "d2", "d0"]),
    ],
)
def test_select_top_k_by_each_label(by: str, expected: list[str]) -> None:
    (chosen,) = select_contexts(_pool(), by, 3, "m")
    assert [p.doc_id for p in chosen.passages] == expected
    assert chosen.outcomes == {} and chosen.run == f"select_by={by}"


def test_selection_needs_the_labels_it_selects_by() -> None:
    pool = _pool()
    bare = [Context("q1", [Passage("d0", relevant=True, abstain_prob={"m": 0.1})])]
    with pytest.raises(UDCGInputError, match="no eRAG label of 'm'"):
        select_contexts(bare, "erag", 1, "m")
    with pytest.raises(UDCGInputError, match="field 'select_by'"):
        select_contexts(pool, "bm25", 1, "m")


def _context(qid: str, relevant: list[bool], correct: bool) -> Context:
    passages = [
        Passage(f"d{i}", relevant=r, abstain_prob={"m": 0.3 + 0.1 * i})
        for i, r in enumerate(relevant)
    ]
    return Context(qid, passages, outcomes={"m": {"correct": correct}})


def test_comparison_means_intervals_and_paired_differences() -> None:
    rng = np.random.default_rng(5)
    weak, hard = [], []
    for i in range(40):
        rel = [bool(x) for x in rng.random(3) < 0.4]
        weak.append(_context(f"q{i}", rel, bool(rng.random() < 0.6)))
        hard.insert(0, _context(f"q{i}", rel, bool(rng.random() < 0.3)))  # other order
    out = compare_conditions(
        {"weak": weak, "hard": hard}, 3, "m", reference="weak", n_bootstrap=400
    )
    correct = {
        n: np.array([c.outcomes["m"]["correct"] for c in cs], float)
        for n, cs in (("weak", weak), ("hard", hard))
    }
    holds = np.array([any(p.relevant for p in c.passages) for c in weak], float)
    values = out["conditions"]["weak"]["values"]
    assert values["accuracy"][0] == pytest.approx(correct["weak"].mean())
    assert values["with relevant"][0] == pytest.approx(holds.mean())
    wrong = ((correct["weak"] == 0) & (holds == 0)).mean()
    assert values["wrong without relevant"][0] == pytest.approx(wrong)
    for name in ("UDCG", "nDCG", "MAP", "MRR", "Precision", "Hits"):
        assert name in values
        # the same relevance labels: the classic metrics score both conditions alike
        if name != "UDCG":
            assert out["differences"]["hard"][name] == pytest.approx([0.0, 0.0, 0.0])
    assert "UDCG-gamma" not in values  # fitted per run: means do not compare
    diff, low, high = out["differences"]["hard"]["accuracy"]
    assert diff == pytest.approx(correct["hard"].mean() - correct["weak"].mean())
    assert low <= diff <= high and high - low > 0
    mean, low, high = values["accuracy"]
    assert low <= mean <= high
    table = markdown(out, ["accuracy"])
    assert table.splitlines()[0] == "|  | weak | hard | hard - weak |"
    with pytest.raises(UDCGInputError, match="same questions"):
        compare_conditions({"a": weak, "b": hard[1:]}, 3, "m")


def test_studies_run_through_the_pipeline_stages(tmp_path: Path) -> None:
    data = _dataset()
    settings = EvaluateSettings(k=3, judge="toy", cache_dir=tmp_path / "stages", n_bootstrap=50)
    judge = ToyJudge()
    cache = StageCache(tmp_path / "stages")
    table1 = distractor_study(data, BM25Retriever(), settings, judge, cache)
    assert set(table1) == {"weak", "hard"}
    for contexts in table1.values():
        assert all("erag" in p.extra for c in contexts for p in c.passages)
    assert all(c.outcomes["toy"]["correct"] for c in table1["hard"])  # no other answer near
    out = compare_conditions(table1, 3, "toy", reference="weak", n_bootstrap=50)
    # hard distractors distract the judge more (P(abstain) 0.6 vs 0.9): UDCG scores them
    # lower, the relevance metrics cannot tell the two apart
    udcg_weak = out["conditions"]["weak"]["values"]["UDCG"][0]
    assert out["conditions"]["hard"]["values"]["UDCG"][0] < udcg_weak
    assert out["differences"]["hard"]["nDCG"][0] == 0.0
    accuracy = {n: out["conditions"][n]["values"]["accuracy"][0] for n in ("weak", "hard")}
    assert accuracy == {
        n: np.mean([c.outcomes["toy"]["correct"] for c in table1[n]]) for n in ("weak", "hard")
    }

    table2 = selection_study(
        data, BM25Retriever(), settings, judge, cache, candidates=6, name="bm25"
    )
    assert list(table2) == ["bm25", "select_by=relevance", "select_by=utility", "select_by=erag"]
    for contexts in table2.values():
        assert all(len(c.passages) == 3 for c in contexts)
    by_relevance = table2["select_by=relevance"]
    assert all(c.passages[0].relevant for c in by_relevance)
    calls = judge.calls
    again = selection_study(
        data, BM25Retriever(), settings, judge, cache, candidates=6, name="bm25"
    )
    assert judge.calls == calls and again == table2  # stage outputs read back


def test_corrected_answers_are_not_read_back_from_the_stage_cache(tmp_path: Path) -> None:
    """The answers grade the outcomes: a dataset whose answers were corrected (same questions,
    corpus and relevance) is retrieved and annotated again."""
    data = _dataset()
    settings = EvaluateSettings(k=3, judge="toy", cache_dir=tmp_path / "stages", n_bootstrap=50)
    distractor_study(data, BM25Retriever(), settings, ToyJudge(), StageCache(tmp_path), False)
    fixed = replace(data, queries=[replace(q, answers=["answer0"]) for q in data.queries])
    cache = StageCache(tmp_path)
    again = distractor_study(fixed, BM25Retriever(), settings, ToyJudge(), cache, erag=False)
    assert cache.hits == []
    assert all(c.answers == ["answer0"] for contexts in again.values() for c in contexts)
    graded = [c.outcomes["toy"]["correct"] for c in again["hard"]]
    assert graded == [c.qid == "q0" for c in again["hard"]]


@pytest.mark.parametrize("kind", ["weak", "hard"])
def test_the_distractors_config_builds_the_retriever(evaluate_config, kind: str) -> None:
    from udcg.cli.hydra_config import build_retriever

    cfg = evaluate_config("retriever=distractors", f"retriever.kind={kind}", "seed=4")
    name, retriever = build_retriever(cfg.retriever)
    assert name == "distractors" and isinstance(retriever, Distractors)
    assert (retriever.kind, retriever.seed, retriever.position) == (kind, 4, None)
    assert isinstance(retriever.base, BM25Retriever)


def test_another_base_retriever_is_not_read_back_from_the_stage_cache(tmp_path: Path) -> None:
    """The retrieval stages are keyed by the base retriever's settings and the run name, not
    its class alone: BM25 with other k1 and b, or another name, retrieves again."""
    data = _dataset()
    settings = EvaluateSettings(k=3, judge="toy", cache_dir=tmp_path / "stages", n_bootstrap=50)
    first = StageCache(tmp_path)
    distractor_study(data, BM25Retriever(), settings, ToyJudge(), first, erag=False)
    selection_study(data, BM25Retriever(), settings, ToyJudge(), first, 6, ("relevance",), "a")
    for base, name in [(BM25Retriever(k1=0.2, b=0.1), "a"), (BM25Retriever(), "b")]:
        cache = StageCache(tmp_path)
        selected = selection_study(data, base, settings, ToyJudge(), cache, 6, ("relevance",), name)
        assert "retrieve" not in cache.hits and name in selected
        assert {c.run for c in selected[name]} == {name}
    cache = StageCache(tmp_path)
    distractor_study(data, BM25Retriever(k1=0.2, b=0.1), settings, ToyJudge(), cache, erag=False)
    assert "retrieve" not in cache.hits
    cache = StageCache(tmp_path)
    distractor_study(data, BM25Retriever(), settings, ToyJudge(), cache, erag=False)
    assert cache.hits.count("retrieve") == 2  # the same base: both kinds read back
