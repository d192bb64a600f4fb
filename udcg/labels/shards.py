"""Shards of a contexts file: split by query id, annotate each on its own machine, merge back.

``--shard I/N`` keeps the contexts whose query id falls in shard I of N (1-based): shard
``1 + (int(blake2b(qid, 8 bytes), big-endian) mod N)``, the same on every machine and Python
version, so all contexts of one query land in the same shard. Name the shard outputs
``part-I-of-N.jsonl`` (e.g. ``out/part-2-of-4.jsonl``): :func:`merge_shards` then orders them
and checks that all N are there; other names are taken in the order given.

:func:`merge_shards` streams the input once and takes each context's line from its shard's
file, in order, checking its query id and run: the merged file is byte for byte the file an
unsharded run writes, and a missing, incomplete, extra or foreign shard is a one-line error.
Each shard's manifest (``SHARD.manifest.json``, :mod:`udcg.labels.provenance`) is checked
too: a shard without one is refused; the shards must agree on the judge (name and
fingerprint), steps and options, and be shards 1..N of N in the order given; each shard's
input digest must be that of its slice of the input (an edited or other input is refused) and
its output digest that of its file (an edited shard is refused). The merged output gets the
manifest an unsharded run writes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, read_contexts
from udcg.io.files import (
    STDIO,
    PathType,
    exclusive_writer,
    is_regular_file,
    numbered_lines,
    verified_write,
)
from udcg.io.manifests import made_by, recorded_judges
from udcg.labels.provenance import (
    JUDGES,
    InputDigest,
    first_difference,
    manifest_path,
    read_manifest,
    record_of,
    write_manifest,
)
from udcg.labels.stream import refuse_outputs

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
_PART = re.compile(r"part-(\d+)-of-(\d+)")


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` as ``(I, N)``, with 1 <= I <= N.

    Examples:
        >>> parse_shard("2/4")
        (2, 4)
    """
    match = _SHARD.match(text)
    if match is None or not 1 <= int(match[1]) <= int(match[2]):
        raise UDCGInputError(
            f"expected I/N with 1 <= I <= N (e.g. 2/4), got {text!r}", field="shard"
        )
    return int(match[1]), int(match[2])


def shard_of(qid: str, shards: int) -> int:
    """The shard (1..``shards``) of a query id: blake2b of its UTF-8 bytes, modulo.

    Examples:
        The same on every machine and run (no salted ``hash``):

        >>> [shard_of(qid, 4) for qid in ("q1", "q2", "q3")], shard_of("q1", 1)
        ([1, 3, 2], 1)
    """
    digest = hashlib.blake2b(qid.encode("utf-8"), digest_size=8).digest()
    return 1 + int.from_bytes(digest, "big") % shards


def in_shard(contexts: Iterable[Context], shard: tuple[int, int]) -> Iterator[Context]:
    """The contexts of shard ``(I, N)``, in input order.

    Examples:
        Of q1, q2 and q3 (shards 1, 3 and 2 of 4, see :func:`shard_of`), shard 2/4 holds q3:

        >>> [ctx.qid for ctx in in_shard([Context(q) for q in ("q1", "q2", "q3")], (2, 4))]
        ['q3']
    """
    index, shards = shard
    return (ctx for ctx in contexts if shard_of(ctx.qid, shards) == index)


def order_shards(paths: Sequence[PathType]) -> list[PathType]:
    """Shard files in shard order: by the ``part-I-of-N`` in their names when every name has
    one (all N present, each once), else as given.

    Examples:
        >>> order_shards(["out.part-2-of-2.jsonl", "out.part-1-of-2.jsonl"])
        ['out.part-1-of-2.jsonl', 'out.part-2-of-2.jsonl']
        >>> order_shards(["b.jsonl", "a.jsonl"])
        ['b.jsonl', 'a.jsonl']
    """
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


def _ids(path: PathType, sha: Any) -> Iterator[tuple[int, str, tuple[object, object]]]:
    """``(line number, line, (qid, run))`` for every non-blank line of an output file; every
    line read (blank ones too) is added to the hash ``sha``."""
    for line_no, text in numbered_lines(path):
        sha.update(text.encode("utf-8"))
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


def _shard_records(ordered: Sequence[PathType], manifests: Sequence[dict]) -> dict[str, Any]:
    """The record the shards share, as an unsharded run's (``shard`` null); refuses shards
    numbered other than 1..N in order, produced by another judge, steps or options, or whose
    manifests record other makers of the input's values (``judges``: the input's manifest
    changed between the shard runs)."""
    total = len(ordered)
    first = record_of(manifests[0])
    for index, (path, manifest) in enumerate(zip(ordered, manifests, strict=True), start=1):
        record = record_of(manifest)
        if record.get("shard") != f"{index}/{total}":
            raise UDCGInputError(
                f"was annotated as shard {record.get('shard')} where shard {index}/{total} "
                f"belongs: give all {total} shard files of this input, in order 1..N",
                path=path,
            )
        difference = first_difference(first, record, skip=("shard",))
        if difference is not None:
            name, theirs, this = difference
            raise UDCGInputError(
                f"was annotated with {name} {json.dumps(this)}, {os.fspath(ordered[0])} with "
                f"{name} {json.dumps(theirs)}: every shard must come from the same judge, steps "
                "and options",
                path=path,
            )
        if manifest.get(JUDGES) != manifests[0].get(JUDGES):
            raise UDCGInputError(
                f"records other makers of the input's values ({JUDGES}:"
                f" {json.dumps(manifest.get(JUDGES))}) than {os.fspath(ordered[0])}"
                f" ({json.dumps(manifests[0].get(JUDGES))}): the input's manifest changed between"
                " the shard runs; annotate the shards again",
                path=path,
            )
    return {**first, "shard": None}


def _check_digests(
    source: PathType, path: PathType, shard: str, manifest: dict, inputs: InputDigest, sha: Any
) -> None:
    """Refuse a shard whose recorded input digest is not that of its slice of ``source``, or
    whose recorded output digest is not that of its file."""
    if (inputs.count, inputs.hexdigest()) != (manifest["contexts"], manifest["input_sha256"]):
        raise UDCGInputError(
            f"was annotated from other contexts than shard {shard} of {os.fspath(source)} "
            f"(input digest {manifest['input_sha256'][:16]} in {manifest_path(path).name}, "
            f"{inputs.hexdigest()[:16]} here): the input was edited since or is another input; "
            "annotate the shard again",
            path=path,
        )
    if sha.hexdigest() != manifest["output_sha256"]:
        raise UDCGInputError(
            f"is not the file udcg annotate wrote (output digest {manifest['output_sha256'][:16]} "
            f"in {manifest_path(path).name}, {sha.hexdigest()[:16]} now): it was edited since; "
            "annotate the shard again",
            path=path,
        )


def _check_makers(source: PathType, first: PathType, manifest: dict, record: dict) -> None:
    """Refuse shards whose ``judges`` (who made each value of the input, then this run's) are
    not what an unsharded run on ``source`` with its manifest now would record: the shards
    were annotated without the input's manifest beside it, or it changed since."""
    if manifest.get(JUDGES) is None or not is_regular_file(source):  # before udcg recorded
        return  # them, or an input read from a pipe, whose manifest cannot be found
    now = made_by(
        recorded_judges(source), record["judge"], record["judge_fingerprint"], record["steps"],
        record["relevance"], record["relabel_relevance"], record["mode"],
    )  # fmt: skip
    if manifest[JUDGES] != now:
        raise UDCGInputError(
            f"records other makers of the input's values ({JUDGES}: "
            f"{json.dumps(manifest[JUDGES])}) than an unsharded run on {os.fspath(source)} "
            f"would ({json.dumps(now)}): the shards ran without {manifest_path(source).name} "
            "beside the input, or it changed since; give every shard machine the input with its "
            "manifest and annotate the shards again",
            path=first,
        )


def merge_shards(source: PathType, shards: Sequence[PathType], output: PathType) -> int:
    """Write the shard files back in the order of ``source`` (the unsharded input) to
    ``output`` (atomic; ``.gz`` compresses) with its manifest; returns the number of contexts.
    ``-`` (standard output) gets the lines only once every shard is checked
    (:func:`udcg.io.files.verified_write`). Holds the output's lock
    (:func:`udcg.io.files.exclusive_writer`) while it writes."""
    ordered = order_shards(shards)
    refuse_outputs(output, {"IN": source} | {f"shard {os.fspath(p)}": p for p in ordered})
    total = len(ordered)
    manifests = [read_manifest(p) for p in ordered]
    record = _shard_records(ordered, manifests)
    _check_makers(source, ordered[0], manifests[0], record)
    hashes = [hashlib.sha256() for _ in ordered]
    readers = [_ids(p, sha) for p, sha in zip(ordered, hashes, strict=True)]
    inputs = [InputDigest() for _ in ordered]
    whole, merged = InputDigest(), hashlib.sha256()
    with exclusive_writer(output, "merged output"), verified_write(output) as out:
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
            inputs[index - 1].add_hash(whole.add(ctx))
            merged.update(text.encode("utf-8"))
            out.write(text)
        for path, reader in zip(ordered, readers, strict=True):
            extra = next(reader, None)
            if extra is not None:
                raise UDCGInputError(
                    "holds more contexts than its shard of the input: another input or another N",
                    path=path,
                    line=extra[0],
                )
        for index, path in enumerate(ordered):
            shard = f"{index + 1} of {total}"
            _check_digests(source, path, shard, manifests[index], inputs[index], hashes[index])
    if os.fspath(output) != STDIO:
        counts = {
            "contexts": whole.count,
            "input_sha256": whole.hexdigest(),
            "output_sha256": merged.hexdigest(),
        }
        if manifests[0].get(JUDGES) is not None:  # one input: the same in every shard
            counts[JUDGES] = manifests[0][JUDGES]
        write_manifest(output, record, counts)
    return whole.count
