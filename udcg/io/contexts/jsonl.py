"""Contexts JSONL files: one retrieved context per line, read as a stream and written whole.

The line format and its rules are the data model's (:mod:`udcg.io.contexts.model`); this
module also re-exports the model, its key constants and the array helpers of
:mod:`udcg.io.contexts.arrays`, so ``from udcg.io.contexts.jsonl import ...`` reaches all of them.

* Duplicate keys inside one JSON object follow :mod:`json` (the last one wins).
* A file without any context is an error; blank lines are skipped but still counted, so line
  numbers in messages match what an editor shows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from udcg.errors import UDCGInputError
from udcg.io.contexts.arrays import (
    abstain_probs,
    answer_probs,
    correctness,
    coverage_matrices,
    judge_probs,
    relevance_matrix,
)
from udcg.io.contexts.checks import (
    ANSWER_LABELS,
    LONE_SURROGATE,
    Where,
    json_problem,
    lone_surrogate,
)
from udcg.io.contexts.model import (
    CONTEXT_KEYS,
    JUDGE_PROB_KEYS,
    PASSAGE_KEYS,
    Context,
    Passage,
    parse_context,
)
from udcg.io.files import PathType, atomic_write, check_input, numbered_lines

__all__ = [
    "ANSWER_LABELS",
    "CONTEXT_KEYS",
    "JUDGE_PROB_KEYS",
    "PASSAGE_KEYS",
    "Context",
    "Passage",
    "abstain_probs",
    "answer_probs",
    "check_context",
    "context_line",
    "correctness",
    "coverage_matrices",
    "judge_probs",
    "no_contexts",
    "read_contexts",
    "relevance_matrix",
    "write_contexts",
]


def read_contexts(path: PathType) -> Iterator[Context]:
    """Stream the contexts of a JSONL file (gzip detected by content), one line at a time.

    A missing path or a directory fails at once (asked of the file system, not by opening
    it); everything else (malformed JSON, invalid fields, an empty file) fails while
    iterating, with ``FILE:LINE: field 'x': ...``, once the reader reaches the offending line.
    Lines before it have been yielded already. The path is opened once, when iteration
    starts, so a pipe (``<(...)``, a FIFO, ``/dev/stdin``) is read whole. A string
    ``hf:ID``/``hf:DIR`` reads a Hugging Face dataset instead, whole and at once
    (:func:`udcg.io.formats.hf_datasets.read_hf_contexts`).

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (Path(folder) / "c.jsonl").write_text('{"qid": 17, "passages": []}\\n')
        ...     contexts = list(read_contexts(Path(folder) / "c.jsonl"))
        >>> [(c.qid, c.passages) for c in contexts]
        [('17', [])]
    """
    if isinstance(path, str) and path.startswith("hf:"):
        from udcg.io.formats.hf_datasets import read_hf_contexts

        return iter(read_hf_contexts(path))
    check_input(path)
    return _read_contexts(path)


def _read_contexts(path: PathType) -> Iterator[Context]:
    count = 0
    for line_no, text in numbered_lines(path):
        if not text.strip():
            continue
        yield parse_context(_json_line(text, path, line_no), Where(path, line_no))
        count += 1
    if count == 0:
        raise UDCGInputError("empty file: no contexts", path=path)


def _json_line(text: str, path: PathType, line_no: int) -> Any:
    """The JSON value of one line; anything :mod:`json` rejects, and a string holding a lone
    surrogate, is an error at that line."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise UDCGInputError(json_problem(exc), path=path, line=line_no) from None
    field = lone_surrogate(text, value)
    if field is not None:
        raise UDCGInputError(LONE_SURROGATE, path=path, line=line_no, field=field or None)
    return value


def _numpy_scalar(value: Any) -> Any:
    """JSON for numpy scalars (``np.bool_``, ``np.int64``, ``np.float32``...) built into
    contexts by user code; anything else is not JSON data."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def write_contexts(path: PathType, contexts: Iterable[Context], *, check: bool = True) -> int:
    """Write ``contexts`` as JSONL (one object per line, UTF-8, keys in a fixed order).

    The file is replaced atomically; a ``.gz`` suffix compresses it. numpy scalars are written
    as the Python values they hold. Each context must pass the reader's checks
    (:func:`check_context`: a context :func:`read_contexts` would refuse is refused with its
    message, ``FILE:LINE: field ...``, the line it would have been written at; ``check=False``
    skips this, about as costly as the write, for contexts made from checked input); NaN or
    infinite numbers raise ``ValueError``, and no contexts at all :func:`no_contexts` (a file
    without any is unreadable); all leave any existing file untouched. Returns the number
    written.

    Examples:
        A round trip through a gzipped file:

        >>> import tempfile
        >>> from pathlib import Path
        >>> ctx = Context("q1", [Passage("d1", relevant=True)], run="bm25")
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     n = write_contexts(Path(folder) / "c.jsonl.gz", [ctx, ctx])
        ...     back = list(read_contexts(Path(folder) / "c.jsonl.gz"))
        >>> n, back == [ctx, ctx]
        (2, True)
    """
    count = 0
    with atomic_write(path) as handle:
        for ctx in not_one_context(contexts):
            obj = check_context(ctx, Where(path, count + 1)) if check else ctx.to_json()
            handle.write(_json_text(obj, allow_nan=False) + "\n")
            count += 1
        if count == 0:
            raise no_contexts(contexts)
    return count


def no_contexts(contexts: object) -> UDCGInputError:
    """The error for an empty ``contexts`` argument; an iterator (what :func:`read_contexts`
    and ``udcg.demo_contexts()`` return) may have been consumed by an earlier call.

    Examples:
        >>> str(no_contexts([]))
        "field 'contexts': no contexts"
        >>> no_contexts(iter([])).reason
        'no contexts (an iterator yields them once: this one may have been consumed already)'
    """
    hint = ""
    if isinstance(contexts, Iterator):
        hint = " (an iterator yields them once: this one may have been consumed already)"
    return UDCGInputError("no contexts" + hint, field="contexts")


def not_one_context(contexts: Iterable[Context]) -> Iterable[Context]:
    """``contexts``, refusing a single :class:`Context` given where an iterable of them is
    expected (a context is not iterable).

    Examples:
        >>> not_one_context(Context("q1"))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'contexts': got one Context, expected an iterable ...
    """
    if isinstance(contexts, Context):
        raise UDCGInputError(
            "got one Context, expected an iterable of them: pass [context]", field="contexts"
        )
    return contexts


def check_context(ctx: Context, where: Where) -> dict[str, Any]:
    """``ctx.to_json()`` once the reader's checks
    (:func:`~udcg.io.contexts.model.parse_context`) accept it: a context built in memory that
    :func:`read_contexts` would refuse is refused with the reader's message, located by
    ``where``. Values JSON writes otherwise (numpy scalars, tuples) are checked as written.

    Examples:
        >>> two = Context("q1", [Passage("d1"), Passage("d1")])
        >>> check_context(two, Where("c.jsonl", 3))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: c.jsonl:3: field 'passages[1].doc_id': duplicate doc_id 'd1' ...
    """
    if not isinstance(ctx, Context):
        raise UDCGInputError(
            f"must be a Context, got {type(ctx).__name__}", path=where.path, line=where.line
        )
    for i, passage in enumerate(ctx.passages):
        if not isinstance(passage, Passage):
            raise where.error(f"passages[{i}]", f"must be a Passage, got {type(passage).__name__}")
    try:
        obj = ctx.to_json()
    except ValueError as exc:  # an extra key clashing with a field
        raise where.error("extra", str(exc)) from None
    try:
        parse_context(obj, where)
    except UDCGInputError:  # maybe numpy scalars or tuples: check them as JSON writes them
        parse_context(json.loads(_json_text(obj, allow_nan=True)), where)
    return obj


def context_line(ctx: Context) -> str:
    """One context as the JSONL line :func:`write_contexts` writes, ending in a newline.

    Examples:
        >>> context_line(Context("q1", [Passage("d1")]))
        '{"qid": "q1", "passages": [{"doc_id": "d1"}]}\\n'
    """
    return _json_text(ctx.to_json(), allow_nan=False) + "\n"


def _json_text(obj: dict[str, Any], allow_nan: bool) -> str:
    return json.dumps(obj, ensure_ascii=False, allow_nan=allow_nan, default=_numpy_scalar)
