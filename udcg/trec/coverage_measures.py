"""C-Prec@k and C-nDCG@k of a run (Q-CARE, :mod:`udcg.qcare.coverage`): the passages are each
query's top k documents in trec_eval order (score descending, ties by document id descending),
each with its coverage gain ``r`` in [0, 1] given per (query, document)::

    C-Prec@k = (1/k) * sum_{j<=k} r_j           (a query with fewer than k documents: 0s)
    C-nDCG@k = DCG@k(g(r)) / IDCG@k             (IDCG: the same top k sorted by r; 0 when 0)

computed by :func:`udcg.qcare.coverage.c_precision` and :func:`~udcg.qcare.coverage.c_ndcg`
(``gain``: ``linear`` g(r) = r, the default, or ``exponential`` g(r) = 2^(10 r) - 1).
``binary=True`` takes r = 1 if the passage covers any sub-query.

The coverage source (``coverage=``, ``udcg trec --coverage FILE``) is one of:

* a dict ``{qid: {doc_id: value}}``, the value either the gain ``r`` (a number in [0, 1]) or
  the passage's row of per-sub-query labels (booleans, or fractions in [0, 1] for fractional
  coverage), one per sub-query of the query: ``r`` is then
  :func:`udcg.qcare.coverage.coverage` of the row (the mean; binary: the maximum). Every row of
  a query has the query's number of sub-queries;
* a TSV file, ``qid doc_id r`` per line (spaces or tabs);
* a JSONL file of ``{"qid", "doc_id", "covers": [labels]}`` or ``{"qid", "doc_id",
  "coverage": r}`` lines;
* contexts labelled by ``udcg qcare label`` (a JSONL file whose first line has ``passages``):
  each passage's ``covers`` row, with the context's ``subqueries``.

With a gain ``r`` given as a number, ``binary`` takes ``1[r > 0]`` (the same as ``1[covers any]``
on boolean labels; give the rows for fractional ones). A row holding a null label (a check
without a usable answer) gives its passage no gain; a (query, document) given twice with two
gains is an error. A document ranked within the top k of a scored query without a gain is an
error naming the query and the document, never a silent 0. Queries the qrels do not judge are
not scored.

Examples:
    d2 covers both sub-queries, d1 one of two: r = (0.5, 1.0) in rank order; C-nDCG@2 =
    ``(0.5 + 1/log2(3)) / (1 + 0.5/log2(3))``:

    >>> from udcg.trec import evaluate
    >>> qrels, run = {"q1": {"d1": 1}}, {"q1": {"d1": 2.0, "d2": 1.0}}
    >>> covers = {"q1": {"d1": [True, False], "d2": [True, True]}}
    >>> values = evaluate(qrels, run, ["C-Prec@2", "C-nDCG@2"], coverage=covers)["q1"]
    >>> {name: round(value, 4) for name, value in values.items()}
    {'C-Prec@2': 0.75, 'C-nDCG@2': 0.8597}
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from typing import Any

import numpy as np
import pyarrow as pa

from udcg.errors import UDCGInputError
from udcg.io.arrow import dictionary_encode, to_numpy
from udcg.io.contexts.jsonl import Context, read_contexts
from udcg.io.files import PathType, numbered_lines
from udcg.io.formats.trec import read_columns
from udcg.metrics.coverage import c_ndcg, c_precision, coverage
from udcg.trec.measures import COVERAGE_MEASURES, Measure
from udcg.validation import show

__all__ = ["Coverage", "CoverageLike", "CoveragePlan", "as_coverage", "plan"]

_ARGUMENT = "pass coverage= (udcg trec: --coverage FILE)"


@dataclass(frozen=True, eq=False)
class Coverage:
    """One coverage gain per (query, document): ``graded`` r in [0, 1] and ``binary`` r (1 if
    the passage covers any sub-query); ``source`` is the file read (``None`` for a dict).

    Examples:
        >>> c = as_coverage({"q1": {"d1": [True, False, False], "d2": 0.5}})
        >>> c.doc_ids.to_pylist(), c.graded.tolist(), c.binary.tolist()
        (['d1', 'd2'], [0.3333333333333333, 0.5], [1.0, 1.0])
    """

    qids: pa.Array
    doc_ids: pa.Array
    graded: np.ndarray
    binary: np.ndarray
    source: str | None = None

    def __len__(self) -> int:
        return len(self.graded)


CoverageLike = Coverage | Mapping[str, Mapping[str, Any]] | str | PathLike[str]


class _Gains:
    """Gains collected pair by pair; a pair given twice must have the same gains."""

    def __init__(self, path: PathType | None) -> None:
        self.path = path
        self.by_pair: dict[tuple[str, str], tuple[float, float]] = {}

    def add(self, qid: str, doc_id: str, gains: tuple[float, float], line: int | None) -> None:
        pair = (qid, doc_id)
        known = self.by_pair.setdefault(pair, gains)
        if known != gains:
            raise UDCGInputError(
                f"query {qid!r}, document {doc_id!r}: two coverage gains ({known[0]!r} and "
                f"{gains[0]!r})",
                path=self.path,
                line=line,
                field="coverage",
            )

    def coverage(self) -> Coverage:
        pairs = list(self.by_pair)
        values = np.array(list(self.by_pair.values()), dtype=np.float64).reshape(-1, 2)
        return Coverage(
            pa.array([q for q, _ in pairs], pa.string()),
            pa.array([d for _, d in pairs], pa.string()),
            values[:, 0].copy(),
            values[:, 1].copy(),
            None if self.path is None else str(self.path),
        )


def _gain(value: Any, where: str, path: PathType | None, line: int | None) -> tuple[float, float]:
    """``(r, 1[r > 0])`` of a number in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        raise UDCGInputError(
            f"{where}: expected a coverage gain or a list of labels, got {show(value)}",
            path=path,
            line=line,
            field="coverage",
        )
    r = float(value)
    if not 0.0 <= r <= 1.0:
        raise UDCGInputError(
            f"{where}: coverage {r!r} is not in [0, 1]", path=path, line=line, field="coverage"
        )
    return r, float(r > 0)


def _row_gains(rows: list[Any], where: str, path: PathType | None, line: int | None) -> list:
    """``(r, binary r)`` of each label row of one query (:func:`udcg.qcare.coverage.coverage`)
    or None for a row with a null label; rows of one query have one length."""
    usable = [row for row in rows if None not in row]
    sizes = sorted({len(row) for row in rows})
    if len(sizes) > 1:
        raise UDCGInputError(
            f"{where}: label rows of {sizes[0]} and {sizes[-1]} sub-queries; give "
            "one label per sub-query of the query in every row",
            path=path,
            line=line,
            field="coverage",
        )
    try:
        graded = coverage([usable])[0].tolist()
        binary = coverage([usable], binary=True)[0].tolist()
    except UDCGInputError as error:
        raise UDCGInputError(
            f"{where}: {error.reason}", path=path, line=line, field="coverage"
        ) from None
    pairs = iter(zip(graded, binary, strict=True))
    return [None if None in row else next(pairs) for row in rows]


def _is_row(value: Any) -> bool:
    return isinstance(value, list | tuple | np.ndarray)


def _from_dict(data: Mapping[str, Any]) -> Coverage:
    gains = _Gains(None)
    for qid, docs in data.items():
        if not isinstance(docs, Mapping):
            raise UDCGInputError(
                f"query {qid!r}: expected a dict of doc_id -> gain or labels", field="coverage"
            )
        rows = {str(d): list(v) for d, v in docs.items() if _is_row(v)}
        found = _row_gains(list(rows.values()), f"query {qid!r}", None, None) if rows else []
        by_row = dict(zip(rows, found, strict=True))
        for doc_id, value in docs.items():
            doc_id = str(doc_id)
            if doc_id in by_row:
                if by_row[doc_id] is not None:
                    gains.add(str(qid), doc_id, by_row[doc_id], None)
            else:
                where = f"query {qid!r}, document {doc_id!r}"
                gains.add(str(qid), doc_id, _gain(value, where, None, None), None)
    return gains.coverage()


def _first_object(path: PathType) -> dict[str, Any] | None:
    """The first non-blank line of ``path`` as JSON when it starts with ``{`` (else None)."""
    for number, text in numbered_lines(path):
        if text.strip():
            if not text.lstrip().startswith("{"):
                return None
            try:
                first = json.loads(text)
            except ValueError as exc:
                raise UDCGInputError(f"not JSON: {exc}", path=path, line=number) from None
            return first if isinstance(first, dict) else {}
    raise UDCGInputError("empty file", path=path, field="coverage")


def _from_contexts(path: PathType) -> Coverage:
    """The gains of the passages of contexts labelled by ``udcg qcare label`` (the reader
    checks each ``covers`` row has one label per sub-query); a warning when the labels come
    from several sources (:func:`udcg.io.contexts.sources.warn_mixed_sources`); labels of a
    question or passages edited since are refused
    (:func:`udcg.io.contexts.sources.check_label_inputs`)."""
    from udcg.io.contexts.sources import RECORD, check_label_inputs, warn_mixed_sources

    gains = _Gains(path)
    sources = []  # the labelled contexts, reduced to the record of who labelled them
    for ctx in read_contexts(path):
        if ctx.subqueries is None:
            continue
        labelled = [p for p in ctx.passages if p.covers is not None]
        rows = [list(p.covers) for p in labelled]
        if not rows:
            continue
        check_label_inputs([ctx])
        sources.append(Context(ctx.qid, extra={RECORD: ctx.extra.get(RECORD)}))
        line = ctx.location()["line"]
        found = _row_gains(rows, f"query {ctx.qid!r}", path, line)
        for passage, pair in zip(labelled, found, strict=True):
            if pair is not None:
                gains.add(ctx.qid, passage.doc_id, pair, line)
    warn_mixed_sources(sources, path)
    return gains.coverage()


def _from_lines(path: PathType) -> Coverage:
    """``{"qid", "doc_id", "covers": [labels]}`` or ``{..., "coverage": r}`` lines."""
    gains = _Gains(path)
    for number, text in numbered_lines(path):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise UDCGInputError(f"not JSON: {exc}", path=path, line=number) from None
        if not isinstance(obj, dict):
            raise UDCGInputError("expected a JSON object", path=path, line=number)
        qid, doc_id = obj.get("qid"), obj.get("doc_id")
        for name, value in (("qid", qid), ("doc_id", doc_id)):
            if not isinstance(value, str) or not value:
                raise UDCGInputError(
                    f"expected a non-empty string, got {show(value)}",
                    path=path,
                    line=number,
                    field=name,
                )
        held = [key for key in ("covers", "coverage") if key in obj]
        if len(held) != 1:
            raise UDCGInputError(
                "expected one of covers (a list of labels) and coverage (a gain r)",
                path=path,
                line=number,
            )
        where = f"query {qid!r}, document {doc_id!r}"
        if held[0] == "coverage":
            pair = _gain(obj["coverage"], where, path, number)
        elif not isinstance(obj["covers"], list):
            raise UDCGInputError(
                "expected a list of labels, one per sub-query", path=path, line=number
            )
        else:
            pair = _row_gains([obj["covers"]], where, path, number)[0]
        if pair is not None:
            gains.add(qid, doc_id, pair, number)
    return gains.coverage()


def _from_tsv(path: PathType) -> Coverage:
    """``qid doc_id r`` lines, parsed by Arrow; a gain out of [0, 1] or a repeated pair is
    then located by a line scan."""
    qids, doc_ids, values = read_columns(path, ("qid", "doc_id", "r"), "r", pa.float64())
    graded = np.asarray(values, dtype=np.float64)
    q, d = dictionary_encode(qids), dictionary_encode(doc_ids)
    keys = to_numpy(q.indices).astype(np.int64) * max(len(d.dictionary), 1)
    keys += to_numpy(d.indices)
    keys.sort()
    if not ((graded >= 0.0) & (graded <= 1.0)).all() or (keys[1:] == keys[:-1]).any():
        gains = _Gains(path)
        for number, text in numbered_lines(path):
            fields = text.split()
            if len(fields) == 3:
                where = f"query {fields[0]!r}, document {fields[1]!r}"
                gains.add(*fields[:2], _gain(float(fields[2]), where, path, number), number)
        return gains.coverage()
    return Coverage(qids, doc_ids, graded, (graded > 0).astype(np.float64), str(path))


def as_coverage(source: CoverageLike) -> Coverage:
    """``source`` (a dict, a TSV or JSONL file, labelled contexts; see the module) as
    :class:`Coverage`.

    Examples:
        >>> as_coverage({"q1": {"d1": 0.5}}).graded.tolist()
        [0.5]
    """
    if isinstance(source, Coverage):
        return source
    if isinstance(source, Mapping):
        return _from_dict(source)
    if not isinstance(source, str | PathLike):
        raise UDCGInputError(
            "expected {qid: {doc_id: gain or labels}}, a coverage file or labelled contexts, "
            f"got {type(source).__name__}",
            field="coverage",
        )
    first = _first_object(source)
    if first is None:
        return _from_tsv(source)
    return _from_contexts(source) if "passages" in first else _from_lines(source)


@dataclass(frozen=True, eq=False)
class CoveragePlan:
    """What the coverage measures of one evaluation need: the gains, which of them (graded,
    binary) and the depth up to which every scored query needs them.

    Examples:
        >>> from udcg.trec.measures import parse_measures
        >>> needs = plan(parse_measures(["C-nDCG(binary=True)@3", "nDCG@10"]), {"q1": {"d1": 1}})
        >>> needs.depth, needs.kinds
        (3, (True,))
    """

    coverage: Coverage
    kinds: tuple[bool, ...]
    depth: int

    def ranked(
        self,
        rows: np.ndarray,
        q_ranked: np.ndarray,
        lengths: np.ndarray,
        scored: np.ndarray,
        qid_names: pa.Array,
        doc_of: Callable[[int], str],
    ) -> dict[bool, np.ndarray]:
        """Per kind (binary or not), the gain of every ranked row (0 where none is given), once
        every scored query (``scored[q]``) has a gain for each document ranked within
        ``self.depth``. ``rows``: each ranked row's index in the coverage, -1 where none;
        ``q_ranked`` and ``lengths`` as in the engine; ``doc_of(i)``: ranked row i's document."""
        first_row = np.cumsum(lengths) - lengths
        rank = np.arange(len(q_ranked)) - first_row[q_ranked]
        missing = rows < 0
        at = np.flatnonzero(missing & (rank < self.depth) & scored[q_ranked])
        if len(at):
            i = int(at[0])
            qid = qid_names[int(q_ranked[i])].as_py()
            raise UDCGInputError(
                f"no coverage for query {qid!r} document {doc_of(i)!r} (rank {rank[i] + 1})",
                path=self.coverage.source,
                field="coverage",
            )
        out = {}
        for binary in self.kinds:
            values = self.coverage.binary if binary else self.coverage.graded
            out[binary] = np.where(missing, 0.0, values.take(np.maximum(rows, 0)))
        return out

    @staticmethod
    def score(m: Measure, r: np.ndarray) -> np.ndarray:
        """``m`` per row of the padded ranked gains ``r`` (zero-padded past each list)."""
        k = m.cutoff
        if m.name == "C-Prec":
            return c_precision(r[:, :k], k)
        return c_ndcg(r[:, :k], k, m.gain)


def plan(measures: Sequence[Measure], coverage_source: CoverageLike | None) -> CoveragePlan | None:
    """The checked inputs of the coverage measures among ``measures`` (None when there are
    none).

    Examples:
        >>> from udcg.trec.measures import parse_measures
        >>> plan(parse_measures("C-Prec@5"), None)
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'coverage': C-Prec@5 needs coverage gains: pass ...
    """
    wanted = [m for m in measures if m.name in COVERAGE_MEASURES]
    if not wanted:
        return None
    if coverage_source is None:
        raise UDCGInputError(f"{wanted[0]} needs coverage gains: {_ARGUMENT}", field="coverage")
    kinds = tuple(sorted({m.binary for m in wanted}))
    return CoveragePlan(as_coverage(coverage_source), kinds, max(m.cutoff for m in wanted))
