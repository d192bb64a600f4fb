"""Run an OpenAI Batch API input file against an OpenAI-compatible server, as ``vllm run-batch``
does with a local model: each request line's ``body`` is POSTed to the server and the reply
written as one line of the OpenAI Batch output format, in input order.

    python bench/run_batch_file.py requests.jsonl results.jsonl --base-url http://127.0.0.1:8000/v1

Output line: ``{"id": "batch_req_N", "custom_id": ..., "response": {"status_code": ...,
"request_id": ..., "body": REPLY}, "error": null}``; a request that gets no HTTP reply
(connection error, timeout) has ``"response": null`` and ``"error": {"code", "message"}``.
The request's ``url`` (``/v1/chat/completions``) is joined to the base URL without its ``/v1``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from tqdm.auto import tqdm


def _post(client: httpx.Client, root: str, number: int, request: dict[str, Any]) -> dict[str, Any]:
    """One request line's result line."""
    out: dict[str, Any] = {"id": f"batch_req_{number}", "custom_id": request.get("custom_id")}
    try:
        reply = client.post(root + request["url"], json=request["body"])
    except httpx.HTTPError as exc:
        return {**out, "response": None, "error": {"code": type(exc).__name__, "message": str(exc)}}
    try:
        body: Any = reply.json()
    except ValueError:
        body = {"error": {"message": reply.text}}
    response = {"status_code": reply.status_code, "request_id": f"req_{number}", "body": body}
    return {**out, "response": response, "error": None}


def run(requests: str, results: str, base_url: str, concurrency: int, timeout: float) -> int:
    """Run every line of ``requests``, write ``results``; returns the number of requests."""
    with open(requests, encoding="utf-8") as handle:
        lines = [json.loads(line) for line in handle if line.strip()]
    root = base_url.rstrip("/").removesuffix("/v1")
    with (
        httpx.Client(timeout=timeout) as client,
        ThreadPoolExecutor(concurrency) as pool,
        open(results, "w", encoding="utf-8") as out,
    ):
        done = pool.map(lambda item: _post(client, root, *item), enumerate(lines))
        for line in tqdm(done, total=len(lines), desc="batch", unit="request", file=sys.stderr):
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
    return len(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("requests", help="OpenAI Batch API input JSONL")
    parser.add_argument("results", help="OpenAI Batch API output JSONL to write")
    parser.add_argument("--base-url", required=True, help="server API root, e.g. .../v1")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    count = run(args.requests, args.results, args.base_url, args.concurrency, args.timeout)
    took = time.perf_counter() - start
    print(f"{count} requests in {took:.1f} s ({count / max(took, 1e-9):.1f}/s) -> {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
