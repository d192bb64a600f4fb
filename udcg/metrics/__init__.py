"""Metrics as pure functions on batches of retrieved lists (see ``_arrays`` for the conventions).

Classic ranking metrics for RAG lists, the LLM-oriented UDCG, and the Q-CARE coverage and
generator metrics. Each returns one value per query.
"""

from __future__ import annotations

import warnings
from typing import Any

from udcg.metrics.coverage import c_ndcg, c_precision, coverage
from udcg.metrics.generator import completeness, conciseness, verifiableness
from udcg.metrics.ranking import (
    context_average_precision,
    context_ndcg,
    hits,
    precision,
    reciprocal_rank,
)
from udcg.metrics.udcg import udcg, udcg_terms, utility

#: old name -> new name (renamed in 0.2.0: they are not trec_eval's nDCG and AP)
_RENAMED = {"ndcg": "context_ndcg", "average_precision": "context_average_precision"}


def __getattr__(name: str) -> Any:
    new = _RENAMED.get(name)
    if new is None:
        raise AttributeError(f"module 'udcg.metrics' has no attribute {name!r}")
    warnings.warn(
        f"udcg.metrics.{name} is now udcg.metrics.{new}; the old name goes away in udcg 0.3",
        DeprecationWarning,
        stacklevel=2,
    )
    return globals()[new]


__all__ = [
    "c_ndcg",
    "c_precision",
    "completeness",
    "conciseness",
    "context_average_precision",
    "context_ndcg",
    "coverage",
    "hits",
    "precision",
    "reciprocal_rank",
    "udcg",
    "udcg_terms",
    "utility",
    "verifiableness",
]
