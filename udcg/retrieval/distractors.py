"""The same relevant passage among weak or hard distractors (UDCG, Trappolini et al. 2025,
Table 1): what classic metrics cannot tell apart and the LLM can.

:class:`Distractors` puts each query's gold passage (the base retriever's best-ranked one) at
``position`` of k (None cycles 1..k over the queries, as :class:`~udcg.retrieval.GoldAt`) and
fills the other k - 1 positions with

* ``hard`` distractors: the base retriever's best non-relevant passages, in its order (the
  contexts of :class:`~udcg.retrieval.GoldAt`);
* ``weak`` distractors: non-relevant passages drawn uniformly from the corpus (reproducible
  for a ``seed``).

For a query, both kinds hold the same gold passage at the same position, and every other
passage is non-relevant: nDCG, MAP, MRR and Precision score the two contexts alike.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from udcg.io.contexts.jsonl import Passage
from udcg.retrieval.base import Query, Ranking, Retriever, check_depth
from udcg.retrieval.controls import GoldAt, check_others
from udcg.validation import one_of

#: The kinds of distractors and what they are.
KINDS = {
    "hard": "the base retriever's best non-relevant passages",
    "weak": "non-relevant passages drawn uniformly from the corpus",
}


class Distractors:
    """One gold passage at ``position`` of k among ``kind`` distractors (module docstring).

    Examples:
        BM25 ranks d0 first for the question; d2 is gold, d1 and d3 are not relevant:

        >>> from udcg.retrieval.bm25 import BM25Retriever
        >>> corpus = [Passage("d0", text="Jane Austen wrote Emma."),
        ...           Passage("d1", text="Canberra is the capital of Australia."),
        ...           Passage("d2", text="Emma is a novel."),
        ...           Passage("d3", text="Rivers flow to the sea.")]
        >>> queries = [Query("q1", "Who wrote Emma?", relevant=frozenset({2}))]
        >>> hard = Distractors(BM25Retriever(), "hard", position=2)
        >>> hard.retrieve(queries, corpus, k=2)[0].indices.tolist()
        [0, 2]
        >>> weak = Distractors(BM25Retriever(), "weak", position=2, seed=1)
        >>> ranking = weak.retrieve(queries, corpus, k=3)[0].indices.tolist()
        >>> ranking[1], sorted(ranking)
        (2, [0, 1, 2])
    """

    def __init__(
        self, base: Retriever, kind: str = "hard", position: int | None = None, seed: int = 0
    ) -> None:
        one_of(kind, "retriever.kind", tuple(KINDS))
        self.base, self.kind, self.position, self.seed = base, kind, position, seed
        self._gold_at = GoldAt(base, position)

    def retrieve(
        self, queries: Sequence[Query], corpus: Sequence[Passage], k: int
    ) -> list[Ranking]:
        hard = self._gold_at.retrieve(queries, corpus, k)
        if self.kind == "hard":
            return hard
        check_depth(k, corpus)
        rng = np.random.default_rng(self.seed)
        positions = self._gold_at.positions(len(queries), k)
        out = []
        for query, ranking, pos in zip(queries, hard, positions, strict=True):
            pool = np.array([i for i in range(len(corpus)) if i not in query.relevant])
            check_others(query, len(pool), k)
            others = rng.choice(pool, k - 1, replace=False)
            gold = ranking.indices[pos - 1]
            indices = np.insert(others.astype(np.int64), pos - 1, gold)
            out.append(Ranking(indices, np.full(k, np.nan)))
        return out
