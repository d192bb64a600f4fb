"""Can judge labels forecast a retriever's end-to-end accuracy without generating its answers?

    HF_HUB_OFFLINE=1 python bench/forecast_transfer.py CONTEXTS.jsonl.gz ... --judge smollm2-135m

Each input holds one retriever's annotated contexts (its ``run`` names it), for instance the
``annotate-*.jsonl.gz`` stage files of an ``evaluate.py -m retriever=bm25,dense,hybrid`` sweep
(its ``cache_dir``). For every target retriever T and every source S (each other retriever, and
all the others pooled), the predictors are fitted on S's contexts and answers of one half of
the questions and forecast T's accuracy on the other half from T's judge labels alone (then the
halves swap), so a forecast never sees T's answers, nor any answer to the questions it
forecasts:

* ``UDCG-theta``: :class:`udcg.UDCGTheta` (penalty ``--l2``) fitted on S, its mean probability
  on T;
* ``UDCG (calibrated)``: UDCG (gamma 1/3) through the one-parameter shift
  ``sigmoid(logit(UDCG) + b)`` (:func:`udcg.theta.calibration.fit_score_calibration`) fitted on
  S;
* ``no change``: the naive forecast, S's measured accuracy on the fitting half.

Each row: forecast, T's measured accuracy on the same questions and their difference, with 95%
intervals from resampling T's questions (``forecast_accuracy``; the fit is held fixed, so the
intervals leave out the fitting noise). Prints a markdown table and the mean absolute forecast
error of each predictor; ``--json`` also writes the rows.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

PREDICTORS = ("UDCG-theta", "UDCG (calibrated)", "no change")


def load(paths: list[Path], judge: str, utility: str) -> dict[str, dict[str, np.ndarray]]:
    """Per run: question ids, relevance, utilities and correctness of its contexts."""
    from udcg.io.contexts.jsonl import correctness, read_contexts, relevance_matrix
    from udcg.io.joins.utility_sources import get_source

    runs: dict[str, dict[str, np.ndarray]] = {}
    for path in paths:
        contexts = list(read_contexts(path))
        name = contexts[0].run or path.name
        if name in runs:
            sys.exit(f"forecast_transfer.py: error: {path}: run {name!r} given twice")
        runs[name] = {
            "qids": np.array([c.qid for c in contexts], dtype=object),
            "relevant": np.stack(relevance_matrix(contexts)),
            "utility": np.stack(get_source(utility).utilities(contexts, judge)),
            "correct": correctness(contexts, judge),
        }
    return runs


def pooled(runs: dict[str, dict[str, np.ndarray]], names: list[str]) -> dict[str, np.ndarray]:
    return {key: np.concatenate([runs[n][key] for n in names]) for key in runs[names[0]]}


def forecast(
    source: dict[str, np.ndarray], target: dict[str, np.ndarray], l2: float, seed: int
) -> dict[str, np.ndarray]:
    """Per predictor, a probability per target context, each half predicted from the source's
    other half."""
    from udcg import metrics
    from udcg.theta import UDCGTheta, split_by_query
    from udcg.theta.calibration import fit_score_calibration

    questions = np.array(sorted(set(target["qids"]) | set(source["qids"])), dtype=object)
    first, second = split_by_query(questions, 0.5, seed)
    out = {name: np.full(len(target["correct"]), np.nan) for name in PREDICTORS}
    for fit_half, apply_half in ((first, second), (second, first)):
        fit = np.isin(source["qids"], questions[fit_half])
        apply = np.isin(target["qids"], questions[apply_half])
        rel, util, correct = source["relevant"][fit], source["utility"][fit], source["correct"][fit]
        model = UDCGTheta(rel.shape[1], l2=l2, val_fraction=0.0, seed=seed)
        model.fit(rel, util, correct, groups=source["qids"][fit])
        t_rel, t_util = target["relevant"][apply], target["utility"][apply]
        out["UDCG-theta"][apply] = model.predict_proba(t_rel, t_util)
        shift = fit_score_calibration(metrics.udcg(rel, util), correct)
        out["UDCG (calibrated)"][apply] = shift.apply(metrics.udcg(t_rel, t_util))
        out["no change"][apply] = correct.mean()
    return out


def rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    from udcg.theta.calibration import forecast_accuracy

    runs = dict(sorted(load(args.contexts, args.judge, args.utility).items()))
    if len(runs) < 2:
        sys.exit("forecast_transfer.py: error: needs the contexts of at least two retrievers")
    table = []
    for target in runs:
        others = [n for n in runs if n != target]
        sources = [] if args.pooled_only else [(n, runs[n], False) for n in others]
        if len(others) > 1:
            sources.append(("+".join(others), pooled(runs, others), True))
        for source_name, source, is_pooled in sources:
            predictions = forecast(source, runs[target], args.l2, args.seed)
            for predictor, prob in predictions.items():
                result = forecast_accuracy(
                    prob,
                    runs[target]["correct"],
                    n_resamples=args.bootstrap,
                    seed=args.seed,
                    groups=runs[target]["qids"],
                )
                table.append(
                    {
                        "target": target,
                        "source": source_name,
                        "pooled": is_pooled,
                        "predictor": predictor,
                        **result,
                    }
                )
    return table


def markdown(table: list[dict[str, Any]]) -> str:
    def ci(row: dict[str, Any], name: str) -> str:
        low, high = row[f"{name}_ci"]
        return f"{row[name]:.3f} [{low:.3f}, {high:.3f}]"

    lines = [
        "| target | fitted on | predictor | forecast [95% CI] | measured [95% CI] "
        "| difference [95% CI] |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in table:
        difference = row["difference"]
        low, high = row["difference_ci"]
        lines.append(
            f"| {row['target']} | {row['source']} | {row['predictor']} | {ci(row, 'forecast')} "
            f"| {ci(row, 'measured')} | {difference:+.3f} [{low:+.3f}, {high:+.3f}] |"
        )
    lines.append("")
    for what, pooled_rows in (("one other retriever", False), ("the others pooled", True)):
        kept = [r for r in table if r["pooled"] == pooled_rows]
        if kept:
            errors = {
                p: np.mean([abs(r["difference"]) for r in kept if r["predictor"] == p])
                for p in PREDICTORS
            }
            lines.append(
                f"Mean absolute forecast error, fitted on {what} ({len(kept) // 3} forecasts): "
                + ", ".join(f"{p} {e:.3f}" for p, e in errors.items())
                + "  "
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("contexts", nargs="+", type=Path, help="annotated contexts, one run each")
    parser.add_argument("--judge", default="smollm2-135m", help="key of the judge's labels")
    parser.add_argument("--utility", default="abstention", help="utility source")
    parser.add_argument("--l2", type=float, default=0.01, help="UDCG-theta's penalty")
    parser.add_argument("--bootstrap", type=int, default=1000, help="resamples of questions")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--pooled-only", action="store_true", help="fit on all the other retrievers only"
    )
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    table = rows(args)
    print(markdown(table))
    if args.json:
        args.json.write_text(json.dumps(table, indent=1) + "\n")


if __name__ == "__main__":
    main()
