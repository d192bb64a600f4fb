"""Hybrid retrieval: reciprocal-rank fusion (RRF) of several retrievers."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from udcg.io.contexts.jsonl import Passage
from udcg.retrieval.base import Query, Ranking, Retriever, check_depth


def rrf_fuse(rankings: Sequence[Ranking], n_docs: int, k: int, constant: float = 60.0) -> Ranking:
    """RRF(d) = sum over lists containing d of 1 / (constant + rank(d)), ranks from 1; the k
    best by fused score, ties by lower corpus index.

    Examples:
        With constant 1: doc 1 is 2nd then 1st, 1/3 + 1/2; doc 0 is 1st once, 1/2:

        >>> lists = [Ranking(np.array([0, 1]), np.zeros(2)), Ranking(np.array([1, 2]), np.zeros(2))]
        >>> fused = rrf_fuse(lists, n_docs=3, k=2, constant=1)
        >>> fused.indices.tolist(), fused.scores.round(4).tolist()
        ([1, 0], [0.8333, 0.5])
    """
    fused = np.zeros(n_docs)
    for ranking in rankings:
        fused[ranking.indices] += 1.0 / (constant + np.arange(1, len(ranking.indices) + 1))
    order = np.argsort(-fused, kind="stable")[:k]
    return Ranking(order, fused[order])


class HybridRetriever:
    """Fuses the top-``depth`` lists of ``retrievers`` by RRF with constant ``rrf_k``.

    Examples:
        One retriever fused with itself keeps its order:

        >>> from udcg.retrieval.bm25 import BM25Retriever
        >>> from udcg.retrieval.base import Query
        >>> corpus = [Passage("d0", text="Jane Austen wrote Emma."), Passage("d1", text="Emma.")]
        >>> hybrid = HybridRetriever([BM25Retriever(), BM25Retriever()])
        >>> hybrid.retrieve([Query("q1", "Who wrote Emma?")], corpus, k=2)[0].indices.tolist()
        [0, 1]
    """

    def __init__(self, retrievers: Sequence[Retriever], rrf_k: float = 60.0, depth: int = 100):
        if not retrievers:
            raise ValueError("a hybrid retriever needs at least one retriever")
        self.retrievers, self.rrf_k, self.depth = list(retrievers), rrf_k, depth

    def retrieve(
        self, queries: Sequence[Query], corpus: Sequence[Passage], k: int
    ) -> list[Ranking]:
        check_depth(k, corpus)
        depth = min(max(self.depth, k), len(corpus))
        per_retriever = [r.retrieve(queries, corpus, depth) for r in self.retrievers]
        return [
            rrf_fuse([lists[i] for lists in per_retriever], len(corpus), k, self.rrf_k)
            for i in range(len(queries))
        ]
