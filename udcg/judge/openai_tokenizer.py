"""Asking an OpenAI-compatible server's tokenizer, at the server root: ``/tokenize`` and
``/detokenize`` (vLLM, llama-server), ``/extras/...`` (llama-cpp-python); requests are retried as
any, an endpoint that still fails is skipped."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from udcg.judge.openai_http import JudgeHTTPClient, JudgeServerError


def token_ids(reply: Any) -> list[int] | None:
    """The ids of a tokenize reply (``{"tokens": [id or {"id": id}, ...]}``), or None."""
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
    try:
        return http.post(url, body)
    except JudgeServerError:
        return None


def first_token_text(http: JudgeHTTPClient, root: str, model: str, text: str) -> str | None:
    """The first token of ``text`` per the tokenizer of the server at ``root``, or None."""
    flags = {"add_special_tokens": False, "add_special": False}
    styles: list[tuple[str, Callable[[str], dict[str, Any]]]] = [
        # vLLM (prompt, add_special_tokens) and llama.cpp's llama-server (content, add_special)
        ("", lambda s: {"model": model, "prompt": s, "content": s, **flags}),
        # llama-cpp-python (always adds BOS: stripped below as the prefix of "")
        ("/extras", lambda s: {"model": model, "input": s}),
    ]
    for where, body in styles:
        tokenize = root + where + "/tokenize"
        ids = token_ids(_try_post(http, tokenize, body(text)))
        if not ids:
            continue
        prefix = token_ids(_try_post(http, tokenize, body("")))
        if prefix is None:
            continue
        if ids[: len(prefix)] == prefix:
            ids = ids[len(prefix) :]
        if not ids:
            continue
        reply = _try_post(http, root + where + "/detokenize", {"model": model, "tokens": ids[:1]})
        if isinstance(reply, dict):
            for field in ("prompt", "content", "text"):
                if isinstance(reply.get(field), str) and reply[field]:
                    return reply[field]
    return None
