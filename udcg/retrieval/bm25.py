"""Lexical retrieval with BM25 (the ``bm25s`` package)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Passage
from udcg.retrieval.base import Query, ScoringRetriever
from udcg.validation import nonnegative_float, one_of, show

#: The BM25 variants of bm25s.
METHODS = ("robertson", "lucene", "atire", "bm25l", "bm25+")

# one indexing at a time changes the level of the "bm25s" logger (see _bm25s_quiet)
_LOGGER_LOCK = threading.Lock()


@contextmanager
def _bm25s_quiet() -> Iterator[None]:
    """The ``bm25s`` logger at WARNING while the block runs, its own level put back after.

    bm25s sets its logger to DEBUG when imported and logs a debug line per index (it has no
    option to turn that off), which a root handler, as under Hydra's job logging, would show.
    The lock keeps concurrent calls from saving each other's level.
    """
    logger = logging.getLogger("bm25s")
    with _LOGGER_LOCK:
        level = logger.level
        logger.setLevel(max(level, logging.WARNING))
        try:
            yield
        finally:
            logger.setLevel(level)


class BM25Retriever(ScoringRetriever):
    """BM25 over lower-cased word tokens (English stop words removed). The default
    ``lucene`` variant of bm25s scores

    score(q, d) = sum_t idf(t) * tf(t, d) / (tf(t, d) + k1 (1 - b + b |d| / avgdl)),
    idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5)).

    Examples:
        "who" is a stop word: d0 matches "wrote" and "emma", d2 "emma" only, d1 nothing:

        >>> from udcg.io.contexts.jsonl import Passage
        >>> corpus = [Passage("d0", text="Jane Austen wrote Emma."),
        ...           Passage("d1", text="Canberra is the capital of Australia."),
        ...           Passage("d2", text="Emma is a novel.")]
        >>> from udcg.retrieval.base import Query
        >>> queries = [Query("q1", "Who wrote Emma?", relevant=frozenset({2}))]
        >>> ranking = BM25Retriever().retrieve(queries, corpus, k=3)[0]
        >>> ranking.indices.tolist(), float(ranking.scores[-1])
        ([0, 2, 1], 0.0)
    """

    def __init__(
        self, k1: float = 1.5, b: float = 0.75, method: str = "lucene", stopwords: str = "en"
    ) -> None:
        """``k1`` >= 0, ``b`` in [0, 1] and ``method`` one of bm25s' :data:`METHODS`, checked
        here (a bad value is one line naming it, before any retrieval)."""
        self.k1 = nonnegative_float(k1, "k1")
        self.b = nonnegative_float(b, "b")
        if self.b > 1:
            raise UDCGInputError(f"must be between 0 and 1, got {show(b)}", field="b")
        self.method = one_of(method, "method", METHODS)
        self.stopwords = stopwords

    def scores(self, queries: Sequence[Query], corpus: Sequence[Passage]) -> np.ndarray:
        """BM25 score of every passage for every query, ``[n_queries, n_docs]``."""
        import bm25s

        model = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
        corpus_tokens = bm25s.tokenize(
            [p.text or "" for p in corpus], stopwords=self.stopwords, show_progress=False
        )
        with _bm25s_quiet():  # only index() logs
            model.index(corpus_tokens, show_progress=False)
        tokens = bm25s.tokenize(
            [q.question for q in queries],
            stopwords=self.stopwords,
            return_ids=False,
            show_progress=False,
        )
        # a question of stop words only has no token: it matches no passage (bm25s fails on it)
        empty = np.zeros(len(corpus))
        return np.stack([model.get_scores(t) if t else empty for t in tokens]).astype(np.float64)
