"""Write a synthetic TREC run and qrels with many score ties and missing judgements.

    python bench/make_trec_data.py --queries 10000 --depth 100 --out bench/data

Scores are rounded to one decimal so about a third of the ranked pairs are tied; about half
the judged documents are not retrieved, a third of retrieved documents are unjudged, and 5% of
the queries have no judgements at all.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def write_files(out: Path, n_queries: int, depth: int, seed: int = 0) -> tuple[Path, Path]:
    """Write ``run.trec`` and ``qrels.trec`` under ``out``; return their paths."""
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    run_path, qrels_path = out / "run.trec", out / "qrels.trec"
    corpus = 50 * depth
    with open(run_path, "w") as run, open(qrels_path, "w") as qrels:
        for q in range(n_queries):
            qid = f"q{q}"
            docs = rng.choice(corpus, size=depth, replace=False)
            scores = np.round(rng.normal(10.0, 1.0, size=depth), 1)
            order = np.argsort(-scores, kind="stable")
            run.writelines(
                f"{qid} Q0 d{docs[i]} {rank + 1} {scores[i]:.1f} bench\n"
                for rank, i in enumerate(order)
            )
            if rng.random() < 0.05:
                continue
            judged = np.concatenate(
                [
                    rng.choice(docs, size=2 * depth // 3, replace=False),
                    rng.choice(corpus, size=depth // 2, replace=False) + corpus,
                ]
            )
            grades = rng.choice(4, size=len(judged), p=[0.6, 0.2, 0.15, 0.05])
            qrels.writelines(f"{qid} 0 d{d} {g}\n" for d, g in zip(judged, grades, strict=True))
    return run_path, qrels_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("bench/data"))
    args = parser.parse_args()
    run, qrels = write_files(args.out, args.queries, args.depth, args.seed)
    print(f"wrote {run} and {qrels}")


if __name__ == "__main__":
    main()
