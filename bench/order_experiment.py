"""Does ordering the context by UDCG-theta help the LLM answer? NQ-open, k = 5 of the top 10.

    HF_HUB_OFFLINE=1 python bench/order_experiment.py --stage labels   # judge labels, answers
    HF_HUB_OFFLINE=1 python bench/order_experiment.py --stage orders   # every ordering, report

Questions: the first ``--questions`` (300) of ``../shared/data/nq-open-oracle.jsonl.gz``;
corpus = every gold passage of the file (as ``evaluate.py dataset=nq_open``); candidates = the
top ``--candidates`` (10) passages of BM25 and of dense retrieval; relevance = answer match.
The embedded SmolLM2-135M is judge (abstention utilities u = 1 - P(NO-RESPONSE) of every
candidate) and generator (16 new tokens, graded by normalised sub-span match), exactly as
``evaluate.py`` asks it, so both share the judge cache (``--out``/judge.sqlite).

Orderings of a context of k = 5 passages, per question:

* ``retriever``: the top 5 as ranked; ``reversed``: the top 5, best last;
* ``ends``: the top 5 with the best at both ends (lost in the middle: ranks 1, 3, 5 from the
  front, 2, 4 from the back);
* ``gold_first``: oracle: answer-bearing candidates of the top 10 first, then the others, each
  in retriever order;
* ``theta``: the 5 of the top 10 and their order that maximise UDCG-theta
  (:meth:`udcg.UDCGTheta.best_context`, a linear assignment), with weights cross-fitted: fitted
  on the retriever-order contexts of one half of the questions (both retrievers pooled), applied
  to the other half, and the other way round. ``--fit-on shuffled`` also answers a random order
  of each question's top 5 (``shuffled``, reported too) and fits on both kinds of context.

Report: accuracy of every ordering, the paired difference with retriever order (95% CI from
``--bootstrap`` resamples of questions), the mean UDCG-theta probability of its contexts; and the
calibration of the cross-fitted UDCG-theta on retriever-order contexts (Brier, ECE with CIs, a
reliability diagram). ``--stage orders`` writes the report after each ordering, so a partial run
already reports what it has; every judge call is cached, so a killed run resumes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

NQ = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "nq-open-oracle.jsonl.gz"
RETRIEVERS = ("bm25", "dense")
ORDERINGS = ("retriever", "theta", "ends", "gold_first", "reversed")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def candidates(args: argparse.Namespace, names: list[str]) -> dict[str, list]:
    """Per retriever, one context of the top ``--candidates`` passages per question (cached)."""
    from udcg.io.contexts.jsonl import read_contexts, write_contexts
    from udcg.pipeline.datasets import nq_open
    from udcg.pipeline.stages import retrieve_contexts
    from udcg.retrieval import BM25Retriever, DenseRetriever

    out = {}
    dataset = None
    for name in names:
        path = args.out / f"candidates_{name}.jsonl"
        if not path.exists():
            if dataset is None:
                dataset = nq_open(args.nq, limit=args.questions)
            retriever = BM25Retriever() if name == "bm25" else DenseRetriever()
            log(f"retrieving the top {args.candidates} with {name}")
            write_contexts(path, retrieve_contexts(dataset, name, retriever, args.candidates))
        out[name] = list(read_contexts(path))
    return out


def judge(args: argparse.Namespace):
    from udcg.judge import open_judge

    return open_judge("smollm2-135m", cache=args.out / "judge.sqlite")


def labelled(args: argparse.Namespace, judge_, names: list[str]) -> dict[str, list]:
    """Candidates with abstention probabilities (relevance comes from retrieval)."""
    from udcg.labels.annotate import annotate

    out = {}
    for name, contexts in candidates(args, names).items():
        log(f"abstention labels of the {name} candidates")
        out[name], _ = annotate(contexts, judge_, steps=["abstain"])
    return out


def arrays(contexts: list, judge_name: str) -> tuple[np.ndarray, np.ndarray]:
    """Relevance and utility ``[n, m]`` of the candidates (u = 1 - P(abstain))."""
    rel = np.array([[float(bool(p.relevant)) for p in c.passages] for c in contexts])
    u = np.array([[1.0 - p.abstain_prob[judge_name] for p in c.passages] for c in contexts])
    return rel, u


def reorder(contexts: list, picks: list[np.ndarray], run: str) -> list:
    from dataclasses import replace

    return [
        replace(c, passages=[c.passages[int(i)] for i in pick], run=run, outcomes={})
        for c, pick in zip(contexts, picks, strict=True)
    ]


def answered(args: argparse.Namespace, judge_, contexts: list) -> np.ndarray:
    """Correctness of the judge's answer from each context (cached)."""
    from udcg.labels.annotate import annotate

    done, _ = annotate(contexts, judge_, steps=["outcomes"], max_new_tokens=16)
    return np.array([bool(c.outcomes[judge_.name].get("correct")) for c in done])


def halves(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[: n // 2]), np.sort(order[n // 2 :])


def fit_crossfit(args, rel, u, training) -> tuple[list, np.ndarray]:
    """UDCG-theta fitted on the training contexts of each half of the questions (both
    retrievers pooled; ``training[name]`` is a list of ``(picks, correct)``, one per ordering
    fitted on): (models, half index of every question)."""
    from udcg.theta import UDCGTheta

    a, b = halves(len(next(iter(rel.values()))), args.seed)
    side = np.zeros(len(a) + len(b), dtype=int)
    side[b] = 1
    models = []
    for fit in (a, b):
        r, x, y = [], [], []
        for name in RETRIEVERS:
            for picks, correct in training[name]:
                idx = np.stack([picks[q] for q in fit])
                r.append(np.take_along_axis(rel[name][fit], idx, axis=1))
                x.append(np.take_along_axis(u[name][fit], idx, axis=1))
                y.append(correct[fit])
        model = UDCGTheta(args.k, bias=True, l2=args.l2, val_fraction=0.0, seed=args.seed)
        models.append(model.fit(np.concatenate(r), np.concatenate(x), np.concatenate(y)))
    return models, side


def paired_ci(x: np.ndarray, y: np.ndarray, n: int, seed: int) -> tuple[float, float, float]:
    """Mean of x - y with a 95% percentile bootstrap CI over questions."""
    d = x.astype(float) - y.astype(float)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(n, len(d)))].mean(axis=1)
    return float(d.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def orders(args: argparse.Namespace) -> None:
    from udcg.theta.calibration import (
        bootstrap_ci,
        brier_score,
        expected_calibration_error,
        plot_reliability,
        reliability_table,
    )
    from udcg.theta.ordering import ends_order, gold_first_order, retriever_order, reversed_order

    judge_ = judge(args)
    cands = labelled(args, judge_, list(RETRIEVERS))
    rel, u = {}, {}
    for name in RETRIEVERS:
        rel[name], u[name] = arrays(cands[name], judge_.name)
    n, m = rel[RETRIEVERS[0]].shape
    picks: dict[str, dict[str, list[np.ndarray]]] = {name: {} for name in RETRIEVERS}
    correct: dict[str, dict[str, np.ndarray]] = {name: {} for name in RETRIEVERS}
    for name in RETRIEVERS:
        picks[name]["retriever"] = [retriever_order(m, args.k) for _ in range(n)]
        log(f"answers from the {name} retriever-order contexts")
        contexts = reorder(cands[name], picks[name]["retriever"], f"{name}-retriever")
        correct[name]["retriever"] = answered(args, judge_, contexts)
    training = {
        name: [(picks[name]["retriever"], correct[name]["retriever"])] for name in RETRIEVERS
    }
    if args.fit_on == "shuffled":  # and a random order of the same top k per question
        rng = np.random.default_rng(args.seed + 1)
        for name in RETRIEVERS:
            picks[name]["shuffled"] = [rng.permutation(args.k) for _ in range(n)]
            log(f"answers from the {name} shuffled contexts")
            contexts = reorder(cands[name], picks[name]["shuffled"], f"{name}-shuffled")
            correct[name]["shuffled"] = answered(args, judge_, contexts)
            training[name].append((picks[name]["shuffled"], correct[name]["shuffled"]))
    models, side = fit_crossfit(args, rel, u, training)
    report: dict = {
        "fit_on": args.fit_on,
        "questions": int(n),
        "candidates": int(m),
        "k": args.k,
        "bootstrap": args.bootstrap,
        "l2": args.l2,
        "theta": [
            {"alpha": md.alpha_.tolist(), "beta": md.beta_.tolist(), "bias": md.intercept_}
            for md in models
        ],
        "orderings": {name: {} for name in args.retrievers},
    }

    def theta_prob(name: str, pick: list[np.ndarray]) -> np.ndarray:
        """Held-out UDCG-theta probability of each question's context."""
        out = np.empty(n)
        for q in range(n):
            idx = np.asarray(pick[q], dtype=int)
            out[q] = models[1 - side[q]].predict_proba(
                rel[name][q, idx][None, :], u[name][q, idx][None, :]
            )[0]
        return out

    def build(name: str, ordering: str) -> list[np.ndarray]:
        if ordering == "reversed":
            return [reversed_order(m, args.k) for _ in range(n)]
        if ordering == "ends":
            return [ends_order(m, args.k) for _ in range(n)]
        if ordering == "gold_first":
            return [gold_first_order(rel[name][q], args.k) for q in range(n)]
        return [
            models[1 - side[q]].best_context(rel[name][q], u[name][q], args.k)[0] for q in range(n)
        ]

    # calibration of the held-out UDCG-theta on the retriever-order contexts
    calibration = {}
    tables = {}
    for name in RETRIEVERS:
        prob = theta_prob(name, picks[name]["retriever"])
        y = correct[name]["retriever"].astype(float)
        calibration[name] = {
            "brier": bootstrap_ci(brier_score, prob, y, n_resamples=args.bootstrap, seed=args.seed),
            "ece": bootstrap_ci(
                expected_calibration_error, prob, y, n_resamples=args.bootstrap, seed=args.seed
            ),
            "forecast": float(prob.mean()),
            "measured": float(y.mean()),
        }
        tables[f"UDCG-theta, {name}"] = reliability_table(prob, y)
    report["calibration"] = calibration
    plot_reliability(tables, args.out / f"{stem(args, 'reliability')}.png")

    fitted_orders = ("shuffled",) if args.fit_on == "shuffled" else ()
    for ordering in ORDERINGS + fitted_orders:
        for name in args.retrievers:
            if ordering not in ("retriever", *fitted_orders):
                picks[name][ordering] = build(name, ordering)
                log(f"answers from the {name} {ordering} contexts")
                contexts = reorder(cands[name], picks[name][ordering], f"{name}-{ordering}")
                correct[name][ordering] = answered(args, judge_, contexts)
            y = correct[name][ordering]
            base = correct[name]["retriever"]
            diff = paired_ci(y, base, args.bootstrap, args.seed)
            same = sum(
                np.array_equal(a, b)
                for a, b in zip(picks[name][ordering], picks[name]["retriever"], strict=True)
            )
            report["orderings"][name][ordering] = {
                "accuracy": float(y.mean()),
                "diff_vs_retriever": diff,
                "theta_prob": float(theta_prob(name, picks[name][ordering]).mean()),
                "same_as_retriever": int(same),
                "gold_in_context": float(
                    np.mean([rel[name][q, picks[name][ordering][q]].any() for q in range(n)])
                ),
            }
        write(args, report)


def stem(args: argparse.Namespace, name: str) -> str:
    """``name`` of an output file, with the retriever (one only) and ``--fit-on shuffled``."""
    if len(args.retrievers) < len(RETRIEVERS):
        name += f"-{args.retrievers[0]}"
    return name if args.fit_on == "retriever" else f"{name}-{args.fit_on}"


def write(args: argparse.Namespace, report: dict) -> None:
    out = stem(args, "report")
    (args.out / f"{out}.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        f"NQ-open, {report['questions']} questions, k = {report['k']} of the top "
        f"{report['candidates']}; paired 95% CIs from {report['bootstrap']} bootstrap "
        "resamples of questions",
        "",
        "| retriever | ordering | accuracy | vs retriever order [95% CI] | mean UDCG-theta "
        "| same as retriever order | gold in context |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, rows in report["orderings"].items():
        for ordering, row in rows.items():
            d, lo, hi = row["diff_vs_retriever"]
            lines.append(
                f"| {name} | {ordering} | {row['accuracy']:.3f} | {d:+.3f} [{lo:+.3f}, {hi:+.3f}] "
                f"| {row['theta_prob']:.3f} | {row['same_as_retriever']} "
                f"| {row['gold_in_context']:.2f} |"
            )
    lines += ["", "| retriever | Brier [95% CI] | ECE [95% CI] | forecast | measured |"]
    lines.append("| --- | ---: | ---: | ---: | ---: |")
    for name, row in report["calibration"].items():
        b, e = row["brier"], row["ece"]
        lines.append(
            f"| {name} | {b[0]:.3f} [{b[1]:.3f}, {b[2]:.3f}] | {e[0]:.3f} [{e[1]:.3f}, "
            f"{e[2]:.3f}] | {row['forecast']:.3f} | {row['measured']:.3f} |"
        )
    (args.out / f"{out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", choices=["labels", "orders"], default="orders")
    parser.add_argument("--nq", type=Path, default=NQ)
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument("--candidates", type=int, default=10)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--l2",
        type=float,
        default=0.01,
        help="L2 penalty of the UDCG-theta fits (default 0.01; unpenalised fits diverge when "
        "the judge's utilities are nearly all 1)",
    )
    parser.add_argument(
        "--fit-on",
        choices=["retriever", "shuffled"],
        default="retriever",
        help="orders: fit UDCG-theta on the retriever-order contexts, or on those and a random "
        "order of the same top k per question (answered too; outputs get a -shuffled suffix)",
    )
    parser.add_argument("--out", type=Path, default=Path("bench/data/order"))
    parser.add_argument(
        "--retrievers",
        nargs="+",
        choices=RETRIEVERS,
        default=list(RETRIEVERS),
        help="labels: label and answer these only (run one process per retriever on a free "
        "core); orders: generate these orderings only (the fit reads both from the cache)",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.stage == "labels":
        judge_ = judge(args)
        cands = labelled(args, judge_, args.retrievers)
        for name in args.retrievers:
            m = len(cands[name][0].passages)
            pick = [np.arange(min(args.k, m))] * len(cands[name])
            log(f"answers from the {name} retriever-order contexts")
            answered(args, judge_, reorder(cands[name], pick, f"{name}-retriever"))
        log("labels done")
    else:
        orders(args)


if __name__ == "__main__":
    main()
