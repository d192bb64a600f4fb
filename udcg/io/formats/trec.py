"""TREC run and qrels files, and ``{qid: {doc_id: value}}`` dicts, as columnar tables.

Run lines are ``qid Q0 doc_id rank score tag`` (rank, Q0 and tag are ignored, as trec_eval
does); qrels lines are ``qid iteration doc_id relevance`` with integer relevance. Columns may
be separated by any run of spaces or tabs. Files are parsed by Arrow's multithreaded CSV
reader; when it or a vectorised check finds a problem, a line-by-line scan reports the first
one as ``FILE:LINE: field 'x': what is wrong``.
"""

from __future__ import annotations

import gzip
import math
import mmap
import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from udcg.errors import UDCGInputError, UDCGWarning
from udcg.io.arrow import (
    decoded,
    encoded,
    from_numpy,
    has_any_byte,
    memory_pool,
    one_chunk,
    sort_indices,
    to_numpy,
)
from udcg.io.files import (
    InputBytes,
    PathType,
    atomic_write,
    is_regular_file,
    open_binary,
    read_bytes,
    read_once,
)
from udcg.validation import show

_RUN_COLUMNS = ("qid", "Q0", "doc_id", "rank", "score", "tag")
BOM = "\ufeff".encode()  # a UTF-8 byte order mark, which Arrow's parser skips
_QRELS_COLUMNS = ("qid", "iteration", "doc_id", "relevance")


@dataclass(frozen=True, eq=False)
class Run:
    """A ranked retrieval run: one row per (query, document) with its score.

    Examples:
        >>> run = run_from_dict({"q1": {"d1": 12.5, "d2": 9.0}, "q2": {"d3": 1.0}})
        >>> len(run), run.qids.to_pylist(), run.scores.tolist()
        (3, ['q1', 'q1', 'q2'], [12.5, 9.0, 1.0])
    """

    qids: pa.Array  # strings, or dictionary-encoded strings as the file readers give them
    doc_ids: pa.Array
    scores: np.ndarray
    source: str | InputBytes | None = None  # the file, or a pipe's content read once

    def __len__(self) -> int:
        return len(self.scores)

    def to_dict(self) -> dict[str, dict[str, float]]:
        """``{qid: {doc_id: score}}``."""
        return _to_dict(self.qids, self.doc_ids, self.scores.tolist())


@dataclass(frozen=True, eq=False)
class Qrels:
    """Relevance judgements: one row per judged (query, document) with an integer grade.

    Examples:
        >>> qrels = qrels_from_dict({"q1": {"d1": 2, "d2": 0}})
        >>> len(qrels), qrels.to_dict()
        (2, {'q1': {'d1': 2, 'd2': 0}})
    """

    qids: pa.Array
    doc_ids: pa.Array
    relevance: np.ndarray
    source: str | InputBytes | None = None  # the file, or a pipe's content read once

    def __len__(self) -> int:
        return len(self.relevance)

    def to_dict(self) -> dict[str, dict[str, int]]:
        """``{qid: {doc_id: relevance}}``."""
        return _to_dict(self.qids, self.doc_ids, self.relevance.tolist())


def _to_dict(qids: pa.Array, doc_ids: pa.Array, values: list) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for q, d, v in zip(qids.to_pylist(), doc_ids.to_pylist(), values, strict=True):
        out.setdefault(q, {})[d] = v
    return out


def _single_spaced(data: bytes) -> bytes:
    """Columns separated by exactly one space, no leading or trailing spaces; lines ended
    where Arrow ends them (CR, LF or CRLF)."""
    return b"\n".join(b" ".join(line.split()) for line in LINE_END.split(data))


def _parse_table(data: bytes, names: tuple[str, ...], types: dict[str, pa.DataType]) -> pa.Table:
    """Parse single-space separated columns; retry once with whitespace normalised."""
    try:
        return _read_csv(data, names, types)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return _read_csv(_single_spaced(data), names, types)


def _read_csv(
    source: bytes | pa.NativeFile, names: tuple[str, ...], types: dict[str, pa.DataType]
) -> pa.Table:
    # the ignored columns are read too, only to see empty fields: two spaces in a row make
    # one, which shifts the columns of a line with a field too few
    ignored = [name for name in names if name not in types]
    table = _csv_table(source, names, {**types, **dict.fromkeys(ignored, pa.string())})
    for name in ignored:
        if any(_has_empty(chunk) for chunk in table[name].chunks):
            raise pa.ArrowInvalid(f"an empty {name} field")
    table = table.drop_columns(ignored)
    for name in ("qid", "doc_id"):
        # the evaluation needs codes: one hash table per column, over all of its blocks
        ids = encoded(table[name])
        ids.dictionary.validate(full=True)  # UTF-8, once per distinct id: ArrowInvalid if not
        if has_any_byte(ids.dictionary, b"\t\v\f"):  # a tab splits columns too: misread
            raise pa.ArrowInvalid(f"whitespace other than spaces inside a {name}")
        if _has_empty(ids.dictionary):
            raise pa.ArrowInvalid(f"an empty {name}")
        table = table.set_column(table.column_names.index(name), name, ids)
    return table


def _has_empty(strings: pa.Array) -> bool:
    """Whether any of ``strings`` (plain strings) is the empty string."""
    if not len(strings):
        return False
    start = strings.offset
    offsets = np.frombuffer(strings.buffers()[1], np.int32)[start : start + len(strings) + 1]
    return bool((offsets[1:] == offsets[:-1]).any())


def _csv_table(
    source: bytes | pa.NativeFile, names: tuple[str, ...], types: dict[str, pa.DataType]
) -> pa.Table:
    import pyarrow.csv as pa_csv  # only where a file is parsed

    return pa_csv.read_csv(
        pa.BufferReader(pa.py_buffer(source)) if isinstance(source, bytes) else source,
        # on the calling thread: Arrow's thread pool parses blocks in parallel but costs more
        # CPU time in all (thread start-up, fresh memory for every thread)
        read_options=pa_csv.ReadOptions(column_names=list(names), use_threads=False),
        parse_options=pa_csv.ParseOptions(delimiter=" ", quote_char=False),
        convert_options=pa_csv.ConvertOptions(
            column_types=types,
            include_columns=list(types),
            strings_can_be_null=False,
            null_values=[],
            check_utf8=False,  # checked on each id column's dictionary (``_read_csv``)
        ),
        memory_pool=memory_pool(),
    )


_ASCII_SPACE = " \t\n\r\v\f"  # what bytes.split(), so _single_spaced, splits on
_ASCII_SPACES = re.compile(f"[{_ASCII_SPACE}]+")


def split_columns(
    line: str, names: tuple[str, ...], path: PathType | None, number: int
) -> list[str]:
    """The columns of ``line``, separated by ASCII whitespace as in the normalised parse (other
    spaces belong to an id): none for a blank line, else exactly ``len(names)`` (an error at
    ``path:number`` otherwise).

    Examples:
        >>> columns = ("qid", "Q0", "doc_id", "rank", "score", "tag")
        >>> split_columns("q1  Q0 d1\\t1 2.5 bm25", columns, "run.txt", 7)
        ['q1', 'Q0', 'd1', '1', '2.5', 'bm25']
        >>> split_columns("q1 Q0", columns[:3], "run.txt", 7)
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: run.txt:7: expected 3 columns (qid Q0 doc_id), found 2
    """
    fields = _ASCII_SPACES.split(line.strip(_ASCII_SPACE))
    fields = fields if fields != [""] else []
    if fields and len(fields) != len(names):
        raise UDCGInputError(
            f"expected {len(names)} columns ({' '.join(names)}), found {len(fields)}",
            path=path,
            line=number,
        )
    return fields


def _scan(path: PathType, data: bytes, names: tuple[str, ...], value_field: str) -> None:
    """Walk the file line by line and raise UDCGInputError at the first bad line."""
    seen: dict[str, set[str]] = {}
    data = data.removeprefix(BOM)  # as Arrow drops it
    for number, raw in enumerate(LINE_END.split(data), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UDCGInputError(
                f"not valid UTF-8 ({exc.reason})", path=path, line=number
            ) from None
        fields = split_columns(line, names, path, number)
        if not fields:
            continue
        row = dict(zip(names, fields, strict=True))
        _check_value(row[value_field], value_field, path, number)
        docs = seen.setdefault(row["qid"], set())
        if row["doc_id"] in docs:
            raise UDCGInputError(
                f"duplicate document {row['doc_id']!r} for query {row['qid']!r}",
                path=path,
                line=number,
                field="doc_id",
            )
        docs.add(row["doc_id"])


_INT64 = re.compile(r"-?[0-9]{1,19}")
LINE_END = re.compile(rb"\r\n|\r|\n")  # as Arrow's reader ends lines
_HEX_LAST = re.compile(rb"[ \t]0[xX][0-9A-Fa-f]+[ \t\v\f]*(?:\r|\n|$)")  # CR: a line end too


def _hex_grade(data: bytes | mmap.mmap) -> bool:
    """Whether a line of ``data`` ends in a hexadecimal number (a grade Arrow would take).

    Examples:
        >>> _hex_grade(b"q1 0 d1 0x10\\n"), _hex_grade(b"q1 0 0x10 1\\n")
        (True, False)
    """
    if data.find(b"0x") < 0 and data.find(b"0X") < 0:
        return False
    return _HEX_LAST.search(data) is not None


def _hex_grade_in(path: PathType, data: bytes | None) -> bool:
    """:func:`_hex_grade` of ``data``, or, when Arrow read the regular file ``path`` itself, of
    that file mapped into memory (not read a second time)."""
    if data is not None:
        return _hex_grade(data)
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as m:
        return _hex_grade(m)


def _check_value(text: str, field: str, path: PathType | None, line: int | None) -> None:
    """Refuse what Arrow does not parse (Python also takes ``+1``, ``1_000``, other digits)."""
    if field == "relevance":
        if not (_INT64.fullmatch(text) and -(2**63) <= int(text) < 2**63):
            raise UDCGInputError(
                f"{text!r} is not an integer grade", path=path, line=line, field=field
            )
        return
    try:
        if not text.isascii() or "_" in text:
            raise ValueError(text)
        value = float(text)
    except ValueError:
        raise UDCGInputError(
            f"{text!r} is not a number", path=path, line=line, field=field
        ) from None
    if not math.isfinite(value):
        raise UDCGInputError(f"{text!r} is not finite", path=path, line=line, field=field)


def _arrow_table(
    path: PathType, names: tuple[str, ...], types: dict[str, pa.DataType]
) -> pa.Table | None:
    """The parsed table of a regular, uncompressed file that Arrow reads itself (in blocks,
    into udcg's memory pool: no copy of the whole file, far fewer fresh pages); None for
    gzip, pipes and other streams, for an empty file, or when the parse fails (other
    spacing, a bad line), all of which the in-memory path handles and words."""
    if not is_regular_file(path):  # asked first: opening a pipe would consume what it peeks
        return None
    with open_binary(path) as handle:
        if isinstance(handle, gzip.GzipFile):
            return None
    try:
        with pa.OSFile(os.fspath(path), memory_pool=memory_pool()) as source:
            table = _read_csv(source, names, types)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    return table if table.num_rows else None


def read_columns(path: PathType, names: tuple[str, ...], value_field: str, value_type: pa.DataType):
    """``(qids, doc_ids, values)`` of a whitespace-separated file with the columns ``names``
    (ids dictionary-encoded, ``value_field`` as ``value_type``); errors name file and line.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> columns = ("qid", "Q0", "doc_id", "rank", "score", "tag")
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (Path(folder) / "r.run").write_text("q1 Q0 d1 1 2.5 t\\nq1 Q0 d2 2 1.5 t\\n")
        ...     table = read_columns(Path(folder) / "r.run", columns, "score", pa.float64())
        >>> qids, doc_ids, scores = table
        >>> qids.to_pylist(), doc_ids.to_pylist(), scores.tolist()
        (['q1', 'q1'], ['d1', 'd2'], [2.5, 1.5])
    """
    # ids parsed as strings and dictionary-encoded after (``_read_csv``): one hash table per
    # column costs less than one per block and the merge of their dictionaries
    types = {"qid": pa.string(), "doc_id": pa.string(), value_field: value_type}
    table = _arrow_table(path, names, types)
    data = None
    if table is None:
        data = read_bytes(path)
        if not data.removeprefix(BOM).strip():
            raise UDCGInputError("empty file", path=path)
        try:
            table = _parse_table(data, names, types)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            _scan(path, data, names, value_field)
            raise UDCGInputError(f"could not parse: {exc}", path=path) from None

    def scan() -> None:  # locate the bad line, reading the file now if Arrow read it
        _scan(path, data if data is not None else read_bytes(path), names, value_field)

    if table[value_field].null_count:
        scan()
        raise UDCGInputError("missing values", path=path, field=value_field)
    if value_field == "relevance" and _hex_grade_in(path, data):
        scan()  # Arrow reads 0x10 as 16 and 0xffffffffffffffff as -1
    values = to_numpy(table[value_field])
    if value_field == "score" and not np.isfinite(values).all():
        scan()
    return one_chunk(table["qid"]), one_chunk(table["doc_id"]), values


_LAYOUTS = {"run": (_RUN_COLUMNS, "score"), "qrels": (_QRELS_COLUMNS, "relevance")}


def locate_duplicate(source: str | InputBytes | None, kind: Literal["run", "qrels"]) -> None:
    """Raise the file-and-line error for a duplicate (query, document) found in ``source``,
    a TREC file of ``kind``; nothing when there is no file.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (Path(folder) / "r.run").write_text("q1 Q0 d1 1 2.5 t\\nq1 Q0 d1 2 1.5 t\\n")
        ...     try:
        ...         locate_duplicate(str(Path(folder) / "r.run"), "run")
        ...     except UDCGInputError as error:
        ...         print(error.line, error.reason)
        2 duplicate document 'd1' for query 'q1'
    """
    if source is not None:
        _scan(source, read_bytes(source), *_LAYOUTS[kind])


def read_trec_run(path: PathType) -> Run:
    """Read a TREC run file (``qid Q0 doc_id rank score tag``); gzip is detected. A pipe is
    read once and its content kept as the run's ``source``, where errors are located later.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> lines = "q1 Q0 d1 1 12.5 bm25\\nq1 Q0 d2 2 9 bm25\\n"
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (Path(folder) / "bm25.run").write_text(lines)
        ...     run = read_trec_run(Path(folder) / "bm25.run")
        >>> run.to_dict()
        {'q1': {'d1': 12.5, 'd2': 9.0}}
    """
    path = read_once(path)
    qids, doc_ids, scores = read_columns(path, _RUN_COLUMNS, "score", pa.float64())
    return Run(qids, doc_ids, scores.astype(np.float64, copy=False), _source(path))


def read_trec_qrels(path: PathType) -> Qrels:
    """Read a TREC qrels file (``qid iteration doc_id relevance``); gzip is detected. A pipe
    is read once, as for :func:`read_trec_run`.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (Path(folder) / "test.qrels").write_text("q1 0 d1 2\\nq1 0 d2 0\\n")
        ...     qrels = read_trec_qrels(Path(folder) / "test.qrels")
        >>> qrels.to_dict(), qrels.relevance.dtype.name
        ({'q1': {'d1': 2, 'd2': 0}}, 'int64')
    """
    path = read_once(path)
    qids, doc_ids, grades = read_columns(path, _QRELS_COLUMNS, "relevance", pa.int64())
    return Qrels(qids, doc_ids, grades.astype(np.int64, copy=False), _source(path))


def _source(path: PathType) -> str | InputBytes:
    """What a run or qrels keeps to read its file again: the path, or a pipe's content."""
    return path if isinstance(path, InputBytes) else str(path)


def columns_from_dict(data: Mapping, field: str, name: str) -> tuple[pa.Array, pa.Array, list]:
    """``(qids, doc_ids, values)`` of ``{qid: {doc_id: value}}``; a malformed entry is an error
    naming ``name`` (the argument) and the query.

    Examples:
        >>> data = {"q1": {"d1": 2, "d2": 0}}
        >>> qids, doc_ids, values = columns_from_dict(data, "relevance", "qrels")
        >>> qids.to_pylist(), doc_ids.to_pylist(), values
        (['q1', 'q1'], ['d1', 'd2'], [2, 0])
    """
    if not isinstance(data, Mapping):
        raise UDCGInputError(
            f"expected {{qid: {{doc_id: {field}}}}}, got {type(data).__name__}", field=name
        )
    qids: list[str] = []
    doc_ids: list[str] = []
    values: list = []
    _one_id_each(data, "query ids", name)
    for qid, docs in data.items():
        if not isinstance(docs, Mapping):
            raise UDCGInputError(f"query {qid!r}: expected a dict of doc_id -> {field}", field=name)
        _one_id_each(docs, f"query {qid!r}: document ids", name)
        qids.extend([str(qid)] * len(docs))
        doc_ids.extend(map(str, docs))
        values.extend(docs.values())
    for q, d, v in zip(qids, doc_ids, values, strict=True):
        if isinstance(v, bool) or not isinstance(v, int | float | np.number):
            raise UDCGInputError(
                f"query {q!r}, document {d!r}: {show(v)} is not a number", field=name
            )
    pool = memory_pool()
    return (
        pa.array(qids, pa.string(), memory_pool=pool),
        pa.array(doc_ids, pa.string(), memory_pool=pool),
        values,
    )


def _one_id_each(keys: Mapping, what: str, name: str) -> None:
    """Refuse two keys that are one id as text (``1`` and ``"1"``): they would merge."""
    if len({str(k) for k in keys}) < len(keys):
        seen: dict[str, Any] = {}
        for key in keys:
            if str(key) in seen:
                raise UDCGInputError(
                    f"{what} {seen[str(key)]!r} and {key!r} are one id as text: give one",
                    field=name,
                )
            seen[str(key)] = key


def run_from_dict(data: Mapping[str, Mapping[str, float]]) -> Run:
    """A Run from ``{qid: {doc_id: score}}``.

    Examples:
        >>> run_from_dict({"q1": {"d1": 1.5}}).to_dict()
        {'q1': {'d1': 1.5}}
    """
    qids, doc_ids, values = columns_from_dict(data, "score", "run")
    empty = [str(qid) for qid, docs in data.items() if not docs]
    if empty:
        more = f" (and {len(empty) - 1} more)" if len(empty) > 1 else ""
        warnings.warn(
            f"run: query {empty[0]!r}{more} ranks no document: left out of every mean, as "
            "trec_eval leaves out a query its run file lacks (pytrec_eval scores it 0)",
            UDCGWarning,
            stacklevel=2,
        )
    scores = np.asarray(values, dtype=np.float64)
    if not np.isfinite(scores).all():
        i = int(np.argmin(np.isfinite(scores)))
        raise UDCGInputError(
            f"query {qids[i]}, document {doc_ids[i]}: score {show(scores[i])} is not finite",
            field="run",
        )
    return Run(qids, doc_ids, scores)


def _is_grade(value: int | float | np.number) -> bool:
    """True for a whole number in int64's range (NaN and infinities are not)."""
    whole = isinstance(value, int | np.integer) or float(value).is_integer()
    return whole and -(2**63) <= value < 2**63


def qrels_from_dict(data: Mapping[str, Mapping[str, int]]) -> Qrels:
    """Qrels from ``{qid: {doc_id: relevance}}`` with integer grades.

    Examples:
        >>> qrels_from_dict({"q1": {"d1": 1, "d2": 2.0}}).relevance.tolist()
        [1, 2]
    """
    qids, doc_ids, values = columns_from_dict(data, "relevance", "qrels")
    for q, d, v in zip(qids, doc_ids, values, strict=True):
        if not _is_grade(v):
            raise UDCGInputError(
                f"query {q}, document {d}: {show(v)} is not an integer grade", field="qrels"
            )
    return Qrels(qids, doc_ids, np.asarray(values, dtype=np.int64))


def ranking_scores(scores: np.ndarray) -> np.ndarray:
    """Scores as trec_eval compares them: rounded to 32-bit floats (it stores each score as a C
    ``float``), so scores that differ only beyond float32's precision tie; beyond its range
    they are infinite.

    Examples:
        >>> ranking_scores(np.array([0.812345678, 0.812345671, 1e300])).tolist()
        [0.8123456835746765, 0.8123456835746765, inf]
    """
    with np.errstate(over="ignore"):
        return np.asarray(scores).astype(np.float32, copy=False)


def trec_order(qids: Any, scores: np.ndarray, doc_ids: Any) -> np.ndarray:
    """Row indices in trec_eval's ranking order: by query, then score descending (compared as
    :func:`ranking_scores`), then doc id descending (the tie-break trec_eval applies).
    ``qids``: query ids or integer codes (Arrow or numpy), ``scores``: float array,
    ``doc_ids``: Arrow strings, plain or dictionary-encoded.

    Examples:
        b (score 2) first, then the tie of a and c broken by id descending:

        >>> scores, doc_ids = np.array([1.0, 2.0, 1.0]), pa.array(["a", "b", "c"])
        >>> trec_order(pa.array(["q1"] * 3), scores, doc_ids).tolist()
        [1, 2, 0]
    """
    # Arrow sorts plain strings only: dictionary-encoded ids are decoded first
    table = pa.Table.from_arrays(
        [
            decoded(qids) if isinstance(qids, pa.Array | pa.ChunkedArray) else from_numpy(qids),
            from_numpy(ranking_scores(scores)),
            decoded(doc_ids),
        ],
        names=["q", "s", "d"],
    )
    return sort_indices(table, [("q", "ascending"), ("s", "descending"), ("d", "descending")])


def write_trec_run(path: PathType, run: Run, tag: str = "udcg") -> None:
    """Write ``run`` as a TREC run file, ranked by score descending within each query.

    Examples:
        Ties are broken by document id descending, as trec_eval ranks them:

        >>> import tempfile
        >>> from pathlib import Path
        >>> run = run_from_dict({"q1": {"a": 1.0, "b": 2.0, "c": 1.0}})
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     write_trec_run(Path(folder) / "out.run", run, tag="mine")
        ...     print((Path(folder) / "out.run").read_text(), end="")
        q1 Q0 b 1 2.0 mine
        q1 Q0 c 2 1.0 mine
        q1 Q0 a 3 1.0 mine
    """
    order = trec_order(run.qids, run.scores, run.doc_ids)
    qids = np.asarray(run.qids.to_pylist(), dtype=object)[order]
    docs = np.asarray(run.doc_ids.to_pylist(), dtype=object)[order]
    scores = run.scores[order]
    with atomic_write(Path(path)) as out:
        rank = 0
        previous = None
        for q, d, s in zip(qids, docs, scores, strict=True):
            rank = rank + 1 if q == previous else 1
            previous = q
            out.write(f"{q} Q0 {d} {rank} {float(s)!r} {tag}\n")
