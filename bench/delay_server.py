"""An OpenAI-compatible server that answers every chat completion after a fixed delay.

    python bench/delay_server.py --port 8123 --delay 0.2 [--jitter 0.5]

``GET /v1/models`` lists one model (``delay``); ``POST /v1/chat/completions`` waits ``--delay``
seconds (with ``--jitter J``: ``delay * (1 - J + 2 J u)``, u in [0, 1) read from the prompt's
hash, so the mean stays ``delay``), then answers one token with ``logprobs`` and
``top_logprobs`` in the OpenAI format, ``NO`` among them with a probability read from the
prompt's hash (so distinct prompts get distinct values). Requests wait concurrently on one
asyncio loop (aiohttp), so the server answers up to ``--backlog`` connections at once after
``delay`` seconds each on average: with requests kept in flight, its throughput is
in-flight / delay. Prints ``ready URL`` on stdout once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import math
from typing import Any

from aiohttp import web


def fraction(messages: Any, salt: bytes) -> float:
    """A number in [0, 1) read from the hash of ``messages`` (and ``salt``)."""
    digest = hashlib.sha256(salt + repr(messages).encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32


def reply(messages: Any) -> dict[str, Any]:
    """One chat completion whose first token's top log-probs hold ``NO`` with a probability in
    (0.01, 0.99) taken from the hash of ``messages``."""
    p_no = 0.01 + 0.98 * fraction(messages, b"p")
    top = {"NO": math.log(p_no), "The": math.log((1 - p_no) / 2), "A": math.log((1 - p_no) / 4)}
    best = max(top, key=top.__getitem__)
    alternatives = [{"token": t, "logprob": lp, "bytes": None} for t, lp in top.items()]
    return {
        "id": "delay",
        "object": "chat.completion",
        "model": "delay",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": best},
                "logprobs": {
                    "content": [{"token": best, "logprob": top[best], "top_logprobs": alternatives}]
                },
                "finish_reason": "length",
            }
        ],
    }


def make_app(delay: float, jitter: float = 0.0) -> web.Application:
    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "delay", "object": "model"}]})

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        u = fraction(body.get("messages"), b"delay")
        await asyncio.sleep(delay * (1 - jitter + 2 * jitter * u))
        return web.json_response(reply(body.get("messages")))

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def serve(host: str, port: int, delay: float, jitter: float, backlog: int) -> None:
    runner = web.AppRunner(make_app(delay, jitter), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=backlog)
    await site.start()
    print(f"ready http://{host}:{port}/v1", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8123)
    parser.add_argument("--delay", type=float, default=0.2, help="seconds per reply")
    parser.add_argument("--jitter", type=float, default=0.0, help="delay spread, in [0, 1]")
    parser.add_argument("--backlog", type=int, default=1024, help="listen backlog")
    args = parser.parse_args()
    if not 0 <= args.jitter <= 1:
        parser.error(f"--jitter must be within [0, 1], got {args.jitter}")
    try:
        asyncio.run(serve(args.host, args.port, args.delay, args.jitter, args.backlog))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
