"""Doctests of the ``udcg`` package (``--doctest-modules`` in pyproject.toml) without its
optional dependencies: a module that imports a missing one (torch, hydra, transformers, ...) is
skipped, and so is an example that imports one when it runs (``UDCGTheta.fit`` needs torch),
each naming what is missing; any other import error still fails.
A line after the results counts the doctests.
"""

from __future__ import annotations

import doctest
import importlib
import re
from collections.abc import Generator

import pytest
from _pytest.doctest import DoctestItem, DoctestModule
from _pytest.reports import CollectReport, TestReport

_NO_MODULE = re.compile(r"^ModuleNotFoundError: No module named '([^']+)'", re.M)


def _missing(error: BaseException | None) -> str | None:
    """The top-level name of the non-udcg module whose absence raised ``error``, directly or
    as the cause of another error (or when an example expecting another exception got that
    one instead), else None."""
    if isinstance(error, doctest.UnexpectedException):
        error = error.exc_info[1]
    if isinstance(error, doctest.DocTestFailure):
        found = _NO_MODULE.search(error.got)
        name = found[1] if found else ""
    else:
        while error is not None and not isinstance(error, ModuleNotFoundError):
            error = error.__cause__
        if error is None:
            return None
        name = error.name or ""
    name = name.split(".")[0]
    return name if name and name != "udcg" else None


def _import_error(module: str) -> BaseException | None:
    try:
        importlib.import_module(module)
    except Exception as error:  # the collection itself reports any other failure
        return error
    return None


def _reason(missing: str) -> str:
    return f"Skipped: needs the optional dependency {missing!r}"


@pytest.hookimpl(tryfirst=True)
def pytest_make_collect_report(collector: pytest.Collector) -> CollectReport | None:
    root = collector.config.rootpath
    if not isinstance(collector, DoctestModule) or not collector.path.is_relative_to(root):
        return None
    relative = collector.path.relative_to(root).with_suffix("")
    if relative.parts[0] != "udcg":
        return None
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    missing = _missing(_import_error(".".join(parts)))
    if missing is None:
        return None
    return CollectReport(
        collector.nodeid, "skipped", (str(collector.path), 0, _reason(missing)), []
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, TestReport, TestReport]:
    report = yield
    if isinstance(item, DoctestItem) and report.failed and call.excinfo is not None:
        missing = _missing(call.excinfo.value)
        if missing is not None:
            report.outcome = "skipped"
            report.longrepr = (str(item.path), item.reportinfo()[1] or 0, _reason(missing))
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line counting the doctests among the results (they run in the same session)."""
    counts = {
        outcome: sum(
            isinstance(report, TestReport) and report.nodeid.startswith("udcg/")
            for report in terminalreporter.stats.get(outcome, [])
        )
        for outcome in ("passed", "failed", "skipped")
    }
    if any(counts.values()):
        line = ", ".join(f"{n} {outcome}" for outcome, n in counts.items() if n)
        terminalreporter.write_line(f"doctests: {line}")
