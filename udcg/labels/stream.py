"""Annotation of a contexts stream, chunk by chunk, into an output that survives a kill.

:func:`annotate_stream` reads contexts lazily, annotates ``chunk`` of them at a time (the judge
sees each step's work for the whole chunk at once) and appends each finished chunk to
``OUT.partial``; at the end the partial file becomes ``OUT`` atomically (renamed, or compressed
into ``OUT`` when it ends in ``.gz``). Memory therefore holds one chunk, whatever the input
size, and the result is byte for byte what :func:`udcg.io.contexts.jsonl.write_contexts` writes.

Only one process writes an output at a time: a second one is refused in one line
(:func:`udcg.io.files.exclusive_writer`, a lock a killed process does not leave stuck).

Beside ``OUT.partial``, ``OUT.partial.manifest`` holds the record of the run (judge, steps,
options) and the line hash of each input context written (:mod:`udcg.labels.provenance`). A
rerun with the same output finds ``OUT.partial``, drops a torn last line (a process killed
mid-write), refuses a record that differs from this run's (naming the field and both values),
checks that each line is the next context of the input (same query id and run, same line hash:
an edited input is refused at its line) and annotates only the rest; with the judge cache, the
calls finished but not yet written cost nothing either. At the end ``OUT.manifest.json`` records
what produced ``OUT`` (:func:`udcg.labels.provenance.write_manifest`). ``-`` writes to standard
output, chunk by chunk, without resuming and without a manifest.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import nullcontext
from itertools import islice
from pathlib import Path
from typing import Any, TypeVar

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, context_line
from udcg.io.files import (
    STDIO,
    PathType,
    atomic_write,
    exclusive_writer,
    is_special,
    keep_owner_and_mode,
    refuse_same_file,
    refuse_unreplaceable,
    standard_output,
)
from udcg.io.manifests import file_sha256, manifest_path
from udcg.labels.annotate import AnnotationReport
from udcg.labels.provenance import (
    JUDGES,
    InputDigest,
    check_format,
    first_difference,
    line_hash,
    write_manifest,
)
from udcg.progress import progress

T = TypeVar("T")
#: Suffix of the file a run appends its finished chunks to.
PARTIAL = ".partial"
#: Suffix (after ``OUT.partial``) of the record and line hashes beside it.
PARTIAL_MANIFEST = ".manifest"
#: Contexts annotated (and written) at a time.
DEFAULT_CHUNK = 1000

AnnotateChunk = Callable[[list[Context]], tuple[list[Context], AnnotationReport]]


def chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Consecutive lists of ``size`` items (the last one shorter).

    Examples:
        >>> list(chunks(range(5), 2))
        [[0, 1], [2, 3], [4]]
    """
    iterator = iter(items)
    while part := list(islice(iterator, size)):
        yield part


def partial_path(output: PathType) -> Path:
    """Where a run writes ``output`` while it works: ``OUT.partial``.

    Examples:
        >>> partial_path("out/contexts.jsonl").as_posix()
        'out/contexts.jsonl.partial'
    """
    return Path(f"{os.fspath(output)}{PARTIAL}")


def partial_manifest_path(partial: Path) -> Path:
    """The record and line hashes beside ``partial``: ``OUT.partial.manifest``.

    Examples:
        >>> partial_manifest_path(partial_path("out.jsonl")).name
        'out.jsonl.partial.manifest'
    """
    return Path(f"{os.fspath(partial)}{PARTIAL_MANIFEST}")


def refuse_outputs(output: PathType, inputs: Mapping[str, PathType | None]) -> None:
    """Refuse an ``output`` that is a directory or a device (``/dev/null``, a FIFO: the finished
    file is renamed over it, and locks and manifests go beside it), or that (or a file a command
    writes beside it: ``OUT.lock``, ``OUT.partial``, ``OUT.partial.manifest``,
    ``OUT.manifest.json``) names one of ``inputs`` (option or argument name -> path): the run
    would replace or delete it.

    Examples:
        >>> refuse_outputs("out.jsonl", {"--cache": "out.jsonl.lock"})
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: out.jsonl.lock: the output names the input --cache ...
    """
    if os.fspath(output) == STDIO:
        standard_output()  # closed (>&-): refused before the work
        refuse_same_file(output, inputs)  # standard output may be an input's file (>> IN)
        return
    if is_special(output):
        raise UDCGInputError(
            "is not a regular file: the output is written beside it and renamed into place "
            "(- writes to standard output)",
            path=output,
        )
    for path in output_files(output):
        refuse_unreplaceable(path)
        refuse_same_file(path, inputs)


def output_files(output: PathType) -> list[Path]:
    """The files an annotate run writes for ``output``: ``OUT``, ``OUT.partial``,
    ``OUT.partial.manifest``, ``OUT.manifest.json`` and the lock ``OUT.lock``.

    Examples:
        >>> [path.name for path in output_files("out.jsonl")][1:]
        ['out.jsonl.partial', 'out.jsonl.partial.manifest', 'out.jsonl.manifest.json', \
'out.jsonl.lock']
    """
    partial = partial_path(output)
    lock = Path(f"{os.fspath(output)}.lock")
    return [Path(output), partial, partial_manifest_path(partial), manifest_path(output), lock]


def _hash_line(ctx: Context) -> str:
    """The line of ``OUT.partial.manifest`` for one input context."""
    return json.dumps(line_hash(ctx)) + "\n"


def _where(ctx: Context) -> str:
    """``FILE:LINE`` of an input context, or its query id when it was not read from a file."""
    return f"{ctx.source[0]}:{ctx.source[1]}" if ctx.source else f"query {ctx.qid!r}"


def _check_record(partial: Path, header: bytes, record: Mapping[str, Any]) -> None:
    """Refuse ``partial`` when the record on the first line of its manifest is not ``record``."""
    manifest = partial_manifest_path(partial)
    start_over = f"delete it and {manifest.name} to start over"
    try:
        found = json.loads(header)
    except ValueError:
        found = None
    if not isinstance(found, dict):
        raise UDCGInputError(
            f"{manifest.name} is not a record this command wrote: {start_over}", path=partial
        )
    check_format(found, partial, start_over)
    difference = first_difference(found, record)
    if difference is not None:
        name, old, new = difference
        raise UDCGInputError(
            f"was written with {name} {json.dumps(old)}, this run has {name} {json.dumps(new)}: "
            f"rerun the command that started it, or {start_over}",
            path=partial,
        )


def resume(partial: Path, contexts: Iterator[Context], record: Mapping[str, Any]) -> int:
    """How many contexts ``partial`` already holds, consumed from ``contexts``; starts
    ``OUT.partial.manifest`` with ``record`` when there is no ``partial``.

    The record in the manifest must equal ``record``. A last line without its newline (torn by
    a kill) is cut off the file; every other line must be the next context of ``contexts``
    (same ``qid`` and ``run``) and its line hash the one recorded for it.
    """
    manifest = partial_manifest_path(partial)
    if not partial.exists():
        manifest.write_text(json.dumps(dict(record)) + "\n", encoding="utf-8")
        return 0
    start_over = f"delete it and {manifest.name} to start over"
    if not manifest.is_file():
        raise UDCGInputError(
            f"no {manifest.name} beside it records what produced it: {start_over}", path=partial
        )
    done = kept = 0
    with manifest.open("rb") as hashes, partial.open("rb") as handle:
        header = hashes.readline()
        _check_record(partial, header, record)
        recorded = len(header)
        for line_no, raw in enumerate(handle, start=1):
            if not raw.endswith(b"\n"):
                break
            try:
                obj = json.loads(raw)
                ids = (obj.get("qid"), obj.get("run"))
            except (ValueError, AttributeError):
                raise UDCGInputError(
                    f"not a line this command wrote: {start_over}", path=partial, line=line_no
                ) from None
            expected = next(contexts, None)
            if expected is None or ids != (expected.qid, expected.run):
                want = "the end of the input" if expected is None else repr(expected.qid)
                raise UDCGInputError(
                    f"holds query {ids[0]!r} where the input has {want}: it comes from "
                    f"another input or shard; {start_over}",
                    path=partial,
                    line=line_no,
                )
            digest = hashes.readline()
            if not digest.endswith(b"\n"):
                raise UDCGInputError(
                    f"holds more lines than {manifest.name} records: {start_over}",
                    path=partial,
                    line=line_no,
                )
            if digest.decode("utf-8", "replace") != _hash_line(expected):
                raise UDCGInputError(
                    f"was annotated from another version of the input context at "
                    f"{_where(expected)} (query {expected.qid!r}): the input was edited; "
                    f"{start_over}",
                    path=partial,
                    line=line_no,
                )
            done += 1
            kept += len(raw)
            recorded += len(digest)
    os.truncate(partial, kept)
    os.truncate(manifest, recorded)
    return done


def _finish(
    partial: Path, output: Path, record: Mapping[str, Any], judges: Mapping[str, Any] | None
) -> None:
    """Write ``OUT.manifest.json`` (with ``judges`` when given), then move the complete
    ``partial`` into place as ``output`` (compressing for ``.gz``; a link stays, its target
    replaced) and remove its manifest."""
    manifest = partial_manifest_path(partial)
    digest = InputDigest()
    with manifest.open(encoding="utf-8") as lines:
        next(lines)  # the record
        for line in lines:
            digest.add_hash(json.loads(line))
    counts = {
        "contexts": digest.count,
        "input_sha256": digest.hexdigest(),
        "output_sha256": file_sha256(partial),
    } | ({JUDGES: dict(judges)} if judges is not None else {})
    write_manifest(output, record, counts)
    # .gz: compressed as write_contexts writes it, the same bytes; a link: copied into place
    # beside its target (atomic_write), which may be on another file system than the partial
    if output.suffix == ".gz" or output.is_symlink():
        with atomic_write(output) as out, partial.open(encoding="utf-8", newline="") as handle:
            shutil.copyfileobj(handle, out, 1 << 16)
        partial.unlink()
    else:
        with partial.open("rb+") as handle:
            keep_owner_and_mode(handle.fileno(), output)
            os.fsync(handle.fileno())
        os.replace(partial, output)
    manifest.unlink()


def annotate_stream(
    contexts: Iterable[Context],
    output: PathType,
    work: AnnotateChunk,
    chunk: int = DEFAULT_CHUNK,
    total: int | None = None,
    *,
    record: Mapping[str, Any],
    judges: Mapping[str, Any] | None = None,
) -> tuple[AnnotationReport, int]:
    """Annotate ``contexts`` with ``work``, ``chunk`` at a time, into ``output``; the counts of
    this run and the number of contexts resumed from ``OUT.partial``. ``record``
    (:func:`udcg.labels.provenance.annotation_record`) says what ``work`` computes: a partial
    file of another record is refused, and the finished output's manifest holds it, with
    ``judges`` (who made the values of each judge key, :func:`udcg.io.manifests.recorded_judges`)
    when given. ``total``
    (the number of contexts, when known) sizes the progress bar. Holds the output's lock
    (:func:`udcg.io.files.exclusive_writer`) for the whole run.

    Examples:
        A ``work`` that labels nothing, two contexts at a time; the output's manifest records
        the run:

        >>> import tempfile
        >>> from pathlib import Path
        >>> from udcg.labels.provenance import annotation_record, read_manifest
        >>> def work(chunk):
        ...     return chunk, AnnotationReport(contexts=len(chunk))
        >>> record = annotation_record("llama3", "fp", ["abstain"], "string", False, "span",
        ...                            "first_token", 32, None, {})
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     out = Path(folder) / "out.jsonl"
        ...     contexts = [Context("q1"), Context("q2"), Context("q3")]
        ...     report, resumed = annotate_stream(contexts, out, work, chunk=2, record=record)
        ...     manifest = read_manifest(out)
        >>> report.contexts, resumed, manifest["contexts"], manifest["judge"]
        (3, 0, 3, 'llama3')
    """
    if chunk < 1:
        raise UDCGInputError(f"must be at least 1, got {chunk}", field="chunk")
    with exclusive_writer(output, "annotation output"):
        return _annotate_stream(iter(contexts), output, work, chunk, total, record, judges)


def _annotate_stream(
    iterator: Iterator[Context],
    output: PathType,
    work: AnnotateChunk,
    chunk: int,
    total: int | None,
    record: Mapping[str, Any],
    judges: Mapping[str, Any] | None,
) -> tuple[AnnotationReport, int]:
    """:func:`annotate_stream` once the lock is held."""
    report = AnnotationReport()
    to_stdout = os.fspath(output) == STDIO
    resumed = 0
    if not to_stdout:
        partial = partial_path(output)
        partial.parent.mkdir(parents=True, exist_ok=True)
        resumed = resume(partial, iterator, record)
        for path in (partial, partial_manifest_path(partial)):  # as private as OUT, at once
            with open(path, "ab") as made:
                keep_owner_and_mode(made.fileno(), Path(output))
    written, lf = resumed, "\n"
    try:
        with (
            nullcontext(standard_output())
            if to_stdout
            else open(partial, "a", encoding="utf-8", newline=lf) as handle,
            nullcontext(None)
            if to_stdout
            else open(partial_manifest_path(partial), "a", encoding="utf-8", newline=lf) as hashes,
            progress(total, "contexts", unit="ctx", initial=resumed) as bar,
        ):
            for part in chunks(iterator, chunk):
                annotated, counts = work(part)
                report.add(counts)
                if hashes is not None:  # the hashes first: every line written has its hash
                    hashes.write("".join(map(_hash_line, part)))
                    hashes.flush()
                handle.write("".join(map(context_line, annotated)))
                handle.flush()
                written += len(part)
                bar.update(len(part))
    except BaseException:
        if not to_stdout and not written:  # nothing to resume: a corrected command starts anew
            partial.unlink(missing_ok=True)
            partial_manifest_path(partial).unlink(missing_ok=True)
        raise
    if not to_stdout:
        _finish(partial, Path(output), record, judges)
    return report, resumed
