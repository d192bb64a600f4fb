"""Annotate retrieved contexts through the judge: utilities, relevance and end-to-end outcomes.

* ``abstain``: ``passages[].abstain_prob[judge]`` with the reference prompt, one call per
  distinct (question, passage) pair;
* ``answer_likelihood``: ``passages[].answer_prob[judge]``, the likelihood of an acceptable
  answer given question and passage (max over ``answers`` of exp(mean token log-prob), see
  :meth:`udcg.judge.base.Judge.answer_prob`), one call per distinct (question, answers,
  passage); needs ``answers`` on every context (not a default step);
* ``relevance``: ``passages[].relevant`` for the passages that have none (a given label, e.g.
  from ``udcg contexts --qrels``, is kept; ``relabel_relevance`` recomputes every passage);
  ``string``: a normalised acceptable answer occurs in the passage (no LLM); ``llm``: the
  judge's P(Yes) that the passage directly supports an acceptable answer (>= 0.5; the soft
  value is kept in ``relevance_prob[judge]``). :attr:`AnnotationReport.relevance_kept` and
  ``relevance_computed`` count the labels kept and computed;
* ``outcomes``: the judge answers from the whole context (``outcomes[judge].answer``), graded
  by normalised sub-span match (``span``) or by the judge as CORRECT / INCORRECT / ABSTAINED
  (``llm``; an unparsable grade is counted and leaves ``correct`` unset, never a silent 0);
* ``erag``: eRAG's per-passage labels (:mod:`udcg.labels.erag`): the judge answers from each
  passage alone, graded as ``outcomes`` grades; ``passages[].erag[judge]`` (0/1) and
  ``passages[].erag_answer[judge]``, one generation per distinct (question, passage) (not a
  default step).

A value the judge could only bound from above (a server's top log-probs did not hold the token
asked for, :func:`udcg.judge.base.upper_bounds`) is kept and its field listed under the judge's
name in the passage's ``bounds``: ``"bounds": {"JUDGE": ["abstain_prob"]}`` (fields
``abstain_prob``, ``answer_prob``, ``relevance_prob``; no ``bounds`` key when every value is
exact). :attr:`AnnotationReport.bounds` counts them.

Every call goes through the judge (wrap it in the on-disk cache so that an interrupted run
resumes where it stopped). Large files are annotated chunk by chunk (:mod:`udcg.labels.stream`).
The command line is ``udcg annotate`` (:mod:`udcg.cli.annotate`).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypeVar

from udcg.errors import UDCGInputError, UDCGServiceError
from udcg.io.contexts.jsonl import Context, Passage
from udcg.judge.base import AbstainMode, Judge
from udcg.judge.prompts import Messages, answer_messages
from udcg.judge.requests import MissingResults, RefusedRequest, Request
from udcg.labels.answers import contains_answer, grade_span
from udcg.labels.batches import judge_call
from udcg.labels.erag import Grader, label_erag

T = TypeVar("T")

STEPS = ("abstain", "answer_likelihood", "relevance", "outcomes", "erag")
#: Steps run when none are named (answer likelihoods and eRAG labels are asked for explicitly).
DEFAULT_STEPS = ("abstain", "relevance", "outcomes")
GRADES = ("CORRECT", "INCORRECT", "ABSTAINED")
#: How ``relevance`` labels passages and how ``outcomes`` grades answers.
RELEVANCE_MODES = ("string", "llm")
GRADERS = ("span", "llm")
#: Passage ``extra`` key listing, per judge, the value fields that are only upper bounds.
BOUNDS = "bounds"


@dataclass
class AnnotationReport:
    """Counts of what an annotation run did.

    Examples:
        >>> report = AnnotationReport(contexts=2, pairs=3)
        >>> report.add(AnnotationReport(contexts=1, pairs=2))
        >>> report.contexts, report.pairs
        (3, 5)
    """

    contexts: int = 0
    pairs: int = 0
    answer_pairs: int = 0
    relevance_checks: int = 0
    answers: int = 0
    failures: Counter = field(default_factory=Counter)
    grades: Counter = field(default_factory=Counter)
    #: value field (``abstain_prob``, ``answer_prob``, ``relevance_prob``) -> distinct judge
    #: values that are only upper bounds
    bounds: Counter = field(default_factory=Counter)
    #: passages whose given ``relevant`` label was kept / computed by the relevance step
    relevance_kept: int = 0
    relevance_computed: int = 0
    #: distinct (question, passage) answers of the eRAG step and the grades of its passages
    erag_answers: int = 0
    erag_grades: Counter = field(default_factory=Counter)
    #: eRAG labels read back from a resumed output (``correct``, ``not correct``: the grade
    #: itself is not kept)
    erag_resumed: Counter = field(default_factory=Counter)

    def add(self, other: AnnotationReport) -> None:
        """Add the counts of ``other`` (another chunk of the same run) to these."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


def relevance_messages(question: str, answers: Sequence[str], passage: str) -> Messages:
    """The relevance check: is the passage RELEVANT, i.e. does it support an acceptable answer.

    Examples:
        >>> messages = relevance_messages("Who wrote Emma?", ["Jane Austen"], "Austen wrote it.")
        >>> [m["role"] for m in messages], messages[1]["content"].splitlines()[1]
        (['system', 'user'], 'Acceptable answers: Jane Austen')
    """
    return [
        {
            "role": "system",
            "content": "You judge whether a document is RELEVANT to a question: it is relevant "
            "only if it directly supports one of the acceptable answers. Reply Yes or No.",
        },
        {
            "role": "user",
            "content": f"Question: {question}\nAcceptable answers: {'; '.join(answers)}\n"
            f"Document: {passage}\nIs the document relevant? Answer Yes or No.",
        },
    ]


def grader_messages(question: str, answers: Sequence[str], answer: str) -> Messages:
    """The LLM grader: CORRECT, INCORRECT or ABSTAINED, one word.

    Examples:
        >>> messages = grader_messages("Who wrote Emma?", ["Jane Austen"], "Austen.")
        >>> messages[1]["content"].splitlines()[-2:]
        ['Model answer: Austen.', 'Grade:']
    """
    return [
        {
            "role": "system",
            "content": "Grade a model's answer against the acceptable answers. Reply with one "
            "word: CORRECT if it gives an acceptable answer, ABSTAINED if it declines to answer "
            "(for example NO-RESPONSE), INCORRECT otherwise.",
        },
        {
            "role": "user",
            "content": f"Question: {question}\nAcceptable answers: {'; '.join(answers)}\n"
            f"Model answer: {answer}\nGrade:",
        },
    ]


def parse_grade(text: str) -> str | None:
    """The first word of ``text`` if it is a grade, else None (strict).

    Examples:
        >>> parse_grade("correct."), parse_grade("ABSTAINED: none"), parse_grade("I'd say CORRECT")
        ('CORRECT', 'ABSTAINED', None)
    """
    words = text.strip().split()
    word = words[0].strip(".:,;!\"'").upper() if words else ""
    return word if word in GRADES else None


def operations(steps: Sequence[str], relevance: str) -> list[str]:
    """The judge operations an annotation with these steps and relevance mode may call (the
    LLM grader generates, as the answers do).

    Examples:
        >>> operations(["abstain", "relevance"], "llm")
        ['abstain_prob', 'yes_prob']
        >>> operations(["relevance", "outcomes"], "string")
        ['generate']
    """
    uses = {
        "abstain_prob": "abstain" in steps,
        "answer_prob": "answer_likelihood" in steps,
        "yes_prob": "relevance" in steps and relevance == "llm",
        "generate": "outcomes" in steps or "erag" in steps,
    }
    return [op for op, used in uses.items() if used]


def check_provided(judge: Judge, steps: Sequence[str], relevance: str) -> None:
    """Refuse, before any call, steps needing an operation ``judge`` does not compute (a
    ``precomputed:`` file has stored probabilities, no answers).

    Examples:
        >>> class Stored(Judge):
        ...     name, fingerprint, provides = "stored", "v1", frozenset({"abstain_prob"})
        >>> check_provided(Stored(), ["abstain"], "string")
        >>> check_provided(Stored(), ["abstain", "outcomes"], "string")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'steps': the judge 'stored' computes abstain_prob only;...
    """
    provided = judge.provides
    if provided is None:
        return
    for op in operations(steps, relevance):
        if op not in provided:
            step = next(s for s in STEPS if s in steps and op in operations([s], relevance))
            raise UDCGInputError(
                f"the judge {judge.name!r} computes {', '.join(sorted(provided))} only; step "
                f"{step} needs {op}: choose other --steps or a model judge",
                field="steps",
            )


def relabels(passage: Passage, relabel_relevance: bool) -> bool:
    """Whether the relevance step labels ``passage``: it has no label, or relabelling is asked.

    Examples:
        >>> relabels(Passage("d1"), False), relabels(Passage("d1", relevant=True), False)
        (True, False)
    """
    return relabel_relevance or passage.relevant is None


def _string_label(passage: Passage, answers: Sequence[str]) -> Passage:
    """``passage`` labelled by answer match; an LLM's ``relevance_prob`` (and its bound marks)
    for the label it replaces is dropped.

    Examples:
        >>> old = Passage("d1", text="Austen wrote Emma.", relevant=False,
        ...               extra={"relevance_prob": {"llama3": 0.1}})
        >>> new = _string_label(old, ["Austen"])
        >>> new.relevant, new.extra
        (True, {})
    """
    for name in passage.extra.get("relevance_prob") or {}:
        passage = with_bound(passage, name, "relevance_prob", False)
    extra = {k: v for k, v in passage.extra.items() if k != "relevance_prob"}
    return replace(passage, relevant=contains_answer(passage.text, answers), extra=extra)


def check_inputs(
    contexts: Iterable[Context],
    steps: Sequence[str],
    relevance: str,
    relabel_relevance: bool = False,
    judge: str | None = None,
) -> int:
    """Check every field the chosen steps need before any LLM call; the number of contexts.
    The relevance step needs answers (and, for ``llm``, the question) only for contexts with a
    passage it labels (see :func:`annotate`). With ``judge`` (the key labels are stored under),
    ``llm`` relevance refuses to keep a ``relevant`` label another judge's LLM computed (its
    ``relevance_prob`` names other judges and not this one, or this one's value disagrees with
    it): it is not a given label.

    Examples:
        >>> passages = [Passage("d1", text="Austen wrote Emma.")]
        >>> ctx = Context("q1", passages, question="Who wrote Emma?")
        >>> check_inputs([ctx], ["abstain"], "string")
        1
        >>> check_inputs([ctx], ["abstain", "outcomes"], "string")
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'answers': missing: step outcomes needs acceptable answers
    """
    asks_question = any(s in steps for s in ("abstain", "answer_likelihood", "outcomes", "erag"))
    count = 0
    for ctx in contexts:
        count += 1
        labels = "relevance" in steps and any(relabels(p, relabel_relevance) for p in ctx.passages)
        needs_answers = [
            s
            for s in ("answer_likelihood", "relevance", "outcomes", "erag")
            if s in steps and (s != "relevance" or labels)
        ]
        needs_question = asks_question or (labels and relevance == "llm")
        if needs_question and not (ctx.question and ctx.question.strip()):
            raise UDCGInputError("missing or empty", field="question", **ctx.location())
        if needs_answers and not ctx.answers:
            raise UDCGInputError(
                f"missing: step {', '.join(needs_answers)} needs acceptable answers",
                field="answers",
                **ctx.location(),
            )
        if "answer_likelihood" in steps:
            for j, answer in enumerate(ctx.answers or []):
                if not answer.strip():
                    raise UDCGInputError("empty answer", field=f"answers[{j}]", **ctx.location())
        if not ctx.passages:
            raise UDCGInputError("no passages to annotate", field="passages", **ctx.location())
        for i, passage in enumerate(ctx.passages):
            if passage.text is None or not passage.text.strip():
                raise UDCGInputError(
                    "missing or empty", field=f"passages[{i}].text", **ctx.location()
                )
            kept = not relabels(passage, relabel_relevance)
            if judge is not None and relevance == "llm" and kept:
                _check_kept_label(ctx, i, judge)
    return count


def _check_kept_label(ctx: Context, i: int, judge: str) -> None:
    """Refuse passage ``i``'s ``relevant`` label when another judge's LLM computed it: its
    ``relevance_prob`` names other judges and not ``judge``, or ``judge``'s value there (a
    probability, else an error) disagrees with it."""
    passage = ctx.passages[i]
    probs = passage.extra.get("relevance_prob")
    probs = probs if isinstance(probs, dict) else {}
    own = probs.get(judge)
    if own is not None and (
        isinstance(own, bool) or not isinstance(own, int | float) or not 0.0 <= own <= 1.0
    ):
        raise UDCGInputError(
            f"expected a probability in [0, 1], got {own!r}",
            field=f"passages[{i}].relevance_prob.{judge}",
            **ctx.location(),
        )
    if (probs and own is None) or (own is not None and (own >= 0.5) != passage.relevant):
        makers = ", ".join(sorted(n for n in probs if n != judge)) or "another run"
        raise UDCGInputError(
            f"was computed by the LLM of {makers} (relevance_prob), not given"
            f"{'' if own is None else f' (it disagrees with {judge}: {own!r})'}:"
            f" pass --relabel-relevance to label it with {judge}",
            field=f"passages[{i}].relevant",
            **ctx.location(),
        )


def refuse_stale_llm_labels(
    contexts: Iterable[Context], judge: str, fingerprint: str, recorded: str | None
) -> None:
    """Refuse a ``relevant`` label the relevance step would keep that judge key ``judge``'s LLM
    made (it holds ``relevance_prob[judge]``) when the input's manifest records that key's
    relevance labels from another fingerprint (``recorded``: the same key on another server or
    model, :func:`udcg.io.manifests.recorded_judges`): they are not this judge's.

    Examples:
        >>> p = Passage("d1", text="Emma.", relevant=True, extra={"relevance_prob": {"m": 0.9}})
        >>> refuse_stale_llm_labels([Context("q1", [p])], "m", "fp-2", "fp-2")  # the same
        >>> refuse_stale_llm_labels([Context("q1", [p])], "m", "fp-2", "fp-1")
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'passages[0].relevant': was computed by judge 'm' ...
    """
    if recorded is None or recorded == fingerprint:
        return
    for ctx in contexts:
        for i, p in enumerate(ctx.passages):
            if p.relevant is not None and judge in (p.extra.get("relevance_prob") or {}):
                raise UDCGInputError(
                    f"was computed by judge {judge!r} with the fingerprint {recorded} (the"
                    f" input's manifest), not by this one ({fingerprint}): pass"
                    " --relabel-relevance to label it again",
                    field=f"passages[{i}].relevant",
                    **ctx.location(),
                )


def with_bound(passage: Passage, name: str, value_field: str, bound: bool) -> Passage:
    """``passage`` with ``value_field`` listed under ``extra["bounds"][name]`` when ``bound``,
    and removed from that list otherwise (an empty list or mapping is dropped).

    Examples:
        >>> bounded = with_bound(Passage("d1"), "llama3", "abstain_prob", True)
        >>> bounded.extra, with_bound(bounded, "llama3", "abstain_prob", False).extra
        ({'bounds': {'llama3': ['abstain_prob']}}, {})
    """
    marks = passage.extra.get(BOUNDS, {})
    listed = value_field in marks.get(name, [])
    if bound == listed:
        return passage
    fields = [f for f in marks.get(name, []) if f != value_field] + [value_field] * bound
    new_marks = {k: v for k, v in marks.items() if k != name} | ({name: fields} if fields else {})
    extra = {k: v for k, v in passage.extra.items() if k != BOUNDS}
    return replace(passage, extra=extra | ({BOUNDS: new_marks} if new_marks else {}))


@contextmanager
def _named(holder: Callable[[int], Context]) -> Iterator[None]:
    """:class:`~udcg.judge.requests.MissingResults` of a judge call given the context that
    needs its first missing item: ``holder(i)`` of the item's position in the call."""
    try:
        yield
    except MissingResults as missing:
        if missing.context is None:
            missing.context = holder(missing.first)
        raise


def _located(annotate: Callable[..., T]) -> Callable[..., T]:
    """``annotate`` with a :class:`~udcg.judge.requests.RefusedRequest` of any step (a prompt
    over a local model's context) given as the file, line and query of the context that holds
    the refused item, whichever chunk, cache or batch it came in."""

    @functools.wraps(annotate)
    def located(contexts: Sequence[Context], *args: Any, **kwargs: Any) -> T:
        try:
            return annotate(contexts, *args, **kwargs)
        except RefusedRequest as refused:
            ctx = None if refused.request is None else _holder(contexts, refused.request)
            if ctx is None:
                raise
            where = ctx.location()
            raise UDCGInputError(f"context {ctx.qid!r}: {refused.reason}", **where) from None

    return located


def _holder(contexts: Sequence[Context], request: Request) -> Context | None:
    """The first context one of whose steps makes ``request``: a pair or triple of its
    question and a passage, or the messages of its answer, a passage's relevance check or
    eRAG answer, or its grading (any generated answer)."""
    got = request.inputs

    def makes(ctx: Context) -> bool:
        texts = [p.text for p in ctx.passages]
        if "messages" not in got:
            answers = "answers" not in got or tuple(got["answers"]) == tuple(ctx.answers)
            return ctx.question == got["question"] and got["passage"] in texts and answers
        messages = got["messages"]
        system, user = grader_messages(ctx.question, ctx.answers, "\0")
        before, _, after = user["content"].partition("\0")
        content = messages[1]["content"] if len(messages) == 2 else ""
        graded = messages[:1] == [system] and content.startswith(before) and content.endswith(after)
        return (
            graded
            or messages == answer_messages(ctx.question, texts)
            or any(messages == answer_messages(ctx.question, [t]) for t in texts)
            or any(messages == relevance_messages(ctx.question, ctx.answers, t) for t in texts)
        )

    return next((ctx for ctx in contexts if makes(ctx)), None)


def _holding(
    contexts: Sequence[Context], items: list[Any], passage_text: int
) -> Callable[[int], Context]:
    """The first context whose question (and answers, for triples) and a passage's text make
    item ``i`` of ``items`` (the text at position ``passage_text`` of the item)."""

    def holder(i: int) -> Context:
        item = items[i]
        return next(
            c
            for c in contexts
            if c.question == item[0]
            and (passage_text == 1 or tuple(c.answers) == item[1])
            and any(p.text == item[passage_text] for p in c.passages)
        )

    return holder


def _judged(
    judge: Judge,
    keys: list[Any],
    work: Callable[..., Sequence[Any]],
    label: str,
    batch: int,
    report: AnnotationReport,
    value_field: str,
    contexts: Sequence[Context],
) -> dict[Any, tuple[float, bool]]:
    """``key -> (value, is an upper bound)`` for each distinct key (a pair or a triple of the
    contexts' items), counted in ``report``; a value that is not a probability (NaN from a
    damaged model) is a :class:`~udcg.errors.UDCGServiceError` naming the judge and context."""
    holder = _holding(contexts, keys, len(keys[0]) - 1 if keys else 1)
    with _named(holder):
        values, bounds = judge_call(judge, keys, work, label, batch)
    report.bounds[value_field] += int(bounds.sum())
    for i, value in enumerate(values):
        if not 0.0 <= float(value) <= 1.0:
            ctx = holder(i)
            path, line = ctx.location()["path"], ctx.location()["line"]
            at = f" ({path}:{line})" if path is not None else ""
            raise UDCGServiceError(
                f"judge {judge.name!r} gave {value_field} {float(value)!r}, not a probability,"
                f" for a passage of context {ctx.qid!r}{at}: is the model damaged?"
            )
    return {k: (float(v), bool(b)) for k, v, b in zip(keys, values, bounds, strict=True)}


def answer_grader(judge: Judge, grader: str, batch: int = 64) -> Grader:
    """The grades of ``(question, answers, generated answer)`` items as ``outcomes`` grades
    them: :func:`~udcg.labels.answers.grade_span` (``span``), or the judge's reply to
    :func:`grader_messages` parsed by :func:`parse_grade` (``llm``, 4 new tokens).

    Examples:
        >>> grade = answer_grader(None, "span")
        >>> grade([("Who wrote Emma?", ("Jane Austen",), "Jane Austen."), ("Q?", ("x",), "y")])
        ['CORRECT', 'INCORRECT']
    """

    def grade(items: Sequence[tuple[str, tuple[str, ...], str]]) -> list[str | None]:
        if grader == "span":
            return [grade_span(answer, list(answers)) for _, answers, answer in items]
        texts, _ = judge_call(
            judge,
            [grader_messages(q, list(a), answer) for q, a, answer in items],
            lambda chunk, **kw: judge.generate(list(chunk), 4, **kw),
            "grading",
            batch,
        )
        return [parse_grade(t) for t in texts]

    return grade


@_located
def annotate(
    contexts: Sequence[Context],
    judge: Judge,
    steps: Sequence[str] = DEFAULT_STEPS,
    relevance: str = "string",
    grader: str = "span",
    mode: AbstainMode = "first_token",
    max_new_tokens: int = 32,
    batch: int = 64,
    relabel_relevance: bool = False,
) -> tuple[list[Context], AnnotationReport]:
    """New contexts with the requested labels added (inputs are not modified). The relevance
    step keeps the ``relevant`` labels the passages already have unless ``relabel_relevance``.

    Each step hands the judge all its distinct calls at once when the judge streams results
    (``streams_results``), else in batches of ``batch``.

    Examples:
        A precomputed judge gives the abstention probability; the string check finds an
        acceptable answer in the passage:

        >>> import json, tempfile
        >>> from pathlib import Path
        >>> from udcg.judge import load_judge
        >>> row = {"question": "Who wrote Emma?", "passage": "Austen did.", "abstain_prob": 0.1}
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (Path(folder) / "llama3.jsonl").write_text(json.dumps(row))
        ...     judge = load_judge(f"precomputed:{folder}/llama3.jsonl")
        >>> passages = [Passage("d1", text=row["passage"])]
        >>> ctx = Context("q1", passages, question=row["question"], answers=["Austen"])
        >>> (labelled,), report = annotate([ctx], judge, steps=["abstain", "relevance"])
        >>> labelled.passages[0].abstain_prob, labelled.passages[0].relevant, report.pairs
        ({'llama3': 0.1}, True, 1)
    """
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        raise UDCGInputError(
            f"unknown step {unknown[0]!r}; known: {', '.join(STEPS)}", field="steps"
        )
    if relevance not in RELEVANCE_MODES or grader not in GRADERS:
        raise UDCGInputError("relevance is string|llm and grader is span|llm", field="options")
    check_inputs(contexts, steps, relevance, relabel_relevance, judge.name)
    report = AnnotationReport(contexts=len(contexts))
    name = judge.name
    out = [
        replace(ctx, passages=list(ctx.passages), outcomes=dict(ctx.outcomes)) for ctx in contexts
    ]

    if "abstain" in steps:
        pairs = sorted({(c.question, p.text) for c in out for p in c.passages})
        report.pairs = len(pairs)
        lookup = _judged(
            judge,
            pairs,
            lambda chunk, **kw: judge.abstain_prob(
                [q for q, _ in chunk], [t for _, t in chunk], mode, **kw
            ),
            "abstention",
            batch,
            report,
            "abstain_prob",
            out,
        )
        for ctx in out:
            new = []
            for p in ctx.passages:
                prob, bound = lookup[(ctx.question, p.text)]
                p = replace(p, abstain_prob={**p.abstain_prob, name: prob})
                new.append(with_bound(p, name, "abstain_prob", bound))
            ctx.passages[:] = new

    if "answer_likelihood" in steps:
        triples = sorted({(c.question, tuple(c.answers), p.text) for c in out for p in c.passages})
        report.answer_pairs = len(triples)
        lookup = _judged(
            judge,
            triples,
            lambda chunk, **kw: judge.answer_prob(
                [q for q, _, _ in chunk],
                [t for _, _, t in chunk],
                [a for _, a, _ in chunk],
                **kw,
            ),
            "answer likelihood",
            batch,
            report,
            "answer_prob",
            out,
        )
        for ctx in out:
            key = (ctx.question, tuple(ctx.answers))
            new = []
            for p in ctx.passages:
                prob, bound = lookup[(*key, p.text)]
                p = replace(p, answer_prob={**p.answer_prob, name: prob})
                new.append(with_bound(p, name, "answer_prob", bound))
            ctx.passages[:] = new

    if "relevance" in steps:
        labelled = [p for c in out for p in c.passages]
        report.relevance_computed = sum(relabels(p, relabel_relevance) for p in labelled)
        report.relevance_kept = len(labelled) - report.relevance_computed
        if relevance == "string":
            for ctx in out:
                ctx.passages[:] = [
                    _string_label(p, ctx.answers) if relabels(p, relabel_relevance) else p
                    for p in ctx.passages
                ]
        else:
            triples = sorted(
                {
                    (c.question, tuple(c.answers), p.text)
                    for c in out
                    for p in c.passages
                    if relabels(p, relabel_relevance)
                }
            )
            report.relevance_checks = len(triples)
            lookup = _judged(
                judge,
                triples,
                lambda chunk, **kw: judge.yes_prob(
                    [relevance_messages(q, a, t) for q, a, t in chunk], **kw
                ),
                "relevance",
                batch,
                report,
                "relevance_prob",
                out,
            )
            for ctx in out:
                new = []
                for p in ctx.passages:
                    if not relabels(p, relabel_relevance):
                        new.append(p)
                        continue
                    prob, bound = lookup[(ctx.question, tuple(ctx.answers), p.text)]
                    extra = {
                        **p.extra,
                        "relevance_prob": {**p.extra.get("relevance_prob", {}), name: prob},
                    }
                    p = replace(p, relevant=prob >= 0.5, extra=extra)
                    new.append(with_bound(p, name, "relevance_prob", bound))
                ctx.passages[:] = new

    made = {"grader": grader, "max_new_tokens": max_new_tokens}  # recorded with each answer
    if "outcomes" in steps:
        prompts = [answer_messages(c.question, [p.text for p in c.passages]) for c in out]
        report.answers = len(prompts)
        with _named(out.__getitem__):
            answers, _ = judge_call(
                judge,
                prompts,
                lambda chunk, **kw: judge.generate(list(chunk), max_new_tokens, **kw),
                "answers",
                batch,
            )
        if grader == "span":
            grades: list[str | None] = [
                grade_span(a, c.answers) for a, c in zip(answers, out, strict=True)
            ]
        else:
            graded = [
                grader_messages(c.question, c.answers, a) for a, c in zip(answers, out, strict=True)
            ]
            with _named(out.__getitem__):
                texts, _ = judge_call(
                    judge,
                    graded,
                    lambda chunk, **kw: judge.generate(list(chunk), 4, **kw),
                    "grading",
                    batch,
                )
            grades = [parse_grade(t) for t in texts]
        for ctx, answer, grade in zip(out, answers, grades, strict=True):
            outcome: dict[str, Any] = {"answer": answer.strip(), **made}
            if grade is None:
                report.failures["unparsable grade"] += 1
                outcome["grade"] = "FAILED"
            else:
                report.grades[grade] += 1
                outcome.update(grade=grade, correct=grade == "CORRECT")
            ctx.outcomes[name] = outcome

    if "erag" in steps:
        out, report.erag_answers, report.erag_grades = label_erag(
            out,
            judge,
            answer_grader(judge, grader, batch),
            max_new_tokens,
            batch,
            made,
        )
        failed = report.erag_grades.pop("FAILED", 0)
        if failed:
            report.failures["unparsable eRAG grade"] += failed
    return out, report
