"""``udcg weights show DIR_OR_FILE``: the card of UDCG-theta weights, checked;
``udcg weights calibrate DIR_OR_FILE CONTEXTS -o OUT [--method temperature|platt]``: the same
weights with a recalibration of their probabilities fitted on held-out annotated contexts.

Reads a weights folder (``model.safetensors`` + ``config.json``, :meth:`UDCGTheta.save_pretrained`)
or a single-file export (``.safetensors`` + ``.json`` card) with every check of
:func:`udcg.io.weights.files.read_weights`, the SHA-256 of the weights included, then prints k, the
judge, utility source, abstention mode, prompt hash, udcg version, gamma, the held-out
correlations and a table of alpha and beta per position. A file that fails a check is one line
on stderr and exit status 2; so is a card that records no SHA-256, unless
``--allow-unverified`` (then the SHA-256 line says ``not recorded (unverified)``). Card strings
are printed with control and format characters escaped (``\\x1b``), never raw.

``calibrate`` reads contexts of exactly k passages with ``relevant``, the judge's utility values
and ``outcomes[judge].correct`` (judge and utility source default to the card's; both checked
against it), fits :meth:`UDCGTheta.calibrate`, prints ECE and Brier score before and after on
those contexts, and writes a weights folder with the card's entries and ``calibration``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from udcg.cli.common import (
    CommandParser,
    add_allow_mismatch,
    add_judge_key,
    add_out,
    add_utility,
    info_stream,
    messages,
    parse,
    run_cli,
)
from udcg.errors import UDCGInputError
from udcg.io.files import standard_output
from udcg.validation import printable


def add_allow_unverified(parser: argparse.ArgumentParser) -> None:
    """``--allow-unverified``: load weights whose card records no SHA-256 (a warning says so)."""
    parser.add_argument(
        "--allow-unverified",
        action="store_true",
        help="load weights whose card records no weights_sha256, unchecked (a warning says so)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``udcg weights`` and its actions."""
    parser = CommandParser(
        prog="udcg weights",
        description="Show the checked card of UDCG-theta weights, or calibrate their "
        "probabilities on held-out annotated contexts.",
    )
    commands = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = commands.add_parser(
        "show",
        help="print the card and verify the SHA-256",
        description="Read UDCG-theta weights with every check, their SHA-256 included, and "
        "print their card and a table of alpha and beta per position.",
    )
    show.add_argument("path", metavar="DIR_OR_FILE", help="a weights folder or .safetensors file")
    add_allow_unverified(show)
    calibrate = commands.add_parser(
        "calibrate",
        help="fit a recalibration of the probabilities on held-out annotated contexts",
        description="Fit p = sigmoid(logit / T) (temperature) or sigmoid(a * logit + b) "
        "(platt) on the contexts of exactly k passages and their outcomes[judge].correct, and "
        "write a weights folder whose card holds it (predict_proba(..., calibrated=True)).",
    )
    calibrate.add_argument("path", metavar="DIR_OR_FILE", help="the weights to calibrate")
    calibrate.add_argument("contexts", help="annotated contexts JSONL with outcomes (- stdin)")
    add_out(calibrate, "the calibrated weights folder", required=True, folder=True)
    calibrate.add_argument(
        "--method",
        choices=["temperature", "platt"],
        default="temperature",
        help="p = sigmoid(logit / T) or sigmoid(a * logit + b) (default: %(default)s)",
    )
    add_judge_key(calibrate, "judge of the utilities and outcomes (default: the card's)")
    add_utility(calibrate, "the utility source (default: the card's)")
    add_allow_unverified(calibrate)
    add_allow_mismatch(calibrate, ["utility", "judge", "fingerprint", "relevance", "prompt"])
    return parser


def _value(value: Any) -> str:
    """A card value as the card prints it, safe for a terminal (:func:`printable`)."""
    if value is None:
        return "unknown"
    if isinstance(value, float):
        return f"{value:.4g}"
    return printable(str(value))


def _signed(value: Any) -> str:
    """A correlation as the tables print it (``+0.462``), or ``undefined``."""
    return f"{value:+.3f}" if isinstance(value, int | float) else "undefined"


def card_text(
    card: Mapping[str, Any], alpha: Any, beta: Any, intercept: float, verified: bool
) -> str:
    """The lines ``udcg weights show`` prints for a checked card and its weights; ``verified``:
    the weights matched the card's SHA-256 (else the card records none)."""
    prompt = card.get("prompt")
    lines = [
        f"format:          {card.get('format')} v{card.get('format_version')}",
        f"k:               {card.get('k')}",
        f"judge:           {_value(card.get('judge_model'))}",
        f"fingerprint:     {_value(card.get('judge_fingerprint'))}",
        f"relevance by:    {_value(card.get('relevance_fingerprint'))}",
        f"utility source:  {_value(card.get('utility', 'abstention'))}",
        f"abstention mode: {_value(card.get('abstention_mode'))}",
        f"prompt SHA-256:  {_value(prompt.get('sha256') if isinstance(prompt, Mapping) else None)}",
        f"judge serving:   {_value(card.get('judge_serving'))}",
        f"generator:       {_value(card.get('generator'))}",
        f"udcg version:    {_value(card.get('udcg_version'))}",
        f"gamma:           {_value(card.get('gamma'))}",
        f"bias, l2:        {card.get('bias')}, {card.get('l2')} (intercept {intercept:.6g})",
        f"license:         {_value(card.get('license'))}",
        f"training data:   {_value(card.get('training_data_fingerprint'))}",
        "weights SHA-256: "
        + (
            f"{_value(card.get('weights_sha256'))} (verified)"
            if verified
            else "not recorded (unverified)"
        ),
        "card SHA-256:    "
        + (
            f"{_value(card['card_sha256'])} (verified: its entries as udcg wrote them)"
            if card.get("card_sha256")
            else "not recorded (its entries are unchecked)"
        ),
    ]
    if card.get("calibration") is not None:
        from udcg.theta.calibration import Calibration

        calibration = Calibration.from_dict(card["calibration"]).describe()
        lines.append(f"calibration:     {printable(calibration)}")
        other = card.get("calibration_fitted_on")
        if isinstance(other, Mapping) and other:
            shown = ", ".join(f"{key} {_value(value)}" for key, value in sorted(other.items()))
            lines.append(f"  fitted on:     {printable(shown)} (other than the weights')")
    for note in card.get("weights_overrides") or []:
        lines.append(f"allowed:         {printable(_value(note))}")
    rows = [r for r in card.get("heldout") or [] if isinstance(r, Mapping)]
    if rows:
        method = _value(card.get("correlation") or "spearman")
        width = max(len("metric"), *(len(_value(r.get("metric"))) for r in rows))
        lines += ["", f"held-out correlation ({method}) with end-to-end correctness:"]
        lines.append(f"  {'metric':<{width}} {method:>9}  95% CI")
        for row in rows:
            ci = row.get("ci95")
            ci_text = (
                f"[{_signed(ci[0])}, {_signed(ci[1])}]"
                if isinstance(ci, list) and len(ci) == 2
                else "n/a"
            )
            lines.append(
                f"  {_value(row.get('metric')):<{width}} {_signed(row.get(method)):>9}  {ci_text}"
            )
    lines += ["", f"  {'position':>8} {'alpha':>12} {'beta':>12}"]
    lines += [
        f"  {i:>8} {a:>12.6g} {b:>12.6g}"
        for i, (a, b) in enumerate(zip(alpha, beta, strict=True), start=1)
    ]
    return "\n".join(lines)


def show(path: str, allow_unverified: bool) -> None:
    """Read ``path`` with every check and print its card on standard output (closed or open
    for reading only: refused before the weights are read)."""
    from udcg.io.weights.files import read_weights
    from udcg.io.weights.hub import weights_source

    out = standard_output()
    weights = read_weights(weights_source(path), allow_unverified=allow_unverified)
    print(f"weights: {printable(str(weights.path))}", file=out)
    card = card_text(weights.card, weights.alpha, weights.beta, weights.intercept, weights.verified)
    print(card, file=out)


def calibrate(args: argparse.Namespace) -> None:
    """Fit the recalibration, print its measures on the fitting contexts, write the folder."""
    import numpy as np

    from udcg.io.contexts.arrays import correctness, relevance_matrix
    from udcg.io.contexts.jsonl import read_contexts
    from udcg.io.contexts.model import distinct_contexts
    from udcg.io.files import read_once
    from udcg.io.formats.hf_datasets import HF_PREFIX, dataset_sha256
    from udcg.io.joins.utility_sources import DEFAULT_SOURCE, get_source
    from udcg.io.manifests import file_sha256
    from udcg.io.weights.files import CALIBRATION_ENTRIES, card_value, check_compatible
    from udcg.judge.prompts import prompt_record
    from udcg.pipeline.context_scores import (
        abstention_mode,
        file_labels_made_by,
        file_values_made_by,
    )
    from udcg.theta import UDCGTheta
    from udcg.theta.calibration import brier_score, expected_calibration_error

    _check_out(args)
    model = UDCGTheta.from_pretrained(args.path, allow_unverified=args.allow_unverified)
    k = len(model.alpha_)
    judge = args.judge_key or model.card_.get("judge_model")
    if not judge:
        raise UDCGInputError("the weights' card names no judge: pass --judge-key NAME")
    utility = args.utility or card_value(model.card_, "utility") or DEFAULT_SOURCE
    prompt = prompt_record()["sha256"]
    made = file_values_made_by(args.contexts, judge, utility)
    applied = {
        "utility": utility,
        "judge": judge,
        "fingerprint": made,
        "relevance": file_labels_made_by(args.contexts),
        "prompt": prompt,
        "mode": abstention_mode(made, utility),
    }
    fitted = {k: v for k, v in model.card_.items() if k not in CALIBRATION_ENTRIES}  # replaced
    notes = check_compatible(fitted, applied, args.allow_mismatch)
    hf = isinstance(args.contexts, str) and args.contexts.startswith(HF_PREFIX)
    source = args.contexts if hf else read_once(args.contexts)  # a pipe: its digest is kept
    given = list(distinct_contexts(read_contexts(source)))
    contexts = [c for c in given if len(c.passages) == k]
    if not contexts:
        raise UDCGInputError(f"no context has k={k} passages", path=args.contexts)
    rel = np.stack(relevance_matrix(contexts, unit=True))
    u = np.stack(get_source(utility).utilities(contexts, judge))
    correct = correctness(contexts, judge)
    raw = model.predict_proba(rel, u)
    model.calibrate(rel, u, correct, method=args.method)  # drops the earlier one's records
    tuned = model.predict_proba(rel, u, calibrated=True)
    digest = dataset_sha256(source) if hf else file_sha256(source)
    card = _calibrated_card(fitted, applied, notes, digest)
    model.save_pretrained(args.out, card=card)
    for note in notes:
        print(f"udcg weights: {note}", file=messages())
    if len(contexts) < len(given):
        print(
            f"udcg weights: {len(given) - len(contexts)} of {len(given)} contexts do not have "
            f"k={k} passages and are left out",
            file=messages(),
        )
    out = info_stream()
    print(f"calibration: {model.calibration_.describe()}", file=out)
    for name, measure in (("ECE", expected_calibration_error), ("Brier", brier_score)):
        before, after = measure(raw, correct), measure(tuned, correct)
        print(f"{name + ':':<7}{before:.4f} -> {after:.4f} (on the fitting contexts)", file=out)
    print(f"weights: {args.out}", file=out)


def _calibrated_card(
    card: dict[str, Any], applied: dict[str, Any], notes: list[str], digest: str
) -> dict[str, Any]:
    """The card entries a calibration adds: what its contexts had (utility source, judge,
    fingerprints, mode) where the card records something else or nothing
    (``calibration_fitted_on``), checked wherever the calibrated weights are applied; the
    digest of those contexts; this run's allowed mismatches. The weights' own entries stay as
    they were fitted."""
    from udcg.io.weights.files import CALIBRATED_ON, MISMATCH_FIELDS, card_value

    other = {
        MISMATCH_FIELDS[name][0]: value
        for name, value in applied.items()
        if name != "prompt" and value is not None and card_value(card, name) != value
    }
    return (
        {"calibration_input_sha256": digest}
        | ({CALIBRATED_ON: other} if other else {})
        | ({"weights_overrides": notes} if notes else {})
    )


def _check_out(args: argparse.Namespace) -> None:
    """OUT is a weights folder to write: not ``-``, not an input, and new, empty or holding
    only the files a weights folder is made of (all replaced): another model's plot or any
    other file would stay beside these weights."""
    from pathlib import Path

    from udcg.io.files import refuse_same_file
    from udcg.io.weights.files import PRETRAINED_FILES

    if args.out == "-":
        raise UDCGInputError("OUT is a weights folder; standard output (-) cannot hold one")
    out = Path(args.out)
    refuse_same_file(out, {"DIR_OR_FILE": args.path, "CONTEXTS": args.contexts})
    if out.is_file():
        raise UDCGInputError("is a file: calibrated weights go to a folder", path=out)
    other = (
        sorted(p.name for p in out.iterdir() if p.name not in PRETRAINED_FILES)
        if (out.is_dir())
        else []
    )
    if other:
        raise UDCGInputError(
            f"holds {other[0]!r}, which writing a weights folder here would leave beside the "
            "calibrated weights: choose a new or empty folder",
            path=out,
        )


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for a user mistake or a file that fails a
    check)."""
    args = parse(build_parser(), argv)
    return run_cli(
        "udcg weights",
        lambda: (
            show(args.path, args.allow_unverified) if args.action == "show" else calibrate(args)
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
