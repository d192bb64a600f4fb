"""Shared fixtures: where the read-only benchmark data lives, the shipped examples, and the
evaluate.py configuration as Hydra composes it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

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


@pytest.fixture
def evaluate_config(tmp_path: Path) -> Callable[..., DictConfig]:
    """``compose(*overrides)``: conf/evaluate.yaml as ``python evaluate.py OVERRIDES`` sees it,
    with the stage cache and outputs under ``tmp_path`` and a short bootstrap."""

    def compose_with(*overrides: str) -> DictConfig:
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            return compose(
                "evaluate",
                overrides=[
                    f"cache_dir={tmp_path / 'cache'}",
                    f"output_dir={tmp_path / 'out'}",
                    "n_bootstrap=100",
                    *overrides,
                ],
            )

    return compose_with
