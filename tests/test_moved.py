"""Names that moved or were renamed in 0.2.0 still work, with a DeprecationWarning."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from udcg import _moved


@pytest.mark.parametrize(("old", "new"), sorted(_moved.MOVED.items()))
def test_an_old_module_name_is_the_new_module_with_a_warning(old: str, new: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_an_old_function_import_still_works() -> None:
    for old in ("udcg.annotate", "udcg.training"):
        sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning):
        from udcg.annotate import annotate
        from udcg.training import train
    from udcg.labels.annotate import annotate as new_annotate
    from udcg.pipeline.training import train as new_train

    assert annotate is new_annotate and train is new_train


def test_an_old_command_still_runs() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "udcg.score", "--help"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0 and result.stdout.startswith("usage: udcg score")


@pytest.mark.parametrize(
    ("old", "new"), [("ndcg", "context_ndcg"), ("average_precision", "context_average_precision")]
)
def test_renamed_metrics_warn(old: str, new: str) -> None:
    import udcg.metrics as metrics

    with pytest.warns(DeprecationWarning, match=f"udcg.metrics.{new}"):
        function = getattr(metrics, old)
    assert function is getattr(metrics, new)
