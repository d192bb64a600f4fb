"""Retrievers for evaluation sweeps: BM25, dense, hybrid (RRF), controls and the UDCG paper's
weak / hard distractors around one gold passage.

Each retriever has ``retrieve(queries, corpus, k) -> list[Ranking]``; ``evaluate.py`` builds
one from its Hydra config (``udcg/conf/retriever/*.yaml``).
"""

from __future__ import annotations

from udcg.retrieval.base import Query, Ranking, Retriever, check_depth, top_k
from udcg.retrieval.bm25 import BM25Retriever
from udcg.retrieval.controls import GoldAt, OracleFirst, RandomRetriever, Reversed
from udcg.retrieval.dense import DenseRetriever
from udcg.retrieval.distractors import Distractors
from udcg.retrieval.hybrid import HybridRetriever, rrf_fuse

__all__ = [
    "BM25Retriever",
    "DenseRetriever",
    "Distractors",
    "GoldAt",
    "HybridRetriever",
    "OracleFirst",
    "Query",
    "RandomRetriever",
    "Ranking",
    "Retriever",
    "Reversed",
    "check_depth",
    "rrf_fuse",
    "top_k",
]
