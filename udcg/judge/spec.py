"""The key a judge's labels are stored under, from its spec.

The key is the spec without connection details, unless the user names the judge
(``--judge-key``, ``judge_name=``):

=============================  =============================================================
spec                           key
=============================  =============================================================
``smollm2-135m``               ``smollm2-135m``
``openai:MODEL@BASE_URL``      ``MODEL``
``precomputed:FILE``           the file's name without ``.gz`` and ``.jsonl`` (``llama3`` for
                               ``runs/llama3.jsonl.gz``)
a transformers id or path      the id or path as given, without a trailing ``/``
=============================  =============================================================

Labels are written (``abstain_prob[KEY]``, ``outcomes[KEY]``...), looked up and read under this
key alone, so a file labelled by one command is found by every other. The same model served and
loaded locally gets the same key; name one of them to keep their labels apart.
"""

from __future__ import annotations

from pathlib import Path

from udcg.errors import UDCGInputError
from udcg.validation import show

EMBEDDED = "smollm2-135m"
OPENAI = "openai:"
PRECOMPUTED = "precomputed:"


def split_openai(spec: str) -> tuple[str, str]:
    """``(MODEL, BASE_URL)`` of ``openai:MODEL@BASE_URL``.

    Examples:
        >>> split_openai("openai:Qwen/Qwen3-8B@http://localhost:8000/v1")
        ('Qwen/Qwen3-8B', 'http://localhost:8000/v1')
    """
    model, sep, base_url = spec.removeprefix(OPENAI).partition("@")
    if not sep or not model or not base_url:
        raise UDCGInputError(f"expected openai:MODEL@BASE_URL, got {spec!r}", field="judge")
    return model, base_url


def precomputed_key(path: str | Path) -> str:
    """The key of a precomputed file: its name without ``.gz`` and ``.jsonl``.

    Examples:
        >>> precomputed_key("runs/llama3.jsonl.gz")
        'llama3'
    """
    name = Path(path).name.removesuffix(".gz").removesuffix(".jsonl")
    if not name:
        raise UDCGInputError(
            f"expected precomputed:FILE, got a path without a file name: {str(path)!r}",
            field="judge",
        )
    return name


def local_key(source: str | Path) -> str:
    """The key of a transformers model: the id or path as given, without a trailing ``/``.

    Examples:
        >>> local_key("models/qwen/"), local_key("Qwen/Qwen3-8B")
        ('models/qwen', 'Qwen/Qwen3-8B')
    """
    return str(source).rstrip("/") or str(source)


def judge_key(spec: str, name: str | None = None) -> str:
    """The key the labels of judge ``spec`` are stored under: ``name`` when given, else the
    spec without connection details (see the module docstring).

    Examples:
        >>> judge_key("openai:Qwen/Qwen3-8B@http://localhost:8000/v1")
        'Qwen/Qwen3-8B'
        >>> judge_key("precomputed:runs/llama3.jsonl.gz"), judge_key("smollm2-135m", name="tiny")
        ('llama3', 'tiny')
    """
    if name is not None:
        if not isinstance(name, str) or not name.strip():
            raise UDCGInputError(
                f"must be a non-empty string, got {show(name)}", field="judge_name"
            )
        return name
    if not isinstance(spec, str) or not spec:
        raise UDCGInputError(f"must be a non-empty judge spec, got {show(spec)}", field="judge")
    if spec.startswith(OPENAI):
        return split_openai(spec)[0]
    if spec.startswith(PRECOMPUTED):
        return precomputed_key(spec.removeprefix(PRECOMPUTED))
    return local_key(spec)
