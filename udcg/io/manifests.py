"""Where the manifest of a derived file lives, the hash it records of the file's content, and
the judge it names (the full record and its checks: :mod:`udcg.labels.provenance`)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from udcg.io.files import STDIO, PathType, open_binary

#: Suffix of the manifest beside a finished output.
MANIFEST = ".manifest.json"


def file_sha256(path: PathType) -> str:
    """SHA-256 of the (uncompressed) bytes of ``path``.

    Examples:
        The same content, compressed or not, has one hash:

        >>> import gzip, tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     with gzip.open(Path(folder) / "a.jsonl.gz", "wt") as out:
        ...         _ = out.write("{}\\n")
        ...     _ = (Path(folder) / "b.jsonl").write_text("{}\\n")
        ...     hashes = [file_sha256(Path(folder) / name) for name in ("a.jsonl.gz", "b.jsonl")]
        >>> hashes[0] == hashes[1]
        True
    """
    sha = hashlib.sha256()
    with open_binary(path) as handle:
        while block := handle.read(1 << 20):
            sha.update(block)
    return sha.hexdigest()


def manifest_path(output: PathType) -> Path:
    """Where the manifest of ``output`` lives: ``OUT.manifest.json``.

    Examples:
        >>> manifest_path("out/contexts.jsonl.gz").as_posix()
        'out/contexts.jsonl.gz.manifest.json'
    """
    return Path(f"{os.fspath(output)}{MANIFEST}")


def recorded_fingerprint(output: PathType, judge_key: str) -> str | None:
    """The fingerprint of judge ``judge_key`` as the manifest beside ``output`` records it
    (``judge_fingerprint``); None without a readable manifest, or where it names another judge
    or another content (its ``output_sha256`` is not ``output``'s: edited since).

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     out = Path(folder) / "out.jsonl"
        ...     _ = out.write_text("{}\\n")
        ...     record = {"judge": "llama3", "judge_fingerprint": "fp-1",
        ...               "output_sha256": file_sha256(out)}
        ...     _ = manifest_path(out).write_text(json.dumps(record))
        ...     found = recorded_fingerprint(out, "llama3"), recorded_fingerprint(out, "gpt")
        >>> found
        ('fp-1', None)
    """
    if os.fspath(output) == STDIO:
        return None
    try:
        manifest = json.loads(manifest_path(output).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("judge") != judge_key:
        return None
    fingerprint = manifest.get("judge_fingerprint")
    if not isinstance(fingerprint, str) or manifest.get("output_sha256") != file_sha256(output):
        return None
    return fingerprint
