"""Control retrievers for sanity checks and positional studies.

* :class:`OracleFirst`: the query's gold passages first, then the base retriever's others;
* :class:`RandomRetriever`: k passages drawn uniformly without replacement;
* :class:`Reversed`: the base retriever's top k in reverse order (best passage last);
* :class:`GoldAt`: one gold passage at position ``position`` (1-based) of k, the other
  positions filled with the base retriever's best non-gold passages in their order;
  ``position=None`` cycles through 1..k over the queries, so one run covers every position.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Passage
from udcg.retrieval.base import Query, Ranking, Retriever, check_depth

#: Score given to the passages a control places by itself (not ranked by the base).
PLACED = float("nan")


def _full(base: Retriever, queries: Sequence[Query], corpus: Sequence[Passage]) -> list[Ranking]:
    """The base retriever's ranking of the whole corpus."""
    return base.retrieve(queries, corpus, len(corpus))


def _non_gold(query: Query, ranking: Ranking, k: int) -> Ranking:
    """The first k passages of ``ranking`` that are not gold for ``query``."""
    keep = np.array([i not in query.relevant for i in ranking.indices], dtype=bool)
    return Ranking(ranking.indices[keep][:k], ranking.scores[keep][:k])


def check_others(query: Query, n_others: int, k: int) -> None:
    """Refuse a query with fewer than k - 1 non-relevant passages: a list of k holding one
    gold passage needs them.

    Examples:
        >>> check_others(Query("q1", "Who wrote Emma?"), n_others=2, k=3)
        >>> check_others(Query("q1", "Who wrote Emma?"), n_others=1, k=3)
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'k': query 'q1' has 1 non-relevant passages in the \
corpus, fewer than k - 1 = 2
    """
    if n_others < k - 1:
        raise UDCGInputError(
            f"query {query.qid!r} has {n_others} non-relevant passages in the corpus, fewer "
            f"than k - 1 = {k - 1}",
            field="k",
        )


def _place(front: list[int], ranking: Ranking, k: int) -> Ranking:
    """``front`` (corpus indices, score NaN) followed by ``ranking``, cut at k."""
    indices = np.concatenate([np.asarray(front, dtype=np.int64), ranking.indices])[:k]
    scores = np.concatenate([np.full(len(front), PLACED), ranking.scores])[:k]
    return Ranking(indices, scores)


class OracleFirst:
    """Gold passages (corpus order) first, then the base retriever's non-gold ranking.

    Examples:
        BM25 ranks d0, d2, d1 (see :class:`~udcg.retrieval.bm25.BM25Retriever`); d2 is gold:

        >>> from udcg.retrieval.bm25 import BM25Retriever
        >>> from udcg.io.contexts.jsonl import Passage
        >>> corpus = [Passage("d0", text="Jane Austen wrote Emma."),
        ...           Passage("d1", text="Canberra is the capital of Australia."),
        ...           Passage("d2", text="Emma is a novel.")]
        >>> from udcg.retrieval.base import Query
        >>> queries = [Query("q1", "Who wrote Emma?", relevant=frozenset({2}))]
        >>> OracleFirst(BM25Retriever()).retrieve(queries, corpus, k=2)[0].indices.tolist()
        [2, 0]
    """

    def __init__(self, base: Retriever) -> None:
        self.base = base

    def retrieve(
        self, queries: Sequence[Query], corpus: Sequence[Passage], k: int
    ) -> list[Ranking]:
        check_depth(k, corpus)
        return [
            _place(sorted(q.relevant), _non_gold(q, r, k), k)
            for q, r in zip(queries, _full(self.base, queries, corpus), strict=True)
        ]


class RandomRetriever:
    """k passages uniformly at random, reproducible for a ``seed``.

    Examples:
        >>> from udcg.retrieval.base import Query
        >>> corpus = [Passage(f"d{i}") for i in range(5)]
        >>> first = RandomRetriever(seed=7).retrieve([Query("q1", "?")], corpus, k=3)[0]
        >>> again = RandomRetriever(seed=7).retrieve([Query("q1", "?")], corpus, k=3)[0]
        >>> len(set(first.indices.tolist())), first.indices.tolist() == again.indices.tolist()
        (3, True)
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def retrieve(
        self, queries: Sequence[Query], corpus: Sequence[Passage], k: int
    ) -> list[Ranking]:
        check_depth(k, corpus)
        rng = np.random.default_rng(self.seed)
        return [
            Ranking(rng.choice(len(corpus), k, replace=False), np.full(k, PLACED)) for _ in queries
        ]


class Reversed:
    """The base retriever's top k, worst first.

    Examples:
        >>> from udcg.retrieval.bm25 import BM25Retriever
        >>> from udcg.io.contexts.jsonl import Passage
        >>> corpus = [Passage("d0", text="Jane Austen wrote Emma."),
        ...           Passage("d1", text="Canberra is the capital of Australia."),
        ...           Passage("d2", text="Emma is a novel.")]
        >>> from udcg.retrieval.base import Query
        >>> queries = [Query("q1", "Who wrote Emma?", relevant=frozenset({2}))]
        >>> Reversed(BM25Retriever()).retrieve(queries, corpus, k=2)[0].indices.tolist()
        [2, 0]
    """

    def __init__(self, base: Retriever) -> None:
        self.base = base

    def retrieve(
        self, queries: Sequence[Query], corpus: Sequence[Passage], k: int
    ) -> list[Ranking]:
        return [
            Ranking(r.indices[::-1].copy(), r.scores[::-1].copy())
            for r in self.base.retrieve(queries, corpus, k)
        ]


class GoldAt:
    """One gold passage (the base's best-ranked gold) at ``position`` of k; None cycles.

    Examples:
        >>> from udcg.retrieval.bm25 import BM25Retriever
        >>> from udcg.io.contexts.jsonl import Passage
        >>> corpus = [Passage("d0", text="Jane Austen wrote Emma."),
        ...           Passage("d1", text="Canberra is the capital of Australia."),
        ...           Passage("d2", text="Emma is a novel.")]
        >>> from udcg.retrieval.base import Query
        >>> queries = [Query("q1", "Who wrote Emma?", relevant=frozenset({2}))]
        >>> GoldAt(BM25Retriever(), position=2).retrieve(queries, corpus, k=2)[0].indices.tolist()
        [0, 2]
        >>> GoldAt(BM25Retriever()).positions(n_queries=4, k=3)
        [1, 2, 3, 1]
    """

    def __init__(self, base: Retriever, position: int | None = None) -> None:
        self.base, self.position = base, position

    def positions(self, n_queries: int, k: int) -> list[int]:
        """The 1-based gold position of each query."""
        if self.position is None:
            return [i % k + 1 for i in range(n_queries)]
        if not 1 <= self.position <= k:
            raise UDCGInputError(
                f"gold position {self.position} is outside 1..k={k}", field="retriever.position"
            )
        return [self.position] * n_queries

    def retrieve(
        self, queries: Sequence[Query], corpus: Sequence[Passage], k: int
    ) -> list[Ranking]:
        check_depth(k, corpus)
        missing = [q.qid for q in queries if not q.relevant]
        if missing:
            raise UDCGInputError(
                f"{len(missing)} queries have no gold passage in the corpus (first: "
                f"{missing[0]!r}); gold_at needs one per query",
                field="retriever",
            )
        out = []
        for query, ranking, pos in zip(
            queries, _full(self.base, queries, corpus), self.positions(len(queries), k), strict=True
        ):
            gold = next(int(i) for i in ranking.indices if i in query.relevant)
            others = _non_gold(query, ranking, k - 1)
            check_others(query, len(others.indices), k)
            indices = np.insert(others.indices, pos - 1, gold)
            scores = np.insert(others.scores, pos - 1, PLACED)
            out.append(Ranking(indices, scores))
        return out
