"""What produced an annotated contexts file, recorded beside it and checked where it is reused.

The **record** of an annotation names everything that changes its values: the judge (``name``
and ``fingerprint``), the steps, ``relevance``, ``relabel_relevance``, ``grader``, ``mode``,
``max_new_tokens``, the shard (``"I/N"``, or null for the whole input) and ``key_settings``,
the judge's run-time settings of each operation the run uses
(:meth:`udcg.judge.base.Judge.key_settings`, part of every cache key: e.g. the abstention token
a server's tokenizer gave). A record of another ``format`` (an older udcg's) never matches.
Each input context has a **line hash**: blake2b (16 bytes, hex) of the line
:func:`udcg.io.contexts.jsonl.context_line` writes for it as read (so re-encoding the same
values does not change it, any edit does). The **input digest** of a sequence of contexts is
the SHA-256 of their line hashes, each followed by a newline.

* ``OUT.manifest.json`` (beside a finished ``OUT``; none for ``-``) is a JSON object: the record,
  ``contexts`` (lines written), ``input_sha256`` (input digest of the contexts annotated) and
  ``output_sha256`` (SHA-256 of OUT's uncompressed bytes).
* ``OUT.partial.manifest`` (beside ``OUT.partial`` while a run works) is JSON Lines: the record
  on line 1, then the line hash of each input context, one JSON string per line, written before
  the context's annotated line is appended to ``OUT.partial``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, context_line
from udcg.io.files import (
    STDIO,
    PathType,
    atomic_write,
    is_special,
    refuse_same_file,
    refuse_unreplaceable,
)
from udcg.io.manifests import contexts_sha256, file_sha256, manifest_path, recorded_judges
from udcg.labels.annotate import STEPS, operations

#: Version of the record layout; a record of another format never matches.
FORMAT = "udcg-annotate/2"
#: Fields of a manifest that describe the file, not what produced it.
COUNTS = ("contexts", "input_sha256", "output_sha256")
#: Field of a manifest that says who made the values of each judge key the file holds
#: (:func:`udcg.io.manifests.recorded_judges`): it describes the file too.
JUDGES = "judges"
_SHA256 = re.compile(r"[0-9a-f]{64}")


def annotation_record(
    judge_name: str,
    judge_fingerprint: str,
    steps: Sequence[str],
    relevance: str,
    relabel_relevance: bool,
    grader: str,
    mode: str,
    max_new_tokens: int,
    shard: tuple[int, int] | None,
    key_settings: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """The record of an annotation run with these settings (steps in :data:`STEPS` order);
    ``key_settings``: operation -> the judge's run-time settings of it, for each operation the
    run uses (:func:`udcg.labels.annotate.operations`), recorded with their keys sorted.

    Examples:
        >>> record = annotation_record("llama3", "fp", ["relevance", "abstain"], "string", False,
        ...                            "span", "first_token", 32, shard=(1, 4),
        ...                            key_settings={"abstain_prob": {"unlisted": "bound",
        ...                                                           "abstain_token": "NO"}})
        >>> record["steps"], record["shard"], record["format"]
        (['abstain', 'relevance'], '1/4', 'udcg-annotate/2')
        >>> record["key_settings"]
        {'abstain_prob': {'abstain_token': 'NO', 'unlisted': 'bound'}}
    """
    return {
        "format": FORMAT,
        "judge": judge_name,
        "judge_fingerprint": judge_fingerprint,
        "steps": [s for s in STEPS if s in steps],
        "relevance": relevance,
        "relabel_relevance": relabel_relevance,
        "grader": grader,
        "mode": mode,
        "max_new_tokens": max_new_tokens,
        "shard": None if shard is None else f"{shard[0]}/{shard[1]}",
        # in one key order, whether the judge resolved them or the cache's record gave them
        "key_settings": {
            op: dict(sorted(settings.items())) for op, settings in key_settings.items()
        },
    }


def default_record(judge: Any, steps: Sequence[str], chunk: int) -> dict[str, Any]:
    """The record of ``annotate(contexts, judge, steps)`` with its defaults (string relevance,
    span grader, first-token abstention, 32 new tokens, the whole input) in chunks of ``chunk``
    contexts, as ``udcg demo`` and the one-journey report annotate.

    Examples:
        >>> from udcg.judge import Judge
        >>> class Fixed(Judge):
        ...     name, fingerprint = "fixed", "fixed-v1"
        >>> record = default_record(Fixed(), ["abstain", "outcomes"], 64)
        >>> record["judge"], record["steps"], record["grader"], record["shard"]
        ('fixed', ['abstain', 'outcomes'], 'span', None)
    """
    settings = {op: judge.key_settings(op) for op in operations(steps, "string")}
    record = annotation_record(
        judge.name, judge.fingerprint, steps, "string", False, "span", "first_token", 32, None,
        settings,
    )  # fmt: skip
    return with_batching(record, judge, chunk)


def with_batching(record: dict[str, Any], judge: Any, chunk: int) -> dict[str, Any]:
    """``record`` with ``batching`` (``chunk`` and ``judge.batch_settings(ops)`` of the
    operations its steps call) when those values move with the other items of a batch (a local
    model's), so that a resume or shard batched otherwise is refused; ``record`` itself for
    other judges, and for steps that call none (string relevance).

    Examples:
        >>> from udcg.judge import Judge
        >>> class Local(Judge):
        ...     name, fingerprint = "local", "local-v1"
        ...     def batch_settings(self, operations=None):
        ...         return {"batch_size": 16} if operations else {}
        >>> abstain = {"steps": ["abstain"], "relevance": "string"}
        >>> with_batching(abstain, Local(), 64)["batching"]
        {'chunk': 64, 'batch_size': 16}
        >>> "batching" in with_batching({**abstain, "steps": ["relevance"]}, Local(), 64)
        False
    """
    batching = judge.batch_settings(operations(record["steps"], record["relevance"]))
    return {**record, "batching": {"chunk": chunk, **batching}} if batching else record


def line_hash(ctx: Context) -> str:
    """The line hash of an input context (hex).

    Examples:
        Equal contexts hash equally, any edit changes the hash:

        >>> len(line_hash(Context("q1"))), line_hash(Context("q1")) == line_hash(Context("q2"))
        (32, False)
    """
    return hashlib.blake2b(context_line(ctx).encode("utf-8"), digest_size=16).hexdigest()


class InputDigest:
    """The input digest of contexts added one at a time.

    Examples:
        >>> digest = InputDigest()
        >>> digest.add(Context("q1")) == line_hash(Context("q1")), digest.count
        (True, 1)
        >>> len(digest.hexdigest())
        64
    """

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self.count = 0

    def add_hash(self, digest: str) -> None:
        """Add the context whose line hash is ``digest``."""
        self._sha.update(f"{digest}\n".encode("ascii"))
        self.count += 1

    def add(self, ctx: Context) -> str:
        """Add ``ctx``; its line hash."""
        digest = line_hash(ctx)
        self.add_hash(digest)
        return digest

    def hexdigest(self) -> str:
        """The digest of the contexts added so far."""
        return self._sha.hexdigest()


def write_manifest(output: PathType, record: Mapping[str, Any], counts: Mapping[str, Any]) -> None:
    """Write ``OUT.manifest.json``: ``record`` then ``counts`` (atomically; a new manifest as
    private as ``OUT``).

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> record = annotation_record("llama3", "fp", ["abstain"], "string", False, "span",
        ...                            "first_token", 32, None, {})
        >>> counts = {"contexts": 2, "input_sha256": "ab" * 32, "output_sha256": "cd" * 32}
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     write_manifest(Path(folder) / "out.jsonl", record, counts)
        ...     manifest = read_manifest(Path(folder) / "out.jsonl")
        >>> manifest["contexts"], record_of(manifest) == record
        (2, True)
    """
    with atomic_write(manifest_path(output), like=output) as handle:
        handle.write(json.dumps({**record, **counts}, indent=1) + "\n")


def refuse_derived_outputs(output: PathType, inputs: dict[str, PathType | None]) -> None:
    """Refuse, before any work, an ``output`` or the manifest written beside it that cannot be
    replaced (a folder, a read-only file) or names one of ``inputs``
    (:func:`udcg.io.files.refuse_same_file`); ``-`` (standard output) has no manifest.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     (Path(folder) / "s.jsonl.manifest.json").mkdir()
        ...     refuse_derived_outputs(Path(folder) / "s.jsonl", {})
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: ...s.jsonl.manifest.json: is a directory, expected an ...
    """
    paths = [output] if os.fspath(output) == STDIO else [output, manifest_path(output)]
    for path in paths:
        refuse_unreplaceable(path)
        refuse_same_file(path, inputs)


def write_derived_manifest(output: PathType, source: PathType, record: Mapping[str, Any]) -> None:
    """Write the manifest of ``output``, contexts made from the contexts file ``source`` by a
    command that adds no abstention, answer-likelihood or relevance values of its own
    (reordered, Q-CARE labels added): ``record`` says what made it, ``source`` and its SHA-256
    what it was made from, and ``judges`` carries who made the values ``source`` holds
    (:func:`udcg.io.manifests.recorded_judges`), so the checks downstream keep knowing. Nothing
    for standard output or a device (``/dev/null``). ``source``'s SHA-256 is
    :func:`udcg.io.manifests.contexts_sha256`'s: a local ``hf:DIR`` dataset's files', none for
    standard input, a pipe, ``<(...)`` (read once, already) or a Hub id.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     src, out = Path(folder) / "in.jsonl", Path(folder) / "out.jsonl"
        ...     _ = src.write_text("{}\\n")
        ...     judges = {"llama3": {"abstain": "fp-1"}}
        ...     made = {"judges": judges, "output_sha256": file_sha256(src)}
        ...     _ = manifest_path(src).write_text(json.dumps(made))
        ...     _ = out.write_text("{}\\n")
        ...     write_derived_manifest(out, src, {"format": "udcg-order/1"})
        ...     carried = recorded_judges(out)
        >>> carried
        {'llama3': {'abstain': 'fp-1'}}
    """
    if os.fspath(output) == STDIO or is_special(output):
        return
    sha256 = contexts_sha256(source)
    counts = {
        "input": os.fspath(source),
        "input_sha256": sha256,
        "output_sha256": file_sha256(output),
        JUDGES: {} if sha256 is None else recorded_judges(source, sha256),
    }
    write_manifest(output, record, counts)


def read_manifest(output: PathType) -> dict[str, Any]:
    """The manifest of ``output``; a missing or unreadable one is a one-line error.

    Examples:
        >>> read_manifest("no/such/out.jsonl")
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: no/such/out.jsonl: no manifest out.jsonl.manifest.json ...
    """
    path = manifest_path(output)
    if not path.is_file():
        raise UDCGInputError(
            f"no manifest {path.name} beside it records what produced it (judge, steps, "
            "input): annotate it again with 'udcg annotate'",
            path=output,
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as exc:
        raise UDCGInputError(f"not a manifest udcg wrote: {exc}", path=path) from None
    missing = [
        k for k in ("format", *COUNTS) if not isinstance(manifest, dict) or k not in manifest
    ]
    if missing:
        raise UDCGInputError(f"not a manifest udcg wrote: no {missing[0]!r}", path=path)
    check_format(manifest, path, "annotate it again with 'udcg annotate'")
    for name, problem in _count_problems(manifest):
        raise UDCGInputError(f"not a manifest udcg wrote: {problem}", path=path, field=name)
    return manifest


def check_format(record: Mapping[str, Any], path: PathType, remedy: str) -> None:
    """Refuse a ``record`` (read from ``path``) of another :data:`FORMAT`: an older udcg's,
    which does not record everything this one checks; ``remedy`` says what to do.

    Examples:
        >>> check_format({"format": "udcg-annotate/1"}, "out.jsonl.manifest.json", "start over")
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: out.jsonl.manifest.json: field 'format': "udcg-annotate/1" ...
    """
    found = record.get("format")
    if found != FORMAT:
        raise UDCGInputError(
            f"{json.dumps(found)} is not the record format of this udcg ({json.dumps(FORMAT)}): "
            f"written by another udcg version, it lacks what this one checks; {remedy}",
            path=path,
            field="format",
        )


def _count_problems(manifest: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(field, problem)`` for each count of ``manifest`` of the wrong type: ``contexts`` a
    non-negative integer, the digests 64 lowercase hex digits.

    Examples:
        >>> for problem in _count_problems({"contexts": "52", "input_sha256": "ab",
        ...                                 "output_sha256": "0" * 64}):
        ...     print(*problem)
        contexts expected a non-negative integer, got "52"
        input_sha256 expected a SHA-256 (64 hex digits), got "ab"
    """
    problems = []
    count = manifest["contexts"]
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        problems.append(("contexts", f"expected a non-negative integer, got {json.dumps(count)}"))
    for name in ("input_sha256", "output_sha256"):
        digest = manifest[name]
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            got = json.dumps(digest)
            problems.append((name, f"expected a SHA-256 (64 hex digits), got {got[:80]}"))
    return problems


def record_of(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The record part of a manifest (without its counts).

    Examples:
        >>> record_of({"format": "udcg-annotate/1", "judge": "llama3", "contexts": 2})
        {'format': 'udcg-annotate/1', 'judge': 'llama3'}
    """
    return {k: v for k, v in manifest.items() if k not in (*COUNTS, JUDGES)}


def first_difference(
    old: Mapping[str, Any], new: Mapping[str, Any], skip: Sequence[str] = ()
) -> tuple[str, Any, Any] | None:
    """The first field (in ``new``'s order, then ``old``'s) whose value differs between two
    records, with both values; None when they agree. Fields in ``skip`` are not compared.

    Examples:
        >>> record = annotation_record("llama3", "fp", ["abstain"], "string", False, "span",
        ...                            "first_token", 32, None, {})
        >>> first_difference(record, {**record, "mode": "sequence"})
        ('mode', 'first_token', 'sequence')
        >>> first_difference(record, {**record, "shard": "1/2"}, skip=["shard"]) is None
        True

        Within nested records, the dotted name of the first value that differs:

        >>> first_difference({"s": {"a": 1, "b": 2}}, {"s": {"a": 1, "b": 3}})
        ('s.b', 2, 3)
    """
    for key in [*new, *(k for k in old if k not in new)]:
        before, after = old.get(key), new.get(key)
        if key in skip or before == after:
            continue
        inner = None
        if isinstance(before, Mapping) and isinstance(after, Mapping):
            inner = first_difference(before, after)
        if inner is None:
            return key, before, after
        return f"{key}.{inner[0]}", inner[1], inner[2]
    return None
