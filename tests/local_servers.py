"""Server subprocesses for the tests: ``bench/servers.py``, where a server that does not start
fails the test with its log."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.bench_scripts import load

servers = load("servers")


@contextmanager
def started(
    command: list[str],
    ready_url: str,
    log: Path,
    limit: float = 120.0,
    env: Mapping[str, str] | None = None,
) -> Iterator[None]:
    """``servers.serve(...)``; a server that exits or is not ready in time fails the test."""
    try:
        with servers.serve(command, ready_url, log, limit, env):
            yield
    except servers.ServerError as exc:
        pytest.fail(str(exc))
