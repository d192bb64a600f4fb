"""Peak memory of ``udcg annotate`` at two input sizes: bounded by the chunk, not the input.

    HF_HUB_OFFLINE=1 python bench/bench_annotate_memory.py            # 2k and 200k contexts

For each size, writes a contexts file (k=5 passages, a distinct query id per context, every
(question, passage) pair distinct) and the matching ``precomputed:`` file of abstention
probabilities, then runs ``python -m udcg annotate IN -o OUT --steps abstain --judge
precomputed:FILE`` as a subprocess with a fresh cache and index directory, and reports its
wall time and peak RSS (``os.wait4`` of that child), sizes side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def write_inputs(directory: Path, n: int, k: int, chars: int) -> tuple[Path, Path]:
    """``n`` contexts of ``k`` passages and one precomputed line per (question, passage)."""
    contexts, probs = directory / f"in-{n}.jsonl", directory / f"probs-{n}.jsonl"
    filler = ("lorem ipsum dolor sit amet " * (chars // 27 + 1))[:chars]
    with contexts.open("w") as ctx_file, probs.open("w") as prob_file:
        for i in range(n):
            question = f"question number {i}?"
            passages = []
            for j in range(k):
                text = f"passage {i}-{j}: {filler}"
                passages.append({"doc_id": f"d{i}-{j}", "text": text})
                value = ((i * 7919 + j * 104729) % 1000) / 1000
                row = {"question": question, "passage": text, "abstain_prob": value}
                prob_file.write(json.dumps(row) + "\n")
            ctx_file.write(json.dumps({"qid": f"q{i}", "question": question, "passages": passages}))
            ctx_file.write("\n")
    return contexts, probs


def run_annotate(directory: Path, contexts: Path, probs: Path) -> tuple[float, float, str]:
    """Wall seconds, peak RSS in MiB and the summary line of one ``udcg annotate`` run."""
    out = directory / f"out-{contexts.stem}.jsonl"
    command = [sys.executable, "-m", "udcg", "annotate", str(contexts), "-o", str(out)]
    command += ["--steps", "abstain", "--judge", f"precomputed:{probs}"]
    command += ["--cache", str(directory / f"cache-{contexts.stem}.sqlite")]
    env = {**os.environ, "UDCG_CACHE_DIR": str(directory / f"cachedir-{contexts.stem}")}
    logs = directory / "stdout.txt", directory / "stderr.txt"
    start = time.perf_counter()
    with logs[0].open("w") as stdout, logs[1].open("w") as stderr:
        child = subprocess.Popen(command, env=env, stdout=stdout, stderr=stderr)
        _, status, usage = os.wait4(child.pid, 0)  # this child's own peak RSS
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"annotate failed: {logs[1].read_text().strip()}")
    return wall, usage.ru_maxrss / 1024, logs[0].read_text().strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 200_000])
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--chars", type=int, default=120, help="filler characters per passage")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="udcg-mem-") as tmp:
        directory = Path(tmp)
        for n in args.sizes:
            contexts, probs = write_inputs(directory, n, args.k, args.chars)
            mib = (contexts.stat().st_size + probs.stat().st_size) / 2**20
            wall, rss, summary = run_annotate(directory, contexts, probs)
            print(f"{n} contexts ({mib:.0f} MiB of input): {summary}", file=sys.stderr)
            rows.append((n, mib, wall, rss))
            for path in directory.iterdir():  # free the disk before the next size
                if path.is_file():
                    path.unlink()
    base = rows[0][3]
    print("| contexts | input MiB | wall s | peak RSS MiB | RSS vs smallest |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for n, mib, wall, rss in rows:
        print(f"| {n:,} | {mib:,.0f} | {wall:.1f} | {rss:.0f} | {rss / base:.2f}x |")


if __name__ == "__main__":
    main()
