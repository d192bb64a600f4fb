"""Prompts of every judge call, as chat messages. The abstention prompt is the reference one;
the answer-likelihood prompt is the same conversation with an acceptable answer as the
assistant's reply (teacher-forced)."""

from __future__ import annotations

Messages = list[dict[str, str]]

ABSTAIN_MARKER = "NO-RESPONSE"

ABSTAIN_SYSTEM = (
    "You are given a question and you must respond based on the provided documents. "
    "Respond directly without providing any premise or explanation. "
    f"If none of the documents contain the answer, please respond with {ABSTAIN_MARKER}. "
    "Do not try to respond based on your own knowledge."
)


def abstain_messages(question: str, passage: str) -> Messages:
    """The reference abstention prompt for one question and one passage."""
    return [
        {"role": "system", "content": ABSTAIN_SYSTEM},
        {"role": "user", "content": f"Document: {passage}\nQuestion: {question}\nAnswer:"},
    ]


def answer_likelihood_messages(question: str, passage: str, answer: str) -> Messages:
    """The abstention prompt for one question and passage, answered by ``answer``: the
    conversation whose assistant turn :meth:`~udcg.judge.base.Judge.answer_prob` scores."""
    return [*abstain_messages(question, passage), {"role": "assistant", "content": answer}]


def answer_messages(question: str, passages: list[str]) -> Messages:
    """The same instructions with the whole retrieved context, for end-to-end answers."""
    documents = "".join(f"Document [{i}]: {p}\n" for i, p in enumerate(passages, start=1))
    return [
        {"role": "system", "content": ABSTAIN_SYSTEM},
        {"role": "user", "content": f"{documents}Question: {question}\nAnswer:"},
    ]
