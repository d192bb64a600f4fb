"""``udcg order IN -o OUT --weights W [-k K] [--ordering O]``: choose and order each context's
passages; ``udcg order --run RUN --qrels QRELS --utilities U --weights W -o OUT``: the same for
a TREC run.

Contexts mode: IN is an annotated contexts JSONL (every passage with ``relevant`` and the
judge's value of the utility source, :mod:`udcg.io.joins.utility_sources`); each context's passages
are the candidates, and OUT gets the ``min(k, n)`` passages the ordering picks, in its order
(the others are dropped: a context is what the generator reads). ``outcomes`` are kept only
for contexts whose passages did not change (they were measured on the original context).
Every OUT line records what ordered it: ``ordered_by`` = ``{"ordering", "k", "judge",
"utility", "weights_sha256", "card_sha256"}`` (the SHA-256 of the weights file and of the
card's entries as read, also for unverified weights).
``--judge-key`` is the judge whose values to read (default: the weights card's judge).

TREC mode: each query's ranked documents (the first ``--depth``, default all) are the
candidates, relevant when their qrels grade is > 0, with utilities read as ``udcg trec
--utilities`` reads them; the chosen documents take ranks 1..min(k, n) and every other
document follows in its original order, so the run keeps all its documents; scores are
``n, n-1, ..., 1`` (strictly decreasing), queries stay in the order of the input.

Orderings (:data:`udcg.theta.ordering.ORDERINGS`): ``theta`` (UDCG-theta's best choice and
order, :meth:`UDCGTheta.best_context`), ``retriever``, ``reversed``, ``ends``, ``gold_first``.
The summary line gives the mean UDCG-theta probability before (the first k candidates as
ranked) and after. Weights are checked as ``udcg score`` checks them (utility source, judge,
the fingerprint of the judge that made the values, prompt;
:func:`udcg.io.weights.files.check_compatible`, ``--allow-mismatch FIELD``); ``-k`` may not
exceed the weights' k (a shorter context is zero-padded).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping

import numpy as np

from udcg.cli.common import (
    CommandParser,
    OnceAction,
    add_allow_mismatch,
    add_judge_key,
    add_out,
    info_stream,
    messages,
    parse,
    refuse_stdin_twice,
    run_cli,
    utility_field,
    weights_inputs,
)
from udcg.cli.trec import add_utility_source
from udcg.cli.weights import add_allow_unverified
from udcg.errors import UDCGInputError
from udcg.io.contexts.sources import passages_moved
from udcg.io.joins.utility_sources import DEFAULT_SOURCE
from udcg.io.weights.files import MISMATCH_FIELDS, check_compatible
from udcg.theta.ordering import ORDERINGS, order_by

_TREC_ONLY = ("qrels", "utilities", "depth")
#: The context key recording what ordered a context (contexts mode).
ORDERED_BY = "ordered_by"
#: The mismatches an ordering allowed on purpose (``--allow-mismatch``), per context
OVERRIDES = "weights_overrides"


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``udcg order``."""
    parser = CommandParser(
        prog="udcg order",
        description="Choose and order each context's passages, or each query's documents of a "
        "TREC run, by UDCG-theta or a heuristic ordering.",
    )
    parser.add_argument(
        "input", nargs="?", metavar="IN", help="contexts mode: annotated contexts JSONL (- stdin)"
    )
    add_out(
        parser,
        "the reordered contexts JSONL, or in TREC mode the reordered run (- stdout)",
        required=True,
        old_positional=True,
    )
    parser.add_argument(
        "--weights",
        action=OnceAction,
        required=True,
        metavar="DIR_OR_FILE",
        help="UDCG-theta weights: a folder of save_pretrained/train.py or a .safetensors file",
    )
    add_allow_unverified(parser)
    parser.add_argument(
        "-k", "--k", type=int, help="passages per context (default: the weights' k)"
    )
    parser.add_argument(
        "--ordering",
        choices=list(ORDERINGS),
        default="theta",
        help="; ".join(f"{name}: {text}" for name, text in ORDERINGS.items())
        + " (default: %(default)s)",
    )
    add_utility_source(parser)
    add_judge_key(
        parser, "the judge whose values to read (default: the judge of the weights' card)"
    )
    add_allow_mismatch(parser, list(MISMATCH_FIELDS))
    trec = parser.add_argument_group("TREC mode")
    trec.add_argument("--run", help="TREC run to reorder (gzip ok)")
    trec.add_argument("--qrels", help="qrels: relevant when the grade is > 0")
    trec.add_argument(
        "--utilities",
        metavar="FILE",
        help="utilities as udcg trec --utilities reads them (TSV, JSONL, annotated contexts)",
    )
    trec.add_argument("--depth", type=int, help="candidates per query: the first N ranked (all)")
    return parser


class _Model:
    """The weights, the k to fill and the UDCG-theta probability of ordered candidates."""

    def __init__(self, path: str, k: int | None, allow_unverified: bool) -> None:
        from udcg.theta import UDCGTheta

        self.theta = UDCGTheta.from_pretrained(path, allow_unverified=allow_unverified)
        self.size = len(self.theta.alpha_)
        self.k = self.size if k is None else k
        if not 1 <= self.k <= self.size:
            raise UDCGInputError(
                f"must be between 1 and the weights' k={self.size}, got {self.k}", field="k"
            )

    def order(self, ordering: str, relevant: np.ndarray, utility: np.ndarray) -> np.ndarray:
        return order_by(ordering, relevant, utility, self.k, self.theta.alpha_, self.theta.beta_)

    def probability(
        self, relevant: list[np.ndarray], utility: list[np.ndarray], orders: list[np.ndarray]
    ) -> np.ndarray:
        """UDCG-theta of each candidate list in its order (zero-padded to the weights' k)."""
        rel, u = np.zeros((len(orders), self.size)), np.zeros((len(orders), self.size))
        for i, order in enumerate(orders):
            rel[i, : len(order)], u[i, : len(order)] = relevant[i][order], utility[i][order]
        return self.theta.predict_proba(rel, u)


def _summary(
    what: str, ordering: str, model: _Model, before: np.ndarray, after: np.ndarray, changed: int
) -> str:
    return (
        f"{what}: {len(after)} reordered by {ordering} (k={model.k}), {changed} changed; "
        f"mean UDCG-theta {before.mean():.4f} -> {after.mean():.4f}"
    )


def _reorder(
    model: _Model, ordering: str, relevant: list[np.ndarray], utility: list[np.ndarray]
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """``(orders, probability before, after)``; before: the first k candidates as ranked."""
    orders = [model.order(ordering, r, u) for r, u in zip(relevant, utility, strict=True)]
    firsts = [np.arange(min(model.k, len(r))) for r in relevant]
    return (
        orders,
        model.probability(relevant, utility, firsts),
        model.probability(relevant, utility, orders),
    )


def order_contexts(args: argparse.Namespace) -> None:
    """Contexts mode (module docstring)."""
    from dataclasses import replace

    from udcg.io.contexts.arrays import relevance_matrix
    from udcg.io.contexts.jsonl import read_contexts, write_contexts
    from udcg.io.joins.utility_sources import get_source
    from udcg.judge.prompts import prompt_record
    from udcg.labels.provenance import write_derived_manifest
    from udcg.pipeline.context_scores import (
        abstention_mode,
        file_labels_made_by,
        file_values_made_by,
    )

    model = _Model(args.weights, args.k, args.allow_unverified)
    utility = args.utility or DEFAULT_SOURCE
    judge = args.judge_key or model.theta.card_.get("judge_model")
    if not judge:
        raise UDCGInputError("the weights' card names no judge: pass --judge-key NAME")
    made = file_values_made_by(args.input, judge, utility)
    relevance = file_labels_made_by(args.input)
    applied = {
        "utility": utility,
        "judge": judge,
        "fingerprint": made,
        "relevance": relevance,
        "mode": abstention_mode(made, utility),
    }
    notes = check_compatible(
        model.theta.card_, {**applied, "prompt": prompt_record()["sha256"]}, args.allow_mismatch
    )
    contexts = list(read_contexts(args.input))
    relevant = relevance_matrix(contexts, unit=True)
    utilities = get_source(utility).utilities(contexts, judge)
    orders, before, after = _reorder(model, args.ordering, relevant, utilities)
    record = {
        "ordering": args.ordering,
        "k": model.k,
        "judge": judge,
        "utility": utility,
        **model.theta.digests(),
    }
    out, changed = [], 0
    for ctx, order in zip(contexts, orders, strict=True):
        same = order.tolist() == list(range(len(ctx.passages)))
        changed += not same
        passages = [ctx.passages[i] for i in order]
        chosen = ctx if same else passages_moved(ctx, replace(ctx, passages=passages, outcomes={}))
        # this ordering's record, and the mismatches it allowed on purpose (as in score --out),
        # replace an earlier ordering's
        extra = {k: v for k, v in chosen.extra.items() if k != OVERRIDES} | {ORDERED_BY: record}
        out.append(replace(chosen, extra=extra | ({OVERRIDES: notes} if notes else {})))
    write_contexts(args.out, out, check=False)
    write_derived_manifest(args.out, args.input, {"format": "udcg-order/1", ORDERED_BY: record})
    stream = info_stream(args.out)
    for note in notes:
        print(f"udcg order: {note}", file=messages())
    print(_summary("contexts", args.ordering, model, before, after, changed), file=stream)


def _lookup(
    qids: list[str], doc_ids: list[str], values: np.ndarray
) -> dict[tuple[str, str], float]:
    return dict(zip(zip(qids, doc_ids, strict=True), values.tolist(), strict=True))


def _ranked(run_path: str) -> dict[str, list[str]]:
    """Each query's documents in trec_eval's ranking order, queries in file order."""
    from udcg.io.formats.trec import read_trec_run, trec_order
    from udcg.io.joins.run_contexts import refuse_repeats

    run = read_trec_run(run_path)
    refuse_repeats(run)
    qids, docs = run.qids.to_pylist(), run.doc_ids.to_pylist()
    ranked: dict[str, list[str]] = {q: [] for q in qids}
    for row in np.asarray(trec_order(run.qids, run.scores, run.doc_ids)).tolist():
        ranked[qids[row]].append(docs[row])
    return ranked


def _candidate_values(
    ranked: Mapping[str, list[str]],
    depth: int | None,
    value: Callable[[str, str], float],
) -> list[np.ndarray]:
    return [np.array([value(q, d) for d in docs[:depth]]) for q, docs in ranked.items()]


def order_run(args: argparse.Namespace) -> None:
    """TREC mode (module docstring)."""
    from udcg.io.files import atomic_write
    from udcg.io.formats.trec import read_trec_qrels
    from udcg.io.joins.trec_contexts import judged_grades
    from udcg.io.joins.utilities import read_utility_file, source_of
    from udcg.pipeline.context_scores import abstention_mode

    model = _Model(args.weights, args.k, args.allow_unverified)
    if args.depth is not None and args.depth < 1:
        raise UDCGInputError(f"must be >= 1, got {args.depth}", field="depth")
    utilities = read_utility_file(args.utilities, utility_field(args.utility), args.judge_key)
    source = source_of(utilities.field)
    notes = check_compatible(
        model.theta.card_,
        {
            "utility": source and source.name,
            "judge": utilities.judge,
            "fingerprint": utilities.fingerprint,
            "mode": source and abstention_mode(utilities.fingerprint, source.name),
        },
        args.allow_mismatch,
    )
    grades = judged_grades(read_trec_qrels(args.qrels))
    u_of = _lookup(utilities.qids.to_pylist(), utilities.doc_ids.to_pylist(), utilities.values)
    ranked = _ranked(args.run)
    unjudged = [q for q in ranked if q not in grades]
    if len(unjudged) == len(ranked):
        raise UDCGInputError(
            f"judges none of the run's {len(ranked)} queries (run query {unjudged[0]!r}): "
            "UDCG-theta needs the relevance of the ranked documents",
            path=args.qrels,
        )
    if unjudged:
        notes.append(
            f"{len(unjudged)} of {len(ranked)} run queries have no qrels (first "
            f"{unjudged[0]!r}): their documents count as not relevant"
        )

    def utility_of(qid: str, doc: str) -> float:
        if (qid, doc) not in u_of:
            raise UDCGInputError(
                f"query {qid!r}, document {doc!r}: no utility for this ranked document "
                "(give utilities for every candidate, or fewer candidates with --depth)",
                path=args.utilities,
            )
        return u_of[qid, doc]

    relevant = _candidate_values(
        ranked, args.depth, lambda q, d: float(grades.get(q, {}).get(d, 0) > 0)
    )
    utility = _candidate_values(ranked, args.depth, utility_of)
    orders, before, after = _reorder(model, args.ordering, relevant, utility)
    changed = 0
    with atomic_write(args.out) as out:
        for (qid, docs), order in zip(ranked.items(), orders, strict=True):
            chosen = set(order.tolist())
            new = [docs[i] for i in order] + [d for i, d in enumerate(docs) if i not in chosen]
            changed += new != docs
            out.writelines(
                f"{qid} Q0 {doc} {rank} {len(new) - rank + 1} udcg_order_{args.ordering}\n"
                for rank, doc in enumerate(new, start=1)
            )
    for note in notes:
        print(f"udcg order: {note}", file=messages())
    print(
        _summary("queries", args.ordering, model, before, after, changed),
        file=info_stream(args.out),
    )


def _check_mode(args: argparse.Namespace) -> None:
    """Contexts mode takes IN and no TREC option; TREC mode the reverse."""
    if args.run is None:
        if args.input is None:
            raise UDCGInputError("give IN (contexts mode) or --run (TREC mode)")
        given = [name for name in _TREC_ONLY if getattr(args, name) is not None]
        if given:
            raise UDCGInputError(f"--{given[0].replace('_', '-')} needs --run (TREC mode)")
        return
    if args.input is not None:
        raise UDCGInputError("TREC mode (--run) takes no IN")
    for name in ("qrels", "utilities"):
        if getattr(args, name) is None:
            raise UDCGInputError(f"TREC mode (--run) needs --{name}")


def _refuse_overwriting(args: argparse.Namespace) -> None:
    """The output, or the manifest written beside it, may not name an input."""
    from udcg.labels.provenance import refuse_derived_outputs

    inputs = {"IN": args.input, "--run": args.run, "--qrels": args.qrels}
    inputs["--utilities"] = args.utilities
    refuse_stdin_twice(inputs)
    refuse_derived_outputs(args.out, {**inputs, **weights_inputs(args.weights)})


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for a user mistake)."""
    args = parse(build_parser(), argv)

    def work() -> None:
        _check_mode(args)
        _refuse_overwriting(args)
        (order_contexts if args.run is None else order_run)(args)

    return run_cli("udcg order", work)


if __name__ == "__main__":
    sys.exit(main())
