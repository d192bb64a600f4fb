"""Conversational queries: a context whose query is the latest user turn of a multi-turn
conversation.

The field: ``conversation``, on the context, a list of turns ``{"role": "user" |
"assistant", "content": "..."}``, oldest first, ending with the user turn being answered,
which ``question`` holds as well::

    {"qid": "emma::2", "question": "When was it published?",
     "conversation": [{"role": "user", "content": "Who wrote Emma?"},
                      {"role": "assistant", "content": "Jane Austen wrote Emma."},
                      {"role": "user", "content": "When was it published?"}],
     "passages": [...]}

The reader checks it (:func:`udcg.io.contexts.checks.conversation`: roles, non-empty
contents, a last user turn equal to ``question``; errors name file, line and field) and keeps
it, as read, in the context's ``extra`` (other keys of a turn included), so a read -> write
round trip is exact. ``udcg qcare label`` decomposes the latest turn given the earlier ones
(:mod:`udcg.qcare.labels.decompose`) into sub-queries that stand on their own; everything
after the sub-queries (coverage checks, claims, the metrics) is the single-turn pipeline.

:func:`read_mtrag_tasks` reads MTRAG's task files (IBM/mt-rag-benchmark: one JSON object per
line, the conversation so far under ``input``) into such contexts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from udcg.errors import UDCGInputError
from udcg.io.contexts import checks
from udcg.io.contexts.checks import Where
from udcg.io.contexts.model import Context, Passage
from udcg.io.contexts.turns import FIELD, history_of, turns_of
from udcg.io.files import PathType, check_input, numbered_lines

__all__ = [
    "FIELD",
    "conversation_context",
    "history_of",
    "read_mtrag_tasks",
    "turns_of",
]

_SPEAKERS = {"user": "user", "agent": "assistant", "assistant": "assistant"}


def conversation_context(
    qid: str, turns: Sequence[str], passages: list[Passage], **fields: Any
) -> Context:
    """A context for the last of ``turns`` (user and assistant alternating, user first):
    ``question`` is the last turn and ``conversation`` the whole list. ``fields`` are the
    other :class:`~udcg.io.contexts.model.Context` fields (``run``, ``outcomes``, ...).

    Examples:
        >>> ctx = conversation_context("q1", ["Who wrote Emma?", "Jane Austen.", "When?"], [])
        >>> ctx.question, ctx.extra["conversation"][1]
        ('When?', {'role': 'assistant', 'content': 'Jane Austen.'})
    """
    if len(turns) % 2 != 1:
        raise UDCGInputError(
            f"{len(turns)} turns: a conversation to answer ends with a user turn (odd count)",
            field=FIELD,
        )
    conversation = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": text}
        for i, text in enumerate(turns)
    ]
    extra = {**fields.pop("extra", {}), FIELD: conversation}
    return Context(qid, passages, question=turns[-1], extra=extra, **fields)


# -- MTRAG ------------------------------------------------------------------------------------


def _absent(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _relevant(passage: dict[str, Any]) -> bool | None:
    """``True`` when at least half of the annotators in ``feedback.relevant`` said yes."""
    votes = (passage.get("feedback") or {}).get("relevant")
    if not isinstance(votes, dict) or not votes:
        return None
    said = [str((v or {}).get("value", "")).strip().lower() for v in votes.values()]
    return said.count("yes") * 2 >= len(said)


def _mtrag_task(obj: Any, where: Where, run: str | None, model: str) -> Context:
    """One MTRAG task line as a context."""
    checks.json_object(obj, "task", where)
    qid = checks.identifier(obj.get("task_id"), "task_id", where)
    raw_turns = obj.get("input")
    if not isinstance(raw_turns, list) or not raw_turns:
        raise where.error("input", "must be a non-empty list of turns")
    conversation = []
    for i, turn in enumerate(raw_turns):
        checks.json_object(turn, f"input[{i}]", where)
        speaker = turn.get("speaker")
        if speaker not in _SPEAKERS:
            raise where.error(
                f"input[{i}].speaker", f"must be user or agent, got {checks.kind(speaker)}"
            )
        text = turn.get("text")
        if not isinstance(text, str) or not text.strip():
            raise where.error(f"input[{i}].text", "must be a non-empty string")
        conversation.append({"role": _SPEAKERS[speaker], "content": text})
    if conversation[-1]["role"] != "user":
        raise where.error(f"input[{len(conversation) - 1}].speaker", "the last turn must be user")
    passages = []
    for j, item in enumerate(obj.get("contexts") or []):
        name = f"contexts[{j}]"
        checks.json_object(item, name, where)
        doc_id = checks.identifier(item.get("document_id"), f"{name}.document_id", where)
        score = item.get("score")
        extra = {"title": item["title"]} if isinstance(item.get("title"), str) else {}
        passages.append(
            Passage(
                doc_id,
                text=checks.optional_str(item.get("text"), f"{name}.text", where),
                score=None if _absent(score) else checks.finite(score, f"{name}.score", where),
                relevant=_relevant(item),
                extra=extra,
            )
        )
    checks.unique_ids([p.doc_id for p in passages], where, "contexts")
    targets = [t.get("text") for t in obj.get("targets") or [] if isinstance(t, dict)]
    answers = [t for t in targets if isinstance(t, str) and t.strip()] or None
    predictions = [p.get("text") for p in obj.get("predictions") or [] if isinstance(p, dict)]
    outcomes = {}
    if predictions and isinstance(predictions[0], str):
        outcomes[model] = {"answer": predictions[0]}
    extra: dict[str, Any] = {}
    for key, name in (
        ("conversation_id", "conversation_id"),
        ("turn", "turn"),
        ("collection", "collection"),
        ("Question Type", "question_type"),
        ("answerability", "answerability"),
        ("Multi-Turn", "multi_turn"),
    ):
        if not _absent(obj.get(key)):
            extra[name] = obj[key]
    extra[FIELD] = conversation
    return Context(
        qid,
        passages,
        run=run,
        question=conversation[-1]["content"],
        answers=answers,
        outcomes=outcomes,
        extra=extra,
        source=where.source(),
    )


def read_mtrag_tasks(
    path: PathType, *, run: str | None = None, model: str = "prediction"
) -> list[Context]:
    """Contexts from an MTRAG task file (JSON Lines; the generation and retrieval task files
    of IBM/mt-rag-benchmark, e.g. ``generation_tasks/reference.jsonl``): one context per
    task.

    ``qid`` = ``task_id``; ``conversation`` = the turns of ``input`` (``agent`` becomes
    ``assistant``) and ``question`` its last, user, turn; ``answers`` = the texts of
    ``targets`` (the reference responses); passages from ``contexts`` (``document_id``,
    ``text``, ``score``, ``title`` kept in the passage's extra, ``relevant`` true when at
    least half of the annotators under ``feedback.relevant`` said yes); the first of
    ``predictions`` becomes ``outcomes[model].answer``. ``conversation_id``, ``turn``,
    ``collection``, ``Question Type`` (as ``question_type``), ``answerability`` and
    ``Multi-Turn`` (``multi_turn``) are kept in ``extra``; ``NaN`` cells are absent. Errors
    name the file, line and field.

    Examples:
        >>> import json, tempfile
        >>> from pathlib import Path
        >>> task = {"task_id": "c1::2", "conversation_id": "c1", "turn": 2,
        ...         "input": [{"speaker": "user", "text": "Who wrote Emma?"},
        ...                   {"speaker": "agent", "text": "Jane Austen."},
        ...                   {"speaker": "user", "text": "When was it published?"}],
        ...         "targets": [{"speaker": "agent", "text": "In 1815."}],
        ...         "contexts": [{"document_id": "d1", "text": "Emma (1815)", "score": 3.5,
        ...                       "feedback": {"relevant": {"a1": {"value": "yes"}}}}],
        ...         "Question Type": ["Factoid"], "Multi-Turn": float("nan")}
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder) / "tasks.jsonl"
        ...     _ = path.write_text(json.dumps(task) + "\\n")
        ...     (ctx,) = read_mtrag_tasks(path, run="reference")
        >>> ctx.qid, ctx.question, ctx.answers, ctx.passages[0].relevant
        ('c1::2', 'When was it published?', ['In 1815.'], True)
        >>> history_of(ctx)[1], ctx.extra["question_type"], "multi_turn" in ctx.extra
        (('assistant', 'Jane Austen.'), ['Factoid'], False)
    """
    check_input(path)
    out = []
    for number, text in numbered_lines(path):
        if not text.strip():
            continue
        where = Where(path, number)
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise UDCGInputError(checks.json_problem(exc), path=path, line=number) from None
        out.append(_mtrag_task(obj, where, run, model))
    if not out:
        raise UDCGInputError("empty file: no tasks", path=path)
    return out
