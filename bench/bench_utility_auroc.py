"""Which utility source separates relevant from irrelevant passages: AUROC on NQ-open.

    HF_HUB_OFFLINE=1 nice -n 10 python bench/bench_utility_auroc.py [--questions 200]

Pairs: the first ``--questions`` NQ-open questions (``../shared/data/nq-open-oracle.jsonl.gz``),
each with its own gold passage (relevant) and the gold passage of the question ``n // 2``
further on, cyclically (irrelevant: another question's passage, never its own). Every pair is
scored by the judge (default: the embedded SmolLM2-135M) through the on-disk cache, once per
utility source:

* ``abstention``: u = 1 - P(abstain), the reference prompt, first-token mode;
* ``answer_likelihood``: u = max over the question's answers of exp(mean token log-prob of the
  answer) teacher-forced after the same prompt.

AUROC of u for relevant (1) vs irrelevant (0) is scikit-learn's ``roc_auc_score``; 95% CIs
are percentile intervals over ``--resamples`` bootstrap resamples of *questions* (a drawn
question brings both of its pairs, as sample weights), the same resamples for both sources, so
the CI of their difference is paired.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

ROOT = Path(__file__).resolve().parents[1]
NQ = ROOT.parent / "shared" / "data" / "nq-open-oracle.jsonl.gz"


def load_pairs(path: Path, n: int) -> tuple[list[str], list[str], list[list[str]], np.ndarray]:
    """(questions, passages, answers, relevant) of 2n pairs: own gold, then another's gold."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        rows = [json.loads(line) for _, line in zip(range(n), handle, strict=False)]
    if len(rows) < n:
        sys.exit(f"{path}: only {len(rows)} questions, {n} asked for")
    questions = [r["question"] for r in rows]
    golds = [r["ctxs"][0]["text"] for r in rows]
    answers = [list(r["answers"]) for r in rows]
    other = [(i + n // 2) % n for i in range(n)]
    relevant = np.r_[np.ones(n), np.zeros(n)]
    return questions * 2, golds + [golds[j] for j in other], answers * 2, relevant


def bootstrap_auroc(
    scores: dict[str, np.ndarray], labels: np.ndarray, groups: np.ndarray, resamples: int, seed: int
) -> dict[str, np.ndarray]:
    """AUROC of each score on ``resamples`` resamples of the groups (same resamples for all)."""
    rng = np.random.default_rng(seed)
    n_groups = int(groups.max()) + 1
    out: dict[str, list[float]] = {name: [] for name in scores}
    for _ in range(resamples):
        counts = np.bincount(rng.integers(0, n_groups, n_groups), minlength=n_groups)
        weights = counts[groups]
        for name, values in scores.items():
            out[name].append(roc_auc_score(labels, values, sample_weight=weights))
    return {name: np.asarray(v) for name, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--judge", default="smollm2-135m")
    parser.add_argument("--cache", help="judge cache (SQLite); default ~/.cache/udcg/judge.sqlite")
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", type=Path, default=NQ)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    from udcg.io.joins.utility_sources import SOURCES
    from udcg.judge import load_judge
    from udcg.judge.cached import CachedJudge

    questions, passages, answers, relevant = load_pairs(args.data, args.questions)
    judge = CachedJudge(load_judge(args.judge), args.cache)
    seconds: dict[str, float] = {}
    probs: dict[str, np.ndarray] = {}
    start = time.perf_counter()
    probs["abstention"] = judge.abstain_prob(questions, passages)
    seconds["abstention"] = time.perf_counter() - start
    start = time.perf_counter()
    probs["answer_likelihood"] = judge.answer_prob(questions, passages, answers)
    seconds["answer_likelihood"] = time.perf_counter() - start
    utilities = {name: SOURCES[name].from_probs(values) for name, values in probs.items()}

    groups = np.r_[np.arange(args.questions), np.arange(args.questions)]
    boot = bootstrap_auroc(utilities, relevant, groups, args.resamples, args.seed)
    results = {}
    for name, u in utilities.items():
        low, high = np.quantile(boot[name], [0.025, 0.975])
        results[name] = {
            "auroc": float(roc_auc_score(relevant, u)),
            "ci95": [float(low), float(high)],
            "mean_u_relevant": float(u[relevant == 1].mean()),
            "mean_u_irrelevant": float(u[relevant == 0].mean()),
            "seconds": round(seconds[name], 1),
        }
    diff = boot["answer_likelihood"] - boot["abstention"]
    point = results["answer_likelihood"]["auroc"] - results["abstention"]["auroc"]
    low, high = np.quantile(diff, [0.025, 0.975])
    summary = {
        "questions": args.questions,
        "pairs": len(questions),
        "judge": judge.name,
        "resamples": args.resamples,
        "sources": results,
        "difference": {"auroc": point, "ci95": [float(low), float(high)]},
        "cache": {"hits": judge.cache.hits, "misses": judge.cache.misses},
    }
    print(
        f"{args.questions} NQ-open questions x (gold, another question's gold) = "
        f"{len(questions)} pairs, judge {judge.name}, {args.resamples} question resamples\n"
    )
    print("| utility source | AUROC | 95% CI | mean u (relevant) | mean u (irrelevant) | s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, r in results.items():
        print(
            f"| {name} | {r['auroc']:.3f} | [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}] | "
            f"{r['mean_u_relevant']:.4f} | {r['mean_u_irrelevant']:.4f} | {r['seconds']} |"
        )
    print(
        f"\nanswer_likelihood - abstention: {point:+.3f} "
        f"[{summary['difference']['ci95'][0]:+.3f}, {summary['difference']['ci95'][1]:+.3f}]"
        f"; cache hits {judge.cache.hits}, misses {judge.cache.misses}"
    )
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
