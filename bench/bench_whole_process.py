"""Whole-process time of ``python -m udcg.trec`` against pytrec_eval's usual script, per shape.

    python bench/bench_whole_process.py --rounds 5 --seeds 2
    python bench/bench_whole_process.py --tools udcg pytrec_eval ranx ir_measures --rounds 1

Generates runs and qrels with ``make_trec_data.write_files`` into a temporary directory: four
shapes (10,000 queries x 100 documents, 100,000 x 10, 1,000 x 1,000: about 1M run lines and
1.1M qrels lines each; 10,000 x 100 with 20 judged documents per query: 0.2M qrels lines),
each with few ties and with many (see ``--ties`` there), each with ``--seeds`` seeds. Every
round starts one fresh process per tool and file pair, the tools taking turns (their order
flips every round), and times it from start to exit:

* udcg: ``python -m udcg.trec QRELS RUN -m nDCG@10,AP,RR,P@10``;
* pytrec_eval: a script that imports pytrec_eval, reads both files into dicts by splitting
  lines, evaluates ``ndcg_cut_10``, ``map``, ``recip_rank`` and ``P_10`` and prints the means;
* ranx and ir_measures (optional): their own file readers and evaluation, means printed.

The table shows per shape the median wall seconds over rounds and seeds, udcg's median divided
by each tool's, and the median CPU seconds (user + system) of the processes. Before timing,
udcg's modules are byte-compiled, as an installed package is (``PYTHONDONTWRITEBYTECODE``
would otherwise make every process compile them again). Parity is checked in the same run:
udcg's means (``--format json``) must equal pytrec_eval's to 1e-9 on every file pair. Last,
``python -c "import udcg"`` and ``python -c pass`` alternate ``--import-rounds`` times
(``--imports-only``: only that).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from make_trec_data import write_files

ROOT = Path(__file__).resolve().parents[1]
#: shape -> (queries, documents per query, judgements per query; None: 7/6 x documents)
SHAPES = {
    "10000x100": (10_000, 100, None),
    "100000x10": (100_000, 10, None),
    "1000x1000": (1_000, 1_000, None),
    "10000x100j20": (10_000, 100, 20),
}
TIES = ("few", "many")
MEASURES = ["nDCG@10", "AP", "RR", "P@10"]
TOOLS = ("udcg", "pytrec_eval", "ranx", "ir_measures")

_PYTREC = """
import sys
import pytrec_eval

qrels = {}
with open(sys.argv[1]) as f:
    for line in f:
        qid, _, doc, rel = line.split()
        qrels.setdefault(qid, {})[doc] = int(rel)
run = {}
with open(sys.argv[2]) as f:
    for line in f:
        qid, _, doc, _, score, _ = line.split()
        run.setdefault(qid, {})[doc] = float(score)
names = ["ndcg_cut_10", "map", "recip_rank", "P_10"]
result = pytrec_eval.RelevanceEvaluator(qrels, set(names)).evaluate(run)
for name in names:
    print(name, repr(sum(values[name] for values in result.values()) / len(result)))
print("num_q", len(result))
"""

_RANX = """
import sys
from ranx import Qrels, Run, evaluate

qrels = Qrels.from_file(sys.argv[1], kind="trec")
run = Run.from_file(sys.argv[2], kind="trec")
print(evaluate(qrels, run, ["ndcg@10", "map", "mrr", "precision@10"], make_comparable=True))
"""

_IR_MEASURES = """
import sys
import ir_measures
from ir_measures import AP, RR, P, nDCG

qrels = ir_measures.read_trec_qrels(sys.argv[1])
run = ir_measures.read_trec_run(sys.argv[2])
print(ir_measures.calc_aggregate([nDCG @ 10, AP, RR, P @ 10], qrels, run))
"""

_PYTREC_NAMES = {"nDCG@10": "ndcg_cut_10", "AP": "map", "RR": "recip_rank", "P@10": "P_10"}


def command(tool: str, qrels: Path, run: Path) -> list[str]:
    """The command line of one whole-process run of ``tool``."""
    if tool == "udcg":
        return [sys.executable, "-m", "udcg.trec", str(qrels), str(run), "-m", ",".join(MEASURES)]
    script = {"pytrec_eval": _PYTREC, "ranx": _RANX, "ir_measures": _IR_MEASURES}[tool]
    return [sys.executable, "-c", script, str(qrels), str(run)]


def timed(args: list[str]) -> tuple[float, float, str]:
    """``(wall seconds, CPU seconds, stdout)`` of one process, from start to exit."""
    start = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    out, err = proc.stdout.read(), proc.stderr.read()  # stderr stays small
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    if proc.returncode:
        sys.exit(f"{' '.join(args[:3])} failed:\n{err.decode()}")
    return wall, usage.ru_utime + usage.ru_stime, out.decode()


def parity(qrels: Path, run: Path, pytrec_out: str) -> float:
    """Largest |udcg mean - pytrec_eval mean| over the four measures (exits on a mismatch of
    the query count)."""
    args = [*command("udcg", qrels, run), "--format", "json"]
    ours = json.loads(subprocess.run(args, capture_output=True, check=True, cwd=ROOT).stdout)
    ref = dict(line.split() for line in pytrec_out.splitlines())
    if ours["num_queries"] != int(ref["num_q"]):
        sys.exit(f"{run}: {ours['num_queries']} queries evaluated, pytrec_eval {ref['num_q']}")
    return max(abs(ours["mean"][m] - float(ref[p])) for m, p in _PYTREC_NAMES.items())


def import_times(rounds: int) -> dict[str, float]:
    """Median wall seconds of ``python -c "import udcg"`` and ``python -c pass``."""
    cases = {"import udcg": "import udcg", "pass": "pass"}
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, code in cases.items():
            times[name].append(timed([sys.executable, "-c", code])[0])
    return {name: statistics.median(values) for name, values in times.items()}


def _print_imports(imports: dict[str, float], rounds: int) -> None:
    print(
        f'import: python -c "import udcg" {imports["import udcg"] * 1000:.0f} ms, '
        f"python -c pass {imports['pass'] * 1000:.0f} ms "
        f"(medians of {rounds} alternating runs)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--ties", nargs="+", default=list(TIES), choices=list(TIES))
    parser.add_argument("--tools", nargs="+", default=["udcg", "pytrec_eval"], choices=TOOLS)
    parser.add_argument("--import-rounds", type=int, default=21)
    parser.add_argument("--imports-only", action="store_true", help="only time the imports")
    parser.add_argument("--data", type=Path, help="keep the generated files here")
    args = parser.parse_args()
    if "udcg" not in args.tools or "pytrec_eval" not in args.tools:
        parser.error("--tools needs udcg and pytrec_eval (the ratios and the parity check)")

    compileall.compile_dir(ROOT / "udcg", quiet=1)
    if args.imports_only:
        _print_imports(import_times(args.import_rounds), args.import_rounds)
        return
    with tempfile.TemporaryDirectory(prefix="udcg-bench-") as tmp:
        data = args.data or Path(tmp)
        pairs: dict[tuple[str, str], list[tuple[Path, Path]]] = {}
        for shape in args.shapes:
            n_queries, depth, judged = SHAPES[shape]
            for ties in args.ties:
                for seed in range(args.seeds):
                    out = data / f"{shape}-{ties}-{seed}"
                    run, qrels = write_files(out, n_queries, depth, seed, ties, judged)
                    pairs.setdefault((shape, ties), []).append((qrels, run))
        print(f"# data in {data}: {sum(map(len, pairs.values()))} file pairs", file=sys.stderr)

        wall: dict[tuple[str, str, str], list[float]] = {}
        cpu: dict[tuple[str, str, str], list[float]] = {}
        worst = 0.0
        for round_ in range(args.rounds):
            started = time.perf_counter()
            tools = args.tools if round_ % 2 == 0 else args.tools[::-1]
            for (shape, ties), files in pairs.items():
                for qrels, run in files:
                    for tool in tools:
                        seconds, cpu_seconds, out = timed(command(tool, qrels, run))
                        wall.setdefault((shape, ties, tool), []).append(seconds)
                        cpu.setdefault((shape, ties, tool), []).append(cpu_seconds)
                        if round_ == 0 and tool == "pytrec_eval":
                            worst = max(worst, parity(qrels, run, out))
            print(
                f"# round {round_ + 1}/{args.rounds} in {time.perf_counter() - started:.0f}s",
                file=sys.stderr,
            )
        imports = import_times(args.import_rounds)

    median = {key: statistics.median(values) for key, values in wall.items()}
    median_cpu = {key: statistics.median(values) for key, values in cpu.items()}
    others = [t for t in args.tools if t != "udcg"]
    samples = args.rounds * args.seeds
    print(
        f"Whole process, median of {samples} runs per cell ({args.rounds} rounds x "
        f"{args.seeds} seeds); wall seconds, CPU seconds in brackets.\n"
    )
    head = ["shape", "ties", *args.tools, *(f"udcg / {t}" for t in others)]
    print("| " + " | ".join(head) + " |")
    print("| --- | --- |" + " ---: |" * (len(head) - 2))
    for shape, ties in pairs:
        cells = [
            f"{median[shape, ties, t]:.3f} ({median_cpu[shape, ties, t]:.2f})" for t in args.tools
        ]
        ours = median[shape, ties, "udcg"]
        ratios = [f"**{ours / median[shape, ties, t]:.3f}**" for t in others]
        print(f"| {shape} | {ties} | " + " | ".join(cells + ratios) + " |")
    print(f"\nparity: largest |udcg mean - pytrec_eval mean| {worst:.1e} (limit 1e-9)")
    _print_imports(imports, args.import_rounds)
    if worst > 1e-9:
        sys.exit("parity check failed")
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("(PYTHONDONTWRITEBYTECODE is set: udcg was byte-compiled before timing)")


if __name__ == "__main__":
    main()
