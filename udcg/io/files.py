"""File helpers shared by every reader and writer: transparent gzip, located read errors
(a corrupt gzip stream, invalid UTF-8), atomic writes and the canonical JSON that records
and cache keys digest."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import re
import secrets
import shutil
import stat
import sys
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from os import PathLike
from pathlib import Path
from typing import IO, Any, TextIO

from udcg.errors import UDCGInputError

PathType = str | PathLike[str]


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys; NaN and infinities are refused.

    Examples:
        >>> canonical_json({"b": 1, "a": [1.5, "é"]})
        '{"a":[1.5,"é"],"b":1}'
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


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


#: The path that means standard input to a reader and standard output to a writer.
STDIO = "-"
#: Suffix of the manifest beside an output: ``OUT.manifest.json`` (:mod:`udcg.io.manifests`).
MANIFEST = ".manifest.json"


class _Read:
    """One input's content, read by the first reader while the others of it wait."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.data: bytes | None = None


#: Inputs read once within the running command or sweep (:func:`inputs_read_once`), by what
#: they were; None outside one.
_READ: ContextVar[dict[tuple[Any, ...], _Read] | None] = ContextVar("udcg_read", default=None)
#: Outside a command: standard input's last read (:func:`_stdin_bytes`).
_LOOSE: dict[tuple[Any, ...], _Read] = {}
_READ_LOCK = threading.Lock()  # guards the dicts only: two inputs are read side by side


@contextlib.contextmanager
def inputs_read_once() -> Iterator[None]:
    """Within the block (a command, a whole sweep: an inner block joins the outer one),
    standard input and pipes are read once and their content kept: every reader of ``-``,
    ``/dev/stdin`` or ``<(...)`` in it gets the same bytes. What a block read is dropped at
    its end, and another thread's block keeps its own.

    Examples:
        >>> with inputs_read_once():  # a command run in-process
        ...     kept = _READ.get()
        >>> kept, _READ.get()
        ({}, None)
    """
    if _READ.get() is not None:
        yield
        return
    token = _READ.set({})
    try:
        yield
    finally:
        _READ.reset(token)


def _kept(key: tuple[Any, ...], read: Callable[[], bytes], loose: bool) -> bytes:
    """``read()``, once per ``key`` within :func:`inputs_read_once`; outside it, once while
    ``key`` is the last one read with ``loose``, else each time."""
    kept = _READ.get()
    if kept is None and not loose:
        return read()
    with _READ_LOCK:
        if kept is None:
            kept = _LOOSE
            if key not in kept:
                kept.clear()
        entry = kept.setdefault(key, _Read())
    with entry.lock:  # a pipe fed with another one by one writer must not wait for that one
        if entry.data is None:
            entry.data = read()
        return entry.data


def _stdin_bytes(stream: Any) -> bytes:
    """All of standard input, read once: a reader may open ``-`` more than once. Kept for the
    running command (:func:`inputs_read_once`), or outside one while ``stream`` is the same
    object on the same file, so another standard input is read anew. A text stream without
    bytes beneath (``io.StringIO``) is read as UTF-8."""
    try:
        status = os.fstat(stream.fileno())
        file: tuple[Any, ...] = (status.st_dev, status.st_ino)
    except (OSError, ValueError, io.UnsupportedOperation):  # no descriptor: the object alone
        file = ()
    raw = getattr(stream, "buffer", None)
    read = raw.read if raw is not None else lambda: stream.read().encode("utf-8")
    return _kept((STDIO, stream, *file), read, loose=True)  # the object held: its id not reused


def live(stream: Any) -> Any:
    """``stream``, or None when it is closed: ``None`` (the shell closed it, ``>&-``) or an
    object closed since (``sys.stdout.close()`` by the caller).

    Examples:
        >>> live(sys.__stderr__) is sys.__stderr__, live(None), live(io.StringIO()) is not None
        (True, None, True)
    """
    return None if stream is None or getattr(stream, "closed", False) else stream


def check_input(path: PathType) -> None:
    """Refuse a missing ``path`` or a directory, asking the file system (``stat``) without
    opening it: opening a pipe to look would consume what it holds. ``-`` is standard input.

    Examples:
        >>> check_input("-")  # standard input: nothing to check
        >>> check_input("no/such/file.jsonl")
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: no/such/file.jsonl: no such file
    """
    if os.fspath(path) == STDIO or isinstance(path, InputBytes):
        return
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise UDCGInputError("no such file", path=path) from None
    except OSError as exc:
        raise UDCGInputError(f"cannot read the file: {exc.strerror}", path=path) from None
    if stat.S_ISDIR(mode):
        raise UDCGInputError("is a directory, expected a file", path=path)


def is_regular_file(path: PathType) -> bool:
    """Whether ``path`` names a regular file, which can be opened and read more than once
    (not ``-``, a pipe, a device or content already read).

    Examples:
        >>> is_regular_file("-"), is_regular_file(InputBytes("/dev/stdin", b"q1 Q0 d1 1 2 t"))
        (False, False)
    """
    if os.fspath(path) == STDIO or isinstance(path, InputBytes):
        return False
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


class InputBytes(PathLike[str]):
    """The raw content of an input that cannot be opened twice (a pipe, ``<(...)``, a device),
    read once; it stands for its path: :func:`open_binary` reads the content, messages show
    the path.

    Examples:
        >>> piped = InputBytes("/dev/fd/63", b"q1 0 d1 1\\n")
        >>> os.fspath(piped), read_bytes(piped)
        ('/dev/fd/63', b'q1 0 d1 1\\n')
    """

    def __init__(self, path: PathType, data: bytes) -> None:
        self.path = os.fspath(path)
        self.data = data

    def __fspath__(self) -> str:
        return self.path

    def __str__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        return f"InputBytes({self.path!r}, {len(self.data)} bytes)"


def read_once(path: PathType) -> PathType:
    """``path`` ready for readers that read it more than once: a regular file or ``-`` as
    given; any other input (a pipe, ``<(...)``, ``/dev/stdin``) read whole, once (once for a
    command or a sweep: :func:`inputs_read_once`), into an :class:`InputBytes`. A missing path
    or a directory is an error.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder) / "lines.txt.gz"
        ...     with atomic_write(path) as out:
        ...         _ = out.write("a\\nb\\n")
        ...     same = read_once(path) == path  # a regular file is read where it is
        >>> same
        True
    """
    check_input(path)
    if os.fspath(path) == STDIO or isinstance(path, InputBytes) or is_regular_file(path):
        return path

    try:
        data = _kept_pipe(path)
        return InputBytes(path, _read_whole(path) if data is None else data)
    except OSError as exc:
        raise _unreadable(path, exc) from None


def _read_whole(path: PathType) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _kept_pipe(path: PathType) -> bytes | None:
    """The content of ``path`` when it names a pipe (``<(...)``, ``/dev/stdin`` piped, a FIFO)
    and a command or sweep is running (:func:`inputs_read_once`): read whole once, known by
    what ``stat`` sees (opening a FIFO whose writer is gone would wait for ever); else None."""
    if _READ.get() is None:
        return None
    status = os.stat(path)
    if not stat.S_ISFIFO(status.st_mode):
        return None
    return _kept((status.st_dev, status.st_ino), lambda: _read_whole(path), loose=False)


def open_binary(path: PathType) -> IO[bytes]:
    """Open ``path`` for binary reading, decompressing gzip (by magic bytes, not by name).
    The file is opened once and its first bytes peeked, so pipes work too; ``-`` reads
    standard input (an error when it is closed), an :class:`InputBytes` its content.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder) / "lines.txt.gz"
        ...     with atomic_write(path) as out:
        ...         _ = out.write("a\\nb\\n")
        ...     with open_binary(path) as handle:  # gzip told by its magic bytes
        ...         content = handle.read()
        >>> content
        b'a\\nb\\n'
    """
    if os.fspath(path) == STDIO:
        if live(sys.stdin) is None:  # closed (<&-)
            raise UDCGInputError("standard input is closed", path=path)
        raw = io.BufferedReader(io.BytesIO(_stdin_bytes(sys.stdin)))
    elif isinstance(path, InputBytes):
        raw = io.BufferedReader(io.BytesIO(path.data))
    else:
        check_input(path)
        piped = _kept_pipe(path)  # in a command: a pipe its readers (a sweep's members) share
        raw = open(path, "rb") if piped is None else io.BufferedReader(io.BytesIO(piped))
    if raw.peek(2)[:2] == b"\x1f\x8b":
        return _GzipReader(raw)
    head = raw.peek(10)[:10]
    for name, magic in _OTHER_COMPRESSIONS.items():
        if magic.match(head):
            raw.close()
            raise UDCGInputError(
                f"compressed with {name}, which udcg does not read (gzip only): decompress it "
                "or gzip it first",
                path=path,
            )
    return raw


#: Compressed formats told by their magic bytes, refused as such (not as invalid UTF-8).
_OTHER_COMPRESSIONS = {
    "bzip2": re.compile(rb"BZh[1-9]1AY&SY"),
    "xz": re.compile(rb"\xfd7zXZ\x00"),
    "zstd": re.compile(rb"\x28\xb5\x2f\xfd"),
    "zip": re.compile(rb"PK\x03\x04"),
}


def open_text(path: PathType) -> IO[str]:
    """Open ``path`` for UTF-8 text reading, decompressing gzip transparently.

    Examples:
        >>> with open_text(InputBytes("piped", "Zürich\\n".encode())) as handle:
        ...     handle.read()
        'Zürich\\n'
    """
    return io.TextIOWrapper(open_binary(path), encoding="utf-8", newline="")


#: What reading a damaged file raises: gzip's errors (``BadGzipFile`` is an ``OSError``).
_READ_ERRORS = (OSError, EOFError, zlib.error)


def _unreadable(path: PathType, exc: BaseException, line: int | None = None) -> UDCGInputError:
    return UDCGInputError(f"cannot read the file: {exc}", path=path, line=line)


def read_bytes(path: PathType) -> bytes:
    """The whole (decompressed) content of ``path``. A damaged gzip stream or a failed read is
    a :class:`~udcg.errors.UDCGInputError` at the line where the readable content stops.

    Examples:
        >>> read_bytes(InputBytes("piped", b"q1 0 d1 1\\n"))
        b'q1 0 d1 1\\n'
    """
    chunks: list[bytes] = []
    try:
        with open_binary(path) as handle:
            if not isinstance(handle, gzip.GzipFile):
                return handle.read()
            while chunk := handle.read(1 << 20):
                chunks.append(chunk)
    except _READ_ERRORS as exc:
        line = sum(chunk.count(b"\n") for chunk in chunks) + 1
        raise _unreadable(path, exc, line) from None
    return b"".join(chunks)


def read_text(path: PathType) -> str:
    """The whole (decompressed) content of ``path`` as UTF-8 text, a leading byte-order mark
    dropped; a byte that is not UTF-8 is a :class:`~udcg.errors.UDCGInputError` at its line.

    Examples:
        >>> read_text(InputBytes("piped", "\\ufeffq1 naïve".encode()))
        'q1 naïve'
    """
    data = read_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UDCGInputError("not valid UTF-8", path=path, line=line) from None
    return text.removeprefix("\ufeff")


def numbered_lines(path: PathType) -> Iterator[tuple[int, str]]:
    """``(line_number, text)`` for every line of ``path`` (gzip detected), each decoded as
    UTF-8 on its own so that invalid bytes are located; a leading BOM is dropped. Lines keep
    their ending; a damaged gzip stream is an error at the line it breaks.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder) / "lines.txt.gz"
        ...     with atomic_write(path) as out:
        ...         _ = out.write("a\\nb\\n")
        ...     lines = list(numbered_lines(path))
        >>> lines
        [(1, 'a\\n'), (2, 'b\\n')]
    """
    line_no = 0
    try:
        with open_binary(path) as handle:
            for line_no, raw in enumerate(handle, start=1):
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise UDCGInputError(
                        f"not valid UTF-8 (byte {exc.start + 1} of the line)",
                        path=path,
                        line=line_no,
                    ) from None
                if line_no == 1 and text.startswith("\ufeff"):
                    text = text[1:]
                yield line_no, text
    except _READ_ERRORS as exc:
        raise _unreadable(path, exc, line_no + 1) from None


def keep_owner_and_mode(fd: int, replaced: PathType) -> None:
    """Give the new file open as ``fd`` the owner, group and permissions of the file it will
    replace (as ``>`` keeps them), when there is one: the owner where the process may set it
    (root, or its own), else the group where it may (a group it is in), and the permissions
    without the set-user/group-ID bits.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     old, new = Path(folder) / "old", Path(folder) / "new"
        ...     _ = old.write_text(""), new.write_text("")
        ...     old.chmod(0o600)
        ...     with open(new, "rb+") as handle:
        ...         keep_owner_and_mode(handle.fileno(), old)
        ...     oct(stat.S_IMODE(new.stat().st_mode))
        '0o600'
    """
    try:
        before = os.stat(replaced)
    except FileNotFoundError:
        return
    try:
        os.fchown(fd, before.st_uid, before.st_gid)
    except PermissionError:  # another owner, and the process is not root: the group, if it may
        with contextlib.suppress(PermissionError):
            os.fchown(fd, -1, before.st_gid)
    os.fchmod(fd, stat.S_IMODE(before.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))


#: bytes of randomness in a temporary file's name (twice as many hex digits)
_TOKEN_BYTES = 6
#: the name :func:`atomic_write` gives the temporary file of ``OUT``: ``.OUT.HEX.tmp``
_TEMPORARY = re.compile(rf"\.(.+)\.[0-9a-f]{{{2 * _TOKEN_BYTES}}}\.tmp")


def temporary_for(name: str) -> str | None:
    """The output name whose temporary file (:func:`atomic_write`, left by a killed run) is
    called ``name``; None for another name.

    Examples:
        >>> temporary_for(".a.jsonl.0123456789ab.tmp"), temporary_for("a.jsonl")
        ('a.jsonl', None)
    """
    found = _TEMPORARY.fullmatch(name)
    return found.group(1) if found else None


def _new_file(directory: Path, prefix: str, suffix: str) -> tuple[int, str]:
    """A file of a fresh name in ``directory``, opened for writing with the usual permissions
    (0o666 less the process's umask, applied by the kernel; the umask is never changed)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        token = secrets.token_hex(_TOKEN_BYTES)
        candidate = os.path.join(directory, f"{prefix}{token}{suffix}")
        try:
            return os.open(candidate, flags, 0o666), candidate
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {directory}")


@contextlib.contextmanager
def atomic_write(path: PathType, mode: str = "w", like: PathType | None = None) -> Iterator[IO]:
    """Write to a temporary file beside ``path`` and rename it into place on success. A
    symbolic link is written through, as ``>`` writes it: the file at the end of its chain of
    links is replaced (created, for a dangling link), and the link stays. A file replaced keeps
    its permissions; a new file takes those of ``like`` when given and present (a record as
    private as the file it describes).

    After a crash or an exception the target is untouched: either the old content or the
    complete new content, never half a file. A ``.gz`` suffix compresses the output. ``-``
    writes to standard output, uncompressed.

    Examples:
        A write that fails leaves the old content:

        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder) / "lines.txt.gz"
        ...     with atomic_write(path) as out:
        ...         _ = out.write("a\\nb\\n")
        ...     try:
        ...         with atomic_write(path) as out:
        ...             _ = out.write("half")
        ...             raise RuntimeError("killed")
        ...     except RuntimeError:
        ...         pass
        ...     content = read_bytes(path)
        >>> content
        b'a\\nb\\n'
    """
    name = os.fspath(path)
    if names_folder(name):  # Path() would drop the slash
        raise UDCGInputError(f"{FOLDER_NAME}, not an output file", path=name)
    stream = STDIO if name == STDIO else stream_name(path)
    if stream == 0:
        raise UDCGInputError("is standard input, not an output", path=path)
    if stream in (STDIO, 1):
        out = standard_output()
        yield out.buffer if "b" in mode else out
        return
    path = Path(path)
    if is_special(path):  # /dev/null, /dev/stdout, a FIFO: written in place, never replaced
        for printed in (sys.stdout, sys.stderr):  # what was printed comes first where it is
            if live(printed) is not None:  # this stream
                printed.flush()
        with _open_in_place(path, stream) as raw, _encoded(raw, path, mode) as out:
            yield out
        return
    refuse_unreplaceable(path)
    target = write_target(path)  # a link stays a link: its target is replaced
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _new_file(target.parent, f".{target.name}.", ".tmp")
    try:
        keep_owner_and_mode(fd, target if like is None or os.path.lexists(target) else like)
        with os.fdopen(fd, "wb") as raw:
            with _encoded(raw, path, mode) as out:
                yield out
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_target(path: Path) -> Path:
    """The file a write to ``path`` replaces: ``path`` itself, or for a symbolic link the name
    at the end of its chain of links (each relative to its link's folder), existing or not.
    A loop of links is a one-line error.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     link = Path(folder) / "out.jsonl"
        ...     link.symlink_to("data/real.jsonl")  # dangling: written as > creates it
        ...     write_target(link) == Path(folder) / "data" / "real.jsonl"
        True
    """
    target = path
    for _ in range(40):  # the kernel's limit on a chain of links
        try:
            link = os.readlink(target)
        except OSError:  # not a link, or nothing there yet
            return target
        if names_folder(link):  # Path() would drop the slash: > refuses it too
            raise UDCGInputError(f"is a link to {link!r}, which {FOLDER_NAME}", path=path)
        target = target.parent / link  # an absolute link replaces the folder
    raise UDCGInputError("too many levels of symbolic links", path=path)


#: why :func:`names_folder` refuses a name as an output file
FOLDER_NAME = "names a folder (its last part is /, . or ..)"


def names_folder(name: str) -> bool:
    """Whether ``name`` can only name a folder: it ends in ``/``, ``/.`` or ``/..`` (or is
    ``.`` or ``..``), which the kernel refuses to open as a file that is not a folder.

    Examples:
        >>> names_folder("out/"), names_folder("/dev/stdin/."), names_folder("./out.jsonl")
        (True, True, False)
    """
    return name.endswith("/") or os.path.basename(name) in (".", "..")


def _open_in_place(path: Path, stream: int | None) -> IO[bytes]:
    """``path`` opened for writing in place: through a duplicate of descriptor ``stream`` when
    it names one of this process's open descriptors (``/dev/stderr``, ``/dev/fd/3``), so the
    data and what the process writes there later share one offset; else opened to append.
    A descriptor open for reading only is refused (:func:`refuse_read_only`)."""
    refuse_read_only(path, stream)
    if stream is not None:
        try:
            return os.fdopen(os.dup(stream), "wb")
        except OSError:  # not open here: the name is opened as any other
            pass
    return open(path, "ab")


def refuse_read_only(path: PathType, stream: int | None) -> None:
    """Refuse an output written through descriptor ``stream`` (``-`` or a name of one of this
    process's open descriptors, :func:`stream_name`) that is open for reading only
    (``3< FILE``, ``1< FILE``): its first write would fail, after the work. A descriptor that
    is not open, or None, is not refused here.

    Examples:
        >>> refuse_read_only("out.jsonl", None)
        >>> with open(os.devnull, "rb") as handle:  # opened for reading only
        ...     refuse_read_only("/dev/fd/3", handle.fileno())
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: /dev/fd/3: descriptor ... is open for reading only, not ...
    """
    if read_only(stream):
        what = "standard output" if stream == 1 else f"descriptor {stream}"
        raise UDCGInputError(f"{what} is open for reading only, not an output", path=path)


def read_only(stream: int | None) -> bool:
    """Whether descriptor ``stream`` is open for reading only (not open, None, or a system
    without ``fcntl``: False).

    Examples:
        >>> with open(os.devnull, "rb") as handle:
        ...     read_only(handle.fileno()), read_only(None)
        (True, False)
    """
    if stream is None:
        return False
    try:
        import fcntl

        flags = fcntl.fcntl(stream, fcntl.F_GETFL)
    except (ImportError, OSError):  # no fcntl here, or not open: nothing to tell yet
        return False
    return flags & os.O_ACCMODE == os.O_RDONLY


#: a name of an open file descriptor, as the kernel resolves it (``/proc/PID/fd/N``)
_FD_NAME = re.compile(r"/proc/(\d+)(?:/task/\d+)?/fd/(0|[1-9]\d*)")


def stream_name(path: PathType) -> int | None:
    """The file descriptor ``path`` names when it is the name of one of this process's open
    streams (``/dev/stdout``, ``/dev/fd/1``, ``/proc/self/fd/1``, ``//dev/stdin``, or a link to
    one, through any folder links and ``..``, as the kernel resolves it), else None.

    Examples:
        >>> stream_name("/dev/stdout"), stream_name("//dev/fd/0"), stream_name("/proc/self/fd/2")
        (1, 0, 2)
        >>> stream_name("out.jsonl") is None, stream_name("/dev/shm/out.jsonl") is None
        (True, True)
        >>> stream_name("-") is None  # ``-`` is read by its callers, not resolved
        True
    """
    name = os.fspath(path)
    if name == STDIO:  # standard input or output by convention, not a name of the file system
        return None
    if not os.path.isabs(name):  # no lexical ..: a folder may be a link
        try:
            name = os.path.join(os.getcwd(), name)
        except OSError:  # the working folder was deleted: a relative name names nothing
            return None
    for _ in range(40):  # a chain of links, as the kernel follows it
        folder, last = os.path.split(name)
        name = os.path.join(os.path.realpath(folder), last)
        found = _FD_NAME.fullmatch(name)
        if found and int(found.group(1)) == os.getpid():
            return int(found.group(2))
        try:
            target = os.readlink(name)
        except OSError:  # not a link, or one this process may not read
            return None
        name = os.path.join(os.path.dirname(name), target)
    return None


def is_special(path: PathType) -> bool:
    """Whether ``path`` is written in place, never renamed over or hashed: the name of an open
    stream (:func:`stream_name`, whatever file it goes to), or anything existing that is
    neither a regular file nor a directory (``/dev/null``, a FIFO).

    Examples:
        >>> is_special("/dev/null"), is_special("/dev/stdout"), is_special("no/such/file")
        (True, True, False)
        >>> is_special("."), is_special("/dev/shm/out.jsonl")  # a regular file, or none yet
        (False, False)
    """
    if stream_name(path) is not None:
        return True
    try:
        kind = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(kind) or stat.S_ISDIR(kind))


@contextlib.contextmanager
def _encoded(raw: IO[bytes], path: Path, mode: str) -> Iterator[IO]:
    """``raw`` compressed when ``path`` ends in ``.gz``, as text unless ``mode`` has ``b``."""
    stream: IO = gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) if path.suffix == ".gz" else raw
    with stream if stream is not raw else contextlib.nullcontext(raw):
        if "b" in mode:
            yield stream
        else:
            text = io.TextIOWrapper(stream, encoding="utf-8", newline="\n")
            yield text
            text.flush()
            text.detach()


@contextlib.contextmanager
def verified_write(path: PathType) -> Iterator[IO[str]]:
    """:func:`atomic_write`, for ``-`` too: standard output gets the text only when the block
    ends without an exception (it is held in a temporary file in ``TMPDIR`` until then), so a
    reader at the end of a pipe never sees what a later check refuses.

    Examples:
        >>> try:
        ...     with verified_write("-") as out:
        ...         _ = out.write("refused later\\n")
        ...         raise UDCGInputError("a later check")
        ... except UDCGInputError:
        ...     pass
        >>> with verified_write("-") as out:
        ...     _ = out.write("checked\\n")
        checked
    """
    if os.fspath(path) != STDIO and stream_name(path) != 1:
        with atomic_write(path) as out:
            yield out
        return
    out = standard_output()  # closed: refused before the work
    with tempfile.TemporaryFile("w+", encoding="utf-8", newline="\n") as held:
        yield held
        held.seek(0)
        out.flush()
        shutil.copyfileobj(held, out, 1 << 16)
        out.flush()


def standard_output() -> TextIO:
    """``sys.stdout``, where a command writes its data; closed (``>&-``) or open for reading
    only (``1< FILE``) it is a one-line error, which a command asks for before its work.

    Examples:
        >>> standard_output() is sys.stdout
        True
    """
    if live(sys.stdout) is None:
        raise UDCGInputError("standard output is closed: give an output file", path=STDIO)
    refuse_read_only(STDIO, descriptor_of(sys.stdout))
    return sys.stdout


def descriptor_of(stream: TextIO) -> int | None:
    """The descriptor behind ``stream``; None without one (a test's captured stream).

    Examples:
        >>> import io
        >>> descriptor_of(sys.__stderr__), descriptor_of(io.StringIO())
        (2, None)
    """
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def refuse_unreplaceable(path: PathType) -> None:
    """Refuse an output ``path`` (``-`` is standard output) that names an existing directory,
    or an existing file this process may not replace where ``>`` would refuse it too: one it
    may not write (read-only, another user's), or, in a folder with the sticky bit (``/tmp``),
    another user's file in a folder it does not own (the kernel refuses the rename).

    Examples:
        >>> refuse_unreplaceable(".")
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: .: is a directory, expected an output file path
    """
    if os.fspath(path) == STDIO:
        return
    if os.path.isdir(path):
        raise UDCGInputError("is a directory, expected an output file path", path=path)
    target = write_target(Path(path))
    try:
        before = os.stat(target)
    except OSError:  # nothing there yet (or a folder on the way, named when written)
        return
    if not stat.S_ISREG(before.st_mode):
        return
    if not os.access(target, os.W_OK):
        raise UDCGInputError("permission denied: the file may not be written", path=path)
    folder = os.stat(target.parent)
    if folder.st_mode & stat.S_ISVTX and os.geteuid() not in (0, before.st_uid, folder.st_uid):
        raise UDCGInputError(
            "another user's file in a folder with the sticky bit: it cannot be replaced",
            path=path,
        )


def refuse_same_file(output: PathType, inputs: dict[str, PathType | None]) -> None:
    """Refuse an ``output`` path that names one of ``inputs`` (option or argument name -> path)
    or the manifest beside one (``IN.manifest.json``, read as its record): writing it would
    replace the input being read. ``-`` is standard output: refused when it
    is a regular file that is one of the inputs (``-o - >> IN``, ``1<>IN``). ``-`` and missing
    inputs are skipped; an output that does not exist yet cannot name an existing input.

    Examples:
        >>> refuse_same_file("-", {"IN": "no/such/contexts.jsonl"})
        >>> refuse_same_file("out/contexts.jsonl", {"IN": "out/../out/contexts.jsonl"})
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: out/contexts.jsonl: the output names the input IN ...
        >>> refuse_same_file("in.jsonl.manifest.json", {"IN": "in.jsonl"})
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: in.jsonl.manifest.json: the output names the input IN's ...
    """
    if os.fspath(output) == STDIO:
        _refuse_stdout_input(inputs)
        return
    out = Path(output)
    records = {
        f"{name}'s manifest": f"{os.fspath(given)}{MANIFEST}"
        for name, given in inputs.items()
        if given is not None and os.fspath(given) != STDIO
    }
    for name, given in {**inputs, **records}.items():
        if given is None or os.fspath(given) == STDIO:
            continue
        source = Path(given)
        try:
            same = (
                os.path.samefile(out, source)
                if out.exists() and source.exists()
                else out.resolve() == source.resolve()
            )
        except (OSError, RuntimeError) as exc:  # a link loop, on either side
            raise UDCGInputError(f"cannot be resolved ({exc})", path=out) from None
        if same:
            raise UDCGInputError(
                f"the output names the input {name} ({os.fspath(given)}): writing it would "
                "replace what is being read; choose another output path",
                path=out,
            )


def _refuse_stdout_input(inputs: dict[str, PathType | None]) -> None:
    """Refuse standard output when it is a regular file that is one of ``inputs``."""
    try:
        here = os.fstat(1)
    except OSError:  # closed
        return
    if not stat.S_ISREG(here.st_mode):
        return
    for name, given in inputs.items():
        if given is None or os.fspath(given) == STDIO or isinstance(given, InputBytes):
            continue
        try:
            there = os.stat(given)
        except OSError:
            continue
        if (there.st_dev, there.st_ino) == (here.st_dev, here.st_ino):
            raise UDCGInputError(
                f"standard output is the input {name} ({os.fspath(given)}): writing it would "
                "change what is being read; choose another output path",
                path=STDIO,
            )


#: Lock files this process holds (absolute path -> [holders nested, the holding thread]).
_HELD: dict[str, list[int]] = {}
_HELD_LOCK = threading.Lock()


@contextlib.contextmanager
def exclusive_writer(path: PathType, what: str = "output") -> Iterator[None]:
    """Hold an exclusive lock on ``path`` for as long as one process writes it.

    The lock is ``fcntl.flock`` on ``PATH.lock`` (created beside it; for a symbolic link, beside
    the file it writes, :func:`write_target`, so two names of one file share it): the kernel
    drops it when
    the holder exits, even by SIGKILL, so a killed run never leaves it stuck. A second process
    that asks for the same ``path`` is refused at once with one line. Within the holding
    process the lock nests (a command may take it before loading its judge, the library again
    around the writing). ``-`` takes no lock.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder) / "out.jsonl"
        ...     with exclusive_writer(path), exclusive_writer(path):  # nested in one process
        ...         held = Path(f"{path}.lock").exists()
        ...     released = not Path(f"{path}.lock").exists()
        >>> held, released
        (True, True)
    """
    if os.fspath(path) == STDIO or stream_name(path) is not None:  # a descriptor: no file to lock
        yield
        return
    target = write_target(Path(path))  # through a link: its target's lock, as it is written
    # one key per folder whatever the name (a linked folder, ``..``): a process nests its own
    lock_path = Path(os.path.realpath(f"{os.fspath(target)}.lock"))
    key = os.fspath(lock_path)
    me = threading.get_ident()
    with _HELD_LOCK:
        held = _HELD.get(key)
        if held is not None and held[1] != me:
            raise UDCGInputError(
                f"another run in this process (another thread) is writing this {what} (lock "
                f"{lock_path}); wait for it to finish or choose another output path",
                path=path,
            )
        if held is not None:
            held[0] += 1
    if held is not None:
        try:
            yield
        finally:
            with _HELD_LOCK:
                held[0] -= 1
        return
    fd = _lock_file(lock_path, path, what)
    with _HELD_LOCK:
        _HELD[key] = [1, me]
    try:
        yield
    finally:
        with _HELD_LOCK:
            del _HELD[key]
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock_path)
        os.close(fd)


def _lock_file(lock_path: Path, path: PathType, what: str) -> int:
    """An open descriptor of ``lock_path`` holding its exclusive ``flock``; one line when
    another process holds it."""
    import fcntl

    lock_path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UDCGInputError(
                f"another process is writing this {what} (lock {lock_path}); wait for it to "
                "finish or choose another output path",
                path=path,
            ) from None
        try:  # the holder before us may have removed the file we locked: lock the new one
            if os.stat(lock_path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)
