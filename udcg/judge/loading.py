"""``load_judge(spec)``: a judge backend from its spec string (see :mod:`udcg.judge`)."""

from __future__ import annotations

from typing import Any

from udcg.judge.base import Judge
from udcg.judge.options import check_options
from udcg.judge.spec import EMBEDDED, OPENAI, PRECOMPUTED, judge_key, split_openai


def load_judge(spec: str, name: str | None = None, **options: Any) -> Judge:
    """A judge backend from its spec string (the forms: :mod:`udcg.judge`), named
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
