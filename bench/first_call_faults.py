"""Page faults and kernel time of udcg's first and second ``evaluate_table`` call in a fresh
process, optionally right after another tool's process has run on the same files.

    python bench/first_call_faults.py bench/data/qrels.trec bench/data/run.trec --rounds 3
    python bench/first_call_faults.py QRELS RUN --after ir_measures --rounds 3
    python bench/first_call_faults.py QRELS RUN --pool mimalloc

The fault count (``getrusage`` minor faults) varies by a few percent from run to run, far less
than the time, so it measures how much fresh memory a first call touches; a fault on a
transparent huge page counts once for 2 MiB, so the table also shows the process's memory in
huge pages after the first call. udcg's Arrow calls allocate from jemalloc
(``udcg.io.arrow.memory_pool``): ``--pool`` puts another Arrow pool in its place (``mimalloc``,
Arrow's default, asks for huge pages; ``system`` is glibc's malloc).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from bench_trec import _WORKERS, TOOLS

_CHILD = """
import json, resource, sys, time
import udcg
from udcg import evaluate_table  # loads the engine before the first call is measured
if {pool!r} != "jemalloc":  # udcg asks for its pool on the first call
    import pyarrow
    pyarrow.jemalloc_memory_pool = getattr(pyarrow, {pool!r} + "_memory_pool")
def huge_mib():
    with open("/proc/self/smaps_rollup") as f:
        kib = [int(line.split()[1]) for line in f if line.startswith("AnonHugePages")]
    return kib[0] / 1024 if kib else float("nan")
def usage():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_minflt, r.ru_stime, time.perf_counter()
measures = ["nDCG@10", "AP", "RR", "P@10"]
calls = []
for _ in range(2):
    before = usage()
    evaluate_table(sys.argv[1], sys.argv[2], measures)
    after = usage()
    calls.append([round(a - b, 3) for a, b in zip(after, before)])
    calls[-1].append(huge_mib())
print(json.dumps(calls))
"""


def _run_tool(tool: str, qrels: str, run: str) -> None:
    worker = _WORKERS[tool] + "\nimport sys\nwork(sys.argv[1], sys.argv[2])\n"
    subprocess.run([sys.executable, "-c", worker, qrels, run], check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("qrels")
    parser.add_argument("run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--after", choices=TOOLS, help="run this tool's process first")
    parser.add_argument("--pool", choices=["jemalloc", "system", "mimalloc"], default="jemalloc")
    args = parser.parse_args()
    print(
        "| round | first call faults | sys s | wall s | huge-page MiB after"
        " | second call faults | sys s | wall s |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for i in range(1, args.rounds + 1):
        if args.after:
            _run_tool(args.after, args.qrels, args.run)
        child = _CHILD.format(pool=args.pool)
        out = subprocess.run(
            [sys.executable, "-c", child, args.qrels, args.run],
            check=True,
            capture_output=True,
            text=True,
        )
        (f1, s1, w1, h1), (f2, s2, w2, _) = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"| {i} | {f1:.0f} | {s1:.3f} | {w1:.3f} | {h1:.0f} | {f2:.0f} | {s2:.3f} | {w2:.3f} |"
        )


if __name__ == "__main__":
    main()
