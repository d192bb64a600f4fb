"""The on-disk judge cache: one SQLite file (WAL mode) mapping the SHA-256 of a call's canonical
identity to a JSON value (of its operation's :data:`FORMS`), so an interrupted run resumes.

Every committed transaction survives a killed process; several processes may share a file (a
writer waits up to ``timeout`` seconds for the lock). Commits stay in ``FILE-wal`` until a
checkpoint: copy a cache after ``udcg cache checkpoint FILE``, or together with its ``-wal``.
Machines each write their own file; :meth:`JudgeCache.merge_from` joins them.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import closing, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from udcg.errors import UDCGInputError
from udcg.io.files import canonical_json, is_special
from udcg.judge.structured import JSONResult

CACHE_FILENAME = "judge.sqlite"
_KEY_VERSION = 1
SELECT_BATCH = 500  # keys per SELECT ... IN (...), under SQLite's bound-variable limit

_SCHEMA = """
CREATE TABLE IF NOT EXISTS judge_cache (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    created REAL NOT NULL
) WITHOUT ROWID
"""
_COLUMNS = ("key", "value", "created")
#: What SQLite raises for an unusable file (a damaged schema's bytes may fail to decode).
_SQLITE_ERRORS = (sqlite3.DatabaseError, UnicodeDecodeError)
#: Errors of a busy file (another writer holds the lock): not the file's fault.
_BUSY = ("database is locked", "database table is locked")


def cache_files(cache: str | os.PathLike[str] | None, name: str = "--cache") -> dict[str, str]:
    """The files of the cache ``cache`` (None: :func:`default_cache_path`) by what to call them:
    the cache and SQLite's files beside it (of the file a link names: SQLite follows it), which
    SQLite deletes when it closes the cache, so an output must name none of them.

    Examples:
        >>> sorted(cache_files("c.sqlite"))
        ['--cache', '--cache (-journal)', '--cache (-shm)', '--cache (-wal)']
    """
    path = os.fspath(default_cache_path() if cache is None else cache)
    real = os.path.realpath(path)
    return {name: path} | {f"{name} ({side})": real + side for side in ("-wal", "-shm", "-journal")}


def default_cache_path() -> Path:
    """``$UDCG_CACHE_DIR/judge.sqlite``, else ``~/.cache/udcg/judge.sqlite``.

    Examples:
        >>> default_cache_path().name
        'judge.sqlite'
    """
    base = os.environ.get("UDCG_CACHE_DIR")
    directory = Path(base).expanduser() if base else Path.home() / ".cache" / "udcg"
    return directory / CACHE_FILENAME


def cache_key(
    fingerprint: str, operation: str, payload: Any, params: Mapping[str, Any] | None = None
) -> str:
    """SHA-256 (hex) of the canonical JSON of a call's identity: the judge's ``fingerprint``,
    the ``operation``, one item's ``payload`` (e.g. its chat messages), the call's ``params``.

    Examples:
        >>> messages = [{"role": "user", "content": "Who wrote Emma?"}]
        >>> key = cache_key("precomputed:abc", "abstain_prob", messages)
        >>> len(key), key == cache_key("precomputed:abc", "abstain_prob", messages, {"k": 1})
        (64, False)
    """
    identity = {"v": _KEY_VERSION, "judge": fingerprint, "op": operation, "input": payload}
    identity["params"] = dict(params or {})
    try:
        return hashlib.sha256(canonical_json(identity).encode("utf-8")).hexdigest()
    except UnicodeEncodeError:  # what the operation's own checks do not name (a schema's)
        holder = f"the {operation} request"
        if not _encodes(fingerprint):
            holder = f"the judge's settings (an option, its fingerprint {fingerprint!a})"
        raise UDCGInputError(
            f"{holder} holds a lone surrogate, which UTF-8 cannot encode"
        ) from None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _probability(stored: Any) -> tuple[float, bool]:
    """``(value, is upper bound)`` of a number in [0, 1] or ``{"value": number, "upper_bound":
    bool}``; ``ValueError`` for anything else."""
    bound = False
    if isinstance(stored, Mapping):
        bound = stored.get("upper_bound", False)
        if set(stored) - {"value", "upper_bound"} or not isinstance(bound, bool):
            raise ValueError("expected a number or {'value': number, 'upper_bound': bool}")
        stored = stored.get("value")
    if isinstance(stored, bool) or not isinstance(stored, (int, float)):
        raise ValueError(f"expected a probability, got {type(stored).__name__}")
    value = float(stored)
    if not 0.0 <= value <= 1.0:  # False for NaN too
        raise ValueError(f"expected a probability in [0, 1], got {value!r}")
    return value, bound


def _stored_bound(text: str) -> bool:
    """Whether a stored value is a probability marked as an upper bound."""
    try:
        stored = json.loads(text)
    except ValueError:
        return False
    return (
        isinstance(stored, dict)
        and set(stored) == {"value", "upper_bound"}
        and (stored["upper_bound"] is True)
    )


def _store_probability(value: float, upper_bound: bool) -> float | dict[str, Any] | None:
    number = float(value)
    stored = {"value": number, "upper_bound": True} if upper_bound else number
    return stored if 0.0 <= number <= 1.0 else None  # NaN: not stored


def _text(stored: Any) -> tuple[str, bool]:
    if not isinstance(stored, str):
        raise ValueError(f"expected a generated text, got {type(stored).__name__}")
    return stored, False


def _json(stored: Any) -> tuple[JSONResult, bool]:
    """The result of ``{"value": finite JSON, "attempts": int >= 1, "raw": [str, ...]}``."""
    if not isinstance(stored, Mapping) or set(stored) != {"value", "attempts", "raw"}:
        raise ValueError("expected {'value', 'attempts', 'raw'}")
    attempts, raw = stored["attempts"], stored["raw"]
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise ValueError(f"expected 'attempts' an integer >= 1, got {attempts!r}")
    if not isinstance(raw, list) or not all(isinstance(r, str) for r in raw):
        raise ValueError("expected 'raw' a list of strings")
    try:
        canonical_json(stored["value"])
    except ValueError:
        raise ValueError("expected a finite JSON 'value'") from None
    return JSONResult(value=stored["value"], attempts=attempts, raw=list(raw)), False


def _store_json(result: JSONResult, _: bool) -> dict[str, Any] | None:
    if not result.ok:
        return None
    stored = {"value": result.value, "attempts": result.attempts, "raw": list(result.raw)}
    try:
        text = canonical_json(stored)  # refuses NaN, infinities and what is not JSON
    except (TypeError, ValueError):
        return None
    # a value JSON changes (int keys become strings, tuples lists) would read back as another
    return stored if json.loads(text)["value"] == result.value else None


_PROBABILITY = (_store_probability, _probability)
#: operation -> (encode(result, upper bound) -> its cached JSON, None: not cached;
#: decode(cached JSON) -> (result, upper bound), ``ValueError`` for a value of another form)
FORMS: dict[str, tuple[Callable[[Any, bool], Any], Callable[[Any], tuple[Any, bool]]]] = {
    "abstain_prob": _PROBABILITY,
    "answer_prob": _PROBABILITY,
    "yes_prob": _PROBABILITY,
    "generate": (lambda text, _: str(text), _text),
    "generate_json": (_store_json, _json),
}


def is_settings(stored: Any) -> bool:
    """True when ``stored`` is a judge's recorded run-time settings of an operation (what
    :meth:`udcg.judge.cached.CachedJudge.key_settings` stores): a non-empty JSON object of
    texts (no probability's form: ``{"value": 0.5, ...}`` is not one).

    Examples:
        >>> is_settings({"abstain_token": "NO", "unlisted": "min(last,rest)"})
        True
        >>> is_settings({}), is_settings({"abstain_token": ["NO"]}), is_settings("NO")
        (False, False, False)
    """
    return (
        isinstance(stored, Mapping)
        and bool(stored)
        and all(isinstance(v, str) for v in stored.values())
    )


def is_entry(stored: Any) -> bool:
    """True when ``stored`` is the cached value of some operation (of its :data:`FORMS`) or a
    judge's recorded run-time settings (:func:`is_settings`).

    Examples:
        >>> is_entry(0.3), is_entry("Paris"), is_entry({"answer": ["Paris"]})
        (True, True, False)
    """
    if is_settings(stored):
        return True
    for _, decode in FORMS.values():
        try:
            decode(stored)
        except ValueError:
            continue
        return True
    return False


@contextmanager
def _sqlite_errors(path: Path) -> Iterator[None]:
    """SQLite's complaints about a file as one error naming ``path``; busy errors pass."""
    try:
        yield
    except _SQLITE_ERRORS as exc:
        if any(busy in str(exc) for busy in _BUSY):
            raise
        raise UDCGInputError(f"not a usable judge cache ({exc}){_why(path)}", path=path) from None


def _why(path: Path) -> str:
    """What may keep SQLite from opening a cache file that is not damaged: a pipe or device
    (not a file on disk), a folder where its ``-shm`` file cannot be created."""
    if path.exists() and not path.is_file():
        return ": it is not a regular file (a pipe or a device); give the cache file itself"
    folder = path.parent
    if path.is_file() and not os.access(folder, os.W_OK):
        return (
            f": its folder {folder} is read-only and SQLite creates {path.name}-shm beside it;"
            " copy the cache to a writable folder"
        )
    return ""


class JudgeCache:
    """A key -> JSON value store in one SQLite file, safe for concurrent processes and threads;
    ``hits``, ``misses`` and ``writes`` count this object's distinct keys found, not found and
    entries written.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     cache = JudgeCache(f"{folder}/judge.sqlite")
        ...     _ = cache.put_many({"k1": 0.25, "k2": "Paris"})
        ...     found = cache.get_many(["k1", "k3"])
        ...     counts = cache.add_new({"k1": 0.25, "k2": "Rome", "k3": 0.5})
        ...     cache.close()
        >>> found, cache.stats()
        ({'k1': 0.25}, {'hits': 1, 'misses': 1, 'writes': 3})
        >>> counts
        MergeCounts(added=1, same=1, conflicts=1, invalid=0, first_invalid=None)
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, timeout: float = 60.0) -> None:
        self.path = Path(path).expanduser() if path is not None else default_cache_path()
        self.timeout = float(timeout)
        self.hits = self.misses = self.writes = 0
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        if self.path.is_dir():
            raise UDCGInputError("is a directory, expected a judge cache file", path=self.path)
        if is_special(self.path):  # before SQLite leaves a -journal beside a device
            raise UDCGInputError(
                "not a usable judge cache: it is a device or a pipe; give the cache file itself",
                path=self.path,
            )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UDCGInputError(
                f"cannot create the cache's folder: {exc}", path=self.path
            ) from None
        with self._lock:
            self._connection()

    def __repr__(self) -> str:
        counts = f"hits={self.hits}, misses={self.misses}, writes={self.writes}"
        return f"JudgeCache({str(self.path)!r}, {counts})"

    def _connection(self) -> sqlite3.Connection:
        """The connection of this process (a forked child opens its own); call under the lock."""
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        with _sqlite_errors(self.path):
            conn = sqlite3.connect(
                self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
            )
            conn.text_factory = _utf8
            try:
                conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
                _check_schema(conn, "main", self.path, allow_empty=True)
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise sqlite3.OperationalError(f"could not switch {self.path} to WAL mode")
                # WAL + NORMAL: commits survive a process crash; a power loss may drop the last.
                conn.execute("PRAGMA synchronous = NORMAL")
                conn.execute(_SCHEMA)
            except BaseException:
                conn.close()
                raise
        self._conn, self._pid = conn, os.getpid()
        return conn

    @contextmanager
    def _open(self, write: bool = False) -> Iterator[sqlite3.Connection]:
        """The connection, under the lock, SQLite errors naming the file; ``write``: in one
        transaction."""
        with self._lock, _sqlite_errors(self.path):
            conn = self._connection()
            with _transaction(conn) if write else nullcontext():
                yield conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def __enter__(self) -> JudgeCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def bad_entry(self, key: str, problem: str) -> UDCGInputError:
        """The error for the unusable entry ``key``, with the command that drops it."""
        return UDCGInputError(
            f"cache entry {key}: {problem}; drop it with `udcg cache drop {self.path} {key}`"
            " (the next run computes it again)",
            path=self.path,
        )

    def get_many(self, keys: Iterable[str], count: bool = True) -> dict[str, Any]:
        """The decoded values of the ``keys`` present (a value not JSON is an error naming the
        key); ``count=False`` leaves ``hits`` and ``misses`` alone."""
        wanted = list(dict.fromkeys(keys))
        with self._open() as conn:
            found = self._decoded(_select(conn, "judge_cache", wanted))
            if count:
                self.hits += len(found)
                self.misses += len(wanted) - len(found)
        return found

    def _decoded(self, rows: Iterable[tuple[str, Any]]) -> dict[str, Any]:
        """``key -> value`` of stored ``(key, JSON text)`` rows; a value not JSON is an error
        naming the key."""
        found = {}
        for key, value in rows:
            if not isinstance(value, str):
                raise self.bad_entry(key, f"value is SQLite {type(value).__name__}, not JSON text")
            try:
                found[key] = json.loads(value)
            except (ValueError, RecursionError):
                shown = value if len(value) <= 60 else value[:60] + "..."
                raise self.bad_entry(key, f"value {shown!r} is not JSON") from None
        return found

    def get(self, key: str, default: Any = None, count: bool = True) -> Any:
        return self.get_many([key], count).get(key, default)

    def put_many(
        self, items: Mapping[str, Any] | Iterable[tuple[str, Any]], count: bool = True
    ) -> int:
        """Store (overwrite) ``key -> value`` pairs in one transaction; returns their count. A
        value that is not finite JSON is a ``ValueError`` before anything is written."""
        rows = self._rows(items)
        if not rows:
            return 0
        with self._open(write=True) as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO judge_cache (key, value, created) VALUES (?, ?, ?)", rows
            )
            if count:
                self.writes += len(rows)
        return len(rows)

    @staticmethod
    def _rows(items: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> list[tuple[str, str, float]]:
        now, rows = time.time(), []
        for key, value in items.items() if isinstance(items, Mapping) else items:
            if not isinstance(key, str):
                raise TypeError(f"cache keys are strings, got {type(key).__name__}")
            try:
                rows.append((key, canonical_json(value), now))
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"value for cache key {key[:16]}... is not storable: {exc}"
                ) from exc
        return rows

    def add_new(
        self,
        items: Mapping[str, Any] | Iterable[tuple[str, Any]],
        check: Callable[[dict[str, Any]], None] | None = None,
    ) -> MergeCounts:
        """Store, in one transaction, the pairs whose key this cache lacks; others keep theirs.
        ``check`` sees the values held for the keys given, in that transaction (no other
        writer in between), and stores nothing by raising."""
        rows = self._rows(items)
        with self._open(write=True) as conn:
            present = dict(_select(conn, "main.judge_cache", [row[0] for row in rows]))
            if check is not None:
                check(self._decoded(present.items()))
            counts = _add_rows(conn, rows, present)
            self.writes += counts.added
        return counts

    def drop(self, keys: Iterable[str] = (), bounds: bool = False) -> int:
        """Delete the entries of ``keys``, and with ``bounds`` every entry stored as an upper
        bound (``{"value": v, "upper_bound": true}``: the next run asks it again, e.g. of a
        server that now echoes), in one transaction; returns how many there were."""
        with self._open(write=True) as conn:
            wanted = list(keys)
            if bounds:
                found = conn.execute(
                    "SELECT key, value FROM judge_cache WHERE value LIKE '%upper_bound%'"
                )
                wanted += [key for key, value in found if _stored_bound(value)]
            before = conn.total_changes
            conn.executemany(
                "DELETE FROM judge_cache WHERE key = ?", [(k,) for k in dict.fromkeys(wanted)]
            )
            return conn.total_changes - before

    def checkpoint(self) -> bool:
        """Move every commit from ``FILE-wal`` into ``FILE``; False when another process's
        open transaction kept part of the WAL."""
        with self._open() as conn:
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return busy == 0

    def __len__(self) -> int:
        with self._open() as conn:
            return conn.execute("SELECT COUNT(*) FROM judge_cache").fetchone()[0]

    def __contains__(self, key: object) -> bool:
        query = "SELECT 1 FROM judge_cache WHERE key = ?"
        if not isinstance(key, str):
            return False
        with self._open() as conn:
            return conn.execute(query, (key,)).fetchone() is not None

    def integrity_check(self) -> bool:
        """SQLite's own consistency check of the whole file."""
        with self._open() as conn:
            return conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]

    def stats(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "writes": self.writes}

    def summary(self) -> dict[str, Any]:
        """``entries`` and the ``oldest`` and ``newest`` write times (Unix seconds; None when
        no entry has a numeric one)."""
        with self._open() as conn:
            entries = conn.execute("SELECT COUNT(*) FROM judge_cache").fetchone()[0]
            oldest, newest = conn.execute(
                "SELECT MIN(created), MAX(created) FROM judge_cache"
                " WHERE typeof(created) IN ('integer', 'real')"
            ).fetchone()
        return {"entries": entries, "oldest": oldest, "newest": newest}

    @staticmethod
    def check_file(path: str | os.PathLike[str]) -> Path:
        """``path``, checked (read-only) to be an existing judge cache file."""
        path = Path(path).expanduser()
        if path.is_dir():
            raise UDCGInputError("is a directory, expected a judge cache file", path=path)
        if not path.exists():
            raise UDCGInputError("no such cache file", path=path)
        if not path.is_file():
            raise UDCGInputError(_why(path).removeprefix(": "), path=path)
        try:
            with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
                conn.text_factory = _utf8
                _check_schema(conn, "main", path, allow_empty=False)
        except _SQLITE_ERRORS as exc:
            raise UDCGInputError(f"not a judge cache ({exc}){_why(path)}", path=path) from None
        return path

    def merge_from(self, source: str | os.PathLike[str]) -> MergeCounts:
        """Copy into this cache, in one transaction, the entries of the cache file ``source``
        (and of its ``-wal``) whose keys it lacks; a key in both keeps this cache's value. A
        source entry that is neither of the :data:`FORMS` nor a settings record
        (:func:`is_entry`), or has a non-numeric write time, is skipped and counted as
        ``invalid``. ``source`` is opened read-only: nothing is written to it."""
        source = self.check_file(source)
        if source.exists() and self.path.exists() and os.path.samefile(source, self.path):
            raise UDCGInputError("is the destination cache itself", path=source)
        with self._open() as conn:
            # read-only: a merge never writes to its input (not even a checkpoint of its -wal)
            conn.execute("ATTACH DATABASE ? AS source", (f"{source.resolve().as_uri()}?mode=ro",))
            try:
                with _sqlite_errors(source):
                    _refuse_wal_drops(conn, source)
                with _transaction(conn), _sqlite_errors(source):
                    _check_schema(conn, "source", source, allow_empty=False)
                    rows = conn.execute("SELECT key, value, created FROM source.judge_cache")
                    counts = MergeCounts(0, 0, 0)
                    while batch := rows.fetchmany(SELECT_BATCH):
                        good = [row for row in batch if _valid_row(*row)]
                        bad = [str(row[0]) for row in batch if not _valid_row(*row)]
                        counts = counts.plus(_add_rows(conn, good), bad)
            finally:
                conn.execute("DETACH DATABASE source")
            self.writes += counts.added
        return counts


def _refuse_wal_drops(conn: sqlite3.Connection, source: Path) -> None:
    """Refuse ``source`` (attached as ``source``) when the ``-wal`` beside it (beside the file a
    link names) drops or changes entries that the file alone holds: SQLite replays any ``-wal``
    over its file, and one an earlier copy left beside a newer file takes the file back to that
    copy. A writer's own ``-wal`` only adds entries, but after a ``cache drop`` or a changed
    settings record (checkpoint it first). A file that cannot be read alone (a checkpoint
    stopped part-way) is not checked."""
    source = source.resolve()  # SQLite opens the file a link names, and its -wal beside it
    wal = Path(f"{source}-wal")
    if not wal.is_file() or wal.stat().st_size == 0:
        return
    table = "SELECT 1 FROM bare.sqlite_master WHERE type = 'table' AND name = 'judge_cache'"
    dropped = (
        "SELECT COUNT(*), MIN(b.key) FROM bare.judge_cache b LEFT JOIN source.judge_cache s"
        " ON s.key = b.key WHERE s.key IS NULL OR s.value IS NOT b.value"
    )
    try:
        conn.execute("ATTACH DATABASE ? AS bare", (f"{source.as_uri()}?immutable=1",))
    except sqlite3.DatabaseError:
        return
    try:
        found = conn.execute(dropped).fetchone() if conn.execute(table).fetchone() else (0, None)
    except sqlite3.DatabaseError:
        return
    finally:
        conn.execute("DETACH DATABASE bare")
    if found[0]:
        raise UDCGInputError(
            f"{wal.name} drops or changes {found[0]} entries that {source.name} holds alone"
            f" (first key {found[1]}): a -wal an earlier copy left beside a newer file? Delete"
            f" {wal.name} and {source.name}-shm and merge again. A writer's own -wal does this"
            f" after `udcg cache drop` (or new run-time settings): run `udcg cache checkpoint"
            f" {source}` where it was written, then merge",
            path=source,
        )


def _utf8(data: bytes) -> str | bytes:
    """A SQLite text as ``str``, or its bytes when not UTF-8 (for the checks to refuse)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


def _check_schema(conn: sqlite3.Connection, schema: str, path: Path, allow_empty: bool) -> None:
    """Refuse a database ``schema`` whose ``judge_cache`` lacks the expected columns or the
    primary key on ``key``, or that has no ``judge_cache`` but other tables (or, unless
    ``allow_empty``, no table at all)."""
    query = f"SELECT name FROM {schema}.sqlite_master WHERE type = 'table' ORDER BY name"
    tables = [name for (name,) in conn.execute(query)]
    if "judge_cache" not in tables:
        if tables:
            raise UDCGInputError(
                f"not a judge cache (no judge_cache table; its tables: "
                f"{', '.join(map(repr, tables))})",
                path=path,
            )
        if not allow_empty:
            raise UDCGInputError("not a judge cache (no judge_cache table)", path=path)
        return
    info = list(conn.execute(f"PRAGMA {schema}.table_info(judge_cache)"))
    columns = tuple(row[1] for row in info)
    if columns != _COLUMNS:
        raise UDCGInputError(
            f"not a judge cache of this udcg version: table judge_cache has the columns "
            f"{', '.join(map(repr, columns))}, expected {', '.join(map(repr, _COLUMNS))}",
            path=path,
        )
    if [row[1] for row in info if row[5]] != ["key"]:  # a key may hold one value only
        raise UDCGInputError(
            "not a judge cache: its judge_cache table has no primary key on 'key', so a key "
            "may hold several values",
            path=path,
        )


def _valid_row(key: Any, value: Any, created: Any) -> bool:
    """True for a text key, a value of :func:`is_entry` as JSON, a finite write time."""
    if not isinstance(key, str) or not isinstance(value, str) or isinstance(created, bool):
        return False
    if not isinstance(created, (int, float)) or not math.isfinite(created):
        return False
    try:
        return is_entry(json.loads(value))
    except (ValueError, RecursionError):
        return False


def _add_rows(
    conn: sqlite3.Connection,
    rows: list[tuple[str, str, float]],
    present: Mapping[str, Any] | None = None,
) -> MergeCounts:
    """Insert (in the caller's transaction) the rows whose key ``main.judge_cache`` lacks;
    ``present``: the stored values of their keys, when the caller has read them already."""
    if present is None:
        present = dict(_select(conn, "main.judge_cache", [row[0] for row in rows]))
    same = sum(present[key] == value for key, value, _ in rows if key in present)
    differ = sum(present[key] != value for key, value, _ in rows if key in present)
    before = conn.total_changes
    conn.executemany(
        "INSERT OR IGNORE INTO main.judge_cache (key, value, created) VALUES (?, ?, ?)", rows
    )
    return MergeCounts(conn.total_changes - before, same, differ)


def _select(conn: sqlite3.Connection, table: str, keys: list[str]) -> list[tuple[str, Any]]:
    """``(key, value)`` of the ``keys`` present in ``table``, selected by ``SELECT_BATCH``."""
    rows = []
    for start in range(0, len(keys), SELECT_BATCH):
        batch = keys[start : start + SELECT_BATCH]
        marks = ",".join("?" * len(batch))
        rows += conn.execute(f"SELECT key, value FROM {table} WHERE key IN ({marks})", batch)
    return rows


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction (IMMEDIATE: the write lock up front); rolled back on any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


@dataclass(frozen=True)
class MergeCounts:
    """Entries ``added``; keys present with the ``same`` value or another one (``conflicts``,
    kept); source entries skipped as ``invalid`` (the first one's key: ``first_invalid``).

    Examples:
        >>> MergeCounts(added=1, same=2, conflicts=0).plus(MergeCounts(3, 0, 1), ["bad-key"])
        MergeCounts(added=4, same=2, conflicts=1, invalid=1, first_invalid='bad-key')
    """

    added: int
    same: int
    conflicts: int
    invalid: int = 0
    first_invalid: str | None = None

    def plus(self, other: MergeCounts, skipped: list[str]) -> MergeCounts:
        """The sum of two counts, with the keys of more ``skipped`` invalid entries."""
        return MergeCounts(
            self.added + other.added,
            self.same + other.same,
            self.conflicts + other.conflicts,
            self.invalid + other.invalid + len(skipped),
            self.first_invalid or other.first_invalid or (skipped[0] if skipped else None),
        )
