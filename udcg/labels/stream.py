"""Annotation of a contexts stream, chunk by chunk, into an output that survives a kill.

:func:`annotate_stream` reads contexts lazily, annotates ``chunk`` of them at a time (the judge
sees each step's work for the whole chunk at once) and appends each finished chunk to
``OUT.partial``; at the end the partial file becomes ``OUT`` atomically (renamed, or compressed
into ``OUT`` when it ends in ``.gz``). Memory therefore holds one chunk, whatever the input
size, and the result is byte for byte what :func:`udcg.io.contexts.write_contexts` writes.

A rerun with the same output finds ``OUT.partial``, drops a torn last line (a process killed
mid-write), checks that its lines are the first contexts of the input (same query id and run,
in order) and annotates only the rest; with the judge cache, the calls finished but not yet
written cost nothing either. The partial file does not record the judge or steps: resume with
the same command, or delete ``OUT.partial`` to start over. ``-`` writes to standard output,
chunk by chunk, without resuming.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from itertools import islice
from pathlib import Path
from typing import TypeVar

from udcg.errors import UDCGInputError
from udcg.io.contexts import Context, context_line
from udcg.io.files import STDIO, PathType, atomic_write
from udcg.labels.annotate import AnnotationReport

T = TypeVar("T")
#: Suffix of the file a run appends its finished chunks to.
PARTIAL = ".partial"
#: Contexts annotated (and written) at a time.
DEFAULT_CHUNK = 1000

AnnotateChunk = Callable[[list[Context]], tuple[list[Context], AnnotationReport]]


def chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Consecutive lists of ``size`` items (the last one shorter)."""
    iterator = iter(items)
    while part := list(islice(iterator, size)):
        yield part


def partial_path(output: PathType) -> Path:
    """Where a run writes ``output`` while it works: ``OUT.partial``."""
    return Path(f"{os.fspath(output)}{PARTIAL}")


def resume(partial: Path, contexts: Iterator[Context]) -> int:
    """How many contexts ``partial`` already holds, consumed from ``contexts``.

    A last line without its newline (torn by a kill) is cut off the file; every other line must
    be the next context of ``contexts`` (same ``qid`` and ``run``).
    """
    if not partial.exists():
        return 0
    done = kept = 0
    with partial.open("rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            if not raw.endswith(b"\n"):
                break
            try:
                obj = json.loads(raw)
                ids = (obj.get("qid"), obj.get("run"))
            except (ValueError, AttributeError):
                raise UDCGInputError(
                    "not a line this command wrote: delete the file to start over",
                    path=partial,
                    line=line_no,
                ) from None
            expected = next(contexts, None)
            if expected is None or ids != (expected.qid, expected.run):
                want = "the end of the input" if expected is None else repr(expected.qid)
                raise UDCGInputError(
                    f"holds query {ids[0]!r} where the input has {want}: it comes from "
                    "another input or shard; delete it to start over",
                    path=partial,
                    line=line_no,
                )
            done += 1
            kept += len(raw)
    os.truncate(partial, kept)
    return done


def _finish(partial: Path, output: Path) -> None:
    """Move the complete ``partial`` into place as ``output`` (compressing for ``.gz``)."""
    if output.suffix == ".gz":  # written as write_contexts writes it: the same bytes
        with atomic_write(output) as out, partial.open(encoding="utf-8", newline="") as handle:
            shutil.copyfileobj(handle, out, 1 << 16)
        partial.unlink()
        return
    with partial.open("rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(partial, output)


def annotate_stream(
    contexts: Iterable[Context],
    output: PathType,
    work: AnnotateChunk,
    chunk: int = DEFAULT_CHUNK,
    total: int | None = None,
) -> tuple[AnnotationReport, int]:
    """Annotate ``contexts`` with ``work``, ``chunk`` at a time, into ``output``; the counts of
    this run and the number of contexts resumed from ``OUT.partial``. ``total`` (the number of
    contexts, when known) sizes the progress bar."""
    from tqdm.auto import tqdm

    if chunk < 1:
        raise UDCGInputError(f"must be at least 1, got {chunk}", field="chunk")
    report = AnnotationReport()
    iterator = iter(contexts)
    to_stdout = os.fspath(output) == STDIO
    resumed = 0
    if not to_stdout:
        partial = partial_path(output)
        partial.parent.mkdir(parents=True, exist_ok=True)
        resumed = resume(partial, iterator)
    with (
        nullcontext(sys.stdout)
        if to_stdout
        else open(partial, "a", encoding="utf-8", newline="\n") as handle,
        tqdm(
            total=total, initial=resumed, desc="contexts", unit="ctx", disable=None, file=sys.stderr
        ) as bar,
    ):
        for part in chunks(iterator, chunk):
            annotated, counts = work(part)
            report.add(counts)
            handle.write("".join(map(context_line, annotated)))
            handle.flush()
            bar.update(len(part))
    if not to_stdout:
        _finish(partial, Path(output))
    return report, resumed
