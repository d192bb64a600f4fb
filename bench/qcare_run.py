"""Q-CARE end to end with the embedded judge, offline: answers, labels, metrics, call counts.

    HF_HUB_OFFLINE=1 nice -n 10 python bench/qcare_run.py demo --questions 10 --k 3
    HF_HUB_OFFLINE=1 nice -n 10 python bench/qcare_run.py nq --questions 50 --k 3

``demo``: the contexts of k passages of the first ``--questions`` questions of the embedded
demo set (answers already in ``outcomes[smollm2-135m]``). ``nq``: the first ``--questions``
questions of ../shared/data/nq-open-oracle.jsonl.gz, each with its gold passage at a seeded
random position among k - 1 BM25 distractors drawn from the gold passages of the other
questions in the same file; the judge then answers from each context (``udcg.labels.annotate``
outcomes step). Every call goes through the judge cache (``--cache``), so a rerun resumes.
Prints the labelling report (label, fallback and judge-call counts next to the reference
pipeline's count for the same inputs) and the metric means; writes the labelled contexts to
``--out``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

import numpy as np

from udcg.cli.qcare import format_report, format_scores
from udcg.io.contexts.jsonl import Context, Passage, read_contexts, write_contexts
from udcg.judge import EMBEDDED, load_judge
from udcg.judge.cached import CachedJudge
from udcg.labels.annotate import annotate
from udcg.qcare import label_contexts, qcare_scores

ROOT = Path(__file__).resolve().parents[1]
NQ = ROOT.parent / "shared" / "data" / "nq-open-oracle.jsonl.gz"
DEMO = ROOT / "udcg" / "data" / "demo.jsonl.gz"


def demo_contexts(n_questions: int, k: int) -> list[Context]:
    """The demo contexts with k passages of the first ``n_questions`` questions."""
    chosen: list[str] = []
    out = []
    for ctx in read_contexts(DEMO):
        if len(ctx.passages) != k:
            continue
        if ctx.qid not in chosen:
            if len(chosen) == n_questions:
                continue
            chosen.append(ctx.qid)
        out.append(ctx)
    return out


def nq_contexts(n_questions: int, k: int, seed: int) -> list[Context]:
    """Gold passage plus k - 1 BM25 distractors (other questions' gold passages)."""
    import bm25s

    with gzip.open(NQ, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    corpus = [f"{r['ctxs'][0]['title']}\n{r['ctxs'][0]['text']}" for r in rows]
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize(corpus, stopwords="en", show_progress=False), show_progress=False
    )
    queries = [r["question"] for r in rows[:n_questions]]
    found, _ = retriever.retrieve(
        bm25s.tokenize(queries, stopwords="en", show_progress=False), k=k + 1, show_progress=False
    )
    rng = np.random.default_rng(seed)
    out = []
    for i, row in enumerate(rows[:n_questions]):
        distractors = [int(j) for j in found[i] if int(j) != i][: k - 1]
        docs = [i, *distractors]
        order = rng.permutation(k)
        passages = [
            Passage(doc_id=f"nq-{docs[j]}", text=corpus[docs[j]], relevant=j == 0) for j in order
        ]
        out.append(
            Context(
                f"nq-{i}",
                passages,
                run="bm25+gold",
                question=row["question"],
                answers=row["answers"],
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", choices=["demo", "nq"])
    parser.add_argument("--questions", type=int, default=10)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--retries", type=int, default=2, help="retries of malformed output")
    parser.add_argument("--cache", default=None, help="judge cache (SQLite)")
    parser.add_argument("--out", default=None, help="labelled contexts JSONL")
    args = parser.parse_args()

    start = time.perf_counter()
    judge = CachedJudge(load_judge(EMBEDDED), args.cache)
    if args.data == "demo":
        contexts = demo_contexts(args.questions, args.k)
    else:
        contexts = nq_contexts(args.questions, args.k, args.seed)
        contexts, _ = annotate(contexts, judge, steps=["outcomes"])
    answered = time.perf_counter()
    labelled, report = label_contexts(
        contexts, judge, answers_from=judge.name, retries=args.retries
    )
    done = time.perf_counter()
    if args.out:
        write_contexts(args.out, labelled)
    print(f"{args.data}: {len(contexts)} contexts of k={args.k}, judge {judge.name}")
    print(format_report(report, judge.name))
    print(
        f"judge calls per question: {report.judge_calls / report.questions:.1f} "
        f"(reference {report.reference_calls / report.questions:.1f})"
    )
    print(f"cache hits {judge.cache.hits}, misses {judge.cache.misses}")
    print(f"time: answers {answered - start:.0f} s, labels {done - answered:.0f} s")
    print(format_scores(qcare_scores(labelled, judge.name)))


if __name__ == "__main__":
    main()
