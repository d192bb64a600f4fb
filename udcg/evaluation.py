"""trec_eval-compatible evaluation of a run against qrels, vectorised over queries.

Semantics (those of trec_eval, checked against pytrec_eval): documents are ranked by score
descending, ties broken by document id descending; unjudged documents have relevance 0; binary
measures count relevance >= ``rel`` (1 by default); nDCG uses linear gain max(relevance, 0) and
the ideal ranking of all judged documents of the query; AP and R divide by the number of
relevant judged documents; queries of the run that are absent from the qrels are ignored, and
so are judged queries that the run does not retrieve for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from os import PathLike

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from udcg._pages import small_pages
from udcg._threads import run_concurrently
from udcg.errors import UDCGInputError
from udcg.io.arrow import from_numpy, to_numpy
from udcg.io.trec_files import (
    Qrels,
    Run,
    locate_duplicate,
    qrels_from_dict,
    read_trec_qrels,
    read_trec_run,
    run_from_dict,
    trec_order,
)
from udcg.measures import Measure, parse_measures
from udcg.metrics import _kernels

QrelsLike = Qrels | Mapping[str, Mapping[str, int]] | str | PathLike[str]
RunLike = Run | Mapping[str, Mapping[str, float]] | str | PathLike[str]


@dataclass(frozen=True, eq=False)
class Evaluation:
    """Per-query values: ``values[i, j]`` is measure ``measures[j]`` on query ``qids[i]``."""

    qids: list[str]
    measures: list[Measure]
    values: np.ndarray

    def to_dict(self) -> dict[str, dict[str, float]]:
        """``{qid: {measure: value}}``."""
        names = [str(m) for m in self.measures]
        return {
            q: dict(zip(names, row, strict=True))
            for q, row in zip(self.qids, self.values.tolist(), strict=True)
        }

    def mean(self) -> dict[str, float]:
        """Mean of each measure over the evaluated queries (0 when there are none)."""
        means = self.values.mean(axis=0) if len(self.qids) else np.zeros(len(self.measures))
        return {str(m): float(v) for m, v in zip(self.measures, means, strict=True)}


def _as_run(run: RunLike) -> Run:
    if isinstance(run, Run):
        return run
    if isinstance(run, Mapping):
        return run_from_dict(run)
    return read_trec_run(run)


def _as_qrels(qrels: QrelsLike) -> Qrels:
    if isinstance(qrels, Qrels):
        return qrels
    if isinstance(qrels, Mapping):
        return qrels_from_dict(qrels)
    return read_trec_qrels(qrels)


def _dictionary(strings: pa.Array) -> pa.DictionaryArray:
    return strings if pa.types.is_dictionary(strings.type) else pc.dictionary_encode(strings)


def _encode(first: pa.Array, second: pa.Array) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """Integer codes of two string columns over one shared dictionary. Dictionary-encoded
    columns (as read from files) are merged through their dictionaries, not row by row."""
    first, second = _dictionary(first), _dictionary(second)
    n_first = len(first.dictionary)
    merged = pc.dictionary_encode(pa.concat_arrays([first.dictionary, second.dictionary]))
    codes = to_numpy(merged.indices)  # int32, read in place
    first_codes = to_numpy(first.indices).astype(np.int32, copy=False)
    # codes follow first appearance, so a dictionary without repeats keeps its own codes
    if not (codes[:n_first] == np.arange(n_first)).all():
        first_codes = codes[:n_first][first_codes]
    return first_codes, codes[n_first:][to_numpy(second.indices)], merged.dictionary


def _sort_with_order(keys: np.ndarray, n_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """``keys`` sorted and the row order that sorts them, for non-negative keys below
    ``n_keys``. When key and row number fit in 63 bits together, one plain sort of
    ``key << bits | row`` gives both (about 2x faster than argsort)."""
    bits = max(len(keys) - 1, 1).bit_length()
    if n_keys.bit_length() + bits > 63:
        order = np.argsort(keys)
        return keys[order], order
    packed = keys << bits  # in-place steps below: fewer fresh pages on a first call
    packed |= np.arange(len(keys), dtype=np.int64)
    packed.sort()
    order = packed & ((1 << bits) - 1)
    packed >>= bits
    return packed, order


def _run_grades(
    qrel_keys: np.ndarray, grades: np.ndarray, n_keys: int, run_keys: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(sorted qrels keys, each run row's grade)``: the qrels keys sorted once and every run
    key looked up in them by binary search; 0 for an unjudged pair."""
    sorted_keys, order = _sort_with_order(qrel_keys, n_keys)
    if not len(sorted_keys):
        return sorted_keys, np.zeros(len(run_keys), dtype=grades.dtype)
    pos = np.searchsorted(sorted_keys, run_keys)
    np.minimum(pos, len(sorted_keys) - 1, out=pos)
    unjudged = sorted_keys[pos] != run_keys
    pos = order[pos]
    del order  # each step frees what it no longer needs: fewer fresh pages on a first call
    run_grades = grades[pos]
    run_grades[unjudged] = 0
    return sorted_keys, run_grades


def _sorted_has_repeats(keys: np.ndarray) -> bool:
    """True when ``keys`` holds a value twice; sorts ``keys`` in place."""
    keys.sort()
    return bool((keys[1:] == keys[:-1]).any())


def _pair_keys(q: np.ndarray, d: np.ndarray, n_docs: int) -> np.ndarray:
    """One int64 key per (query, document) code pair: ``q * n_docs + d``."""
    keys = np.multiply(q, n_docs, dtype=np.int64)
    keys += d
    return keys


def _duplicate_error(
    what: str,
    source: str | None,
    keys: np.ndarray,
    qids: pa.Array,
    docs: pa.Array,
    q: np.ndarray,
    d: np.ndarray,
) -> UDCGInputError:
    """The error for a repeated (query, document) pair, located by line when read from a file."""
    if what == "qrels":
        locate_duplicate(source, ("qid", "iteration", "doc_id", "relevance"), "relevance")
    else:
        locate_duplicate(source, ("qid", "Q0", "doc_id", "rank", "score", "tag"), "score")
    order = np.argsort(keys, kind="stable")
    i = int(order[np.flatnonzero(keys[order][1:] == keys[order][:-1])[0] + 1])
    return UDCGInputError(
        f"duplicate document {docs[d[i]].as_py()!r} for query {qids[q[i]].as_py()!r}", field=what
    )


def _ideal_dcg(q: np.ndarray, grades: np.ndarray, n_queries: int, k: int | None) -> np.ndarray:
    """IDCG@k per query: its judged gains sorted descending, counted per grade (no sort)."""
    gains = np.maximum(grades, 0)
    n_grades = int(gains.max(initial=0)) + 1
    per_grade = np.bincount(np.multiply(q, n_grades, dtype=np.int64) + gains)
    counts = np.zeros((n_queries, n_grades), dtype=np.int64)
    counts.flat[: len(per_grade)] = per_grade
    depth = int(counts[:, 1:].sum(axis=1).max(initial=0))
    depth = depth if k is None else min(depth, k)
    cumulative = np.concatenate(([0.0], np.cumsum(_kernels.discounts(depth))))
    idcg = np.zeros(n_queries)
    filled = np.zeros(n_queries, dtype=np.int64)
    for grade in range(counts.shape[1] - 1, 0, -1):
        end = np.minimum(filled + counts[:, grade], depth)
        idcg += grade * (cumulative[end] - cumulative[np.minimum(filled, depth)])
        filled += counts[:, grade]
    return idcg


def _length_buckets(lengths: np.ndarray) -> list[np.ndarray]:
    """Group queries whose list lengths share a power-of-two class, bounding padding to 2x."""
    classes = np.ceil(np.log2(np.maximum(lengths, 1))).astype(np.int64)
    return [np.flatnonzero(classes == c) for c in np.unique(classes)]


def _measure(m: Measure, gains: np.ndarray, n_rel: np.ndarray, idcg: np.ndarray) -> np.ndarray:
    if m.name == "nDCG":
        return _kernels.ndcg(np.maximum(gains, 0.0), idcg, m.cutoff)
    is_rel = (gains >= m.rel).astype(np.float64)
    if m.name == "AP":
        return _kernels.average_precision(is_rel, n_rel, m.cutoff)
    if m.name == "RR":
        return _kernels.reciprocal_rank(is_rel, m.cutoff)
    if m.name == "P":
        return _kernels.precision(is_rel, m.cutoff)
    if m.name == "R":
        return _kernels.recall(is_rel, n_rel, m.cutoff)
    return _kernels.hits(is_rel, m.cutoff)


def evaluate_table(
    qrels: QrelsLike, run: RunLike, measures: str | Measure | Iterable[str | Measure]
) -> Evaluation:
    """Evaluate ``run`` against ``qrels``; inputs are Run/Qrels, TREC file paths or dicts."""
    parsed = parse_measures(measures)
    with small_pages():
        return _evaluate(parsed, _as_qrels(qrels), _as_run(run))


def _evaluate(parsed: list[Measure], qrels: Qrels, run: Run) -> Evaluation:
    # independent steps run side by side (udcg._threads): both encodings are Arrow's
    (q_run, q_qrels, qid_names), (d_run, d_qrels, doc_names) = run_concurrently(
        lambda: _encode(run.qids, qrels.qids), lambda: _encode(run.doc_ids, qrels.doc_ids)
    )
    n_queries, n_docs = len(qid_names), max(len(doc_names), 1)

    qrel_keys = _pair_keys(q_qrels, d_qrels, n_docs)
    run_keys = _pair_keys(q_run, d_run, n_docs)
    judged = np.zeros(n_queries, dtype=bool)
    judged[q_qrels] = True
    keep = judged[q_run]
    q_kept = q_run[keep]
    kept = (q_kept, run.scores[keep], run.doc_ids.take(from_numpy(np.flatnonzero(keep))))
    # the numpy work on this thread, Arrow's sort (its own memory pool) beside it
    (sorted_keys, run_grades, run_repeats), order = run_concurrently(
        lambda: (
            *_run_grades(qrel_keys, qrels.relevance, n_queries * n_docs, run_keys),
            _sorted_has_repeats(run_keys),  # after the lookup, which reads them in file order
        ),
        lambda: trec_order(*kept),
    )
    if (sorted_keys[1:] == sorted_keys[:-1]).any():
        raise _duplicate_error(
            "qrels", qrels.source, qrel_keys, qid_names, doc_names, q_qrels, d_qrels
        )
    if run_repeats:
        run_keys = _pair_keys(q_run, d_run, n_docs)  # the check sorted them
        raise _duplicate_error("run", run.source, run_keys, qid_names, doc_names, q_run, d_run)

    q_ranked = q_kept[order]
    gains = run_grades[keep][order].astype(np.float64)

    lengths = np.bincount(q_ranked, minlength=n_queries)
    evaluated = np.flatnonzero(lengths > 0)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    rank = np.arange(len(q_ranked)) - starts[q_ranked]

    rel_levels = {m.rel for m in parsed if m.name in ("AP", "R")}
    n_rel = {
        lvl: np.bincount(q_qrels, weights=qrels.relevance >= lvl, minlength=n_queries)
        for lvl in rel_levels
    }
    idcg = {
        m.cutoff: _ideal_dcg(q_qrels, qrels.relevance, n_queries, m.cutoff)
        for m in parsed
        if m.name == "nDCG"
    }

    values = np.empty((n_queries, len(parsed)))
    row_of = np.empty(n_queries, dtype=np.int64)
    for bucket in _length_buckets(lengths[evaluated]):
        queries = evaluated[bucket]
        row_of[queries] = np.arange(len(queries))
        in_bucket = np.isin(q_ranked, queries) if len(bucket) < len(evaluated) else slice(None)
        padded = np.zeros((len(queries), int(lengths[queries].max())))
        padded[row_of[q_ranked[in_bucket]], rank[in_bucket]] = gains[in_bucket]
        for j, m in enumerate(parsed):
            n_rel_m = n_rel[m.rel][queries] if m.name in ("AP", "R") else None
            idcg_m = idcg[m.cutoff][queries] if m.name == "nDCG" else None
            values[queries, j] = _measure(m, padded, n_rel_m, idcg_m)
    names = qid_names.take(from_numpy(evaluated)).to_pylist()
    return Evaluation(names, parsed, values[evaluated])


def evaluate(
    qrels: QrelsLike, run: RunLike, measures: str | Measure | Iterable[str | Measure]
) -> dict[str, dict[str, float]]:
    """Per-query values ``{qid: {measure: value}}``, equal to pytrec_eval's for the same inputs.

    ``measures`` use ir_measures names: ``nDCG@10``, ``AP``, ``AP@100``, ``RR``, ``P@5``,
    ``R@100``, ``Hits@10``.
    """
    return evaluate_table(qrels, run, measures).to_dict()
