"""SHA-256 of files, read in 1 MiB chunks, and of the files a model folder is loaded from.

The digest of a large file (:data:`REMEMBERED` bytes or more) is remembered in
``file-digests.json`` in the udcg cache folder (``$UDCG_CACHE_DIR``, else ``~/.cache/udcg``)
under the file's path and identity (device, inode, size, modification and change times, the
last set by the kernel on every write): a model's weights are hashed once, and again only
after they change. An unreadable or unwritable record only means hashing again.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

#: Files of this size or more have their digest remembered.
REMEMBERED = 64 << 20
#: What ``transformers`` loads from a model folder: weights, configurations, tokenizer files
#: and the chat template.
MODEL_FILES = (
    "*.safetensors",
    "*.bin",
    "*.json",
    "*.model",
    "*.tiktoken",
    "*.jinja",
    "additional_chat_templates/*.jinja",
    "merges.txt",
    "vocab.txt",
)


def _read_sha256(path: Path) -> str:
    """Hex SHA-256 of the bytes of ``path``, read now."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _identity(path: Path) -> list[int]:
    """What changes when the file at ``path`` is written or replaced."""
    st = path.stat()
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _record_path() -> Path:
    """Where remembered digests live: ``file-digests.json`` in the udcg cache folder."""
    from udcg.judge.cache import default_cache_path

    return default_cache_path().parent / "file-digests.json"


def _remembered(record: Path) -> dict[str, Any]:
    """The remembered digests (path -> ``{"identity": [...], "sha256": hex}``); none when the
    record is missing or unreadable."""
    try:
        entries = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return entries if isinstance(entries, dict) else {}


def _remember(record: Path, key: str, identity: list[int], digest: str) -> None:
    """Add one digest to ``record`` (written atomically; skipped where it cannot be)."""
    entries = _remembered(record) | {key: {"identity": identity, "sha256": digest}}
    tmp = record.with_name(f".{record.name}.{os.getpid()}.tmp")
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(entries), encoding="utf-8")
        os.replace(tmp, record)
    except OSError:
        tmp.unlink(missing_ok=True)


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of the bytes of the file at ``path`` (remembered for a large file).

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (Path(folder) / "a.bin").write_bytes(b"abc")
        ...     file_sha256(Path(folder) / "a.bin")[:16]
        'ba7816bf8f01cfea'
    """
    identity = _identity(path)
    if identity[2] < REMEMBERED:
        return _read_sha256(path)
    record, key = _record_path(), os.fspath(path.resolve())
    known = _remembered(record).get(key)
    if isinstance(known, dict) and known.get("identity") == identity:
        digest = known.get("sha256")
        if isinstance(digest, str):
            return digest
    digest = _read_sha256(path)
    if _identity(path) == identity:  # not written while it was read
        _remember(record, key, identity, digest)
    return digest


def folder_sha256(folder: Path, leave_out: tuple[str, ...] = ()) -> str:
    """Hex SHA-256 over the name and digest of each file of ``folder`` that ``transformers``
    loads a model from (:data:`MODEL_FILES`: top level, and the chat templates of
    ``additional_chat_templates/``), in name order; the names in ``leave_out`` are skipped.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (Path(folder) / "config.json").write_text("{}")
        ...     before = folder_sha256(Path(folder))
        ...     _ = (Path(folder) / "README.md").write_text("not loaded")
        ...     same = folder_sha256(Path(folder)) == before
        ...     _ = (Path(folder) / "model.safetensors").write_bytes(b"weights")
        ...     changed = folder_sha256(Path(folder)) != before
        >>> same, changed
        (True, True)
    """
    files = sorted({p for pattern in MODEL_FILES for p in folder.glob(pattern) if p.is_file()})
    h = hashlib.sha256()
    for path in files:
        name = path.relative_to(folder).as_posix()
        if name not in leave_out:
            h.update(f"{name}\0{file_sha256(path)}\n".encode())
    return h.hexdigest()
