"""Label contexts with a judge from Python (``udcg.label``): the steps of ``udcg annotate``
(:mod:`udcg.labels.annotate`) and Q-CARE's labels (:func:`udcg.qcare.label_contexts`)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context
from udcg.judge.base import Judge
from udcg.labels.annotate import DEFAULT_STEPS
from udcg.labels.annotate import STEPS as ANNOTATE_STEPS
from udcg.pipeline.context_scores import as_contexts
from udcg.pipeline.stages import annotate_contexts

if TYPE_CHECKING:
    from udcg.judge.cache import JudgeCache

#: What :func:`label` can add: the annotate steps, then ``qcare`` (sub-queries, coverage and,
#: with the judge's answers, claim labels).
STEPS = (*ANNOTATE_STEPS, "qcare")


def label(
    contexts: Iterable[Context] | str | os.PathLike[str],
    judge: Judge | str,
    steps: Sequence[str] = DEFAULT_STEPS,
    *,
    cache: JudgeCache | str | os.PathLike[str] | Literal[False] | None = None,
    relevance: str = "string",
    grader: str = "span",
    max_new_tokens: int = 32,
    relabel: bool = False,
) -> list[Context]:
    """New contexts with the labels of ``steps`` added (:data:`STEPS`; the inputs are not
    modified). ``contexts``: contexts or a contexts JSONL file; ``judge``: a judge
    (:func:`udcg.load_judge`) or its spec string. ``cache``: the on-disk judge cache, so that a
    rerun asks the judge nothing twice; None: for a spec, the one every command shares
    (:func:`udcg.judge.cache.default_cache_path`), for a judge object none; False: none.
    ``relevance`` (``string`` | ``llm``) and ``grader`` (``span`` | ``llm``) are
    :func:`udcg.labels.annotate.annotate`'s. Step ``qcare`` is ``udcg qcare label``
    (:func:`udcg.qcare.label_contexts`), with ``--answers-from`` the judge on the contexts that
    carry its answer (``outcomes[judge].answer``; coverage only on the others): its own labels
    are recomputed, Q-CARE labels of another judge or given by hand are refused unless
    ``relabel``, which replaces them.

    >>> import json, tempfile
    >>> from pathlib import Path
    >>> import udcg
    >>> contexts = list(udcg.demo_contexts())[:2]
    >>> probs = Path(tempfile.mkdtemp()) / "probs.jsonl"
    >>> _ = probs.write_text("".join(
    ...     json.dumps({"question": c.question, "passage": p.text, "abstain_prob": 0.25}) + "\\n"
    ...     for c in contexts for p in c.passages))
    >>> labelled = udcg.label(contexts, f"precomputed:{probs}", ["abstain"], cache=False)
    >>> labelled[0].passages[0].abstain_prob
    {'smollm2-135m': 0.0..., 'probs': 0.25}
    """
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        raise UDCGInputError(
            f"unknown step {unknown[0]!r}; known: {', '.join(STEPS)}", field="steps"
        )
    close = None  # what this call opened: the judge of a spec, or the cache it put around one
    if isinstance(judge, str):
        from udcg.judge import load_judge, open_judge

        judge = load_judge(judge) if cache is False else open_judge(judge, cache=cache)
        close = judge.close
    elif cache not in (None, False):
        from udcg.judge.cached import CachedJudge

        judge = CachedJudge(judge, cache)
        close = judge.cache.close
    try:
        out = annotate_contexts(
            as_contexts(contexts, distinct=False),  # labelled as given, repeats included
            judge,
            [s for s in steps if s != "qcare"],
            relevance,
            grader,
            max_new_tokens,
            qcare=False,
        )
        return _label_qcare(out, judge, relabel) if "qcare" in steps else out
    finally:
        if close is not None:
            close()


def _label_qcare(contexts: list[Context], judge: Judge, relabel: bool) -> list[Context]:
    """Step ``qcare``: :func:`udcg.qcare.label_contexts` with ``answers_from`` the judge on the
    contexts that carry its answer, coverage only on the others; in the given order."""
    from udcg.qcare import label_contexts

    answered = [isinstance(c.outcomes.get(judge.name, {}).get("answer"), str) for c in contexts]
    out = list(contexts)
    for answers in (True, False):
        where = [i for i, a in enumerate(answered) if a is answers]
        if where:
            labelled, _ = label_contexts(
                [contexts[i] for i in where],
                judge,
                answers_from=judge.name if answers else None,
                relabel=relabel,
            )
            for i, ctx in zip(where, labelled, strict=True):
                out[i] = ctx
    return out
