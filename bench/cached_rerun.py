"""Whole-process time of a ``udcg annotate`` rerun that the judge cache answers whole.

    python bench/cached_rerun.py --judge smollm2-135m --rounds 5
    python bench/cached_rerun.py --judge precomputed:PROBS.jsonl --contexts 1000

Writes ``--contexts`` contexts of 4 passages over 3 questions x 4 passages (12 distinct
(question, passage) pairs; ``tests/e2e/test_cached_rerun.py`` uses them too) into a temporary
directory, runs ``udcg annotate --steps abstain`` once to fill a fresh judge cache (timed, shown
as ``first``), then ``--rounds`` reruns on the same cache, each a fresh process timed from start
to exit. Prints the first run's time, each rerun's, their median and the reruns' cache line
(a rerun must report ``misses 0``).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from udcg.io.contexts.jsonl import Context, Passage, write_contexts

QUESTIONS = ("Where does the Danube end?", "How long is the Danube?", "Who wrote Faust?")
PASSAGES = (
    "The Danube reaches the Black Sea in Romania.",
    "The Danube is about 2,850 kilometres long.",
    "Goethe wrote Faust in two parts.",
    "The Rhine flows into the North Sea.",
)


def many_contexts(n: int = 1000, k: int = 4) -> list[Context]:
    """``n`` contexts of ``k`` passages over 3 questions x 4 passages (12 distinct pairs)."""
    return [
        Context(
            f"q{i}",
            [
                Passage(
                    doc_id=f"d{(i + j) % len(PASSAGES)}", text=PASSAGES[(i + j) % len(PASSAGES)]
                )
                for j in range(k)
            ],
            question=QUESTIONS[i % len(QUESTIONS)],
        )
        for i in range(n)
    ]


def timed(command: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Wall seconds of ``command`` and its cache line; a failure stops the bench."""
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stderr}")
    line = re.search(r"cache hits \d+, misses \d+", done.stdout + done.stderr)
    return seconds, line.group(0) if line else "(no cache line)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--judge", default="smollm2-135m")
    parser.add_argument("--contexts", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "contexts.jsonl"
        write_contexts(src, many_contexts(args.contexts))
        base = [sys.executable, "-m", "udcg", "annotate", str(src), "-o"]
        judge = ["--judge", args.judge, "--steps", "abstain", "--cache", f"{tmp}/judge.sqlite"]
        first, line = timed([*base, f"{tmp}/first.jsonl", *judge], env)
        print(f"first run: {first:.2f} s ({line})")
        times = []
        for r in range(args.rounds):
            seconds, line = timed([*base, f"{tmp}/rerun{r}.jsonl", *judge], env)
            times.append(seconds)
            print(f"rerun {r + 1}: {seconds:.2f} s ({line})")
        print(
            f"{args.contexts} contexts, judge {args.judge}: cached rerun median "
            f"{statistics.median(times):.2f} s, min {min(times):.2f} s over {args.rounds} runs"
        )


if __name__ == "__main__":
    main()
