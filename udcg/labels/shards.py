"""Shards of a contexts file: split by query id, annotate each on its own machine, merge back.

``--shard I/N`` keeps the contexts whose query id falls in shard I of N (1-based): shard
``1 + (int(blake2b(qid, 8 bytes), big-endian) mod N)``, the same on every machine and Python
version, so all contexts of one query land in the same shard. Name the shard outputs
``part-I-of-N.jsonl`` (e.g. ``out/part-2-of-4.jsonl``): :func:`merge_shards` then orders them
and checks that all N are there; other names are taken in the order given.

:func:`merge_shards` streams the input once and takes each context's line from its shard's
file, in order, checking its query id and run: the merged file is byte for byte the file an
unsharded run writes, and a missing, incomplete, extra or foreign shard is a one-line error.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from udcg.errors import UDCGInputError
from udcg.io.contexts import Context, read_contexts
from udcg.io.files import PathType, atomic_write, numbered_lines

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
_PART = re.compile(r"part-(\d+)-of-(\d+)")


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` as ``(I, N)``, with 1 <= I <= N."""
    match = _SHARD.match(text)
    if match is None or not 1 <= int(match[1]) <= int(match[2]):
        raise UDCGInputError(
            f"expected I/N with 1 <= I <= N (e.g. 2/4), got {text!r}", field="shard"
        )
    return int(match[1]), int(match[2])


def shard_of(qid: str, shards: int) -> int:
    """The shard (1..``shards``) of a query id: blake2b of its UTF-8 bytes, modulo."""
    digest = hashlib.blake2b(qid.encode("utf-8"), digest_size=8).digest()
    return 1 + int.from_bytes(digest, "big") % shards


def in_shard(contexts: Iterable[Context], shard: tuple[int, int]) -> Iterator[Context]:
    """The contexts of shard ``(I, N)``, in input order."""
    index, shards = shard
    return (ctx for ctx in contexts if shard_of(ctx.qid, shards) == index)


def order_shards(paths: Sequence[PathType]) -> list[PathType]:
    """Shard files in shard order: by the ``part-I-of-N`` in their names when every name has
    one (all N present, each once), else as given."""
    found = [_PART.search(Path(p).name) for p in paths]
    if not paths or not all(found):
        return list(paths)
    numbers = [(int(m[1]), int(m[2])) for m in found if m]
    totals = {n for _, n in numbers}
    if len(totals) != 1:
        raise UDCGInputError(f"shard files of different splits: N in {sorted(totals)}")
    total = totals.pop()
    given = sorted(i for i, _ in numbers)
    missing = sorted(set(range(1, total + 1)) - set(given))
    if missing:
        raise UDCGInputError(
            f"missing shard {', '.join(map(str, missing))} of {total}: give all {total}"
        )
    if given != list(range(1, total + 1)):
        raise UDCGInputError(f"a shard file is given twice (shards {given})")
    order = sorted(range(len(paths)), key=lambda k: numbers[k][0])
    return [paths[k] for k in order]


def _ids(path: PathType) -> Iterator[tuple[int, str, tuple[object, object]]]:
    """``(line number, line, (qid, run))`` for every non-blank line of an output file."""
    for line_no, text in numbered_lines(path):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except ValueError:
            raise UDCGInputError("malformed JSON", path=path, line=line_no) from None
        if not isinstance(obj, dict):
            raise UDCGInputError("expected a JSON object", path=path, line=line_no)
        yield (
            line_no,
            text if text.endswith("\n") else text + "\n",
            (obj.get("qid"), obj.get("run")),
        )


def merge_shards(source: PathType, shards: Sequence[PathType], output: PathType) -> int:
    """Write the shard files back in the order of ``source`` (the unsharded input) to
    ``output`` (atomic; ``.gz`` compresses); returns the number of contexts."""
    ordered = order_shards(shards)
    total = len(ordered)
    readers = [_ids(p) for p in ordered]
    count = 0
    with atomic_write(output) as out:
        for ctx in read_contexts(source):
            index = shard_of(ctx.qid, total)
            path, line = ctx.source or (source, None)
            got = next(readers[index - 1], None)
            if got is None:
                raise UDCGInputError(
                    f"ends before the context of query {ctx.qid!r} ({path}:{line}): the shard "
                    f"run is incomplete, or not shard {index} of {total} of this input",
                    path=ordered[index - 1],
                )
            line_no, text, ids = got
            if ids != (ctx.qid, ctx.run):
                raise UDCGInputError(
                    f"holds query {ids[0]!r} (run {ids[1]!r}) where shard {index} of {total} "
                    f"has query {ctx.qid!r} (run {ctx.run!r}, {path}:{line}): give all {total} "
                    "shard files of this input, in order 1..N",
                    path=ordered[index - 1],
                    line=line_no,
                )
            out.write(text)
            count += 1
        for path, reader in zip(ordered, readers, strict=True):
            extra = next(reader, None)
            if extra is not None:
                raise UDCGInputError(
                    "holds more contexts than its shard of the input: another input or another N",
                    path=path,
                    line=extra[0],
                )
    return count
