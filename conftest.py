"""Doctest collection of the ``udcg`` package (``--doctest-modules`` in pyproject.toml): a module
whose optional dependency (torch, hydra, transformers, ...) is not installed is skipped with the
name of what is missing; any other import error still fails the collection.
"""

from __future__ import annotations

import importlib

import pytest
from _pytest.doctest import DoctestModule
from _pytest.reports import CollectReport


def _missing_dependency(module: str) -> str | None:
    """The top-level name of the non-udcg module that importing ``module`` misses, else None."""
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as error:
        missing = (error.name or "").split(".")[0]
        if missing and missing != "udcg":
            return missing
    except Exception:  # the collection itself reports any other failure
        pass
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_make_collect_report(collector: pytest.Collector) -> CollectReport | None:
    if not isinstance(collector, DoctestModule):
        return None
    relative = collector.path.relative_to(collector.config.rootpath).with_suffix("")
    if relative.parts[0] != "udcg":
        return None
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    missing = _missing_dependency(".".join(parts))
    if missing is None:
        return None
    reason = f"Skipped: doctests need the optional dependency {missing!r}"
    return CollectReport(collector.nodeid, "skipped", (str(collector.path), 0, reason), [])
