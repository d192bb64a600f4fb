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


def recorded_fingerprints(output: PathType, judge_key: str) -> dict[str, str]:
    """Annotate step -> fingerprint of the judge ``judge_key`` whose values of that step
    ``output`` holds, as the manifest beside it records them: the steps of the run that wrote
    it (``steps``, ``judge_fingerprint``) and those its input held and that run kept
    (``kept``). Empty without a readable manifest of this content (its ``output_sha256`` is
    ``output``'s: not edited since) and this judge key.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     out = Path(folder) / "out.jsonl"
        ...     _ = out.write_text("{}\\n")
        ...     record = {"judge": "llama3", "judge_fingerprint": "fp-2", "steps": ["abstain"],
        ...               "kept": {"answer_likelihood": "fp-1"}, "output_sha256": file_sha256(out)}
        ...     _ = manifest_path(out).write_text(json.dumps(record))
        ...     found = recorded_fingerprints(out, "llama3"), recorded_fingerprints(out, "gpt")
        >>> found
        ({'answer_likelihood': 'fp-1', 'abstain': 'fp-2'}, {})
    """
    if os.fspath(output) == STDIO or not Path(output).is_file():
        return {}
    try:
        manifest = json.loads(manifest_path(output).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(manifest, dict) or manifest.get("judge") != judge_key:
        return {}
    fingerprint, steps = manifest.get("judge_fingerprint"), manifest.get("steps")
    kept = manifest.get("kept") or {}
    if (
        not isinstance(fingerprint, str)
        or not isinstance(steps, list)
        or not isinstance(kept, dict)
    ):
        return {}
    if manifest.get("output_sha256") != file_sha256(output):
        return {}
    found = {s: f for s, f in kept.items() if isinstance(s, str) and isinstance(f, str)}
    return found | {s: fingerprint for s in steps if isinstance(s, str)}
