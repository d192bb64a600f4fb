"""One on-disk cache for every judge call, so that an interrupted run resumes where it stopped.

The cache is a single SQLite file in WAL mode. Each entry maps a key, the SHA-256 of a canonical
JSON of (judge fingerprint, operation, input, parameters), to a JSON value. Writes are grouped in
transactions: a process killed at any point (even by SIGKILL) leaves every committed transaction
readable and never a half-written one, and several processes may read and write the same file at
once (SQLite serialises the writers; a writer waits up to ``timeout`` seconds for the lock).

WAL needs a local filesystem, so machines do not share one file: each writes its own, and
:meth:`JudgeCache.merge_from` (``udcg cache merge``) joins them afterwards.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from udcg.errors import UDCGInputError

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


def default_cache_path() -> Path:
    """``$UDCG_CACHE_DIR/judge.sqlite``, else ``~/.cache/udcg/judge.sqlite``."""
    base = os.environ.get("UDCG_CACHE_DIR")
    directory = Path(base).expanduser() if base else Path.home() / ".cache" / "udcg"
    return directory / CACHE_FILENAME


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys; NaN and infinities are refused."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def cache_key(
    fingerprint: str, operation: str, payload: Any, params: Mapping[str, Any] | None = None
) -> str:
    """The key of one judge call: SHA-256 (hex) of the canonical JSON of its identity.

    ``fingerprint`` names the judge (backend, model, settings), ``operation`` the method,
    ``payload`` the input of one item (e.g. its chat messages), ``params`` the call's options.
    """
    identity = {
        "v": _KEY_VERSION,
        "judge": fingerprint,
        "op": operation,
        "input": payload,
        "params": dict(params or {}),
    }
    return hashlib.sha256(canonical_json(identity).encode("utf-8")).hexdigest()


class JudgeCache:
    """A key -> JSON value store in one SQLite file, safe for concurrent processes and threads.

    ``hits``, ``misses`` and ``writes`` count, for this object, the distinct keys found and not
    found by :meth:`get_many` and the entries written by :meth:`put_many`.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, timeout: float = 60.0) -> None:
        self.path = Path(path).expanduser() if path is not None else default_cache_path()
        self.timeout = float(timeout)
        self.hits = 0
        self.misses = 0
        self.writes = 0
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self._connection()

    def __repr__(self) -> str:
        return (
            f"JudgeCache({str(self.path)!r}, hits={self.hits}, misses={self.misses}, "
            f"writes={self.writes})"
        )

    # -- connection ---------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        """The connection of this process (a forked child opens its own); call under the lock."""
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        conn = sqlite3.connect(
            self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise sqlite3.OperationalError(f"could not switch {self.path} to WAL mode")
            # In WAL mode NORMAL keeps every committed transaction across a crash of the process;
            # only a power loss can drop the last ones, and it never corrupts the file.
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute(_SCHEMA)
        except BaseException:
            conn.close()
            raise
        self._conn, self._pid = conn, os.getpid()
        return conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def __enter__(self) -> JudgeCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reads and writes ---------------------------------------------------------------------

    def get_many(self, keys: Iterable[str]) -> dict[str, Any]:
        """The cached values of those ``keys`` that are present, decoded from JSON."""
        wanted = list(dict.fromkeys(keys))
        found: dict[str, Any] = {}
        with self._lock:
            conn = self._connection()
            for start in range(0, len(wanted), SELECT_BATCH):
                batch = wanted[start : start + SELECT_BATCH]
                marks = ",".join("?" * len(batch))
                rows = conn.execute(
                    f"SELECT key, value FROM judge_cache WHERE key IN ({marks})", batch
                ).fetchall()
                for key, value in rows:
                    found[key] = json.loads(value)
            self.hits += len(found)
            self.misses += len(wanted) - len(found)
        return found

    def get(self, key: str, default: Any = None) -> Any:
        return self.get_many([key]).get(key, default)

    def put_many(self, items: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> int:
        """Store ``key -> value`` pairs in one transaction (all or none); returns their count.

        Values must be JSON-serialisable without NaN or infinities (``ValueError`` otherwise,
        before anything is written). An existing key is overwritten.
        """
        pairs = list(items.items() if isinstance(items, Mapping) else items)
        now = time.time()
        rows = []
        for key, value in pairs:
            if not isinstance(key, str):
                raise TypeError(f"cache keys are strings, got {type(key).__name__}")
            try:
                rows.append((key, canonical_json(value), now))
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"value for cache key {key[:16]}... is not storable: {exc}"
                ) from exc
        if not rows:
            return 0
        with self._lock:
            conn = self._connection()
            # IMMEDIATE takes the write lock up front, waiting up to busy_timeout for it.
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    "INSERT OR REPLACE INTO judge_cache (key, value, created) VALUES (?, ?, ?)",
                    rows,
                )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            self.writes += len(rows)
        return len(rows)

    def __len__(self) -> int:
        with self._lock:
            return self._connection().execute("SELECT COUNT(*) FROM judge_cache").fetchone()[0]

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        with self._lock:
            row = (
                self._connection()
                .execute("SELECT 1 FROM judge_cache WHERE key = ?", (key,))
                .fetchone()
            )
        return row is not None

    def integrity_check(self) -> bool:
        """SQLite's own consistency check of the whole file."""
        with self._lock:
            result = self._connection().execute("PRAGMA integrity_check").fetchall()
        return result == [("ok",)]

    def stats(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "writes": self.writes}

    def summary(self) -> dict[str, Any]:
        """``entries`` and the ``oldest`` and ``newest`` write times (Unix seconds, None when
        empty) of the whole file."""
        with self._lock:
            entries, oldest, newest = (
                self._connection()
                .execute("SELECT COUNT(*), MIN(created), MAX(created) FROM judge_cache")
                .fetchone()
            )
        return {"entries": entries, "oldest": oldest, "newest": newest}

    @staticmethod
    def check_file(path: str | os.PathLike[str]) -> Path:
        """``path``, checked (read-only) to be an existing judge cache file."""
        path = Path(path).expanduser()
        if not path.is_file():
            raise UDCGInputError("no such cache file", path=path)
        try:
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
            try:
                table = conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'judge_cache'"
                ).fetchone()
            finally:
                conn.close()
        except sqlite3.DatabaseError as exc:
            raise UDCGInputError(f"not a judge cache ({exc})", path=path) from None
        if table is None:
            raise UDCGInputError("not a judge cache (no judge_cache table)", path=path)
        return path

    def merge_from(self, source: str | os.PathLike[str]) -> MergeCounts:
        """Copy into this cache, in one transaction, the entries of the cache file ``source``
        whose keys it lacks. A key in both keeps this cache's value; the counts tell how many
        such values were equal and how many differed."""
        source = self.check_file(source)
        if source.resolve() == self.path.resolve():
            raise UDCGInputError("is the destination cache itself", path=source)
        with self._lock:
            conn = self._connection()
            conn.execute("ATTACH DATABASE ? AS source", (str(source),))
            try:
                return self._merge_attached(conn)
            finally:
                conn.execute("DETACH DATABASE source")

    def _merge_attached(self, conn: sqlite3.Connection) -> MergeCounts:
        conn.execute("BEGIN IMMEDIATE")
        try:
            same, differ = conn.execute(
                "SELECT COALESCE(SUM(s.value = d.value), 0), COALESCE(SUM(s.value != d.value), 0)"
                " FROM source.judge_cache AS s JOIN main.judge_cache AS d ON d.key = s.key"
            ).fetchone()
            conn.execute(
                "INSERT OR IGNORE INTO main.judge_cache (key, value, created)"
                " SELECT key, value, created FROM source.judge_cache"
            )
            added = conn.execute("SELECT changes()").fetchone()[0]
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self.writes += added
        return MergeCounts(added=added, same=same, conflicts=differ)


@dataclass(frozen=True)
class MergeCounts:
    """What :meth:`JudgeCache.merge_from` did: entries ``added``; keys already present with the
    ``same`` value; keys already present with another value (``conflicts``, left as they were)."""

    added: int
    same: int
    conflicts: int


def finite_json(value: Any) -> bool:
    """True when ``value`` holds no NaN or infinite float (so it may be cached)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, Mapping):
        return all(finite_json(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(finite_json(v) for v in value)
    return True
