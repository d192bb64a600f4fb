"""UDCG's Table 1 (weak vs hard distractors) and Table 2 (top k of the top 25 by relevance,
utility or eRAG) on NQ-open with the embedded judge (:mod:`udcg.pipeline.paper_tables`).

    python bench/udcg_tables.py distractors --limit 100 -k 5 -o bench/data/udcg_tables
    python bench/udcg_tables.py selection --limit 100 -k 5 --candidates 25 -o bench/data/udcg_tables

Writes ``OUT/<study>.json`` (every number, the command, the settings) and ``OUT/<study>.md``.
Stage outputs go to ``--cache-dir`` and judge calls to the shared judge cache, so a rerun or
an interrupted run recomputes nothing it already has.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from udcg.pipeline.benchmark import connect_judge
from udcg.pipeline.datasets import nq_open
from udcg.pipeline.paper_tables import (
    OUTCOME_COLUMNS,
    compare_conditions,
    distractor_study,
    markdown,
    selection_study,
)
from udcg.pipeline.settings import EvaluateSettings
from udcg.pipeline.stages import StageCache
from udcg.retrieval import BM25Retriever

NQ = Path(__file__).resolve().parents[2] / "shared" / "data" / "nq-open-oracle.jsonl.gz"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="UDCG's Table 1 and Table 2 on NQ-open.")
    parser.add_argument("study", choices=("distractors", "selection"))
    parser.add_argument("--data", type=Path, default=NQ, help="the NQ-open oracle file")
    parser.add_argument("--limit", type=int, default=100, help="first N questions")
    parser.add_argument("-k", type=int, default=5, help="passages per context")
    parser.add_argument("--candidates", type=int, default=25, help="selection: top-N pool")
    parser.add_argument("--judge", default="smollm2-135m", help="judge spec")
    parser.add_argument(
        "--utility", default="abstention", help="utility source: abstention | answer_likelihood"
    )
    parser.add_argument("--n-bootstrap", type=int, default=1000, help="bootstrap resamples")
    parser.add_argument("--seed", type=int, default=0, help="random distractors, bootstrap")
    parser.add_argument(
        "--no-erag",
        action="store_true",
        help="distractors: no eRAG labels (saves k generations per question)",
    )
    parser.add_argument("--cache-dir", type=Path, default=Path("outputs/udcg_tables/cache"))
    parser.add_argument("-o", "--out", type=Path, default=Path("outputs/udcg_tables"))
    args = parser.parse_args(argv)

    started = time.time()
    settings = EvaluateSettings(
        k=args.k,
        judge=args.judge,
        utility=args.utility,
        seed=args.seed,
        n_bootstrap=args.n_bootstrap,
        cache_dir=args.cache_dir,
    )
    dataset = nq_open(args.data, limit=args.limit)
    judge = connect_judge(settings)
    cache = StageCache(args.cache_dir)
    if args.study == "distractors":
        conditions = distractor_study(
            dataset, BM25Retriever(), settings, judge, cache, erag=not args.no_erag
        )
        reference = "weak"
    else:
        conditions = selection_study(
            dataset, BM25Retriever(), settings, judge, cache, args.candidates, name="bm25"
        )
        reference = "bm25"
    result = compare_conditions(
        conditions,
        args.k,
        settings.judge_key,
        settings.utility,
        reference,
        args.n_bootstrap,
        args.seed,
    )
    result["command"] = shlex.join(["python", "bench/udcg_tables.py", *(argv or sys.argv[1:])])
    result["seconds"] = round(time.time() - started, 1)
    result["judge_cache"] = judge.cache.stats()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.study}.json").write_text(json.dumps(result, indent=2) + "\n")
    columns = None if args.study == "distractors" else list(OUTCOME_COLUMNS)
    table = markdown(result, columns)
    (args.out / f"{args.study}.md").write_text(f"    {result['command']}\n\n{table}\n")
    print(table)
    print(f"{result['n_questions']} questions, {result['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
