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


class _GzipReader(gzip.GzipFile):
    """A gzip stream over an already open file, closing that file with itself."""

    def __init__(self, raw: io.BufferedReader) -> None:
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def open_binary(path: PathType) -> IO[bytes]:
    """Open ``path`` for binary reading, decompressing gzip (by magic bytes, not by name).
    The file is opened once and its first bytes peeked, so pipes work too."""
    path = Path(path)
    if not path.exists():
        raise UDCGInputError("no such file", path=path)
    if path.is_dir():
        raise UDCGInputError("is a directory, expected a file", path=path)
    raw = open(path, "rb")  # handed to the caller, who closes it
    if raw.peek(2)[:2] == b"\x1f\x8b":
        return _GzipReader(raw)
    return raw


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
