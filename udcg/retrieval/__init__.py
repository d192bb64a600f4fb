"""Retrievers for evaluation sweeps: BM25, dense, hybrid (RRF) and controls.

Each retriever has ``retrieve(queries, corpus, k) -> list[Ranking]``; :func:`build_retriever`
builds one from its Hydra config (``conf/retriever/*.yaml``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from udcg.errors import UDCGInputError
from udcg.retrieval.base import Query, Ranking, Retriever, check_depth, top_k
from udcg.retrieval.bm25 import BM25Retriever
from udcg.retrieval.controls import GoldAt, OracleFirst, RandomRetriever, Reversed
from udcg.retrieval.dense import DenseRetriever
from udcg.retrieval.hybrid import HybridRetriever, rrf_fuse


def build_retriever(config: Mapping[str, Any]) -> tuple[str, Retriever]:
    """``(name, retriever)`` from a config with ``name`` and a ``_target_`` to instantiate."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    spec = (
        OmegaConf.to_container(config, resolve=True)
        if OmegaConf.is_config(config)
        else dict(config)
    )
    name = spec.pop("name", None)
    if not name or "_target_" not in spec:
        raise UDCGInputError(
            "a retriever config needs 'name' and '_target_' (see conf/retriever/)",
            field="retriever",
        )
    try:
        retriever = instantiate(spec)
    except InstantiationException as exc:
        raise UDCGInputError(f"cannot build retriever {name!r}: {exc}", field="retriever") from None
    if not isinstance(retriever, Retriever):
        raise UDCGInputError(
            f"{spec['_target_']} has no retrieve(queries, corpus, k)", field="retriever"
        )
    return str(name), retriever


__all__ = [
    "BM25Retriever",
    "DenseRetriever",
    "GoldAt",
    "HybridRetriever",
    "OracleFirst",
    "Query",
    "RandomRetriever",
    "Ranking",
    "Retriever",
    "Reversed",
    "build_retriever",
    "check_depth",
    "rrf_fuse",
    "top_k",
]
