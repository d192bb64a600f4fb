"""Shared fixtures: where the read-only benchmark data lives, and the shipped examples."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
EXAMPLES = REPO / "examples"


@pytest.fixture
def shared_data() -> Path:
    """``<repo>/../shared/data``; tests using it skip on a machine without it."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"benchmark data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def examples() -> Path:
    """The examples shipped in the repository."""
    return EXAMPLES
