"""Metrics as pure functions on batches of retrieved lists (see ``_arrays`` for the conventions).

Classic ranking metrics for RAG lists and the LLM-oriented UDCG, each one value per query
(Q-CARE's coverage and generator metrics live in :mod:`udcg.qcare`).
"""

from __future__ import annotations

from udcg.metrics.ranking import (
    context_average_precision,
    context_ndcg,
    hits,
    precision,
    reciprocal_rank,
)
from udcg.metrics.udcg import udcg, udcg_terms, utility

__all__ = [
    "context_average_precision",
    "context_ndcg",
    "hits",
    "precision",
    "reciprocal_rank",
    "udcg",
    "udcg_terms",
    "utility",
]
