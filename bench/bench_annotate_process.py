"""Whole-process ``udcg annotate`` against a delay server: wall time of the command as a user
starts it (interpreter start, imports, probe, reading, judging, writing) next to the ideal.

    HF_HUB_OFFLINE=1 python bench/bench_annotate_process.py --contexts 3000 --k 5 \
        --in-flight 64 --delay 0.2 --seeds 1 2 3

For each seed a contexts file of ``--contexts`` contexts with ``--k`` passages each is generated
(every (question, passage) pair distinct, passage lengths drawn from the seed), then
``udcg annotate IN -o OUT --steps abstain --judge openai:delay@URL --judge-option
abstain_token=NO --max-concurrency N --cache FRESH`` runs as a subprocess against
``bench/delay_server.py`` (every reply after ``--delay`` seconds, replies waiting concurrently).
The ideal is the server's own limit, pairs / (in_flight / delay) seconds, with no start-up; the
ratio ideal / wall is what a user gets of it, start-up included. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servers import free_port, serve

ROOT = Path(__file__).resolve().parents[1]


def write_contexts(path: Path, contexts: int, k: int, seed: int) -> int:
    """``contexts`` contexts of ``k`` distinct passages each (lengths from ``seed``); the
    number of distinct pairs."""
    rng = random.Random(seed)
    with path.open("w") as out:
        for c in range(contexts):
            passages = []
            for j in range(k):
                words = " ".join(f"w{rng.randrange(10_000)}" for _ in range(rng.randint(20, 120)))
                passages.append(
                    {"docid": f"d{c}-{j}", "text": f"Record {c}/{j} (seed {seed}): {words}"}
                )
            row = {"qid": f"q{c}", "question": f"What happened in case {c}?", "answers": ["x"]}
            out.write(json.dumps({**row, "passages": passages}) + "\n")
    return contexts * k


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, default=3000)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--in-flight", type=int, nargs="+", default=[64])
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--chunk", type=int, help="udcg annotate --chunk (default: its own)")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        port = free_port()
        url = f"http://127.0.0.1:{port}/v1"
        server = [sys.executable, str(ROOT / "bench" / "delay_server.py"), "--port", str(port)]
        server += ["--delay", str(args.delay)]
        with serve(server, url + "/models", tmp / "server.log"):
            for seed in args.seeds:
                contexts = tmp / f"in-{seed}.jsonl"
                pairs = write_contexts(contexts, args.contexts, args.k, seed)
                for in_flight in args.in_flight:
                    out = tmp / f"out-{seed}-{in_flight}.jsonl"
                    command = [
                        sys.executable, "-m", "udcg", "annotate", str(contexts), "-o", str(out),
                        "--steps", "abstain", "--judge", f"openai:delay@{url}",
                        "--judge-option", "abstain_token=NO", "--max-concurrency", str(in_flight),
                        "--cache", str(tmp / f"cache-{seed}-{in_flight}.sqlite"),
                    ]  # fmt: skip
                    if args.chunk is not None:
                        command += ["--chunk", str(args.chunk)]
                    start = time.perf_counter()
                    done = subprocess.run(command, env=env, capture_output=True, text=True)
                    wall = time.perf_counter() - start
                    if done.returncode != 0:
                        sys.exit(done.stderr[-3000:])
                    ideal = pairs / (in_flight / args.delay)
                    rows.append((seed, in_flight, pairs, wall, ideal))
    chunk = "" if args.chunk is None else f", --chunk {args.chunk}"
    print(f"delay {args.delay:g} s, {args.contexts} contexts x {args.k} passages{chunk}\n")
    print("| seed | in flight | requests | wall (s) | ideal (s) | ideal / wall |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for seed, in_flight, pairs, wall, ideal in rows:
        print(f"| {seed} | {in_flight} | {pairs} | {wall:.1f} | {ideal:.1f} | {ideal / wall:.0%} |")


if __name__ == "__main__":
    main()
