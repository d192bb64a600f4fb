"""Pipeline stages whose outputs are cached on disk, keyed by the hash of what they depend on.

``retrieve`` (queries + corpus -> contexts) and ``annotate`` (contexts -> judge labels) write
``<cache_dir>/<stage>-<key>.jsonl.gz``; a rerun with the same configuration reads them back. The
judge's own SQLite cache sits underneath (by default the one every command shares, see
:func:`udcg.judge.cache.default_cache_path`), so a run interrupted midway, another sweep member
or a ``udcg annotate`` run asking for the same (question, passage) pairs recomputes nothing it
already has.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from udcg.io.contexts.jsonl import Context, Passage, read_contexts, write_contexts
from udcg.io.joins.utility_sources import get_source
from udcg.judge.base import Judge
from udcg.labels.annotate import operations
from udcg.labels.erag import has_erag, made_as
from udcg.pipeline.datasets import Dataset
from udcg.retrieval import Ranking, Retriever
from udcg.retrieval.base import ScoringRetriever

if TYPE_CHECKING:
    from udcg.pipeline.settings import EvaluateSettings


def stage_key(*parts: Any) -> str:
    """First 16 hex digits of the SHA-256 of the canonical JSON of ``parts``."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class StageCache:
    """Stage outputs as JSONL files under ``directory``; ``hits`` names the stages read back."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.hits: list[str] = []

    def run(self, stage: str, key: str, compute: Callable[[], list[Context]]) -> list[Context]:
        """The cached output of ``stage`` for ``key``, else ``compute()`` (then stored)."""
        path = self.directory / f"{stage}-{key}.jsonl.gz"
        if path.is_file():
            self.hits.append(stage)
            return list(read_contexts(path))
        contexts = compute()
        self.directory.mkdir(parents=True, exist_ok=True)
        write_contexts(path, contexts, check=False)
        return contexts


def _extended(top: Ranking, deeper: Ranking, depth: int) -> Ranking:
    """``top`` followed by ``deeper``'s passages it lacks, ``depth`` in all."""
    more = ~np.isin(deeper.indices, top.indices)
    return Ranking(
        np.concatenate([top.indices, deeper.indices[more]])[:depth],
        np.concatenate([top.scores, deeper.scores[more]])[:depth],
    )


def retrieve_contexts(
    dataset: Dataset, name: str, retriever: Retriever, k: int, depth: int | None = None
) -> list[Context]:
    """One context per query: the top-k passages with score and answer relevance, then (with
    ``depth`` > k) the next passages of a ``depth``-deep retrieval, as candidates. The first k
    are the k-deep retrieval's, whatever ``depth``: a control that places by position
    (``GoldAt``) or draws k (``RandomRetriever``) keeps its top k when candidates are added. A
    scoring retriever's top k leads its deeper list, so it retrieves once."""
    depth = k if depth is None else max(depth, k)
    rankings = retriever.retrieve(dataset.queries, dataset.corpus, depth)
    if depth > k and not isinstance(retriever, ScoringRetriever):
        top = retriever.retrieve(dataset.queries, dataset.corpus, k)
        rankings = [_extended(t, d, depth) for t, d in zip(top, rankings, strict=True)]
    contexts = []
    for query, ranking in zip(dataset.queries, rankings, strict=True):
        passages = [
            Passage(
                doc_id=dataset.corpus[i].doc_id,
                text=dataset.corpus[i].text,
                score=None if np.isnan(s) else float(s),
                relevant=int(i) in query.relevant,
            )
            for i, s in zip(ranking.indices, ranking.scores, strict=True)
        ]
        contexts.append(
            Context(query.qid, passages, run=name, question=query.question, answers=query.answers)
        )
    return contexts


def missing_steps(
    contexts: Sequence[Context],
    judge: str,
    utility: str,
    relevance: str,
    erag: bool = False,
    outcome: Mapping[str, Any] | None = None,
) -> list[str]:
    """The annotate steps whose labels under key ``judge`` (the judge's
    :func:`~udcg.judge.judge_key`) some context still lacks (relevance=llm: always; ``erag``:
    eRAG's per-passage labels too). With ``outcome`` (``{"grader": ..., "max_new_tokens":
    ...}``), outcomes that record another value of one of them count as missing, so they are
    made again as asked; a field an outcome does not record (given outcomes) is not checked."""
    source = get_source(utility)
    passages = [p for c in contexts for p in c.passages]
    steps = []
    if not all(source.has(p, judge) for p in passages):
        steps.append(source.step)
    if relevance == "llm" or any(p.relevant is None for p in passages):
        steps.append("relevance")
    outcomes = [c.outcomes.get(judge, {}) for c in contexts]
    if any(o.get("correct") is None or not made_as(o, outcome) for o in outcomes):
        steps.append("outcomes")
    if erag and not has_erag(contexts, judge, outcome):
        steps.append("erag")
    return steps


def needs_coverage(contexts: Sequence[Context]) -> bool:
    """Some context lacks sub-queries or a passage lacks coverage labels."""
    return any(c.subqueries is None or any(p.covers is None for p in c.passages) for c in contexts)


def annotate_contexts(
    contexts: Sequence[Context],
    judge: Judge,
    steps: Sequence[str],
    relevance: str,
    grader: str,
    max_new_tokens: int,
    qcare: bool,
) -> list[Context]:
    """Judge labels for ``steps`` (see :func:`udcg.labels.annotate.annotate`; ``relevance=llm``
    relabels every passage, ``string`` fills only missing labels), then Q-CARE coverage labels
    (:func:`udcg.qcare.label_contexts`) when ``qcare`` and some are missing."""
    from udcg.labels.annotate import annotate

    out = list(contexts)
    if steps:
        out, _ = annotate(
            out,
            judge,
            steps,
            relevance=relevance,
            grader=grader,
            max_new_tokens=max_new_tokens,
            relabel_relevance=relevance == "llm",
        )
    if qcare and needs_coverage(out):
        from udcg.qcare import label_contexts

        out, _ = label_contexts(out, judge)
    return out


def annotate_stage(
    cache: StageCache,
    contexts: list[Context],
    judge: Judge,
    steps: Sequence[str],
    settings: EvaluateSettings,
) -> list[Context]:
    """:func:`annotate_contexts` through ``cache`` (stage ``annotate``), keyed by the contexts,
    the judge's fingerprint, run-time key settings (a resolved abstention token) and labels key,
    ``steps``, how given relevance labels are treated and the settings the labels depend on."""
    key = stage_key(
        [c.to_json() for c in contexts],
        judge.fingerprint,
        {op: judge.key_settings(op) for op in operations(steps, settings.relevance)},
        "relevance labels given are kept",  # what the relevance step does with given labels
        settings.judge_key,
        steps,
        settings.relevance,
        settings.grader,
        settings.max_new_tokens,
        settings.qcare,
    )
    return cache.run(
        "annotate",
        key,
        lambda: annotate_contexts(
            contexts,
            judge,
            steps,
            settings.relevance,
            settings.grader,
            settings.max_new_tokens,
            settings.qcare,
        ),
    )
