"""File helpers shared by every reader and writer: transparent gzip and atomic writes."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import tempfile
from collections.abc import Iterator
from os import PathLike
from pathlib import Path
from typing import IO

from udcg.errors import UDCGInputError

PathType = str | PathLike[str]


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(2) == b"\x1f\x8b"


def open_binary(path: PathType) -> IO[bytes]:
    """Open ``path`` for binary reading, decompressing gzip (by magic bytes, not by name)."""
    path = Path(path)
    if not path.exists():
        raise UDCGInputError("no such file", path=path)
    if path.is_dir():
        raise UDCGInputError("is a directory, expected a file", path=path)
    if _is_gzip(path):
        return gzip.open(path, "rb")
    return open(path, "rb")


def open_text(path: PathType) -> IO[str]:
    """Open ``path`` for UTF-8 text reading, decompressing gzip transparently."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8", newline="")


def read_bytes(path: PathType) -> bytes:
    """The whole (decompressed) content of ``path``."""
    with open_binary(path) as handle:
        return handle.read()


@contextlib.contextmanager
def atomic_write(path: PathType, mode: str = "w") -> Iterator[IO]:
    """Write to a temporary file beside ``path`` and rename it into place on success.

    After a crash or an exception the target is untouched: either the old content or the
    complete new content, never half a file. A ``.gz`` suffix compresses the output.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)  # mkstemp creates 0600; give the usual permissions
    try:
        with os.fdopen(fd, "wb") as raw:
            stream: IO = (
                gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) if path.suffix == ".gz" else raw
            )
            with stream if stream is not raw else contextlib.nullcontext(raw):
                if "b" in mode:
                    yield stream
                else:
                    text = io.TextIOWrapper(stream, encoding="utf-8", newline="\n")
                    yield text
                    text.flush()
                    text.detach()
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
