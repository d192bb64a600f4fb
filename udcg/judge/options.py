"""Judge backends: the one a spec names, its options checked before it is built (an option it
does not take, or a value of the wrong type, is one line listing the options it takes), and
:func:`load_judge`."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from udcg.errors import UDCGInputError
from udcg.judge.spec import EMBEDDED, OPENAI, PRECOMPUTED, judge_key, split_openai
from udcg.validation import show

if TYPE_CHECKING:
    from udcg.judge.base import Judge

#: Annotation words of backend parameters -> (accepted types, how a message names them).
_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "bool": ((bool,), "true or false"),
    "int": ((int,), "an integer"),
    "float": ((int, float), "a number"),
    "str": ((str,), "a string"),
    "None": ((type(None),), "null"),
}


@dataclass(frozen=True)
class Backend:
    """A backend's label for messages, the keyword parameters a user may set and ``build``:
    the judge from ``name`` and those options.

    >>> "timeout" in backend_of("openai:Qwen/Qwen3-8B@http://localhost:8000/v1").parameters
    True
    """

    label: str
    parameters: Mapping[str, inspect.Parameter]
    build: Callable[..., Any]


def _keywords(function: Callable[..., Any], *fixed: str) -> dict[str, inspect.Parameter]:
    """The named parameters of ``function`` except ``fixed`` (set from the spec)."""
    return {
        name: p
        for name, p in inspect.signature(function).parameters.items()
        if name not in fixed and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }


def backend_of(spec: str) -> Backend:
    """The backend that :func:`udcg.judge.load_judge` builds for ``spec``.

    >>> backend_of("precomputed:runs/llama3.jsonl").label
    'precomputed judge'
    """
    if spec == EMBEDDED:
        from udcg.judge.embedded import load_embedded_judge
        from udcg.judge.local import TransformersJudge

        model = _keywords(TransformersJudge, "model_id_or_path", "name", "gguf_file", "source_id")
        keywords = {**model, **_keywords(load_embedded_judge)}
        return Backend(f"embedded judge ({EMBEDDED})", keywords, load_embedded_judge)
    if spec.startswith(OPENAI):
        from udcg.judge.openai_backend import OpenAIJudge

        keywords = _keywords(OpenAIJudge, "model", "base_url", "name")
        return Backend("openai judge", keywords, lambda **o: OpenAIJudge(*split_openai(spec), **o))
    if spec.startswith(PRECOMPUTED):
        from udcg.judge.precomputed import PrecomputedJudge

        build = partial(PrecomputedJudge, spec.removeprefix(PRECOMPUTED))
        return Backend("precomputed judge", _keywords(PrecomputedJudge, "path", "name"), build)
    from udcg.judge.local import TransformersJudge

    keywords = _keywords(TransformersJudge, "model_id_or_path", "name")
    return Backend("transformers judge", keywords, partial(TransformersJudge, spec))


def check_options(spec: str, options: Mapping[str, Any], prefix: str = "") -> None:
    """Check each option is a parameter of ``spec``'s backend, of its type; errors name the
    field ``prefix`` + option.

    >>> check_options("openai:m@http://localhost:8000/v1", {"timeout": "10"})
    Traceback (most recent call last):
    udcg.errors.UDCGInputError: field 'timeout': must be a number, got '10'
    """
    backend = backend_of(spec)
    for key, value in options.items():
        field = f"{prefix}{key}"
        if key == "name":
            raise UDCGInputError(
                "the key of the labels is set with judge_name (--judge-key), not as a backend "
                "option",
                field=field,
            )
        parameter = backend.parameters.get(key)
        if parameter is None:
            accepted = ", ".join(sorted(backend.parameters)) or "none"
            raise UDCGInputError(
                f"not an option of the {backend.label}; its options: {accepted}", field=field
            )
        words = [w.strip() for w in str(parameter.annotation).split("|")]
        if not all(w in _TYPES for w in words):
            continue  # an annotation not checked
        kinds = tuple(t for w in words for t in _TYPES[w][0])
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            expected = " or ".join(_TYPES[w][1] for w in words)
            raise UDCGInputError(f"must be {expected}, got {show(value)}", field=field)


def load_judge(spec: str, name: str | None = None, **options: Any) -> Judge:
    """A judge backend from its spec string (the forms: :mod:`udcg.judge`), named
    ``judge_key(spec, name)``, ``options`` checked (:func:`check_options`).

    >>> import json, pathlib, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     row = {"question": "Who wrote Emma?", "passage": "Austen did.", "abstain_prob": 0.1}
    ...     _ = pathlib.Path(folder, "llama3.jsonl").write_text(json.dumps(row))
    ...     judge = load_judge(f"precomputed:{folder}/llama3.jsonl")
    >>> judge.name, judge.abstain_prob(["Who wrote Emma?"], ["Austen did."]).tolist()
    ('llama3', [0.1])
    """
    check_options(spec, options)
    key = judge_key(spec, name)
    return backend_of(spec).build(name=key, **options)
