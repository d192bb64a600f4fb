"""Kill an annotation run with SIGKILL midway, rerun it, and compare with an uninterrupted run.

    HF_HUB_OFFLINE=1 python bench/resume_check.py --questions 5

Annotates the k=5 demo contexts of the first ``--questions`` questions with the embedded judge
(abstention probabilities and end-to-end outcomes) three times, each through ``python -m udcg
annotate``: once uninterrupted with its own cache; once killed as soon as its cache holds
``--kill-after`` entries; then the killed run again on the same cache. Prints the cache hit
counts of the rerun and whether its output is byte-identical to the uninterrupted run's.
"""

from __future__ import annotations

import argparse
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from udcg.data.demo import SOURCE, build_contexts, load_source
from udcg.io.contexts import write_contexts


def entries(cache: Path) -> int:
    if not cache.exists():
        return 0
    try:
        with sqlite3.connect(cache, timeout=30) as conn:
            return conn.execute("SELECT count(*) FROM judge_cache").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def annotate(src: Path, out: Path, cache: Path) -> subprocess.Popen:
    command = [
        sys.executable,
        "-m",
        "udcg.labels.annotate",
        str(src),
        str(out),
        "--cache",
        str(cache),
    ]
    command += ["--steps", "abstain", "outcomes"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=5)
    parser.add_argument("--kill-after", type=int, default=20)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="udcg-resume-"))
    questions = load_source(SOURCE)[: args.questions]
    contexts = [c for c in build_contexts(questions) if len(c.passages) == 5]
    src = work / "in.jsonl"
    write_contexts(src, contexts)

    start = time.perf_counter()
    full = annotate(src, work / "uninterrupted.jsonl", work / "cache_a.sqlite")
    print(full.communicate()[0].strip(), f"({time.perf_counter() - start:.0f} s)")

    killed = annotate(src, work / "resumed.jsonl", work / "cache_b.sqlite")
    while entries(work / "cache_b.sqlite") < args.kill_after and killed.poll() is None:
        time.sleep(0.2)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    done_before = entries(work / "cache_b.sqlite")
    print(
        f"SIGKILLed the second run with {done_before} judge calls in its cache; "
        f"output written: {(work / 'resumed.jsonl').exists()}"
    )
    rerun = annotate(src, work / "resumed.jsonl", work / "cache_b.sqlite")
    print("rerun:", rerun.communicate()[0].strip())
    same = (work / "uninterrupted.jsonl").read_bytes() == (work / "resumed.jsonl").read_bytes()
    print(f"{len(contexts)} contexts; resumed output identical to the uninterrupted one: {same}")


if __name__ == "__main__":
    main()
