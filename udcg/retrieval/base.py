"""What every retriever shares: the queries it answers, the ranked lists it returns."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Passage
from udcg.validation import positive_int


@dataclass(frozen=True)
class Query:
    """A question to retrieve for; ``relevant`` holds the corpus indices of its gold passages.

    Examples:
        >>> query = Query("q1", "Who wrote Emma?", answers=["Jane Austen"], relevant=frozenset({2}))
        >>> query.answers, 2 in query.relevant
        (['Jane Austen'], True)
    """

    qid: str
    question: str
    answers: list[str] = field(default_factory=list)
    relevant: frozenset[int] = frozenset()


@dataclass(frozen=True, eq=False)
class Ranking:
    """Corpus indices best first, with the retriever's score for each.

    Examples:
        >>> ranking = top_k(np.array([[0.1, 0.7, 0.4]]), k=2)[0]
        >>> ranking.indices.tolist(), ranking.scores.tolist()
        ([1, 2], [0.7, 0.4])
    """

    indices: np.ndarray
    scores: np.ndarray


def retriever_identity(retriever: object) -> dict[str, object]:
    """What a cached retrieval stage is keyed by: the retriever's class (module and name) and
    its public attributes that are plain values (retrievers it wraps described alike); any
    other attribute by ``repr``, so an object without a stable one is never matched.

    Examples:
        >>> from udcg.retrieval.bm25 import BM25Retriever
        >>> from udcg.retrieval.controls import Reversed
        >>> retriever_identity(Reversed(BM25Retriever(k1=0.9)))["base"]["k1"]
        0.9
    """
    kind = type(retriever)

    def plain(value: object) -> object:
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, Retriever):
            return retriever_identity(value)
        return repr(value)

    attributes = sorted(getattr(retriever, "__dict__", {}).items())
    fields = {k: plain(v) for k, v in attributes if not k.startswith("_")}
    return {"class": f"{kind.__module__}.{kind.__qualname__}", **fields}


@runtime_checkable
class Retriever(Protocol):
    """Ranks ``corpus`` for each query and returns its ``k`` best passages.

    Examples:
        >>> from udcg.retrieval.bm25 import BM25Retriever
        >>> isinstance(BM25Retriever(), Retriever)
        True
    """

    def retrieve(
        self, queries: Sequence[Query], corpus: Sequence[Passage], k: int
    ) -> list[Ranking]: ...


def check_depth(k: int, corpus: Sequence[Passage]) -> None:
    """A list size the corpus can fill: 1 <= k <= len(corpus).

    Examples:
        >>> check_depth(4, [Passage("d0"), Passage("d1")])
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'k': k=4 is larger than the corpus (2 passages)
    """
    positive_int(k, "k")
    if k > len(corpus):
        raise UDCGInputError(f"k={k} is larger than the corpus ({len(corpus)} passages)", field="k")


def top_k(scores: np.ndarray, k: int) -> list[Ranking]:
    """Per row of ``scores`` ``[n_queries, n_docs]``, the k highest; ties by lower index.

    Examples:
        >>> [r.indices.tolist() for r in top_k(np.array([[0.1, 0.5, 0.5], [3.0, 1.0, 2.0]]), 2)]
        [[1, 2], [0, 2]]
    """
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return [Ranking(row, scores[i, row]) for i, row in enumerate(order)]


class ScoringRetriever(ABC):
    """A retriever that scores every passage for every query and keeps the k best.

    Examples:
        A retriever that prefers short passages:

        >>> class Shortest(ScoringRetriever):
        ...     def scores(self, queries, corpus):
        ...         return -np.array([[len(p.text) for p in corpus]] * len(queries), dtype=float)
        >>> corpus = [Passage("d0", text="long passage"), Passage("d1", text="short")]
        >>> Shortest().retrieve([Query("q1", "?")], corpus, k=1)[0].indices.tolist()
        [1]
    """

    @abstractmethod
    def scores(self, queries: Sequence[Query], corpus: Sequence[Passage]) -> np.ndarray:
        """Score of every passage for every query, ``[n_queries, n_docs]``."""

    def retrieve(
        self, queries: Sequence[Query], corpus: Sequence[Passage], k: int
    ) -> list[Ranking]:
        """The k best-scored passages per query (:func:`top_k`)."""
        check_depth(k, corpus)
        if not queries:
            return []
        return top_k(self.scores(queries, corpus), k)
