"""Retrievers against hand-computed or independently computed rankings."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from udcg.cli.hydra_config import CONF_DIR, build_retriever
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Passage
from udcg.retrieval import (
    BM25Retriever,
    DenseRetriever,
    Distractors,
    GoldAt,
    OracleFirst,
    Query,
    RandomRetriever,
    Ranking,
    Reversed,
    rrf_fuse,
)

TEXTS = [
    "canberra is the capital city of australia",
    "sydney is the largest city of australia",
    "paris is the capital of france",
    "dogs bark at night",
    "the capital of australia moved from melbourne to canberra",
]
CORPUS = [Passage(doc_id=f"d{i}", text=t) for i, t in enumerate(TEXTS)]
QUERY = Query("q", "capital of australia", ["Canberra"], frozenset({0, 4}))


def reference_bm25(query: list[str], docs: list[list[str]], k1=1.5, b=0.75) -> np.ndarray:
    """Lucene BM25: idf * tf / (tf + k1 (1 - b + b dl / avgdl)),
    idf = ln(1 + (N - df + 0.5) / (df + 0.5))."""
    n, avgdl = len(docs), sum(map(len, docs)) / len(docs)
    out = np.zeros(n)
    for term in set(query):
        df = sum(term in d for d in docs)
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for j, d in enumerate(docs):
            tf = d.count(term)
            out[j] += idf * tf / (tf + k1 * (1 - b + b * len(d) / avgdl))
    return out


def test_bm25_matches_the_formula() -> None:
    scores = BM25Retriever(stopwords=None).scores([QUERY], CORPUS)[0]
    expected = reference_bm25(QUERY.question.split(), [t.split() for t in TEXTS])
    np.testing.assert_allclose(scores, expected, rtol=1e-5)
    ranking = BM25Retriever(stopwords=None).retrieve([QUERY], CORPUS, 3)[0]
    assert ranking.indices.tolist() == np.argsort(-expected, kind="stable")[:3].tolist()


def test_bm25_scores_a_question_of_stop_words_zero() -> None:
    """ "To be or not to be?" loses every token to the stop words: it matches nothing, beside
    a question that keeps its scores."""
    queries = [Query("q0", "To be or not to be?", [], frozenset()), QUERY]
    scores = BM25Retriever().scores(queries, CORPUS)
    assert scores[0].tolist() == [0.0] * len(CORPUS)
    np.testing.assert_array_equal(scores[1], BM25Retriever().scores([QUERY], CORPUS)[0])


def test_bm25_options_are_checked_when_built() -> None:
    for options, field in (({"k1": -1}, "k1"), ({"b": 1.5}, "b"), ({"method": "okapi"}, "method")):
        with pytest.raises(UDCGInputError) as err:
            BM25Retriever(**options)
        assert err.value.field == field


def test_dense_is_cosine_of_the_embedded_encoder() -> None:
    from sentence_transformers import SentenceTransformer

    from udcg.retrieval.dense import model_path

    retriever = DenseRetriever(device="cpu")
    ranking = retriever.retrieve([QUERY], CORPUS, 5)[0]
    encoder = SentenceTransformer(model_path("embedded"), device="cpu")
    q, d = encoder.encode([QUERY.question]), encoder.encode(TEXTS)
    cos = (d @ q[0]) / np.linalg.norm(d, axis=1) / np.linalg.norm(q[0])
    np.testing.assert_allclose(ranking.scores, np.sort(cos)[::-1], atol=1e-5)
    assert ranking.indices[0] in QUERY.relevant


class _Encoder:
    """Records whether the retriever asked for sentence-transformers' progress bar."""

    def __init__(self) -> None:
        self.bars: list[bool] = []

    def encode(self, texts: list[str], show_progress_bar: bool, **_: object) -> np.ndarray:
        self.bars.append(show_progress_bar)
        return np.ones((len(texts), 2))


class _Terminal:
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("stderr", "setting", "bar"),
    [(_Terminal(), "", True), (_Terminal(), "off", False), (None, "", False)],
)
def test_dense_encoding_shows_a_bar_as_udcg_progress_says(
    monkeypatch: pytest.MonkeyPatch, stderr: object, setting: str, bar: bool
) -> None:
    """The encoder's bar follows ``UDCG_PROGRESS`` like every progress display (off: none),
    and a closed standard error (``sys.stderr`` None) has none."""
    monkeypatch.setenv("UDCG_PROGRESS", setting)
    monkeypatch.setattr("sys.stderr", stderr)
    retriever, encoder = DenseRetriever(batch_size=2), _Encoder()
    retriever._encoder = encoder
    retriever.scores([QUERY], CORPUS)
    assert encoder.bars == [bar, False]  # the passages (more than a batch), the one query


def test_rrf_hand_computed() -> None:
    a = Ranking(np.array([2, 0, 1]), np.zeros(3))
    b = Ranking(np.array([0, 3]), np.zeros(2))
    fused = rrf_fuse([a, b], n_docs=4, k=3, constant=1.0)
    # doc0: 1/3 + 1/2, doc2: 1/2, doc3: 1/3, doc1: 1/4
    assert fused.indices.tolist() == [0, 2, 3]
    np.testing.assert_allclose(fused.scores, [1 / 3 + 1 / 2, 1 / 2, 1 / 3])


class Fixed:
    """A base retriever with a fixed order: 3, 2, 1, 0, 4."""

    def retrieve(self, queries, corpus, k):
        order = np.array([3, 2, 1, 0, 4])[:k]
        return [Ranking(order, -np.arange(k, dtype=float)) for _ in queries]


def test_controls() -> None:
    assert OracleFirst(Fixed()).retrieve([QUERY], CORPUS, 4)[0].indices.tolist() == [0, 4, 3, 2]
    assert Reversed(Fixed()).retrieve([QUERY], CORPUS, 3)[0].indices.tolist() == [1, 2, 3]
    # gold = the base's best-ranked gold passage (0), the others in the base's order
    assert GoldAt(Fixed(), 2).retrieve([QUERY], CORPUS, 3)[0].indices.tolist() == [3, 0, 2]
    cycled = GoldAt(Fixed()).retrieve([QUERY] * 4, CORPUS, 3)
    assert [int(np.flatnonzero(r.indices == 0)[0]) + 1 for r in cycled] == [1, 2, 3, 1]
    first = RandomRetriever(seed=3).retrieve([QUERY] * 2, CORPUS, 3)
    again = RandomRetriever(seed=3).retrieve([QUERY] * 2, CORPUS, 3)
    assert [r.indices.tolist() for r in first] == [r.indices.tolist() for r in again]
    assert all(len(set(r.indices.tolist())) == 3 for r in first)


def test_gold_at_errors() -> None:
    with pytest.raises(UDCGInputError, match=r"outside 1\.\.k=3"):
        GoldAt(Fixed(), 4).retrieve([QUERY], CORPUS, 3)
    with pytest.raises(UDCGInputError, match="no gold passage"):
        GoldAt(Fixed(), 1).retrieve([Query("x", "x")], CORPUS, 3)
    # three gold of five: two others, fewer than a list of 4 needs (a numpy IndexError before)
    mostly_gold = Query("q", "capital", relevant=frozenset({0, 1, 4}))
    for control in (
        GoldAt(Fixed(), 4),
        Distractors(Fixed(), "hard", 4),
        Distractors(Fixed(), "weak"),
    ):
        with pytest.raises(UDCGInputError, match=r"'q' has 2 non-relevant passages in the corpus"):
            control.retrieve([mostly_gold], CORPUS, 4)


@pytest.mark.parametrize("control", ["gold_at", "random"])
def test_candidates_keep_the_top_k_of_a_k_deep_retrieval(control: str) -> None:
    """An ordering study retrieves 2k candidates; their first k are the k-deep retrieval's
    (the retriever-order baseline of every ordering), so GoldAt keeps its gold within 1..k and
    RandomRetriever its k-draw."""
    from udcg.pipeline.datasets import Dataset
    from udcg.pipeline.stages import retrieve_contexts

    retriever = GoldAt(Fixed()) if control == "gold_at" else RandomRetriever(seed=5)
    queries = [replace(QUERY, qid=f"q{i}") for i in range(4)]
    dataset = Dataset("d", queries, CORPUS)
    top = retrieve_contexts(dataset, "r", retriever, 2)
    candidates = retrieve_contexts(dataset, "r", retriever, 2, depth=4)
    for shallow, deep in zip(top, candidates, strict=True):
        ids = [p.doc_id for p in deep.passages]
        assert ids[:2] == [p.doc_id for p in shallow.passages] and len(set(ids)) == 4
    if control == "gold_at":
        assert all(any(p.relevant for p in c.passages[:2]) for c in candidates)


def test_k_larger_than_corpus() -> None:
    with pytest.raises(UDCGInputError, match=r"k=6 is larger than the corpus \(5 passages\)"):
        BM25Retriever().retrieve([QUERY], CORPUS, 6)


@pytest.mark.parametrize(
    "name", ["bm25", "hybrid", "oracle_first", "random", "reversed", "gold_at"]
)
def test_every_config_builds_and_retrieves(name: str) -> None:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("evaluate", overrides=[f"retriever={name}"])
    built_name, retriever = build_retriever(cfg.retriever)
    assert built_name == name
    (ranking,) = retriever.retrieve([QUERY], CORPUS, 3)
    assert len(ranking.indices) == 3 and len(set(ranking.indices.tolist())) == 3


def test_build_retriever_rejects_a_bad_config() -> None:
    with pytest.raises(UDCGInputError, match="needs 'name' and '_target_'"):
        build_retriever({"_target_": "udcg.retrieval.BM25Retriever"})
    with pytest.raises(UDCGInputError, match="cannot build retriever"):
        build_retriever({"name": "x", "_target_": "udcg.retrieval.Nope"})
