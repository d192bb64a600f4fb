"""Judge probabilities computed elsewhere: a JSONL file, one line per (question, passage) pair,
``{"question": ..., "passage": ..., "abstain_prob": 0.03, "answer_prob": 0.41}`` (or the natural
log ``abstain_logprob`` / ``answer_logprob``); ``answer_prob`` already normalised as
:meth:`~udcg.judge.base.Judge.answer_prob` states (answers at lookup are checked, not used).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sqlite3
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from udcg.errors import UDCGInputError
from udcg.io.files import PathType, open_text
from udcg.judge.base import Judge, OnResult
from udcg.judge.cache import SELECT_BATCH, default_cache_path
from udcg.judge.requests import Request, column
from udcg.judge.spec import precomputed_key

#: Stored values: probability field -> its log-probability alternative.
VALUES = {"abstain_prob": "abstain_logprob", "answer_prob": "answer_logprob"}

Value = tuple[str, tuple[str, str], float]  # (value field, (question, passage), probability)


class PrecomputedJudge(Judge):
    """A judge that looks up the stored probabilities; ``name`` defaults to the file's name
    without ``.gz`` and ``.jsonl``. A file over :attr:`in_memory_bytes` (decompressed) is read
    from a :class:`PrecomputedIndex`, else from a dict."""

    in_memory_bytes = 4 << 20

    def __init__(self, path: PathType, name: str | None = None) -> None:
        self.path = Path(path)
        self.name = name or precomputed_key(self.path)
        probs: dict[str, dict[tuple[str, str], float]] | None = {v: {} for v in VALUES}
        digest, size = hashlib.sha256(), 0
        for number, line in self._lines():
            data = line.encode()
            digest.update(data)
            size += len(data)
            if probs is not None and size > self.in_memory_bytes:
                probs = None  # too large: validated and indexed below
            for field, pair, prob in self._values(line, number) if probs is not None else ():
                probs[field][pair] = prob  # type: ignore[index]
        self.fingerprint = f"precomputed:{digest.hexdigest()}"
        self._probs, self._index = probs, None
        if probs is None:
            values = (v for number, line in self._lines() for v in self._values(line, number))
            self._index = PrecomputedIndex(digest.hexdigest(), values)
        elif not any(probs.values()):
            raise UDCGInputError("empty file: no precomputed probabilities", path=self.path)

    def _lines(self) -> Iterator[tuple[int, str]]:
        with open_text(self.path) as handle:
            yield from ((n, line) for n, line in enumerate(handle, start=1) if line.strip())

    def _values(self, line: str, number: int) -> list[Value]:
        def fail(message: str, field: str | None = None) -> UDCGInputError:
            return UDCGInputError(message, path=self.path, line=number, field=field)

        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise fail(f"malformed JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise fail("expected a JSON object")
        for field in ("question", "passage"):
            if not isinstance(row.get(field), str):
                raise fail("missing or not a string", field)
        found = []
        for prob_field, log_field in VALUES.items():
            field = prob_field if prob_field in row else log_field if log_field in row else None
            if field is None:
                continue
            value = row[field]
            if type(value) not in (int, float) or not math.isfinite(value):
                raise fail(f"{value!r} is not a finite number", field)
            prob = math.exp(value) if field == log_field else float(value)
            if not 0.0 <= prob <= 1.0 or (field == log_field and value > 0):
                raise fail(f"{value!r} is not a probability", field)
            found.append((prob_field, (row["question"], row["passage"]), prob))
        if not found:
            names = " or ".join(f"{p} ({lp})" for p, lp in VALUES.items())
            raise fail(f"needs {names}", "abstain_prob")
        return found

    def compute(self, op: str, requests: list[Request], on_result: OnResult | None) -> Any:
        """The stored value of each pair; a missing pair or another operation is an error."""
        if op not in VALUES:
            raise UDCGInputError(
                f"the precomputed judge only provides stored probabilities, not {op}; "
                "use a model judge for this step",
                field="judge",
            )
        pairs = list(zip(column(requests, "question"), column(requests, "passage"), strict=True))
        if self._index is not None:
            values = self._index.get(op, pairs)
        else:
            values = [self._probs[op].get(pair) for pair in pairs]  # type: ignore[index]
        for (question, passage), value in zip(pairs, values, strict=True):
            if value is None:
                raise UDCGInputError(
                    f"no precomputed {op} for question {question[:60]!r} with passage "
                    f"{passage[:60]!r}",
                    path=self.path,
                )
        return np.asarray(values, dtype=np.float64).reshape(len(pairs))


class PrecomputedIndex:
    """A precomputed file's values in SQLite keyed by a hash of (question, passage), at
    ``$UDCG_CACHE_DIR/precomputed/SHA256.sqlite`` (``digest``, the file's): built once from the
    lazy ``values`` through a temporary file, then read-only. A later line overrides an
    earlier one, as in the dict."""

    def __init__(self, digest: str, values: Iterable[Value]) -> None:
        self.path = default_cache_path().parent / "precomputed" / f"{digest}.sqlite"
        if not self.path.exists():
            self._build(self.path, values)
        self._lock = threading.Lock()
        uri = f"{self.path.resolve().as_uri()}?mode=ro"
        self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False)

    @staticmethod
    def _build(path: Path, values: Iterable[Value]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        try:
            with contextlib.closing(sqlite3.connect(tmp, isolation_level=None)) as conn:
                conn.execute("PRAGMA journal_mode = OFF")
                conn.execute("PRAGMA synchronous = OFF")
                conn.execute(
                    "CREATE TABLE probs (key BLOB PRIMARY KEY, abstain_prob REAL, "
                    "answer_prob REAL) WITHOUT ROWID"
                )
                conn.execute("BEGIN")
                for field, pair, prob in values:
                    conn.execute(
                        f"INSERT INTO probs (key, {field}) VALUES (?, ?) ON CONFLICT (key) "
                        f"DO UPDATE SET {field} = excluded.{field}",
                        (_pair_key(pair), prob),
                    )
                conn.execute("COMMIT")
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def get(self, what: str, pairs: Sequence[tuple[str, str]]) -> list[float | None]:
        """The stored ``what`` of each pair, None where absent."""
        if what not in VALUES:
            raise ValueError(f"unknown value field {what!r}")
        keys = [_pair_key(pair) for pair in pairs]
        found: dict[bytes, float | None] = {}
        with self._lock:
            for start in range(0, len(keys), SELECT_BATCH):
                batch = keys[start : start + SELECT_BATCH]
                sql = f"SELECT key, {what} FROM probs WHERE key IN ({','.join('?' * len(batch))})"
                found.update(self._conn.execute(sql, batch).fetchall())
        return [found.get(key) for key in keys]


def _pair_key(pair: tuple[str, str]) -> bytes:
    """16 bytes of BLAKE2b over the JSON of (question, passage)."""
    text = json.dumps(pair, ensure_ascii=False, separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()
