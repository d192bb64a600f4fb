"""udcg vs pytrec_eval, ranx and ir_measures: TREC files -> per-query nDCG@10, AP, RR, P@10.

    python bench/make_trec_data.py --queries 10000 --depth 100 --out bench/data
    python bench/bench_trec.py bench/data/qrels.trec bench/data/run.trec

Each tool runs in its own fresh process on the same files: parse both files, then compute the
four measures for every query (each tool's own reader and evaluator, as a user calls them).
"cold" is the first call in the process (ranx includes its numba compilation there), "warm" the
best of the next ``--repeats`` calls; "peak MiB" is the growth of the process's peak resident
memory over its footprint after imports, during the cold call. With ``--rounds N`` every tool
runs N times, the tools taking turns, and the table shows the medians (single runs on a shared
host vary by 20-30%). ``--parity`` instead compares udcg's per-query values with pytrec_eval's
on the same files and prints the largest absolute difference per measure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

TOOLS = ("udcg", "pytrec_eval", "ranx", "ir_measures")

_WORKERS = {
    "udcg": """
from udcg import evaluate_table  # udcg's names load on first use: load the engine now
def work(qrels, run):
    return evaluate_table(qrels, run, ["nDCG@10", "AP", "RR", "P@10"]).values
""",
    "pytrec_eval": """
import pytrec_eval
def work(qrels, run):
    with open(qrels) as q, open(run) as r:
        judged, ranked = pytrec_eval.parse_qrel(q), pytrec_eval.parse_run(r)
    measures = {"ndcg_cut_10", "map", "recip_rank", "P_10"}
    return pytrec_eval.RelevanceEvaluator(judged, measures).evaluate(ranked)
""",
    "ranx": """
import ranx
def work(qrels, run):
    judged = ranx.Qrels.from_file(qrels, kind="trec")
    ranked = ranx.Run.from_file(run, kind="trec")
    metrics = ["ndcg@10", "map", "mrr", "precision@10"]
    return ranx.evaluate(judged, ranked, metrics, return_mean=False, make_comparable=True)
""",
    "ir_measures": """
import ir_measures
from ir_measures import AP, RR, P, nDCG
def work(qrels, run):
    judged = ir_measures.read_trec_qrels(qrels)
    ranked = ir_measures.read_trec_run(run)
    return list(ir_measures.iter_calc([nDCG @ 10, AP, RR, P @ 10], judged, ranked))
""",
}

_HARNESS = """
import json, resource, sys, time
{worker}
qrels, run, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter(); work(qrels, run); cold = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
warm = []
for _ in range(repeats):
    start = time.perf_counter(); work(qrels, run); warm.append(time.perf_counter() - start)
print(json.dumps({{"cold": cold, "warm": min(warm), "peak_mib": (peak - base) / 1024}}))
"""


def measure(tool: str, qrels: str, run: str, repeats: int) -> dict:
    """Time ``tool`` in a fresh interpreter; returns cold/warm seconds and peak MiB."""
    code = _HARNESS.format(worker=_WORKERS[tool])
    out = subprocess.run(
        [sys.executable, "-c", code, qrels, run, str(repeats)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


_PYTREC_NAMES = {"nDCG@10": "ndcg_cut_10", "AP": "map", "RR": "recip_rank", "P@10": "P_10"}


def parity(qrels: str, run: str) -> None:
    """Print max |udcg - pytrec_eval| per measure over every query both evaluate."""
    import pytrec_eval

    import udcg

    ours = udcg.evaluate(qrels, run, list(_PYTREC_NAMES))
    with open(qrels) as q, open(run) as r:
        judged, ranked = pytrec_eval.parse_qrel(q), pytrec_eval.parse_run(r)
    ref = pytrec_eval.RelevanceEvaluator(judged, set(_PYTREC_NAMES.values())).evaluate(ranked)
    if set(ours) != set(ref):
        sys.exit(f"query sets differ: {len(set(ours) ^ set(ref))} queries in only one")
    print(f"{len(ours)} queries")
    for name, ref_name in _PYTREC_NAMES.items():
        diff = max(abs(ours[q][name] - ref[q][ref_name]) for q in ref)
        print(f"{name}: max abs diff {diff:.2e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("qrels")
    parser.add_argument("run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--tools", nargs="+", default=list(TOOLS), choices=TOOLS)
    parser.add_argument("--parity", action="store_true")
    args = parser.parse_args()
    if args.parity:
        parity(args.qrels, args.run)
        return
    runs: dict[str, list[dict]] = {tool: [] for tool in args.tools}
    for round_ in range(args.rounds):
        for tool in args.tools:
            started = time.perf_counter()
            runs[tool].append(measure(tool, args.qrels, args.run, args.repeats))
            print(
                f"# round {round_ + 1}: {tool} done in {time.perf_counter() - started:.1f}s",
                file=sys.stderr,
            )
    results = {
        tool: {key: statistics.median(r[key] for r in measured) for key in measured[0]}
        for tool, measured in runs.items()
    }
    ours = results.get("udcg")
    print("| tool | cold s | warm s | peak MiB | udcg time / tool time (cold, warm) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for tool, r in results.items():
        ratio = f"{ours['cold'] / r['cold']:.3f}, {ours['warm'] / r['warm']:.3f}" if ours else "-"
        print(f"| {tool} | {r['cold']:.3f} | {r['warm']:.3f} | {r['peak_mib']:.0f} | {ratio} |")


if __name__ == "__main__":
    main()
