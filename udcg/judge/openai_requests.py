"""Request bodies of the OpenAI-compatible judge, online and in batch files: ``extra_body``
overlaid with the model, temperature 0 and the operation's fields."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from udcg.judge.prompts import Messages

CHAT_PATH = "/chat/completions"  # relative to the API root (.../v1)
COMPLETIONS_PATH = "/completions"


def chat_body(
    model: str, messages: Messages, extra_body: Mapping[str, Any], **options: Any
) -> dict[str, Any]:
    """A chat completion at temperature 0 with ``options`` (``max_tokens``, ``logprobs``...)."""
    return {**extra_body, "model": model, "messages": messages, "temperature": 0.0, **options}


def first_token_body(
    model: str, messages: Messages, extra_body: Mapping[str, Any], top_logprobs: int
) -> dict[str, Any]:
    """One token with the log-probs of its ``top_logprobs`` most likely values."""
    return chat_body(
        model, messages, extra_body, max_tokens=1, logprobs=True, top_logprobs=top_logprobs
    )


def generate_body(
    model: str, messages: Messages, extra_body: Mapping[str, Any], max_new_tokens: int
) -> dict[str, Any]:
    """A greedy completion of at most ``max_new_tokens`` tokens."""
    return chat_body(model, messages, extra_body, max_tokens=int(max_new_tokens))


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
