"""Modules that moved in 0.2.0 stay importable under their old names, with a
DeprecationWarning, until 0.3.0 (see CHANGELOG.md)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

#: old module name -> new module name
MOVED = {
    "udcg.annotate": "udcg.cli.annotate",
    "udcg.answers": "udcg.labels.answers",
    "udcg.demo": "udcg.cli.demo",
    "udcg.evaluation": "udcg.trec.engine",
    "udcg.measures": "udcg.trec.measures",
    "udcg.score": "udcg.cli.score",
    "udcg.training": "udcg.pipeline.training",
    "udcg.utility_sources": "udcg.io.utility_sources",
    "udcg.qcare.checks": "udcg.labels.qcare.checks",
    "udcg.qcare.decompose": "udcg.labels.qcare.decompose",
    "udcg.qcare.pipeline": "udcg.labels.qcare.label",
    "udcg.qcare.prompts": "udcg.labels.qcare.prompts",
}


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module at its new name (the same module object)."""

    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{self.old} moved to {self.new}; the old name goes away in udcg 0.3",
            DeprecationWarning,
            stacklevel=3,
        )
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """The module was executed when it was imported under its new name."""

    def get_code(self, fullname: str) -> object:
        """For ``python -m OLD``: run the new module's code as ``__main__``."""
        spec = importlib.util.find_spec(self.new)
        return spec.loader.get_code(self.new)  # type: ignore[union-attr]


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(fullname, new))


def install() -> None:
    """Put the finder on ``sys.meta_path`` once."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())
