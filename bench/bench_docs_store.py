"""``udcg contexts --dataset ID`` (passages looked up in an ir_datasets docs store) against
``udcg contexts --collection FILE`` (the collection streamed), whole processes, on a generated
collection of 2,000,000 passages.

    python bench/bench_docs_store.py                          # 2M passages, 1k x 100 and 10k x 100
    python bench/bench_docs_store.py --passages 200000 --shapes 100x10 --seeds 1 --keep DIR

Per seed, writes into a temporary directory (``--keep DIR``: there, reused when present) the
collection (TSV ``doc_id<TAB>title<TAB>text``, 40-60 random words, ``bench_contexts.py``'s
generator) and, per shape ``QUERIESxDEPTH``, a run, topics and qrels drawn from the whole
collection. The same files are registered as an ir_datasets dataset (``TsvDocs`` with a
``(doc_id, title, text)`` document, ``TsvQueries``, ``TrecQrels``) in each child process that
reads them (a registration lives in its process only), ``IR_DATASETS_HOME`` a folder of the
directory (the docs store is written beside the collection).

Timed, each as its own child process (wall time and peak resident memory from ``wait4``):

* ``build``: the first ``--dataset`` run, which builds the docs store (one pass over the
  collection, ``COLLECTION.pklz4`` beside it), once per seed;
* then, ``--rounds`` times per shape, taking turns: ``file`` (``python -m udcg.cli.contexts RUN
  --topics --collection --qrels -k``) and ``store`` (the same with ``--dataset ID``).

The two outputs must be byte-identical (exit status 1 otherwise). Then, in one more child
process, the two ways of finding the ranked passages alone, ``--rounds`` times each: ``lookup``
(``docs_store().get_many(ids)`` of the ids the contexts hold) and ``scan``
(``read_collection(collection, ids)``, the stream ``--collection`` reads). Prints one line per
timing and a Markdown table of medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_contexts import write_collection, write_run  # noqa: E402

DATASET = "local-bench/docs-store"


class TitledDoc(NamedTuple):
    """A passage of the generated collection, in its column order."""

    doc_id: str
    title: str
    text: str


def register(directory: Path, run_dir: Path, name: str = DATASET) -> None:
    """Register the files of ``directory`` (collection) and ``run_dir`` (topics, qrels) as
    ``name`` in this process."""
    import ir_datasets
    from ir_datasets.formats import TrecQrels, TsvDocs, TsvQueries
    from ir_datasets.util import LocalDownload

    dataset = ir_datasets.Dataset(
        TsvDocs(LocalDownload(directory / "collection.tsv"), TitledDoc),
        TsvQueries(LocalDownload(run_dir / "topics.tsv")),
        TrecQrels(LocalDownload(run_dir / "qrels.trec"), {}),
    )
    ir_datasets.registry.register(name, dataset)


def lookup_and_scan(directory: Path, run_dir: Path, rounds: int) -> tuple[float, float, int]:
    """Median seconds of ``get_many`` on the docs store and of ``read_collection`` for the
    passages of ``run_dir/file.jsonl``, and how many passages that is."""
    from udcg.io.contexts.jsonl import read_contexts
    from udcg.io.formats.collection import read_collection
    from udcg.io.formats.ir_datasets import load_ir_dataset

    name = f"{DATASET}/{directory.name}/{run_dir.name}"
    register(directory, run_dir, name)
    ids = {p.doc_id for c in read_contexts(run_dir / "file.jsonl") for p in c.passages}
    store = load_ir_dataset(name).passages
    lookups, scans = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        found = store(ids)
        lookups.append(time.perf_counter() - started)
        started = time.perf_counter()
        read = read_collection(directory / "collection.tsv", ids)
        scans.append(time.perf_counter() - started)
        assert found == read, "the docs store and the collection disagree"
    return statistics.median(lookups), statistics.median(scans), len(ids)


def child(directory: Path, run_dir: Path, argv: list[str]) -> int:
    """The ``--dataset`` side: register, then ``udcg contexts`` as its console script runs it."""
    register(directory, run_dir)
    from udcg.cli.contexts import main

    return main(argv)


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MiB) and the last stderr line of one child process."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
    if process.returncode != 0:
        raise SystemExit(f"failed ({process.returncode}): {' '.join(command)}\n" + lines[-1])
    return wall, usage.ru_maxrss / 1024, lines[-1] if lines else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passages", type=int, default=2_000_000)
    parser.add_argument("--shapes", default="1000x100,10000x100", help="QUERIESxDEPTH,...")
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=1, help="collections generated (seed 0...)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="write (or reuse) the data in this directory")
    if sys.argv[1:2] == ["--child"]:  # DIRECTORY RUN_DIR, then udcg contexts' arguments
        return child(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:])
    if sys.argv[1:2] == ["--parts"]:  # DIRECTORY RUN_DIR ROUNDS
        found = lookup_and_scan(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]))
        print(json.dumps(found))
        return 0
    args = parser.parse_args()
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes.split(",")]
    results: dict[tuple[int, str, str], list[tuple[float, float]]] = {}
    builds = []
    parts: dict[tuple[int, str], tuple[float, float, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = args.keep or Path(tmp)
        # this script's processes (children too) keep ir_datasets' files under the directory
        os.environ["IR_DATASETS_HOME"] = str(base / "ir_datasets_home")
        for seed in range(args.seeds):
            directory = base / f"seed{seed}"
            directory.mkdir(parents=True, exist_ok=True)
            collection = directory / "collection.tsv"
            rng = np.random.default_rng(seed)
            started = time.perf_counter()
            if not collection.exists():
                write_collection(collection, args.passages, "tsv", rng)
            size = collection.stat().st_size / 2**20
            print(f"seed {seed}: collection {size:.0f} MiB, {args.passages} passages "
                  f"({time.perf_counter() - started:.0f} s)", flush=True)  # fmt: skip
            env = dict(os.environ)
            for shape_index, (queries, depth) in enumerate(shapes):
                run_dir = directory / f"{queries}x{depth}"
                run_dir.mkdir(exist_ok=True)
                if not (run_dir / "run.trec").exists():
                    shape_rng = np.random.default_rng([seed, shape_index])
                    write_run(run_dir, args.passages, queries, depth, shape_rng)
                common = [str(run_dir / "run.trec"), "-k", str(args.k)]
                file_cmd = [
                    sys.executable, "-m", "udcg.cli.contexts", *common,
                    "--topics", str(run_dir / "topics.tsv"), "--collection", str(collection),
                    "--qrels", str(run_dir / "qrels.trec"), "-o", str(run_dir / "file.jsonl"),
                ]  # fmt: skip
                store_cmd = [
                    sys.executable, __file__, "--child", str(directory), str(run_dir), *common,
                    "--dataset", DATASET, "-o", str(run_dir / "store.jsonl"),
                ]  # fmt: skip
                if not Path(f"{collection}.pklz4").exists():
                    wall, rss, _ = timed(store_cmd, env)
                    builds.append((seed, wall, rss))
                    print(f"  build docs store (first --dataset run): {wall:.1f} s, "
                          f"{rss:.0f} MiB", flush=True)  # fmt: skip
                for turn in range(args.rounds):
                    pair = [("file", file_cmd), ("store", store_cmd)]
                    for name, command in pair if turn % 2 == 0 else pair[::-1]:
                        wall, rss, line = timed(command, env)
                        results.setdefault((seed, f"{queries}x{depth}", name), []).append(
                            (wall, rss)
                        )
                        print(f"  {queries}x{depth} {name:5s} {wall:6.2f} s {rss:6.0f} MiB  "
                              f"{line}", flush=True)  # fmt: skip
                same = (run_dir / "file.jsonl").read_bytes() == (
                    run_dir / "store.jsonl"
                ).read_bytes()
                print(f"  {queries}x{depth}: outputs byte-identical: {same}", flush=True)
                if not same:
                    return 1
                # in a child: a parent grown by the scan would raise the children's peak RSS
                # (Linux keeps the high-water mark of resident memory across fork and exec)
                parts_cmd = [sys.executable, __file__, "--parts", str(directory), str(run_dir),
                             str(args.rounds)]  # fmt: skip
                done = subprocess.run(
                    parts_cmd, env=env, capture_output=True, text=True, check=True
                )
                lookup, scan, n = json.loads(done.stdout.splitlines()[-1])
                parts[(seed, f"{queries}x{depth}")] = (lookup, scan, n)
                print(f"  {queries}x{depth}: {n} passages: docs store get_many {lookup:.2f} s, "
                      f"collection scan {scan:.2f} s", flush=True)  # fmt: skip
        print("\n| seed | run (queries x depth) | file: wall s | file: peak MiB | "
              "store: wall s | store: peak MiB | store / file | get_many s | scan s |")  # fmt: skip
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for seed in range(args.seeds):
            for queries, depth in shapes:
                shape = f"{queries}x{depth}"
                file_t = results[(seed, shape, "file")]
                store_t = results[(seed, shape, "store")]
                fw, fr = (statistics.median(v) for v in zip(*file_t, strict=True))
                sw, sr = (statistics.median(v) for v in zip(*store_t, strict=True))
                lookup, scan, _ = parts[(seed, shape)]
                print(f"| {seed} | {queries} x {depth} | {fw:.2f} | {fr:.0f} | {sw:.2f} | "
                      f"{sr:.0f} | {sw / fw:.2f} | {lookup:.2f} | {scan:.2f} |")  # fmt: skip
        for seed, wall, rss in builds:
            print(f"docs store build, seed {seed}: {wall:.1f} s, peak {rss:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
