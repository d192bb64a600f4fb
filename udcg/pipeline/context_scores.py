"""Scores of labelled contexts, one row per context, as a pandas DataFrame
(``udcg.score_contexts``): UDCG, UDCG-theta with fitted weights, the classic ranking metrics and
Q-CARE's metrics when the contexts carry its labels."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from udcg import metrics
from udcg._lazy import import_pandas
from udcg.errors import UDCGInputError
from udcg.io.contexts.checks import Where
from udcg.io.contexts.jsonl import (
    Context,
    check_context,
    no_contexts,
    not_one_context,
    read_contexts,
    relevance_matrix,
)
from udcg.io.contexts.model import distinct_contexts
from udcg.io.contexts.sources import check_label_inputs, warn_given_outcome, warn_mixed_sources
from udcg.io.files import PathType
from udcg.io.joins.utility_sources import DEFAULT_SOURCE, get_source
from udcg.io.manifests import mode_of, recorded_judges, relevance_made_by, values_made_by
from udcg.io.weights.files import check_compatible
from udcg.judge.spec import PRECOMPUTED
from udcg.labels.erag import erag_labels
from udcg.metrics.udcg import DEFAULT_GAMMA
from udcg.pipeline.metric_table import ERAG_METRICS, classic_metrics, erag_metrics
from udcg.qcare.scores import GENERATOR_METRICS, qcare_scores

if TYPE_CHECKING:
    import pandas as pd

    from udcg.theta import UDCGTheta


def as_contexts(
    contexts: Iterable[Context] | str | os.PathLike[str], distinct: bool = True
) -> list[Context]:
    """``contexts`` as a list: a contexts JSONL file (``.gz`` too) is read; contexts given in
    memory pass the reader's checks (:func:`udcg.io.contexts.jsonl.check_context`; an error
    names ``contexts[i] (qid ...)`` and the field); a context held twice is refused when
    ``distinct`` (a mean or a fit would count it twice:
    :func:`udcg.io.contexts.model.distinct_contexts`); none at all is an error
    (:func:`udcg.io.contexts.jsonl.no_contexts`).

    >>> from udcg.demo_data.demo import OUTPUT
    >>> len(as_contexts(OUTPUT))
    1020
    >>> from udcg.io.contexts.jsonl import Passage
    >>> as_contexts([Context("q1", [Passage("d1", relevant="yes")])])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    udcg.errors.UDCGInputError: contexts[0] (qid 'q1'): field 'passages[0].relevant': must be ...
    """
    if isinstance(contexts, (str, os.PathLike)):
        read: Iterable[Context] = read_contexts(contexts)
    else:
        read = _checked(not_one_context(contexts))
    listed = distinct_contexts(read) if distinct else list(read)
    if not listed and not isinstance(contexts, (str, os.PathLike)):
        raise no_contexts(contexts)
    return listed


def _checked(contexts: Iterable[Context]) -> Iterator[Context]:
    """``contexts``, each once the reader's checks accept it."""
    for i, ctx in enumerate(contexts):
        qid = getattr(ctx, "qid", None)
        name = f"contexts[{i}]" + (f" (qid {qid!r})" if isinstance(qid, str | int) else "")
        check_context(ctx, Where(name, None))
        yield ctx


def stored_judge_key(contexts: Sequence[Context], utility: str = DEFAULT_SOURCE) -> str:
    """The one judge key the contexts' utilities (source ``utility``) are stored under; none or
    several is an error naming them.

    >>> from udcg.demo_data import demo_contexts
    >>> stored_judge_key(list(demo_contexts()))
    'smollm2-135m'
    """
    field = get_source(utility).field
    keys = sorted({key for c in contexts for p in c.passages for key in getattr(p, field)})
    if len(keys) != 1:
        found = ", ".join(keys) if keys else "none"
        raise UDCGInputError(
            f"cannot tell which judge's labels to score: passages hold {field} of {found}; "
            "pass judge_key",
            field="judge_key",
        )
    return keys[0]


def theta_columns(
    model: UDCGTheta, relevant: Sequence[np.ndarray], utility: Sequence[np.ndarray]
) -> dict[str, np.ndarray]:
    """``UDCG-theta`` of each context of the weights' k (NaN for other sizes), and
    ``UDCG-theta (recalibrated)`` when the weights carry a calibration."""
    k = len(model.alpha_)
    rows = np.flatnonzero([len(r) == k for r in relevant])
    variants = {"UDCG-theta": False}
    if model.calibration_ is not None:
        variants["UDCG-theta (recalibrated)"] = True
    columns = {}
    for name, calibrated in variants.items():
        values = np.full(len(relevant), np.nan)
        if len(rows):
            values[rows] = model.predict_proba(
                np.stack([relevant[i] for i in rows]),
                np.stack([utility[i] for i in rows]),
                calibrated=calibrated,
            )
        columns[name] = values
    return columns


def file_values_made_by(
    contexts: Iterable[Context] | str | os.PathLike[str], judge: str, utility: str
) -> str | None:
    """The fingerprint of the judge that made the values of ``utility`` under ``judge`` in a
    contexts file, as its manifest records it (:func:`udcg.io.manifests.values_made_by`);
    None for contexts in memory or a file without that record.

    >>> file_values_made_by([], "sim", "abstention") is None
    True
    """
    if not isinstance(contexts, (str, os.PathLike)):
        return None
    return values_made_by(contexts, judge, get_source(utility).step)


def file_labels_made_by(contexts: Iterable[Context] | str | os.PathLike[str]) -> str | None:
    """The fingerprint of the judge whose LLM labelled the relevance of a contexts file, as its
    manifest records it under any judge key (a passage has one ``relevant`` label, whichever
    key's LLM made it; several makers are joined with `` + ``); None for contexts in memory,
    relevance not labelled by an LLM (given, or from the answers) or a file without that record.

    >>> file_labels_made_by([]) is None
    True
    """
    if not isinstance(contexts, (str, os.PathLike)):
        return None
    return relevance_made_by(recorded_judges(contexts))


def made_by_spec(spec: str, key: str, made: str | None, contexts: PathType | None) -> None:
    """Refuse a ``precomputed:FILE`` judge spec when the manifest of the ``contexts`` file
    records that another judge (fingerprint ``made``) made the values under its ``key``: the
    file's digest is its fingerprint (in any abstention mode: the file's values have none,
    :func:`udcg.io.manifests.with_mode`).
    Other specs add options to theirs and are not checked here.

    Examples:
        >>> made_by_spec("smollm2-135m", "smollm2-135m", "local:abc", "c.jsonl")
    """
    if made is None or not spec.startswith(PRECOMPUTED):
        return
    from udcg.judge.precomputed import PrecomputedJudge

    fingerprint = PrecomputedJudge(spec.removeprefix(PRECOMPUTED), name=key).fingerprint
    if made != fingerprint:
        raise UDCGInputError(
            f"the values of judge {key!r} were made by the judge with fingerprint {made}, not "
            f"by {spec} ({fingerprint}): use the contexts that judge annotated",
            path=contexts,
            field=None if contexts is not None else "judge",
        )


def refuse_kept_values(
    made: dict[str, str],
    steps: Sequence[str],
    fingerprint: str,
    key: str,
    allow_mismatch: Sequence[str] = (),
    redone: Sequence[str] | None = None,
) -> list[str]:
    """Refuse to label ``steps`` of given contexts with the judge of ``key`` and
    ``fingerprint`` (first-token abstention) when their manifest records (``made``: step ->
    fingerprint, :func:`udcg.io.manifests.recorded_judges`) that another judge of the key made
    values of a step this run keeps (``made`` holds the steps the report reads; ``redone``: the
    steps whose every value this run replaces, default ``steps``; string relevance only fills
    missing labels): one report would mix two judges' values. With
    ``fingerprint`` in ``allow_mismatch``, one note per kept step instead.

    Examples:
        >>> refuse_kept_values({"abstain": "fp-a"}, ["abstain"], "fp-b", "m")  # all redone
        []
        >>> refuse_kept_values({"outcomes": "fp-a"}, ["abstain"], "fp-b", "m")
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'judge': the given contexts' outcomes under judge ...
    """
    replaced = steps if redone is None else redone
    kept = {s: by for s, by in made.items() if s not in replaced and by != fingerprint}
    notes = []
    for step, by in sorted(kept.items()):
        message = (
            f"the given contexts' {step} under judge {key!r} were made by the judge with"
            f" fingerprint {by} (their manifest), and this run labels"
            f" {', '.join(steps) or 'Q-CARE coverage'}"
            f" with {fingerprint}: the report would mix two judges' values"
        )
        if "fingerprint" in allow_mismatch:
            notes.append(f"{message} (allowed on purpose)")
            continue
        raise UDCGInputError(
            f"{message}; use the judge that made them, annotate the contexts again with it, or"
            " allow_mismatch=[fingerprint] to mix them anyway",
            field="judge",
        )
    return notes


def abstention_mode(made: str | None, utility: str) -> str | None:
    """The abstention mode of the ``utility`` values the judge with fingerprint ``made`` made
    (:func:`udcg.io.manifests.mode_of`; a card's ``abstention_mode``); None for another utility
    source or an unknown maker.

    Examples:
        >>> abstention_mode("fp|mode=sequence", "abstention"), abstention_mode("fp", "abstention")
        ('sequence', 'first_token')
    """
    return mode_of(made) if get_source(utility).step == "abstain" else None


def values_mode(given: str | None, made: str | None, utility: str) -> str | None:
    """The abstention mode of the values scored: the one their manifest records
    (:func:`abstention_mode`), which a ``given`` mode (``--mode``) must equal; ``given`` when
    the manifest says nothing.

    Examples:
        >>> values_mode(None, "fp|mode=sequence", "abstention")
        'sequence'
        >>> values_mode("sequence", None, "abstention")
        'sequence'
        >>> values_mode("sequence", "fp", "abstention")
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'mode': the contexts' abstention values were made ...
    """
    recorded = abstention_mode(made, utility)
    if given is not None and recorded is not None and given != recorded:
        raise UDCGInputError(
            f"the contexts' abstention values were made in mode {recorded!r} (their manifest"
            f" records it), not {given!r}",
            field="mode",
        )
    return given if recorded is None else recorded


def checked_theta(
    weights: UDCGTheta | str | os.PathLike[str],
    sizes: Iterable[int],
    judge: str,
    utility: str,
    allow_mismatch: Sequence[str] = (),
    *,
    mode: str | None = None,
    fingerprint: str | None = None,
    relevance: str | None = None,
    allow_unverified: bool = False,
    option: str = "allow_mismatch=['{field}']",
) -> tuple[UDCGTheta, list[str]]:
    """``(model, notes)``: weights (a fitted model, a weights folder or file:
    :meth:`udcg.theta.UDCGTheta.from_pretrained`) checked against what they score
    (:func:`udcg.io.weights.files.check_compatible`: k against the list ``sizes``, the utility
    source, the judge key, the abstention prompt's SHA-256, the abstention ``mode``, the
    ``fingerprint`` of the judge that made the utilities and that of the judge whose LLM
    labelled the ``relevance``, when given);
    a note per mismatch allowed by ``allow_mismatch`` (``option`` says how to allow one)."""
    from udcg.judge.prompts import prompt_record
    from udcg.theta import UDCGTheta

    model = (
        weights
        if isinstance(weights, UDCGTheta)
        else UDCGTheta.from_pretrained(weights, allow_unverified=allow_unverified)
    )
    k = len(model.alpha_)
    sizes = sorted(set(sizes))
    applied = {
        "k": None if k in sizes else ", ".join(map(str, sizes)),
        "utility": utility,
        "judge": judge,
        "fingerprint": fingerprint,
        "relevance": relevance,
        "prompt": prompt_record()["sha256"],
        "mode": mode,
    }
    card = {"k": k, **getattr(model, "card_", {})}
    return model, check_compatible(card, applied, allow_mismatch, option, calibrated=True)


def _has_qcare_labels(contexts: Sequence[Context]) -> bool:
    return any(c.subqueries is not None for c in contexts)


def _has_answer_labels(contexts: Sequence[Context], judge: str) -> bool:
    return any(c.outcomes.get(judge, {}).get("claims") is not None for c in contexts)


def erag_columns(contexts: Sequence[Context], judge: str) -> dict[str, np.ndarray]:
    """eRAG's metrics (:func:`udcg.pipeline.metric_table.erag_metrics`) of each context whose
    passages all have an eRAG label of ``judge``, NaN for the others.

    >>> from udcg.io.contexts.jsonl import Passage
    >>> p1 = Passage("d1", extra={"erag": {"m": 0}})
    >>> p2 = Passage("d2", extra={"erag": {"m": 1}})
    >>> columns = erag_columns([Context("q1", [p1, p2]), Context("q2", [p1, Passage("d3")])], "m")
    >>> columns["eRAG-MRR"].tolist()
    [0.5, nan]
    """
    labels = erag_labels(contexts, judge)
    rows = np.flatnonzero([not np.isnan(row).any() for row in labels])
    columns = {name: np.full(len(labels), np.nan) for name in ERAG_METRICS}
    if len(rows):
        for name, values in erag_metrics([labels[i] for i in rows]).items():
            columns[name][rows] = values
    return columns


def _has_erag_labels(contexts: Sequence[Context], judge: str) -> bool:
    return any(not np.isnan(row).all() for row in erag_labels(contexts, judge))


def score_contexts(
    contexts: Iterable[Context] | str | os.PathLike[str],
    *,
    judge_key: str | None = None,
    utility: str = DEFAULT_SOURCE,
    weights: UDCGTheta | str | os.PathLike[str] | None = None,
    gamma: float = DEFAULT_GAMMA,
    qcare: bool | None = None,
    allow_mismatch: Sequence[str] = (),
    qcare_gain: str = "linear",
    qcare_coverage: str = "boolean",
    erag: bool | None = None,
) -> pd.DataFrame:
    """One row per context: ``qid``, ``run``, ``k`` (its list size), ``correct`` (the judge's
    graded outcome, NaN when ungraded), ``UDCG`` (:func:`udcg.metrics.udcg` at ``gamma``),
    ``UDCG-theta`` with ``weights`` (NaN for contexts not of the weights' k), nDCG, MAP, MRR and
    Precision, then Q-CARE's C-Prec and C-nDCG (and Completeness, Conciseness, Verifiableness
    when the judge's answers carry claim labels; NaN where labels are missing), then eRAG's
    ``eRAG-nDCG``, ``-MAP``, ``-MRR``, ``-Precision`` and ``-Hits`` over the passages' eRAG
    labels of the judge (:func:`erag_columns`; NaN for a context with a passage unlabelled).

    ``contexts``: contexts or a contexts JSONL file; ``judge_key``: the key their labels are
    stored under (None: the only one they hold); ``utility``: the utility source
    (``abstention`` or ``answer_likelihood``); ``weights``: a fitted :class:`udcg.UDCGTheta`,
    a weights folder or file, checked against the contexts (``allow_mismatch`` lets named
    fields differ, with a note); ``qcare``: None adds Q-CARE's columns when some context has
    its labels, True always (the generator's NaN when the judge has no outcomes), False never;
    ``qcare_gain`` and ``qcare_coverage`` are :func:`udcg.qcare.qcare_scores`'s ``gain`` and
    ``coverage``; ``erag``: None adds eRAG's columns when some passage has an eRAG label of the
    judge, True always, False never. Notes land in ``frame.attrs["notes"]`` (a weights mismatch
    allowed, why a Q-CARE column is NaN for some contexts). Needs pandas (the
    ``pandas`` extra).

    >>> import udcg
    >>> frame = udcg.score_contexts(udcg.demo_contexts())
    >>> list(frame.columns)
    ['qid', 'run', 'k', 'correct', 'UDCG', 'nDCG', 'MAP', 'MRR', 'Precision']
    >>> frame.groupby("k")["UDCG"].mean().round(3).to_dict()
    {1: 0.507, 3: 0.527, 5: 0.484, 10: 0.483}
    """
    pd = import_pandas("udcg.score_contexts()")
    given, contexts = contexts, as_contexts(contexts)
    judge = judge_key or stored_judge_key(contexts, utility)
    relevant = relevance_matrix(contexts, unit=True)
    util = get_source(utility).utilities(contexts, judge)
    correct = [c.outcomes.get(judge, {}).get("correct") for c in contexts]
    columns: dict[str, Any] = {
        "qid": [c.qid for c in contexts],
        "run": [c.run for c in contexts],
        "k": [len(c.passages) for c in contexts],
        "correct": np.array([np.nan if v is None else float(v) for v in correct]),
        "UDCG": metrics.udcg(relevant, util, gamma),
    }
    notes: list[str] = []
    if weights is not None:
        made = file_values_made_by(given, judge, utility)
        model, notes = checked_theta(
            weights,
            columns["k"],
            judge,
            utility,
            allow_mismatch,
            mode=abstention_mode(made, utility),
            fingerprint=made,
            relevance=file_labels_made_by(given),
        )
        columns.update(theta_columns(model, relevant, util))
    columns.update(classic_metrics(relevant))
    if qcare or (qcare is None and _has_qcare_labels(contexts)):
        outcomes = any(judge in c.outcomes for c in contexts)
        answers = judge if (qcare and outcomes) or _has_answer_labels(contexts, judge) else None
        where = os.fspath(given) if isinstance(given, str | os.PathLike) else "the contexts"
        check_label_inputs(contexts, [answers] if answers else [])
        warn_mixed_sources(contexts, where)
        if answers is not None:
            warn_given_outcome(contexts, answers, where)
        scores = qcare_scores(
            contexts, answers_from=answers, gain=qcare_gain, coverage=qcare_coverage
        )
        columns.update({name: v.filled(np.nan) for name, v in scores.values.items()})
        notes.extend(scores.notes())  # why a Q-CARE column is NaN, as `udcg qcare score` says
        if qcare and answers is None:  # every column: the judge has no outcomes to score
            columns.update({n: np.full(len(contexts), np.nan) for n in GENERATOR_METRICS})
    if erag or (erag is None and _has_erag_labels(contexts, judge)):
        columns.update(erag_columns(contexts, judge))
    frame = pd.DataFrame(columns)
    frame.attrs["notes"] = notes
    return frame
