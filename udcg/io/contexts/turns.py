"""The turns of a conversational query (``conversation``, see :mod:`udcg.qcare.conversation`):
read from a context's ``extra``, checked as the reader checks them."""

from __future__ import annotations

from typing import Any

from udcg.io.contexts import checks
from udcg.io.contexts.checks import Where
from udcg.io.contexts.model import Context

#: The context key that holds the conversation.
FIELD = "conversation"


def turns_of(ctx: Context) -> list[dict[str, Any]] | None:
    """The conversation of a context (checked as the reader checks it), or ``None`` for a
    single-turn query.

    Examples:
        >>> turns = [{"role": "user", "content": "Who wrote Emma?"},
        ...          {"role": "assistant", "content": "Jane Austen."},
        ...          {"role": "user", "content": "When?"}]
        >>> ctx = Context("q1", [], question="When?", extra={FIELD: turns})
        >>> [t["role"] for t in turns_of(ctx)], turns_of(Context("q2", [])) is None
        (['user', 'assistant', 'user'], True)
    """
    value = ctx.extra.get(FIELD)
    if value is None:
        return None
    path, line = ctx.source if ctx.source is not None else (None, None)
    return checks.conversation(value, FIELD, Where(path, line), ctx.question)


def history_of(ctx: Context) -> tuple[tuple[str, str], ...]:
    """The turns before the latest user turn, as ``(role, content)`` pairs (empty for a
    single-turn query): what the decomposition prompts show.

    Examples:
        >>> turns = [{"role": "user", "content": "Who wrote Emma?"},
        ...          {"role": "assistant", "content": "Jane Austen."},
        ...          {"role": "user", "content": "When?"}]
        >>> history_of(Context("q1", [], question="When?", extra={FIELD: turns}))
        (('user', 'Who wrote Emma?'), ('assistant', 'Jane Austen.'))
    """
    turns = turns_of(ctx)
    if not turns:
        return ()
    return tuple((t["role"], t["content"]) for t in turns[:-1])
