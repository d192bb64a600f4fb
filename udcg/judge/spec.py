"""The key a judge's labels are stored under: the name the user gives (``--judge-key``,
``judge_name=``), else the spec without connection details (see docs/judge.md): the spec for
``smollm2-135m`` and a transformers id or path (no trailing ``/``), ``MODEL`` for
``openai:MODEL@BASE_URL``, the file name without ``.gz``/``.jsonl`` for ``precomputed:FILE``.
"""

from __future__ import annotations

from pathlib import Path

from udcg.errors import UDCGInputError
from udcg.validation import encodable, show

EMBEDDED = "smollm2-135m"
OPENAI = "openai:"
PRECOMPUTED = "precomputed:"


def split_openai(spec: str) -> tuple[str, str]:
    """``(MODEL, BASE_URL)`` of ``openai:MODEL@BASE_URL``.

    >>> split_openai("openai:Qwen/Qwen3-8B@http://localhost:8000/v1")
    ('Qwen/Qwen3-8B', 'http://localhost:8000/v1')
    """
    model, sep, base_url = spec.removeprefix(OPENAI).partition("@")
    if not sep or not model or not base_url:
        raise UDCGInputError(f"expected openai:MODEL@BASE_URL, got {spec!r}", field="judge")
    return model, base_url


def precomputed_key(path: str | Path) -> str:
    """The key of a precomputed file: its name without ``.gz`` and ``.jsonl``.

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

    >>> local_key("models/qwen/")
    'models/qwen'
    """
    return str(source).rstrip("/") or str(source)


def judge_key(spec: str, name: str | None = None) -> str:
    """The key the labels of judge ``spec`` are stored under (see the module docstring).

    >>> judge_key("openai:Qwen/Qwen3-8B@http://localhost:8000/v1"), judge_key("x", name="tiny")
    ('Qwen/Qwen3-8B', 'tiny')
    """
    if name is not None:
        if not isinstance(name, str) or not name.strip():
            raise UDCGInputError(
                f"must be a non-empty string, got {show(name)}", field="judge_name"
            )
        return encodable(name, "judge_name")
    if not isinstance(spec, str) or not spec:
        raise UDCGInputError(f"must be a non-empty judge spec, got {show(spec)}", field="judge")
    if spec.startswith(OPENAI):
        key = split_openai(spec)[0]
    elif spec.startswith(PRECOMPUTED):
        key = precomputed_key(spec.removeprefix(PRECOMPUTED))
    else:
        key = local_key(spec)
    try:
        return encodable(key, "judge")
    except UDCGInputError as exc:  # a file name not valid in UTF-8
        raise UDCGInputError(
            f"its key {key!a} {exc.reason}: name it (--judge-key)", field="judge"
        ) from None
