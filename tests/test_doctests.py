"""Every public function and class carries a runnable example: ``>>>`` in its docstring (a
class: in its own docstring or a public method's). pytest runs the examples as doctests
(``--doctest-modules`` in pyproject.toml)."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator

import pytest

#: modules whose public functions and classes carry examples: their ``__all__``, or without
#: one every public function and class they define
MODULES = (
    "udcg",
    "udcg.errors",
    "udcg.validation",
    "udcg.stats",
    "udcg.demo_data",
    "udcg.metrics",
    "udcg.metrics.ranking",
    "udcg.metrics.udcg",
    "udcg.trec",
    "udcg.trec.comparison",
    "udcg.trec.coverage_measures",
    "udcg.trec.engine",
    "udcg.trec.measures",
    "udcg.trec.significance",
    "udcg.trec.utility_measures",
    "udcg.theta",
    "udcg.theta.calibration",
    "udcg.theta.estimator",
    "udcg.theta.gamma",
    "udcg.theta.ordering",
    "udcg.theta.simulate",
    "udcg.judge",
    "udcg.judge.base",
    "udcg.judge.cache",
    "udcg.judge.cached",
    "udcg.judge.options",
    "udcg.judge.prompts",
    "udcg.judge.spec",
    "udcg.judge.structured",
    "udcg.qcare",
    "udcg.qcare.agreement",
    "udcg.qcare.coverage",
    "udcg.qcare.generator",
    "udcg.qcare.published",
    "udcg.qcare.scores",
    "udcg.qcare.labels.checks",
    "udcg.qcare.labels.decompose",
    "udcg.qcare.labels.label",
    "udcg.integrations.ir_measures",
    "udcg.io.contexts.arrays",
    "udcg.io.contexts.jsonl",
    "udcg.io.contexts.model",
    "udcg.io.arrow",
    "udcg.io.files",
    "udcg.io.formats.collection",
    "udcg.io.formats.hf_datasets",
    "udcg.io.formats.ir_datasets",
    "udcg.io.formats.interop",
    "udcg.io.formats.reference",
    "udcg.io.formats.topics",
    "udcg.io.formats.trec",
    "udcg.io.joins.run_contexts",
    "udcg.io.joins.trec_contexts",
    "udcg.io.joins.utilities",
    "udcg.io.joins.utility_sources",
    "udcg.io.weights.card",
    "udcg.io.weights.files",
    "udcg.labels.annotate",
    "udcg.labels.answers",
    "udcg.labels.batches",
    "udcg.labels.provenance",
    "udcg.labels.signal_check",
    "udcg.retrieval.base",
    "udcg.retrieval.bm25",
    "udcg.retrieval.controls",
    "udcg.retrieval.dense",
    "udcg.retrieval.hybrid",
)


def _public(module_name: str) -> Iterator[tuple[str, object]]:
    """``(dotted name, object)`` of the public functions and classes of ``module_name``."""
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            name
            for name, value in vars(module).items()
            if (inspect.isfunction(value) or inspect.isclass(value))
            and not name.startswith("_")
            and value.__module__ == module_name
        ]
    for name in names:
        value = getattr(module, name)
        if inspect.isfunction(value) or inspect.isclass(value):
            yield f"{module_name}.{name}", value


def _has_example(value: object) -> bool:
    docs = [inspect.getdoc(value) or ""]
    if inspect.isclass(value):
        docs += [
            inspect.getdoc(member) or ""
            for name, member in vars(value).items()
            if not name.startswith("_") and callable(member)
        ]
    return any(">>>" in doc for doc in docs)


def _walk() -> list[tuple[str, object]]:
    """Every public function and class once, under the first name it is found by."""
    found: dict[int, tuple[str, object]] = {}
    for module in MODULES:
        for name, value in _public(module):
            found.setdefault(id(value), (name, value))
    return list(found.values())


PUBLIC = _walk()


def test_the_walk_finds_the_api() -> None:
    names = {name for name, _ in PUBLIC}
    assert {"udcg.evaluate", "udcg.UDCGTheta", "udcg.metrics.udcg"} <= names
    assert {"udcg.stats.correlation", "udcg.qcare.coverage.c_ndcg"} <= names
    assert "udcg.theta.UDCGTheta" not in names  # found once, as udcg.UDCGTheta
    assert "udcg.theta.DEFAULT_GRID" not in names  # data, not a function or class


@pytest.mark.parametrize(("name", "value"), PUBLIC, ids=[name for name, _ in PUBLIC])
def test_public_name_has_an_example(name: str, value: object) -> None:
    assert _has_example(value), f"{name}: no '>>>' example in its docstring"
