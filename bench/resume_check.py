"""Kill one shard of a sharded annotation with SIGKILL midway, rerun it, merge the shards, and
compare with an uninterrupted single-process run.

    HF_HUB_OFFLINE=1 python -u bench/resume_check.py --questions 5 --shards 3
    HF_HUB_OFFLINE=1 python -u bench/resume_check.py --questions 60 --delay 0.05

Annotates the k=5 demo contexts of the first ``--questions`` questions (abstention
probabilities and end-to-end outcomes) with the embedded judge, or with ``--delay SECONDS``
with an ``openai:`` judge served by ``bench/delay_server.py`` (every reply after that delay,
values from the prompt's hash; 16 requests in flight), each run through ``python -m udcg
annotate``: once uninterrupted, unsharded, with its own cache; then as ``--shards`` shards
(``--shard I/N``, one cache file per shard, as on separate machines), the largest shard
SIGKILLed as soon as its cache holds ``--kill-after`` entries and rerun on the same cache.
Prints each rerun's summary (contexts resumed, cache hits and misses), merges the shard outputs
(``udcg merge-shards``) and the shard caches (``udcg cache merge``), says whether the merged
output is byte-identical to the uninterrupted run's, and reruns the unsharded command on the
merged cache (every call a hit).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from servers import free_port

from udcg.demo_data.demo import SOURCE, build_contexts, load_source
from udcg.io.contexts.jsonl import write_contexts
from udcg.labels.shards import shard_of


def entries(cache: Path) -> int:
    if not cache.exists():
        return 0
    try:
        with sqlite3.connect(cache, timeout=30) as conn:
            return conn.execute("SELECT count(*) FROM judge_cache").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def udcg(*args: str | Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "udcg", *map(str, args)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


#: Judge arguments of every annotate run (set in main).
JUDGE: list[str] = []


def annotate(src: Path, out: Path, cache: Path, *extra: str) -> subprocess.Popen:
    steps = ["--steps", "abstain,outcomes", "--chunk", "4"]
    return udcg("annotate", src, "-o", out, "--cache", cache, *steps, *JUDGE, *extra)


@contextlib.contextmanager
def delay_server(delay: float) -> Iterator[str]:
    """``bench/delay_server.py`` on a free loopback port; yields its base URL."""
    port = free_port()
    script = Path(__file__).with_name("delay_server.py")
    command = [sys.executable, str(script), "--port", str(port), "--delay", str(delay)]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        ready = server.stdout.readline().split()
        if ready[:1] != ["ready"]:
            raise SystemExit("the delay server did not start")
        yield ready[1]
    finally:
        server.terminate()
        server.wait()


def finished(process: subprocess.Popen) -> str:
    stdout = process.communicate()[0].strip()
    if process.returncode != 0:
        raise SystemExit(f"failed with status {process.returncode}: {stdout}")
    return stdout.replace("\n", " | ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=5)
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--kill-after", type=int, default=10)
    parser.add_argument("--delay", type=float, help="judge: the delay server, SECONDS a reply")
    args = parser.parse_args()
    if args.delay is None:
        run(args)
        return
    with delay_server(args.delay) as url:
        JUDGE.extend(["--judge", f"openai:delay@{url}", "--max-concurrency", "16"])
        run(args)


def run(args: argparse.Namespace) -> None:
    """The uninterrupted run, the shards with one killed, the merges."""
    work = Path(tempfile.mkdtemp(prefix="udcg-resume-"))
    questions = load_source(SOURCE)[: args.questions]
    contexts = [c for c in build_contexts(questions) if len(c.passages) == 5]
    src = work / "in.jsonl"
    write_contexts(src, contexts)
    n = args.shards

    start = time.perf_counter()
    whole = work / "uninterrupted.jsonl"
    print("uninterrupted:", finished(annotate(src, whole, work / "cache_whole.sqlite")))
    print(f"  ({time.perf_counter() - start:.0f} s)")

    sizes = {i: sum(shard_of(c.qid, n) == i for c in contexts) for i in range(1, n + 1)}
    victim = max(sizes, key=sizes.__getitem__)
    parts = [work / f"part-{i}-of-{n}.jsonl" for i in range(1, n + 1)]
    caches = [work / f"cache-{i}.sqlite" for i in range(1, n + 1)]
    for i in range(1, n + 1):
        run = annotate(src, parts[i - 1], caches[i - 1], "--shard", f"{i}/{n}")
        if i == victim:
            while entries(caches[i - 1]) < args.kill_after and run.poll() is None:
                time.sleep(0.1)
            run.send_signal(signal.SIGKILL)
            run.wait()
            written = parts[i - 1].with_name(parts[i - 1].name + ".partial")
            lines = written.read_bytes().count(b"\n") if written.exists() else 0
            print(
                f"shard {i}/{n} ({sizes[i]} contexts): SIGKILLed with "
                f"{entries(caches[i - 1])} judge calls in its cache, {lines} contexts written"
            )
            run = annotate(src, parts[i - 1], caches[i - 1], "--shard", f"{i}/{n}")
            print(f"shard {i}/{n} rerun: {finished(run)}")
        else:
            print(f"shard {i}/{n} ({sizes[i]} contexts): {finished(run)}")

    merged = work / "merged.jsonl"
    print(finished(udcg("merge-shards", src, *parts, "-o", merged)))
    same = whole.read_bytes() == merged.read_bytes()
    print(f"{len(contexts)} contexts; merged shards identical to the uninterrupted run: {same}")
    print(finished(udcg("cache", "merge", work / "merged.sqlite", *caches)))
    again = annotate(src, work / "again.jsonl", work / "merged.sqlite")
    print("unsharded on the merged cache:", finished(again))


if __name__ == "__main__":
    main()
