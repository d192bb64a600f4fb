"""Request bodies of the OpenAI-compatible judge, online and in batch files: ``extra_body``
overlaid with the model, temperature 0 and the operation's fields."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from udcg.judge.prompts import Messages

CHAT_PATH = "/chat/completions"  # relative to the API root (.../v1)
COMPLETIONS_PATH = "/completions"


def generate_body(
    model: str, messages: Messages, extra_body: Mapping[str, Any], max_new_tokens: int, **more: Any
) -> dict[str, Any]:
    """A greedy chat completion of at most ``max_new_tokens`` tokens, with ``more`` fields."""
    chat = {"model": model, "messages": messages, "temperature": 0.0}
    return {**extra_body, **chat, "max_tokens": int(max_new_tokens), **more}


def first_token_body(
    model: str, messages: Messages, extra_body: Mapping[str, Any], top_logprobs: int
) -> dict[str, Any]:
    """One token with the log-probs of its ``top_logprobs`` most likely values."""
    return generate_body(model, messages, extra_body, 1, logprobs=True, top_logprobs=top_logprobs)


def echo_body(model: str, prompt: str, extra_body: Mapping[str, Any]) -> dict[str, Any]:
    """A raw completion that echoes ``prompt`` with one log-prob per prompt token."""
    return {
        **extra_body,
        "model": model,
        "prompt": prompt,
        "max_tokens": 1,
        "temperature": 0.0,
        "echo": True,
        "logprobs": 1,
    }


def json_response_format(schema: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``response_format`` asking for JSON output, constrained to ``schema`` when given."""
    if schema is None:
        return {"type": "json_object"}
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": dict(schema)}}
