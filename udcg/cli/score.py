"""``udcg score CONTEXTS.jsonl --judge J [--utility SOURCE] [--weights DIR_OR_FILE]
[--mode MODE] [--allow-mismatch FIELD]... [-o F.jsonl]``.

Scores each retrieved context with UDCG (at ``--gamma``), UDCG-theta (with fitted weights, for
contexts of the weights' k; also ``UDCG-theta (recalibrated)`` when the weights carry a
calibration) and nDCG, MAP, MRR, Precision; prints the means (a run's mean UDCG-theta is the
accuracy the weights forecast for it, from judge labels alone) and, with
``--out``, writes one JSON line per context (``--out -``: to standard output, the means then
to stderr). ``-`` as CONTEXTS reads standard input. ``--judge`` takes the spec the contexts
were annotated with (labels are read under its key, :func:`udcg.judge.judge_key`) or the key
itself; ``--judge-key`` names the key outright. Where the contexts' manifest records which judge
made the values read (:func:`udcg.io.manifests.values_made_by`), a ``precomputed:FILE`` spec
whose file is another (its fingerprint is the file's digest) is refused in one line: its key is
the same, its values are not these. ``--utility`` picks the utility source (see
:mod:`udcg.io.joins.utility_sources`). A context repeated (the same qid, run and passages) is
refused at its second line: it would count twice in the means.

Weights are checked against what they are applied to
(:func:`udcg.io.weights.files.check_compatible`): their k against the contexts' sizes, the utility
source, the judge key, the abstention prompt's SHA-256 against this udcg's prompt, and the
abstention mode of the values (the one their manifest records, which ``--mode`` must equal;
else ``--mode``; not checked without either), and the fingerprint of the judge
that made the contexts' values (their manifest records it) against the one the card records. A
difference is refused unless
``--allow-mismatch FIELD`` is given; each allowed difference is printed on stderr and recorded as
``weights_overrides`` in every ``--out`` line.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from udcg import metrics
from udcg.cli.common import (
    CommandParser,
    OnceAction,
    add_allow_mismatch,
    add_judge_key,
    add_out,
    add_utility,
    info_stream,
    messages,
    parse,
    run_cli,
    weights_inputs,
)
from udcg.cli.weights import add_allow_unverified
from udcg.io.contexts.jsonl import read_contexts, relevance_matrix
from udcg.io.contexts.model import distinct_contexts
from udcg.io.files import atomic_write, standard_output
from udcg.io.joins.utility_sources import DEFAULT_SOURCE, get_source
from udcg.io.weights.files import MISMATCH_FIELDS
from udcg.judge.spec import judge_key
from udcg.labels.provenance import refuse_derived_outputs, write_derived_manifest
from udcg.pipeline.context_scores import (
    checked_theta,
    file_labels_made_by,
    file_values_made_by,
    made_by_spec,
    theta_columns,
    values_mode,
)
from udcg.pipeline.metric_table import classic_metrics
from udcg.validation import printable


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``udcg score``."""
    parser = CommandParser(
        prog="udcg score",
        description="Score each annotated context with UDCG, UDCG-theta (with fitted weights) "
        "and nDCG, MAP, MRR and Precision, and print the means.",
    )
    parser.add_argument(
        "contexts",
        help="contexts JSONL (relevant and the utility source's field needed; - reads stdin)",
    )
    parser.add_argument(
        "--judge",
        required=True,
        help="the judge whose labels to read: its spec as given to annotate, or its key",
    )
    add_judge_key(parser, "the key the labels are stored under (default: the --judge spec's)")
    add_utility(
        parser,
        "utility source: abstention (u = 1 - abstain_prob) or answer_likelihood "
        "(u = answer_prob) (default: %(default)s)",
        default=DEFAULT_SOURCE,
    )
    parser.add_argument(
        "--weights",
        action=OnceAction,
        help="UDCG-theta weights: a folder of save_pretrained/train.py, or a .safetensors file "
        "with its .json card",
    )
    parser.add_argument(
        "--mode",
        choices=["first_token", "sequence"],
        help="the abstention mode the utilities were annotated with (checked against the "
        "weights; not checked when not given)",
    )
    add_allow_mismatch(
        parser,
        list(MISMATCH_FIELDS),
        "use weights fitted with another FIELD on purpose (repeatable; "
        f"{', '.join(MISMATCH_FIELDS)}); recorded in the output",
    )
    add_allow_unverified(parser)
    parser.add_argument("--gamma", type=float, default=1 / 3, help="UDCG gamma (default 1/3)")
    add_out(parser, "write per-context scores here (JSONL; - is stdout)")
    return parser


def means_table(columns: dict[str, np.ndarray], groups: list[tuple[str, int]]) -> str:
    """Tab-separated means of every column per (run, k), then over all contexts; a column
    with no defined value in a group shows ``n/a`` (UDCG-theta for another k)."""
    keys = sorted(set(groups))
    rows = [("run", "k", "n", *columns)]
    for label, members in [
        *((key, [g == key for g in groups]) for key in keys),
        (("all", ""), [True] * len(groups)),
    ]:
        mask = np.asarray(members, dtype=bool)
        means = []
        for values in columns.values():
            defined = values[mask & ~np.isnan(values)]
            means.append(f"{defined.mean():.4f}" if len(defined) else "n/a")
        rows.append((str(label[0]), str(label[1]), str(int(mask.sum())), *means))
    return "\n".join("\t".join(row) for row in rows)


def score(args: argparse.Namespace) -> None:
    """Compute, print and optionally write the scores."""
    if args.out:
        inputs = {"CONTEXTS": args.contexts, **weights_inputs(args.weights)}
        refuse_derived_outputs(args.out, inputs)
    else:
        standard_output()  # where the results go: closed or read-only, refused before the work
    judge = judge_key(args.judge, args.judge_key)
    made = file_values_made_by(args.contexts, judge, args.utility)
    made_by_spec(args.judge, judge, made, args.contexts)
    contexts = distinct_contexts(read_contexts(args.contexts))
    relevant = relevance_matrix(contexts, unit=True)
    utility = get_source(args.utility).utilities(contexts, judge)
    columns: dict[str, np.ndarray] = {
        "UDCG": metrics.udcg(relevant, utility, args.gamma),
        **classic_metrics(relevant),
    }
    if args.weights:
        model, overrides = checked_theta(
            args.weights,
            (len(c.passages) for c in contexts),
            judge,
            args.utility,
            args.allow_mismatch,
            mode=values_mode(args.mode, made, args.utility),
            fingerprint=made,
            relevance=file_labels_made_by(args.contexts),
            allow_unverified=args.allow_unverified,
            option="--allow-mismatch {field}",
        )
        for note in overrides:
            print(f"UDCG-theta: {note}", file=messages())
        columns.update(theta_columns(model, relevant, utility))
        k = len(model.alpha_)
        others = sum(len(c.passages) != k for c in contexts)
        if others:
            print(
                f"UDCG-theta: {others} of {len(contexts)} contexts do not have k={k} passages "
                "and are left empty (null)",
                file=messages(),
            )
    else:
        overrides = []
    out = info_stream(args.out)
    made_note = f" (values made by {printable(made)})" if made else ""
    print(f"{len(contexts)} contexts, judge {judge}{made_note}, utility {args.utility}", file=out)
    groups = [(c.run or "-", len(c.passages)) for c in contexts]
    print(means_table(columns, groups), file=out)
    if args.out:
        with atomic_write(args.out) as out:
            for i, ctx in enumerate(contexts):
                row = {
                    name: (None if np.isnan(v[i]) else float(v[i])) for name, v in columns.items()
                }
                if overrides:
                    row["weights_overrides"] = overrides
                out.write(json.dumps({"qid": ctx.qid, "run": ctx.run, **row}) + "\n")
        digests = model.digests() if args.weights else {"weights_sha256": None, "card_sha256": None}
        record = {
            "format": "udcg-score/1",
            "judge": judge,
            "judge_fingerprint": made,
            "utility": args.utility,
            "gamma": args.gamma,
            **digests,  # of the weights and the card (the calibration is in the card) as read
        }  # with the contexts' digest and who made their values: what made these scores
        write_derived_manifest(args.out, args.contexts, record)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for a user mistake)."""
    args = parse(build_parser(), argv)
    return run_cli("udcg score", lambda: score(args))


if __name__ == "__main__":
    sys.exit(main())
