"""udcg._threads: the thread count setting and concurrent runs keep order and errors."""

from __future__ import annotations

import time

import pytest

from udcg._threads import map_concurrently, run_concurrently, worker_count
from udcg.errors import UDCGInputError


def test_results_keep_the_order_of_the_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UDCG_NUM_THREADS", "3")

    def slow_square(x: int) -> int:
        time.sleep(0.01 * (5 - x))  # later items finish first
        return x * x

    assert map_concurrently(slow_square, range(5)) == [0, 1, 4, 9, 16]
    assert run_concurrently(lambda: "a", lambda: "b") == ["a", "b"]


def test_an_exception_in_a_call_propagates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UDCG_NUM_THREADS", "2")

    def fail() -> None:
        raise UDCGInputError("bad line", field="x")

    with pytest.raises(UDCGInputError, match="bad line"):
        run_concurrently(lambda: 1, fail)


def test_default_count_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UDCG_NUM_THREADS", raising=False)
    assert 1 <= worker_count() <= 8
    monkeypatch.setenv("UDCG_NUM_THREADS", "16")
    assert worker_count() == 16
