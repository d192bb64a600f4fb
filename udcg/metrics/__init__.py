"""Metrics as pure functions on batches of retrieved lists (see ``_arrays`` for the conventions).

Classic ranking metrics for RAG lists, the LLM-oriented UDCG, and the Q-CARE coverage and
generator metrics. Each returns one value per query.
"""

from udcg.metrics.coverage import c_ndcg, c_precision, coverage
from udcg.metrics.generator import completeness, conciseness, verifiableness
from udcg.metrics.ranking import average_precision, hits, ndcg, precision, reciprocal_rank
from udcg.metrics.udcg import udcg, udcg_terms, utility

__all__ = [
    "average_precision",
    "c_ndcg",
    "c_precision",
    "completeness",
    "conciseness",
    "coverage",
    "hits",
    "ndcg",
    "precision",
    "reciprocal_rank",
    "udcg",
    "udcg_terms",
    "utility",
    "verifiableness",
]
