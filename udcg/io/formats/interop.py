"""Runs and qrels from other libraries' objects, as :class:`~udcg.io.formats.trec.Run` and
:class:`~udcg.io.formats.trec.Qrels`.

Accepted, besides TREC files and ``{qid: {doc_id: value}}`` dicts (``udcg.io.formats.trec``):

* ranx ``Run`` / ``Qrels`` (read through their ``to_dict()``);
* pandas DataFrames with TREC columns (first match wins): query ``q_id`` (ranx), ``qid``
  (PyTerrier) or ``query_id`` (ir_measures); document ``doc_id`` (ranx, ir_measures) or
  ``docno`` (PyTerrier); run score ``score``; qrels grade ``relevance`` (ir_measures),
  ``label`` (PyTerrier), ``rel`` or ``score`` (ranx's ``Qrels.to_dataframe()``);
* iterables of objects with ``query_id``, ``doc_id`` and ``score`` (ir_measures ``ScoredDoc``)
  or ``relevance`` (ir_measures ``Qrel``), such as ``list(ir_measures.read_trec_run(...))``.

None of those libraries is imported here: objects are recognised by their type's module or by
their attributes, so reading a file never loads pandas, ranx or ir_measures.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from udcg.errors import UDCGInputError
from udcg.io.formats.trec import Qrels, Run, qrels_from_dict, run_from_dict
from udcg.validation import show

Kind = Literal["run", "qrels"]

#: DataFrame column names, in the order they are looked for
QUERY_COLUMNS = ("q_id", "qid", "query_id")
DOC_COLUMNS = ("doc_id", "docno")
VALUE_COLUMNS: dict[Kind, tuple[str, ...]] = {
    "run": ("score",),
    "qrels": ("relevance", "label", "rel", "score"),
}
#: attribute holding the value of an item of an iterable (ir_measures' ScoredDoc and Qrel)
_VALUE_ATTRIBUTE: dict[Kind, str] = {"run": "score", "qrels": "relevance"}
_ITEM_NAME: dict[Kind, str] = {"run": "ScoredDoc", "qrels": "Qrel"}


def _module(obj: Any) -> str:
    return type(obj).__module__ or ""


def _is_ranx(obj: Any) -> bool:
    return _module(obj).split(".")[0] == "ranx" and hasattr(obj, "to_dict")


def _is_dataframe(obj: Any) -> bool:
    return hasattr(obj, "columns") and hasattr(obj, "__getitem__") and not isinstance(obj, type)


def to_run(obj: Any) -> Run:
    """A Run from a ranx Run, a DataFrame or an iterable of ScoredDoc-like objects.

    Examples:
        A PyTerrier-style DataFrame (``qid``, ``docno``, ``score``):

        >>> import pandas as pd
        >>> frame = pd.DataFrame({"qid": ["q1", "q1"], "docno": ["d1", "d2"], "score": [2.0, 1.0]})
        >>> to_run(frame).to_dict()
        {'q1': {'d1': 2.0, 'd2': 1.0}}
    """
    return _convert(obj, "run")  # type: ignore[return-value]


def to_qrels(obj: Any) -> Qrels:
    """Qrels from a ranx Qrels, a DataFrame or an iterable of Qrel-like objects.

    Examples:
        Objects with ``query_id``, ``doc_id`` and ``relevance``, as ir_measures' ``Qrel``:

        >>> from types import SimpleNamespace as Qrel
        >>> to_qrels([Qrel(query_id="q1", doc_id="d1", relevance=2)]).to_dict()
        {'q1': {'d1': 2}}
    """
    return _convert(obj, "qrels")  # type: ignore[return-value]


def _convert(obj: Any, kind: Kind) -> Run | Qrels:
    if _is_ranx(obj):
        expected = "Run" if kind == "run" else "Qrels"
        if type(obj).__name__ != expected:
            raise UDCGInputError(
                f"expected a ranx {expected}, got a ranx {type(obj).__name__}", field=kind
            )
        data = obj.to_dict()
        return run_from_dict(data) if kind == "run" else qrels_from_dict(data)
    if _is_dataframe(obj):
        return _from_columns(*_dataframe_columns(obj, kind), kind)
    if isinstance(obj, Iterable) and not isinstance(obj, str | bytes | Mapping):
        return _from_columns(*_item_columns(obj, kind), kind)
    raise UDCGInputError(
        f"expected a TREC {kind} file, a {{qid: {{doc_id: value}}}} dict, a udcg or ranx "
        f"{'Run' if kind == 'run' else 'Qrels'}, a DataFrame or an iterable of "
        f"{_ITEM_NAME[kind]}; got {type(obj).__name__}",
        field=kind,
    )


def _pick(columns: list[str], wanted: tuple[str, ...], what: str, kind: Kind) -> str:
    for name in wanted:
        if name in columns:
            return name
    raise UDCGInputError(
        f"the DataFrame has no {what} column ({' / '.join(wanted)}); its columns: "
        f"{', '.join(map(str, columns)) or 'none'}",
        field=kind,
    )


def _one_id_column(frame: Any, columns: list[str], wanted: tuple[str, ...], kind: Kind) -> None:
    """Refuse two id columns (``qid`` and ``query_id``) that disagree: which one is meant?"""
    present = [name for name in wanted if name in columns]
    for other in present[1:]:
        if frame[present[0]].astype(str).tolist() != frame[other].astype(str).tolist():
            raise UDCGInputError(
                f"the DataFrame has both {present[0]!r} and {other!r} columns, and they differ: "
                "keep the one that holds the ids",
                field=kind,
            )


def _dataframe_columns(frame: Any, kind: Kind) -> tuple[Any, Any, Any]:
    columns = [str(c) for c in frame.columns]
    read = {*QUERY_COLUMNS, *DOC_COLUMNS, *VALUE_COLUMNS[kind]}  # others are never read
    twice = sorted({c for c in columns if c in read and columns.count(c) > 1})
    if twice:
        raise UDCGInputError(f"the DataFrame has two columns named {twice[0]!r}", field=kind)
    q = _pick(columns, QUERY_COLUMNS, "query id", kind)
    d = _pick(columns, DOC_COLUMNS, "document id", kind)
    _one_id_column(frame, columns, QUERY_COLUMNS, kind)
    _one_id_column(frame, columns, DOC_COLUMNS, kind)
    v = _pick(columns, VALUE_COLUMNS[kind], "score" if kind == "run" else "relevance", kind)
    return frame[q], frame[d], frame[v]


def _item_columns(items: Iterable, kind: Kind) -> tuple[list, list, list]:
    value = _VALUE_ATTRIBUTE[kind]
    qids: list = []
    doc_ids: list = []
    values: list = []
    for i, item in enumerate(items):
        try:
            qids.append(item.query_id)
            doc_ids.append(item.doc_id)
            values.append(getattr(item, value))
        except AttributeError:
            missing = [a for a in ("query_id", "doc_id", value) if not hasattr(item, a)]
            raise UDCGInputError(
                f"item {i} ({type(item).__name__}) has no {', '.join(missing)}: expected "
                f"objects with query_id, doc_id and {value} (ir_measures {_ITEM_NAME[kind]})",
                field=kind,
            ) from None
    return qids, doc_ids, values


def _ids(values: Any, kind: Kind, what: str) -> pa.Array:
    """Plain Arrow strings; ids that are not strings (integers) are turned into strings."""
    try:
        ids = pa.array(values, type=pa.string())
    except (pa.ArrowTypeError, pa.ArrowInvalid):  # not all strings: as text, none merged
        first: dict[str, Any] = {}
        for v in values:
            if v is not None and first.setdefault(str(v), v) != v:
                raise UDCGInputError(
                    f"{what}s {first[str(v)]!r} and {v!r} are one id as text: give one",
                    field=kind,
                ) from None
        ids = pa.array([None if v is None else str(v) for v in values], type=pa.string())
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks()
    if ids.null_count:
        raise UDCGInputError(f"{ids.null_count} missing {what}(s)", field=kind)
    return ids


def _numbers(values: Any, kind: Kind, qids: pa.Array, doc_ids: pa.Array) -> np.ndarray:
    """Finite float scores (run) or integer grades (qrels); the first bad one is an error
    naming its query and document."""
    array = np.asarray(values)
    bad = None
    if array.dtype.kind in "biuf":
        numbers = array.astype(np.float64)
        if kind == "run":
            flags = ~np.isfinite(numbers)
        else:
            flags = ~np.isfinite(numbers) | (numbers != np.round(numbers))
        if array.dtype.kind == "b":
            flags = np.ones(len(array), dtype=bool)
        bad = int(np.argmax(flags)) if flags.any() else None
    else:  # objects: check one by one
        numbers = np.zeros(len(array))
        for i, v in enumerate(array.tolist()):
            if isinstance(v, bool) or not isinstance(v, int | float):
                bad = i
                break
            numbers[i] = v
            if not np.isfinite(v) or (kind == "qrels" and int(v) != v):
                bad = i
                break
    if bad is not None:
        what = "a finite score" if kind == "run" else "an integer grade"
        v = array.tolist()[bad]
        raise UDCGInputError(
            f"query {qids[bad].as_py()!r}, document {doc_ids[bad].as_py()!r}: {show(v)} is "
            f"not {what}",
            field=kind,
        )
    return numbers if kind == "run" else numbers.astype(np.int64)


def _from_columns(qids: Any, doc_ids: Any, values: Any, kind: Kind) -> Run | Qrels:
    q = _ids(qids, kind, "query id")
    d = _ids(doc_ids, kind, "document id")
    numbers = _numbers(values, kind, q, d)
    if kind == "run":
        return Run(q, d, numbers)
    return Qrels(q, d, numbers)
