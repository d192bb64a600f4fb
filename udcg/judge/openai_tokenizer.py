"""Asking an OpenAI-compatible server's tokenizer how it splits a text.

Servers expose their tokenizer outside the OpenAI API, at the server root: vLLM and llama.cpp's
llama-server serve ``/tokenize`` and ``/detokenize``, llama-cpp-python serves
``/extras/tokenize`` and ``/extras/detokenize``. Each request is retried as any request (see
:mod:`udcg.judge.openai_http`); an endpoint that still fails, or that the server refuses (HTTP
404), is skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from udcg.judge.openai_http import JudgeHTTPClient, JudgeServerError


def token_ids(reply: Any) -> list[int] | None:
    """The token ids of a tokenize reply (``{"tokens": [id, ...]}`` or ``[{"id": ...}, ...]``),
    or None when it holds none."""
    if not isinstance(reply, dict) or not isinstance(reply.get("tokens"), list):
        return None
    ids = []
    for token in reply["tokens"]:
        if isinstance(token, dict):
            token = token.get("id")
        if not isinstance(token, int) or isinstance(token, bool):
            return None
        ids.append(token)
    return ids


def _try_post(http: JudgeHTTPClient, url: str, body: Mapping[str, Any]) -> Any:
    """One POST with the client's retries, or None when it fails in the end."""
    try:
        return http.post(url, body)
    except JudgeServerError:
        return None


def first_token_text(http: JudgeHTTPClient, root: str, model: str, text: str) -> str | None:
    """The text of the first token of ``text`` per the tokenizer of the server at ``root``
    serving ``model``, or None when no tokenizer endpoint says."""
    styles: list[tuple[str, Callable[[str], dict[str, Any]], str]] = [
        # vLLM (prompt, add_special_tokens) and llama.cpp's llama-server (content, add_special)
        (
            "/tokenize",
            lambda s: {
                "model": model,
                "prompt": s,
                "content": s,
                "add_special_tokens": False,
                "add_special": False,
            },
            "/detokenize",
        ),
        # llama-cpp-python (always adds BOS: stripped below as the prefix of "")
        ("/extras/tokenize", lambda s: {"model": model, "input": s}, "/extras/detokenize"),
    ]
    for tokenize, body, detokenize in styles:
        ids = token_ids(_try_post(http, root + tokenize, body(text)))
        if not ids:
            continue
        prefix = token_ids(_try_post(http, root + tokenize, body("")))
        if prefix is None:
            continue
        if ids[: len(prefix)] == prefix:
            ids = ids[len(prefix) :]
        if not ids:
            continue
        reply = _try_post(http, root + detokenize, {"model": model, "tokens": ids[:1]})
        if isinstance(reply, dict):
            for field in ("prompt", "content", "text"):
                if isinstance(reply.get(field), str) and reply[field]:
                    return reply[field]
    return None
