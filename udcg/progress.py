"""Progress of long work on standard error, on a terminal or not.

:func:`progress` is what every long loop of the toolkit reports through (annotation, judge
calls, contexts, the evaluation stages). Its display depends on where stderr goes:

* a terminal: the usual ``tqdm`` bar;
* anything else (a log file, CI, ``nohup``): one plain line every few seconds and one at the
  end, without carriage returns: ``contexts: 300/1000 (30%), 41.2/s, ETA 17s``.

``UDCG_PROGRESS=0`` (or ``off``, ``false``, ``no``) turns it off, as does tqdm's own
``TQDM_DISABLE``; ``UDCG_PROGRESS=lines`` writes lines on a terminal too.
``UDCG_PROGRESS_INTERVAL`` sets the seconds between lines (default 5). Nothing here changes
process-wide state: the settings are read, never written.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from types import TracebackType
from typing import Any, TextIO

from udcg.errors import UDCGInputError

DEFAULT_INTERVAL = 5.0
_OFF = {"0", "off", "false", "no"}


def _interval() -> float:
    text = os.environ.get("UDCG_PROGRESS_INTERVAL", "").strip()
    if not text:
        return DEFAULT_INTERVAL
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0 or math.isinf(value):
        raise UDCGInputError(
            f"must be a positive number of seconds, got {text!r}", field="UDCG_PROGRESS_INTERVAL"
        )
    return value


def progress_mode(stream: TextIO) -> str:
    """How :func:`progress` shows work on ``stream``: ``off``, ``bar`` or ``lines``."""
    setting = os.environ.get("UDCG_PROGRESS", "").strip().lower()
    tqdm_off = os.environ.get("TQDM_DISABLE", "").strip().lower()
    if setting in _OFF or tqdm_off not in ("", *_OFF):
        return "off"
    if setting == "lines":
        return "lines"
    isatty = getattr(stream, "isatty", None)
    return "bar" if isatty is not None and isatty() else "lines"


def _duration(seconds: float) -> str:
    """``17s``, ``3m05s``, ``1h02m``."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class LineProgress:
    """Plain progress lines: one per ``interval`` seconds of work and one at the end (when
    ``leave``). Thread-safe :meth:`update`."""

    def __init__(
        self,
        stream: TextIO,
        desc: str,
        total: int | None,
        initial: int = 0,
        leave: bool = True,
        interval: float = DEFAULT_INTERVAL,
    ) -> None:
        self.stream, self.desc, self.total = stream, desc, total
        self.n = self._start = int(initial)
        self.leave, self.interval = leave, interval
        self._t0 = self._last = time.monotonic()
        self._lock = threading.Lock()

    def line(self, now: float) -> str:
        """The line for the work done by ``now`` (a :func:`time.monotonic` reading)."""
        done = self.n - self._start
        rate = done / (now - self._t0) if now > self._t0 else 0.0
        parts = [
            f"{self.n}/{self.total} ({100 * self.n / self.total:.0f}%)"
            if self.total
            else f"{self.n}",
            f"{rate:.1f}/s",
        ]
        if self.total and rate > 0:
            parts.append(f"ETA {_duration(max(self.total - self.n, 0) / rate)}")
        return f"{self.desc}: {', '.join(parts)}"

    def _write(self, now: float) -> None:
        self._last = now
        self.stream.write(self.line(now) + "\n")
        self.stream.flush()

    def update(self, n: int = 1) -> None:
        """Count ``n`` more items done; write a line when ``interval`` seconds have passed."""
        with self._lock:
            self.n += n
            now = time.monotonic()
            if now - self._last >= self.interval:
                self._write(now)

    def set_description(self, desc: str) -> None:
        """Name the work that follows; a line says so at once."""
        with self._lock:
            self.desc = desc
            self._write(time.monotonic())

    def close(self) -> None:
        """Write the final line (when ``leave`` and some work was counted)."""
        with self._lock:
            if self.leave and self.n > self._start:
                self._write(time.monotonic())

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _Silent:
    """No display; the same methods."""

    def update(self, n: int = 1) -> None:
        """Nothing to show."""

    def set_description(self, desc: str) -> None:
        """Nothing to show."""

    def close(self) -> None:
        """Nothing to show."""

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


def next_stage(bar: Any, what: str, stage: str) -> None:
    """Count a finished stage of ``bar`` (a :func:`progress` over a command's stages) and name
    the next: ``what: stage``."""
    bar.update(1)
    bar.set_description(f"{what}: {stage}")


def progress(
    total: int | None,
    desc: str,
    unit: str = "it",
    initial: int = 0,
    leave: bool = True,
    stream: TextIO | None = None,
) -> Any:
    """A progress display of ``total`` items (None: unknown) named ``desc`` on ``stream``
    (default stderr; none when stderr is closed), as :func:`progress_mode` says: a context
    manager with ``update(n)``, ``set_description(desc)`` and ``close()``. ``leave=False``: a
    bar is cleared when done and lines mode writes no final line (for the inner loops of a
    longer run)."""
    stream = sys.stderr if stream is None else stream
    closed = stream is None or getattr(stream, "closed", False)  # stderr closed (2>&-)
    mode = "off" if closed else progress_mode(stream)
    if mode == "off":
        return _Silent()
    if mode == "lines":
        return LineProgress(stream, desc, total, initial, leave, _interval())
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        initial=initial,
        desc=desc,
        unit=unit,
        leave=leave,
        file=stream,
        disable=False,
        dynamic_ncols=True,
    )
