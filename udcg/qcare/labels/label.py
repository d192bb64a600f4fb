"""The Q-CARE labelling pipeline: decompositions and the four checks for a batch of contexts.

Every judge call is made once per distinct input across the whole batch (the same question
under several runs is decomposed once, the same sub-query x chunk pair is checked once) and
goes through whatever cache the judge has, so a rerun only computes what is missing.

What is written (see :mod:`udcg.io.contexts.jsonl`):

* ``subqueries`` (kept when the context already has them, e.g. written by a human); a
  conversational query (:mod:`udcg.qcare.conversation`) is decomposed given its earlier
  turns, once per distinct (question, history);
* ``qcare_labels``, the record of who labelled the context: ``judge`` (its key),
  ``fingerprint``, ``subqueries`` (``"given"`` or ``"judge"``), ``outcomes`` (the models
  whose answers it labelled), ``checks`` (how its Yes/No labels were read: ``logprobs``,
  ``text`` or both) and ``inputs`` (short digests of the question, of the passages' texts in
  order and of each labelled outcome's answer, so that a later run and the readers see when
  they changed: :func:`udcg.io.contexts.sources.label_inputs`);
* ``passages[].covers[s]`` (hard) and ``passages[].covers_prob[s]`` (soft, null for text
  labels and for values the server only bounded);
* with ``answers_from=MODEL``, in ``outcomes[MODEL]``: ``claims`` of its ``answer``,
  ``claim_relevance[f][s]``, ``subquery_covered[s]`` and ``claim_support[f][chunk]``, each with
  its ``_prob`` twin. A sub-query with no relevant claim is not covered (no call); when a
  relevance check had no usable answer, its coverage is unknown (null, no call).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from udcg.errors import UDCGInputError
from udcg.io.contexts.checks import OUTCOME_LABELS
from udcg.io.contexts.jsonl import Context
from udcg.io.contexts.sources import RECORD, changed_inputs, label_inputs
from udcg.judge.base import Judge
from udcg.qcare.conversation import history_of
from udcg.qcare.labels import prompts as qp
from udcg.qcare.labels.checks import CheckMode, YesNoChecker
from udcg.qcare.labels.decompose import MIN_ANSWER_CHARS, decompose_answers, decompose_queries
from udcg.validation import nonnegative_int

#: Chunks the reference pipeline judges per query.
REFERENCE_TOP_K = 10
CHECKS = ("coverage", "claim_relevance", "claims_cover", "claim_support")
#: Outcome fields ``label_contexts`` writes for ``answers_from``; those indexed by sub-query.
PER_SUBQUERY = tuple(n for n in OUTCOME_LABELS if n.startswith(("subquery", "claim_rel")))


@dataclass
class QCareReport:
    """What a labelling run did. ``prompts`` counts the distinct prompts of each stage (what
    a cold run sends, before the cache; text-mode and JSON retries included in ``checks`` and
    ``fallbacks``); ``reference_calls`` is the number of LLM calls the reference pipeline
    makes for the same contexts (one run per context, no sharing), from the same sizes.

    Examples:
        >>> report = QCareReport(contexts=2)
        >>> report.prompts["coverage"] += 6
        >>> report.judge_calls, report.labels["coverage"]
        (6, Counter())
    """

    contexts: int = 0
    questions: int = 0
    answers: int = 0
    subqueries: int = 0
    claims: int = 0
    labels: dict[str, Counter] = field(default_factory=lambda: {c: Counter() for c in CHECKS})
    fallbacks: Counter = field(default_factory=Counter)
    prompts: Counter = field(default_factory=Counter)
    checks: Counter = field(default_factory=Counter)
    text_reason: str | None = None
    reference_calls: int = 0
    replaced: int = 0
    dropped: Counter = field(default_factory=Counter)
    stale: Counter = field(default_factory=Counter)

    @property
    def judge_calls(self) -> int:
        """Model calls of a cold run: generations (with retries) and Yes/No prompts."""
        return (
            self.fallbacks["generation prompts"]
            + sum(self.prompts[c] for c in CHECKS)
            + self.checks["retried"]
        )


def answer_of(ctx: Context, model: str) -> str:
    """``outcomes[model].answer`` of a context, or a located error.

    Examples:
        >>> from udcg.io.contexts.model import Passage
        >>> outcomes = {"m": {"answer": "Austen."}}
        >>> ctx = Context("q1", [Passage("d1", text="t")], question="Who?", outcomes=outcomes)
        >>> answer_of(ctx, "m")
        'Austen.'
        >>> answer_of(ctx, "other")
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'outcomes.other.answer': missing or not a string ...
    """
    answer = ctx.outcomes.get(model, {}).get("answer")
    if not isinstance(answer, str):
        present = sorted(m for m, o in ctx.outcomes.items() if isinstance(o.get("answer"), str))
        hint = f"; models with an answer: {', '.join(present)}" if present else ""
        raise UDCGInputError(
            f"missing or not a string (qid {ctx.qid!r}){hint}",
            field=f"outcomes.{model}.answer",
            **ctx.location(),
        )
    return answer


def check_inputs(contexts: Sequence[Context], answers_from: str | None) -> None:
    """Every field the pipeline needs, checked before any judge call.

    Examples:
        >>> from udcg.io.contexts.model import Passage
        >>> outcomes = {"m": {"answer": "Austen."}}
        >>> ctx = Context("q1", [Passage("d1", text="t")], question="Who?", outcomes=outcomes)
        >>> check_inputs([ctx], answers_from="m")  # nothing missing
        >>> check_inputs([Context("q2", [Passage("d1")], question="Who?")], None)
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'passages[0].text': missing or empty
    """
    for ctx in contexts:
        if not (ctx.question and ctx.question.strip()):
            raise UDCGInputError("missing or empty", field="question", **ctx.location())
        for i, passage in enumerate(ctx.passages):
            if passage.text is None or not passage.text.strip():
                raise UDCGInputError(
                    "missing or empty", field=f"passages[{i}].text", **ctx.location()
                )
        if answers_from is not None:
            answer_of(ctx, answers_from)


def _written_labels(ctx: Context, answers_from: str | None) -> str | None:
    """The first label field of ``ctx`` that labelling it would write, or None."""
    for i, p in enumerate(ctx.passages):
        for name in ("covers", "covers_prob"):
            if (p.covers if name == "covers" else p.extra.get(name)) is not None:
                return f"passages[{i}].{name}"
    outcome = ctx.outcomes.get(answers_from, {}) if answers_from is not None else {}
    return next((f"outcomes.{answers_from}.{n}" for n in OUTCOME_LABELS if n in outcome), None)


class _Prepared(NamedTuple):
    """A context made ready to label: see :func:`_prepare`."""

    context: Context
    record: dict[str, Any]
    replaced: bool
    dropped: list[str]
    stale: list[str]


def _prepare(ctx: Context, judge: Judge, answers_from: str | None, relabel: bool) -> _Prepared:
    """The context to label, its new record, whether labels not this judge's are replaced,
    the models whose labels by another judge were dropped and those whose labels by this
    judge were dropped as stale.

    Labels written by this judge (same fingerprint in the record) are recomputed; labels of
    another judge or without a record are refused unless ``relabel``, which replaces them
    (sub-queries the other judge decomposed are decomposed again, its labels of other
    outcomes are dropped). When the question or the passages differ from those the record's
    ``inputs`` name, this judge's sub-queries are decomposed again (question) and its labels
    of other outcomes are dropped, as are those of an outcome whose answer differs (a record
    without ``inputs`` is taken as matching: :func:`~udcg.io.contexts.sources.changed_inputs`).
    Labels per sub-query that would outlive their sub-queries are refused."""
    old = ctx.extra.get(RECORD) if isinstance(ctx.extra.get(RECORD), dict) else {}
    own = bool(old) and old.get("fingerprint") == judge.fingerprint
    theirs = [] if own else [m for m in old.get("outcomes", []) if m in ctx.outcomes]
    if own:  # its passages' labels are this judge's, an outcome's only if its record lists it
        listed = answers_from in old.get("outcomes", [])
        outcome = {} if listed or answers_from is None else ctx.outcomes.get(answers_from, {})
        written = next(
            (f"outcomes.{answers_from}.{n}" for n in OUTCOME_LABELS if n in outcome), None
        )
    else:
        written = _written_labels(ctx, answers_from) or next(
            (f"outcomes.{m}.{n}" for m in theirs for n in OUTCOME_LABELS if n in ctx.outcomes[m]),
            None,
        )
    if written is not None and not relabel:
        who = f"judge {old.get('judge')!r}" if old else f"given: no {RECORD} record"
        by = f"judge {judge.name!r}"
        if own:
            who = f"given: the {RECORD} record of judge {judge.name!r} does not list it"
        elif old.get("judge") == judge.name:  # one key, two fingerprints: say which
            who += f" with fingerprint {old.get('fingerprint')!r}"
            by += f" with fingerprint {judge.fingerprint!r}"
        raise UDCGInputError(
            f"holds labels already ({who}); labelling would replace them with the labels of "
            f"{by}: pass --relabel (relabel=True) to replace them, or remove them",
            field=written,
            **ctx.location(),
        )
    models = set(old.get("outcomes", [])) if own else set()
    changed = set(changed_inputs(ctx, models)) if own else set()
    from_judge = old.get("subqueries") == "judge"
    subqueries = ctx.subqueries if (own and "question" not in changed) or not from_judge else None
    stale = sorted(
        m for m in models - {answers_from} if changed & {"question", "passages", f"outcomes.{m}"}
    )
    models -= set(stale)
    outcomes = dict(ctx.outcomes)
    dropped = [m for m in theirs if m != answers_from]
    for model in [*dropped, *stale]:
        outcome = outcomes.get(model, {})
        outcomes[model] = {k: v for k, v in outcome.items() if k not in OUTCOME_LABELS}
    if subqueries is None:
        for model, outcome in outcomes.items():
            per_subquery = next((n for n in PER_SUBQUERY if n in outcome), None)
            if model != answers_from and per_subquery is not None:
                raise UDCGInputError(
                    "labels per sub-query, but the judge is to decompose the sub-queries: "
                    "give `subqueries` with these labels or remove them",
                    field=f"outcomes.{model}.{per_subquery}",
                    **ctx.location(),
                )
    kept = models - {answers_from}  # this judge's labels of other outcomes, kept as they are
    models |= {answers_from} if answers_from else set()
    earlier = old.get("checks") if kept and isinstance(old.get("checks"), list) else []
    record = {
        "judge": judge.name,
        "fingerprint": judge.fingerprint,
        "subqueries": "judge" if subqueries is None or from_judge else "given",
        "outcomes": sorted(models),
        "checks": earlier,  # how the labels kept from this judge's earlier runs were read
        "inputs": label_inputs(ctx, models),
    }
    extra = {k: v for k, v in ctx.extra.items() if k != RECORD}
    replaced = written is not None  # for this judge: labels of an outcome it never labelled
    context = replace(ctx, subqueries=subqueries, outcomes=outcomes, extra=extra)
    return _Prepared(context, record, replaced, dropped, [m for m in stale if m in ctx.outcomes])


def _run_checks(
    checker: YesNoChecker, name: str, keys: list[Any], build: Any, report: QCareReport
) -> dict[Any, tuple[float | None, bool | None]]:
    """``{key: (soft, hard)}`` for distinct keys, counting prompts and yes/no/unusable labels."""
    report.prompts[name] += len(keys)
    soft, hard = checker([build(*key) for key in keys], name.replace("_", " "))
    for value in hard:
        report.labels[name]["unusable" if value is None else ("yes" if value else "no")] += 1
    return dict(zip(keys, zip(soft, hard, strict=True), strict=True))


def _reference_calls(ctx: Context, answer: str | None, claims: list[str], relevant: int) -> int:
    """LLM calls of the reference pipeline for one context: decomposition, k x |SQ| coverage
    checks (top 10 chunks) and, with an answer, fact extraction (skipped below 3 characters;
    at least one fact), |SQ| x |F| relevance checks, one support call per chunk and one
    coverage call per sub-query with a relevant fact."""
    n_sub, k = len(ctx.subqueries or []), min(len(ctx.passages), REFERENCE_TOP_K)
    calls = 1 + k * n_sub
    if answer is not None:
        n_facts = max(len(claims), 1)
        calls += int(len(answer.strip()) >= MIN_ANSWER_CHARS) + n_sub * n_facts + k + relevant
    return calls


def label_contexts(
    contexts: Sequence[Context],
    judge: Judge,
    answers_from: str | None = None,
    checks: CheckMode = "auto",
    retries: int = 2,
    batch: int = 64,
    relabel: bool = False,
) -> tuple[list[Context], QCareReport]:
    """New contexts with Q-CARE labels (inputs are not modified) and a report.

    ``answers_from`` names the outcome whose ``answer`` is decomposed and checked (a model's
    generated answer, or any user-supplied one); without it only retrieval coverage is
    labelled. ``checks`` picks how Yes/No labels are read (see :mod:`udcg.qcare.labels.checks`);
    ``retries`` bounds the retries of malformed JSON and Yes/No replies. Labels the input
    already holds are recomputed when this judge wrote them (the ``qcare_labels`` record) and
    refused otherwise, unless ``relabel`` (then replaced; see :func:`_prepare`).

    Examples:
        Sub-queries given, no answer: one coverage check, read from log-probs:

        >>> import numpy as np
        >>> from udcg.io.contexts.model import Context, Passage
        >>> from udcg.judge import Judge
        >>> class Sure(Judge):  # P(Yes) = 0.9 for every check
        ...     name = fingerprint = "sure"
        ...     def yes_prob(self, prompts):
        ...         return np.full(len(prompts), 0.9)
        ...     abstain_prob = generate = None
        >>> passages = [Passage("d1", text="Austen wrote Emma.")]
        >>> question = "Who wrote Emma?"
        >>> ctx = Context("q1", passages, question=question, subqueries=[question])
        >>> (labelled,), report = label_contexts([ctx], Sure())
        >>> labelled.passages[0].covers, labelled.passages[0].extra, report.judge_calls
        ([True], {'covers_prob': [0.9]}, 1)
    """
    check_inputs(contexts, answers_from)
    report = QCareReport(contexts=len(contexts))
    prepared = [_prepare(c, judge, answers_from, relabel) for c in contexts]
    for ready in prepared:
        report.replaced += ready.replaced
        report.dropped.update(ready.dropped)
        report.stale.update(ready.stale)
    contexts = [ready.context for ready in prepared]
    retries = nonnegative_int(retries, "retries")
    checker = YesNoChecker(judge, checks, retries=retries, batch=batch)

    queries = [(c.question, history_of(c)) for c in contexts]  # (latest turn, history)
    need = sorted({q for c, q in zip(contexts, queries, strict=True) if c.subqueries is None})
    found = decompose_queries(
        judge, [q for q, _ in need], retries, report.fallbacks, [h for _, h in need]
    )
    decomposed = dict(zip(need, found, strict=True))
    out = [
        replace(ctx, subqueries=decomposed[q]) if ctx.subqueries is None else ctx
        for ctx, q in zip(contexts, queries, strict=True)
    ]
    per_question = {q: c.subqueries for q, c in zip(queries, out, strict=True)}
    report.questions = len(per_question)
    report.subqueries = sum(len(s) for s in per_question.values())

    coverage = _run_checks(
        checker,
        "coverage",
        sorted({(s, p.text) for c in out for s in c.subqueries for p in c.passages}),
        qp.chunk_coverage,
        report,
    )
    out = [
        replace(
            ctx,
            passages=[
                replace(
                    p,
                    covers=[coverage[(s, p.text)][1] for s in ctx.subqueries],
                    extra={
                        **p.extra,
                        "covers_prob": [coverage[(s, p.text)][0] for s in ctx.subqueries],
                    },
                )
                for p in ctx.passages
            ],
        )
        for ctx in out
    ]
    if answers_from is None:
        report.reference_calls = sum(_reference_calls(c, None, [], 0) for c in out)
    else:
        out = _label_answers(out, checker, answers_from, retries, report)
    report.checks.update(+checker.counts)
    report.text_reason = checker.text_reason
    routes = [r for r in ("logprobs", "text") if checker.counts[r]]
    out = [
        replace(
            c,
            extra={
                **c.extra,
                RECORD: {**r.record, "checks": sorted({*r.record["checks"], *routes})},
            },
        )
        for c, r in zip(out, prepared, strict=True)
    ]
    return out, report


def _label_answers(
    contexts: list[Context],
    checker: YesNoChecker,
    model: str,
    retries: int,
    report: QCareReport,
) -> list[Context]:
    """Claims and the three answer checks for ``outcomes[model].answer``."""
    answers = [answer_of(c, model) for c in contexts]
    asked = [(c.question, history_of(c), a) for c, a in zip(contexts, answers, strict=True)]
    keys = sorted(set(asked))
    report.answers = len(keys)
    claims_of = dict(
        zip(
            keys,
            decompose_answers(
                checker.judge,
                [q for q, _, _ in keys],
                [a for _, _, a in keys],
                retries,
                report.fallbacks,
                [h for _, h, _ in keys],
            ),
            strict=True,
        )
    )
    report.claims = sum(len(c) for c in claims_of.values())
    claims = [claims_of[key] for key in asked]
    pairs = list(zip(contexts, claims, strict=True))
    relevance = _run_checks(
        checker,
        "claim_relevance",
        sorted({(s, f) for c, fs in pairs for s in c.subqueries for f in fs}),
        qp.claim_relevance,
        report,
    )
    support = _run_checks(
        checker,
        "claim_support",
        sorted({(f, p.text) for c, fs in pairs for f in fs for p in c.passages}),
        qp.claim_support,
        report,
    )
    # claims-cover-sub-query: asked only of the claims judged relevant to the sub-query
    cover_key: list[list[tuple[str, tuple[str, ...]] | bool | None]] = []
    for ctx, fs in zip(contexts, claims, strict=True):
        row: list[tuple[str, tuple[str, ...]] | bool | None] = []
        for s in ctx.subqueries:
            hard = [relevance[(s, f)][1] for f in fs]
            if None in hard:
                report.fallbacks["coverage unknown (relevance unusable)"] += 1
                row.append(None)
            elif not any(hard):
                row.append(False)
            else:
                row.append((s, tuple(f for f, h in zip(fs, hard, strict=True) if h)))
        cover_key.append(row)
    covered = _run_checks(
        checker,
        "claims_cover",
        sorted({key for row in cover_key for key in row if isinstance(key, tuple)}),
        lambda s, fs: qp.claims_cover(s, fs),
        report,
    )
    out = []
    for ctx, answer, fs, row in zip(contexts, answers, claims, cover_key, strict=True):
        labels: dict[str, Any] = {"claims": fs}
        grids = {
            "claim_relevance": [[relevance[(s, f)] for s in ctx.subqueries] for f in fs],
            "subquery_covered": [covered[k] if isinstance(k, tuple) else (None, k) for k in row],
            "claim_support": [[support[(f, p.text)] for p in ctx.passages] for f in fs],
        }
        for name, grid in grids.items():
            labels[name] = _component(grid, 1)
            labels[f"{name}_prob"] = _component(grid, 0)
        relevant = sum(isinstance(k, tuple) for k in row)
        report.reference_calls += _reference_calls(ctx, answer, fs, relevant)
        outcomes = {**ctx.outcomes, model: {**ctx.outcomes[model], **labels}}
        out.append(replace(ctx, outcomes=outcomes))
    return out


def _component(grid: list[Any], index: int) -> list[Any]:
    """Element ``index`` of every ``(soft, hard)`` pair of a nested list."""
    return [_component(item, index) if isinstance(item, list) else item[index] for item in grid]
