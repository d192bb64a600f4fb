"""Package attributes imported on first use (PEP 562), so importing a package stays cheap, and
the optional pandas, imported where a function needs it, and the check that transformers runs
on the installed torch."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from udcg.errors import UDCGInputError


def lazy_attributes(
    package: str, names: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``names`` maps each public name to the
    module that defines it; a name is imported when first read and then kept in
    ``namespace`` (the package's globals)."""

    def getattr_(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(names))

    return getattr_, dir_


def import_pandas(what: str) -> Any:
    """The pandas module, or an ImportError saying that ``what`` needs it.

    Examples:
        >>> import_pandas("Evaluation.to_dataframe()").__name__
        'pandas'
    """
    try:
        import pandas
    except ImportError as exc:
        raise ImportError(f"{what} needs pandas: pip install 'udcg[pandas]'") from exc
    return pandas


def require_transformers_torch(what: str) -> None:
    """Raise a one-line :class:`UDCGInputError` when the installed transformers has turned
    PyTorch off (a torch older than it supports: it logs that, then fails deep in a model load
    or an import); a missing torch or transformers raises ModuleNotFoundError."""
    from importlib.metadata import version  # not at import: it loads some 60 modules

    import torch  # noqa: F401 (ModuleNotFoundError: the extra is missing)
    from transformers.utils import is_torch_available

    if not is_torch_available():
        raise UDCGInputError(
            f"{what} needs PyTorch, which transformers {version('transformers')} turns off: the "
            f"installed torch {version('torch')} is older than it supports. Upgrade torch, or "
            "install an older transformers"
        )
