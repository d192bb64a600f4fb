"""``load_judge(spec)``: a judge backend from its spec string (see :mod:`udcg.judge`)."""

from __future__ import annotations

from typing import Any

from udcg.judge.base import Judge
from udcg.judge.options import check_options
from udcg.judge.spec import EMBEDDED, OPENAI, PRECOMPUTED, judge_key, split_openai


def load_judge(spec: str, name: str | None = None, **options: Any) -> Judge:
    """A judge backend from its spec string (the forms: :mod:`udcg.judge`), named
    ``judge_key(spec, name)``, ``options`` checked (:func:`~udcg.judge.options.check_options`).

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
