"""Annotate retrieved contexts through the judge: utilities, relevance and end-to-end outcomes.

* ``abstain``: ``passages[].abstain_prob[judge]`` with the reference prompt, one call per
  distinct (question, passage) pair;
* ``answer_likelihood``: ``passages[].answer_prob[judge]``, the likelihood of an acceptable
  answer given question and passage (max over ``answers`` of exp(mean token log-prob), see
  :meth:`udcg.judge.base.Judge.answer_prob`), one call per distinct (question, answers,
  passage); needs ``answers`` on every context (not a default step);
* ``relevance``: ``passages[].relevant``; ``string``: a normalised acceptable answer occurs in
  the passage (no LLM); ``llm``: the judge's P(Yes) that the passage directly supports an
  acceptable answer (>= 0.5; the soft value is kept in ``relevance_prob[judge]``);
* ``outcomes``: the judge answers from the whole context (``outcomes[judge].answer``), graded
  by normalised sub-span match (``span``) or by the judge as CORRECT / INCORRECT / ABSTAINED
  (``llm``; an unparsable grade is counted and leaves ``correct`` unset, never a silent 0).

Every call goes through the judge (wrap it in the on-disk cache so that an interrupted run
resumes where it stopped). The command line is ``udcg annotate`` (:mod:`udcg.cli.annotate`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from udcg.errors import UDCGInputError
from udcg.io.contexts import Context
from udcg.judge.base import AbstainMode, Judge
from udcg.judge.prompts import Messages, answer_messages
from udcg.labels.answers import contains_answer, grade_span
from udcg.labels.batches import in_batches

STEPS = ("abstain", "answer_likelihood", "relevance", "outcomes")
#: Steps run when none are named (answer likelihoods are asked for explicitly).
DEFAULT_STEPS = ("abstain", "relevance", "outcomes")
GRADES = ("CORRECT", "INCORRECT", "ABSTAINED")
#: How ``relevance`` labels passages and how ``outcomes`` grades answers.
RELEVANCE_MODES = ("string", "llm")
GRADERS = ("span", "llm")
T = TypeVar("T")


@dataclass
class AnnotationReport:
    """Counts of what an annotation run did."""

    contexts: int = 0
    pairs: int = 0
    answer_pairs: int = 0
    relevance_checks: int = 0
    answers: int = 0
    failures: Counter = field(default_factory=Counter)
    grades: Counter = field(default_factory=Counter)


def relevance_messages(question: str, answers: Sequence[str], passage: str) -> Messages:
    """The relevance check: is the passage RELEVANT, i.e. does it support an acceptable answer."""
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
    """The LLM grader: CORRECT, INCORRECT or ABSTAINED, one word."""
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
    """The first word of ``text`` if it is a grade, else None (strict)."""
    words = text.strip().split()
    word = words[0].strip(".:,;!\"'").upper() if words else ""
    return word if word in GRADES else None


def check_inputs(contexts: Sequence[Context], steps: Sequence[str], relevance: str) -> None:
    """Check every field the chosen steps need before any LLM call."""
    needs_answers = [s for s in ("answer_likelihood", "relevance", "outcomes") if s in steps]
    needs_question = (
        "abstain" in steps
        or "answer_likelihood" in steps
        or "outcomes" in steps
        or relevance == "llm"
    )
    for ctx in contexts:
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


def annotate(
    contexts: Sequence[Context],
    judge: Judge,
    steps: Sequence[str] = DEFAULT_STEPS,
    relevance: str = "string",
    grader: str = "span",
    mode: AbstainMode = "first_token",
    max_new_tokens: int = 32,
    batch: int = 64,
) -> tuple[list[Context], AnnotationReport]:
    """New contexts with the requested labels added (inputs are not modified)."""
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        raise UDCGInputError(
            f"unknown step {unknown[0]!r}; known: {', '.join(STEPS)}", field="steps"
        )
    if relevance not in RELEVANCE_MODES or grader not in GRADERS:
        raise UDCGInputError("relevance is string|llm and grader is span|llm", field="options")
    check_inputs(contexts, steps, relevance)
    report = AnnotationReport(contexts=len(contexts))
    name = judge.name
    out = [
        replace(ctx, passages=list(ctx.passages), outcomes=dict(ctx.outcomes)) for ctx in contexts
    ]

    if "abstain" in steps:
        pairs = sorted({(c.question, p.text) for c in out for p in c.passages})
        report.pairs = len(pairs)
        probs = in_batches(
            pairs,
            batch,
            lambda chunk: judge.abstain_prob([q for q, _ in chunk], [t for _, t in chunk], mode),
            "abstention",
        )
        lookup = dict(zip(pairs, probs, strict=True))
        for ctx in out:
            ctx.passages[:] = [
                replace(
                    p, abstain_prob={**p.abstain_prob, name: float(lookup[(ctx.question, p.text)])}
                )
                for p in ctx.passages
            ]

    if "answer_likelihood" in steps:
        triples = sorted({(c.question, tuple(c.answers), p.text) for c in out for p in c.passages})
        report.answer_pairs = len(triples)
        likelihoods = in_batches(
            triples,
            batch,
            lambda chunk: judge.answer_prob(
                [q for q, _, _ in chunk], [t for _, _, t in chunk], [a for _, a, _ in chunk]
            ),
            "answer likelihood",
        )
        lookup = dict(zip(triples, likelihoods, strict=True))
        for ctx in out:
            key = (ctx.question, tuple(ctx.answers))
            ctx.passages[:] = [
                replace(p, answer_prob={**p.answer_prob, name: float(lookup[(*key, p.text)])})
                for p in ctx.passages
            ]

    if "relevance" in steps:
        if relevance == "string":
            for ctx in out:
                ctx.passages[:] = [
                    replace(p, relevant=contains_answer(p.text, ctx.answers)) for p in ctx.passages
                ]
        else:
            triples = sorted(
                {(c.question, tuple(c.answers), p.text) for c in out for p in c.passages}
            )
            report.relevance_checks = len(triples)
            soft = in_batches(
                triples,
                batch,
                lambda chunk: judge.yes_prob([relevance_messages(q, a, t) for q, a, t in chunk]),
                "relevance",
            )
            lookup = dict(zip(triples, soft, strict=True))
            for ctx in out:
                key = (ctx.question, tuple(ctx.answers))
                new = []
                for p in ctx.passages:
                    prob = float(lookup[(*key, p.text)])
                    extra = {
                        **p.extra,
                        "relevance_prob": {**p.extra.get("relevance_prob", {}), name: prob},
                    }
                    new.append(replace(p, relevant=prob >= 0.5, extra=extra))
                ctx.passages[:] = new

    if "outcomes" in steps:
        prompts = [answer_messages(c.question, [p.text for p in c.passages]) for c in out]
        report.answers = len(prompts)
        answers = in_batches(
            prompts, batch, lambda chunk: judge.generate(list(chunk), max_new_tokens), "answers"
        )
        if grader == "span":
            grades: list[str | None] = [
                grade_span(a, c.answers) for a, c in zip(answers, out, strict=True)
            ]
        else:
            texts = in_batches(
                [
                    grader_messages(c.question, c.answers, a)
                    for a, c in zip(answers, out, strict=True)
                ],
                batch,
                lambda chunk: judge.generate(list(chunk), 4),
                "grading",
            )
            grades = [parse_grade(t) for t in texts]
        for ctx, answer, grade in zip(out, answers, grades, strict=True):
            outcome: dict[str, Any] = {"answer": answer.strip(), "grader": grader}
            if grade is None:
                report.failures["unparsable grade"] += 1
                outcome["grade"] = "FAILED"
            else:
                report.grades[grade] += 1
                outcome.update(grade=grade, correct=grade == "CORRECT")
            ctx.outcomes[name] = outcome
    return out, report
