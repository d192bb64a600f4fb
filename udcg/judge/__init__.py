"""The judge: every LLM call of the toolkit. ``load_judge(spec)`` builds a backend from
``smollm2-135m`` (the embedded model), ``openai:MODEL@BASE_URL``, ``precomputed:PATH`` or a
transformers id or path (see docs/judge.md); its labels are stored under :func:`judge_key`.
``open_judge`` puts it behind the shared on-disk cache, on Ray actors with ``engine``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from udcg.judge.base import JSONResult, Judge
from udcg.judge.options import load_judge
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
    """:func:`load_judge` behind the on-disk ``cache`` (None: the shared default), probed
    before the first call the cache cannot answer; with ``engine`` a
    :class:`~udcg.judge.ray_engine.RayJudge` (each actor's judge probed as it starts).

    >>> import json, pathlib, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     row = {"question": "Who wrote Emma?", "passage": "Austen did.", "abstain_prob": 0.1}
    ...     _ = pathlib.Path(folder, "llama3.jsonl").write_text(json.dumps(row))
    ...     judge = open_judge(f"precomputed:{folder}/llama3.jsonl", cache=f"{folder}/cache")
    ...     values = judge.abstain_prob(["Who wrote Emma?"], ["Austen did."]).tolist()
    >>> type(judge).__name__, values
    ('CachedJudge', [0.1])
    """
    from udcg.judge.cached import CachedJudge

    if engine is None:
        return CachedJudge(load_judge(spec, name=name, **dict(options or {})), cache, probe=True)
    from udcg.judge.ray_engine import RayJudge

    return CachedJudge(RayJudge(spec, name, options, engine), cache, probe=False)


__all__ = ["EMBEDDED", "JSONResult", "Judge", "judge_key", "load_judge", "open_judge"]
