"""Whole-process time and peak memory of ``udcg contexts`` on a large synthetic collection.

    python bench/bench_contexts.py                      # 2,000,000 passages, 10,000 x 100 run
    python bench/bench_contexts.py --passages 200000 --queries 1000 --format jsonl --keep DIR

Writes into a temporary directory (``--keep DIR``: there, and reused when already present):

* a collection of ``--passages`` passages of 40-60 words drawn from a 20,000-word vocabulary,
  TSV ``doc_id<TAB>title<TAB>text`` or JSONL ``{"id", "title", "text"}`` (``--format``);
* a run of ``--queries`` queries x ``--depth`` documents drawn from the whole collection, one
  decimal scores (many ties), topics (TSV) and qrels (3 judgements per query).

Then runs ``python -m udcg.cli.contexts RUN --topics --collection --qrels --k --out`` once as a
child process and reports its wall time and peak resident memory (``getrusage`` of the
children), the input sizes, and checks the output with ``read_contexts``. Exit status 1 when
the peak is over ``--max-rss-mib`` (default 1024).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 50_000


def _vocabulary(rng: np.random.Generator, size: int = 20_000) -> list[str]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    lengths = rng.integers(2, 10, size=size)
    return ["".join(rng.choice(letters, size=n)) for n in lengths]


def write_collection(path: Path, n: int, fmt: str, rng: np.random.Generator) -> None:
    """``n`` passages d0..d{n-1} of 40-60 random words and a 2-4 word title."""
    words = _vocabulary(rng)
    with open(path, "w", encoding="utf-8") as out:
        for start in range(0, n, CHUNK):
            size = min(CHUNK, n - start)
            lengths = rng.integers(40, 61, size=size)
            picks = rng.integers(0, len(words), size=int(lengths.sum()) + 4 * size)
            at = 0
            for i, length in enumerate(lengths.tolist(), start=start):
                text = " ".join([words[w] for w in picks[at : at + length]])
                title = " ".join([words[w] for w in picks[at + length : at + length + 2 + i % 3]])
                at += length + 4
                if fmt == "jsonl":
                    out.write(json.dumps({"id": f"d{i}", "title": title, "text": text}) + "\n")
                else:
                    out.write(f"d{i}\t{title}\t{text}\n")


def write_run(directory: Path, passages: int, queries: int, depth: int, rng) -> None:
    """``run.trec``, ``topics.tsv`` and ``qrels.trec`` under ``directory``."""
    with (
        open(directory / "run.trec", "w") as run,
        open(directory / "topics.tsv", "w") as topics,
        open(directory / "qrels.trec", "w") as qrels,
    ):
        for q in range(queries):
            docs = rng.choice(passages, size=depth, replace=False)
            scores = np.sort(np.round(rng.normal(10.0, 1.0, size=depth), 1))[::-1]
            run.writelines(
                f"q{q} Q0 d{d} {rank} {s:.1f} bench\n"
                for rank, (d, s) in enumerate(
                    zip(docs.tolist(), scores.tolist(), strict=True), start=1
                )
            )
            topics.write(f"q{q}\tsynthetic question number {q}\n")
            qrels.writelines(
                f"q{q} 0 d{d} 1\n" for d in docs[rng.choice(depth, 3, replace=False)].tolist()
            )


def _mib(path: Path) -> float:
    return path.stat().st_size / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passages", type=int, default=2_000_000)
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--format", choices=["tsv", "jsonl"], default="tsv")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, help="write (or reuse) the data in this directory")
    parser.add_argument("--max-rss-mib", type=float, default=1024.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.keep or Path(tmp)
        directory.mkdir(parents=True, exist_ok=True)
        collection = directory / f"collection.{args.format}"
        rng = np.random.default_rng(args.seed)
        started = time.perf_counter()
        if not collection.exists():
            write_collection(collection, args.passages, args.format, rng)
        if not (directory / "run.trec").exists():
            write_run(directory, args.passages, args.queries, args.depth, rng)
        print(
            f"data: collection {_mib(collection):.0f} MiB ({args.passages} passages, "
            f"{args.format}), run {_mib(directory / 'run.trec'):.0f} MiB ({args.queries} x "
            f"{args.depth}); written in {time.perf_counter() - started:.0f} s"
        )
        out = directory / "contexts.jsonl"
        command = [
            sys.executable,
            "-m",
            "udcg.cli.contexts",
            str(directory / "run.trec"),
            "--topics",
            str(directory / "topics.tsv"),
            "--collection",
            str(collection),
            "--qrels",
            str(directory / "qrels.trec"),
            "-k",
            str(args.k),
            "--out",
            str(out),
        ]
        print("$", " ".join(command), flush=True)
        started = time.perf_counter()
        subprocess.run(command, check=True, cwd=ROOT)
        wall = time.perf_counter() - started
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux
        sys.path.insert(0, str(ROOT))
        from udcg.io.contexts.jsonl import read_contexts

        contexts = sum(1 for _ in read_contexts(out))
        print(
            f"udcg contexts: {wall:.1f} s wall, peak RSS {peak:.0f} MiB; output {contexts} "
            f"contexts, {_mib(out):.0f} MiB"
        )
        ok = peak < args.max_rss_mib and contexts == args.queries
        print(f"{'PASS' if ok else 'FAIL'}: peak under {args.max_rss_mib:.0f} MiB")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
