"""``load_judge(spec)``: a judge backend from its spec string (see :mod:`udcg.judge`)."""

from __future__ import annotations

from typing import Any

from udcg.judge.base import Judge
from udcg.judge.options import check_options
from udcg.judge.spec import EMBEDDED, OPENAI, PRECOMPUTED, judge_key, split_openai


def load_judge(spec: str, name: str | None = None, **options: Any) -> Judge:
    """A judge backend from its spec string (the forms: :mod:`udcg.judge`), named
    ``judge_key(spec, name)``. ``options`` go to the backend; one it does not take, or a value
    of the wrong type, is an error listing the options it takes.

    Examples:
        A precomputed judge answers from its file (here one abstention probability):

        >>> import json, tempfile
        >>> from pathlib import Path
        >>> row = {"question": "Who wrote Emma?", "passage": "Austen did.", "abstain_prob": 0.1}
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (Path(folder) / "llama3.jsonl").write_text(json.dumps(row))
        ...     judge = load_judge(f"precomputed:{folder}/llama3.jsonl")
        >>> judge.name, judge.abstain_prob([row["question"]], [row["passage"]]).tolist()
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
