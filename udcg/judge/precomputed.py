"""Judge probabilities computed elsewhere: a JSONL file, one line per (question, passage) pair,
``{"question": ..., "passage": ..., "abstain_prob": 0.03, "answer_prob": 0.41}`` (or the natural
log ``abstain_logprob`` / ``answer_logprob``); ``answer_prob`` already normalised as
:meth:`~udcg.judge.base.Judge.answer_prob` states (answers at lookup are checked, not used).

A pair is identified by the abstention prompt it renders (:func:`pair_prompt`), as the judge
cache keys it: two pairs that render one prompt (``("Who?", "Doc\nQuestion: When?")`` and
``("When?\nQuestion: Who?", "Doc")``) are one pair, so two values for them are refused.
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
from udcg.io.contexts.checks import LONE_SURROGATE, json_problem, lone_surrogate
from udcg.io.files import PathType, numbered_lines, read_once
from udcg.judge.base import Judge, OnResult
from udcg.judge.cache import SELECT_BATCH, default_cache_path
from udcg.judge.prompts import abstain_messages
from udcg.judge.requests import Request, column
from udcg.judge.spec import precomputed_key

#: Stored values: probability field -> its log-probability alternative.
VALUES = {"abstain_prob": "abstain_logprob", "answer_prob": "answer_logprob"}

#: (value field, the pair's prompt, probability, line number)
Value = tuple[str, str, float, int]
#: How far a line's probability and log-probability of one value may disagree.
AGREE = 1e-6


class PrecomputedJudge(Judge):
    """A judge that looks up the stored probabilities; ``name`` defaults to the file's name
    without ``.gz`` and ``.jsonl``. A file over :attr:`in_memory_bytes` (decompressed) is read
    from a :class:`PrecomputedIndex`, else from a dict."""

    in_memory_bytes = 4 << 20
    provides = frozenset(VALUES)

    def __init__(self, path: PathType, name: str | None = None) -> None:
        self.path = Path(path)
        self._source = read_once(path)  # a pipe is read once, whole: both passes read these
        self.name = name or precomputed_key(self.path)
        probs: dict[str, dict[str, float]] | None = {v: {} for v in VALUES}
        lines: dict[tuple[str, str], int] = {}
        digest, size = hashlib.sha256(), 0
        for number, line in self._lines():
            data = line.encode()
            digest.update(data)
            size += len(data)
            if probs is not None and size > self.in_memory_bytes:
                probs = None  # too large: validated and indexed below
            for field, pair, prob, _ in self._values(line, number) if probs is not None else ():
                earlier = probs[field].setdefault(pair, prob)  # type: ignore[index]
                first = lines.setdefault((field, pair), number)
                if abs(earlier - prob) > AGREE:
                    raise _conflict(self.path, number, field, prob, earlier, first)
        self.fingerprint = f"precomputed:{digest.hexdigest()}"
        self._probs, self._index = probs, None
        if probs is None:
            values = (v for number, line in self._lines() for v in self._values(line, number))
            self._index = PrecomputedIndex(digest.hexdigest(), values, self.path)
        elif not any(probs.values()):
            raise UDCGInputError("empty file: no precomputed probabilities", path=self.path)

    def _lines(self) -> Iterator[tuple[int, str]]:
        """The non-blank lines, numbered; bytes that are not UTF-8 or a damaged gzip stream
        are an error at their line."""
        return ((n, line) for n, line in numbered_lines(self._source) if line.strip())

    def _values(self, line: str, number: int) -> list[Value]:
        def fail(message: str, field: str | None = None) -> UDCGInputError:
            return UDCGInputError(message, path=self.path, line=number, field=field)

        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise fail(json_problem(exc)) from None
        if not isinstance(row, dict):
            raise fail("expected a JSON object")
        for field in ("question", "passage"):
            if not isinstance(row.get(field), str):
                raise fail("missing or not a string", field)
        surrogate = lone_surrogate(line, row)
        if surrogate is not None:
            raise fail(LONE_SURROGATE, surrogate or None)
        found = []
        for prob_field, log_field in VALUES.items():
            given = {f: _number(row[f]) for f in (prob_field, log_field) if f in row}
            for field, value in given.items():
                if value is None:
                    raise fail(f"{row[field]!r} is not a finite number", field)
                if not (0.0 <= value <= 1.0 if field == prob_field else value <= 0.0):
                    raise fail(f"{row[field]!r} is not a probability", field)
            if not given:
                continue
            probs = [given[prob_field]] if prob_field in given else []
            probs += [math.exp(given[log_field])] if log_field in given else []
            if len(probs) == 2 and abs(probs[0] - probs[1]) > AGREE:
                raise fail(
                    f"{probs[0]!r} disagrees with {log_field} {row[log_field]!r} "
                    f"(exp = {probs[1]!r}): give one, or two that agree",
                    prob_field,
                )
            found.append(
                (prob_field, pair_prompt(row["question"], row["passage"]), probs[0], number)
            )
        if not found:
            names = " or ".join(f"{p} ({lp})" for p, lp in VALUES.items())
            raise fail(f"needs {names}", "abstain_prob")
        return found

    def close(self) -> None:
        if self._index is not None:
            self._index.close()

    def compute(self, op: str, requests: list[Request], on_result: OnResult | None) -> Any:
        """The stored value of each pair; a missing pair or another operation is an error."""
        if op not in VALUES:
            raise UDCGInputError(
                f"the precomputed judge only provides stored probabilities, not {op}; "
                "use a model judge for this step",
                field="judge",
            )
        pairs = list(zip(column(requests, "question"), column(requests, "passage"), strict=True))
        prompts = [pair_prompt(q, p) for q, p in pairs]
        if self._index is not None:
            values = self._index.get(op, prompts)
        else:
            values = [self._probs[op].get(prompt) for prompt in prompts]  # type: ignore[index]
        for (question, passage), value in zip(pairs, values, strict=True):
            if value is None:
                raise UDCGInputError(
                    f"no precomputed {op} for question {question[:60]!r} with passage "
                    f"{passage[:60]!r}",
                    path=self.path,
                )
        return np.asarray(values, dtype=np.float64).reshape(len(pairs))


class PrecomputedIndex:
    """A precomputed file's values in SQLite keyed by a hash of each pair's prompt, at
    ``$UDCG_CACHE_DIR/precomputed/SHA256.v3.sqlite`` (``digest``, the file's): built once from
    the lazy ``values`` of ``source`` through a temporary file, then read-only. Two lines giving
    a pair different values are refused, as in the dict."""

    def __init__(self, digest: str, values: Iterable[Value], source: Path) -> None:
        # v3: keyed by prompt (v2 by the raw pair; v1 may hold the last of two values)
        self.path = default_cache_path().parent / "precomputed" / f"{digest}.v3.sqlite"
        if not self.path.exists():
            self._build(self.path, values, source)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    def close(self) -> None:
        """Close the index file (reopened by the next :meth:`get`)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    @staticmethod
    def _build(path: Path, values: Iterable[Value], source: Path) -> None:
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
                for field, prompt, prob, number in values:
                    key = _prompt_key(prompt)
                    changed = conn.execute(
                        f"INSERT INTO probs (key, {field}) VALUES (?, ?) ON CONFLICT (key) "
                        f"DO UPDATE SET {field} = coalesce({field}, excluded.{field}) "
                        f"WHERE {field} IS NULL OR abs({field} - excluded.{field}) <= ?",
                        (key, prob, AGREE),
                    ).rowcount
                    if not changed:
                        sql = f"SELECT {field} FROM probs WHERE key = ?"
                        (earlier,) = conn.execute(sql, (key,)).fetchone()
                        raise _conflict(source, number, field, prob, earlier, None)
                conn.execute("COMMIT")
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def get(self, what: str, prompts: Sequence[str]) -> list[float | None]:
        """The stored ``what`` of each pair's prompt, None where absent."""
        if what not in VALUES:
            raise ValueError(f"unknown value field {what!r}")
        keys = [_prompt_key(prompt) for prompt in prompts]
        found: dict[bytes, float | None] = {}
        with self._lock:
            if self._conn is None:
                uri = f"{self.path.resolve().as_uri()}?mode=ro"
                self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
            for start in range(0, len(keys), SELECT_BATCH):
                batch = keys[start : start + SELECT_BATCH]
                sql = f"SELECT key, {what} FROM probs WHERE key IN ({','.join('?' * len(batch))})"
                found.update(self._conn.execute(sql, batch).fetchall())
        return [found.get(key) for key in keys]


def _number(value: Any) -> float | None:
    """A JSON number as a finite float, or None (not a number, infinite, too large)."""
    if type(value) not in (int, float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _conflict(
    path: Path, line: int, field: str, prob: float, earlier: float, first: int | None
) -> UDCGInputError:
    """Two lines giving one (question, passage) pair, or two pairs of one prompt, different
    values."""
    where = f"line {first}" if first is not None else "an earlier line"
    return UDCGInputError(
        f"{prob!r} for a (question, passage) pair whose prompt {where} gives {earlier!r}: which"
        " one is the judge's? Keep one line per pair",
        path=path,
        line=line,
        field=field,
    )


def pair_prompt(question: str, passage: str) -> str:
    """The user message of the abstention prompt of (question, passage), what a pair is."""
    return abstain_messages(question, passage)[1]["content"]


def _prompt_key(prompt: str) -> bytes:
    """16 bytes of BLAKE2b over a pair's prompt."""
    return hashlib.blake2b(prompt.encode("utf-8"), digest_size=16).digest()
