"""Write a synthetic TREC run and qrels with score ties and missing judgements.

    python bench/make_trec_data.py --queries 10000 --depth 100 --out bench/data
    python bench/make_trec_data.py --queries 100000 --depth 10 --ties many --seed 1 --out DIR
    python bench/make_trec_data.py --queries 10000 --depth 100 --judged 20 --out DIR

``--ties`` sets how often documents of a query share a score: ``some`` (the default) rounds
normal scores to one decimal (at depth 100, 88% of the documents share their score with
another); ``few`` keeps four decimals (0.3% at depth 100, 2.7% at depth 1000); ``many`` draws
every score from the five values 0-4. The run is written ranked, as retrieval systems write
runs: by query, scores descending, tied documents in random order. A query has 7/6 x depth
judged documents unless ``--judged`` gives their number; 4 in 7 of them are retrieved (by
default two thirds of the retrieved documents), the others not, and 5% of the queries have no
judgements at all.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

#: ties -> decimals of the written scores
TIES = {"some": 1, "few": 4, "many": 0}


def _scores(rng: np.random.Generator, depth: int, ties: str) -> np.ndarray:
    if ties == "many":
        return rng.integers(0, 5, size=depth).astype(np.float64)
    return np.round(rng.normal(10.0, 1.0, size=depth), TIES[ties])


def write_files(
    out: Path,
    n_queries: int,
    depth: int,
    seed: int = 0,
    ties: str = "some",
    judged: int | None = None,
) -> tuple[Path, Path]:
    """Write ``run.trec`` and ``qrels.trec`` under ``out``; return their paths. ``judged``:
    judgements per query (default 7/6 x ``depth``), 4 in 7 of them on retrieved documents."""
    if ties not in TIES:
        raise ValueError(f"ties must be one of {', '.join(TIES)}, got {ties!r}")
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    run_path, qrels_path = out / "run.trec", out / "qrels.trec"
    corpus = 50 * depth
    decimals = TIES[ties]
    if judged is None:
        retrieved, unretrieved = 2 * depth // 3, depth // 2
    else:
        retrieved = min(4 * judged // 7, depth)
        unretrieved = judged - retrieved
    with open(run_path, "w") as run, open(qrels_path, "w") as qrels:
        for q in range(n_queries):
            qid = f"q{q}"
            docs = rng.choice(corpus, size=depth, replace=False)
            scores = _scores(rng, depth, ties)
            order = np.argsort(-scores, kind="stable")
            run.writelines(
                f"{qid} Q0 d{docs[i]} {rank + 1} {scores[i]:.{decimals}f} bench\n"
                for rank, i in enumerate(order)
            )
            if rng.random() < 0.05:
                continue
            judged_docs = np.concatenate(
                [
                    rng.choice(docs, size=retrieved, replace=False),
                    rng.choice(corpus, size=unretrieved, replace=False) + corpus,
                ]
            )
            grades = rng.choice(4, size=len(judged_docs), p=[0.6, 0.2, 0.15, 0.05])
            qrels.writelines(
                f"{qid} 0 d{d} {g}\n" for d, g in zip(judged_docs, grades, strict=True)
            )
    return run_path, qrels_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ties", choices=list(TIES), default="some")
    parser.add_argument("--judged", type=int, help="judgements per query (default 7/6 x depth)")
    parser.add_argument("--out", type=Path, default=Path("bench/data"))
    args = parser.parse_args()
    run, qrels = write_files(args.out, args.queries, args.depth, args.seed, args.ties, args.judged)
    print(f"wrote {run} and {qrels}")


if __name__ == "__main__":
    main()
