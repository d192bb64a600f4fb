"""Query and answer decomposition through the judge (JSON generation with bounded retries).

* A query becomes a list of minimal self-contained sub-queries. A single sub-query means a
  single-focus query, which stays as it is: the original query text is kept verbatim. When
  generation fails after the retries, the query is its own single sub-query (a counted
  fallback).
* An answer becomes a list of atomic claims. An empty answer or an abstention (NO-RESPONSE)
  makes no claim; an answer shorter than :data:`MIN_ANSWER_CHARS` characters is its own claim
  (no call); when generation fails, the whole answer is its own claim (a counted fallback).

Exact duplicates (after case and whitespace folding) are dropped from both lists.

A conversational query (:mod:`udcg.qcare.conversation`) is its latest user turn plus the
earlier turns (``histories``): the prompts show the history and ask for sub-queries (claims)
that stand without it, so a single sub-query is kept as the judge rewrote it (the latest turn
alone, "When was it published?", would not stand on its own); a failed decomposition still
falls back to the latest turn, counted. Without history nothing changes, prompts included.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from udcg.judge.base import JSONResult, Judge
from udcg.judge.prompts import Messages
from udcg.labels.answers import is_abstention
from udcg.labels.batches import in_batches
from udcg.qcare.labels import prompts as qp
from udcg.qcare.labels.prompts import History

MIN_ANSWER_CHARS = 3
MAX_ITEMS = 12
_GENERATE_TOKENS = 64


def _string_list(value: Any, key: str) -> list[str]:
    """The de-duplicated non-empty strings of ``{key: [...]}`` (or of a bare list)."""
    if isinstance(value, dict):
        if key not in value:
            raise ValueError(f"expected an object with a {key!r} list")
        value = value[key]
    if not isinstance(value, list) or not value:
        raise ValueError(f"{key!r} must be a non-empty list of strings")
    if len(value) > MAX_ITEMS:
        raise ValueError(f"{key!r} has {len(value)} items, at most {MAX_ITEMS} expected")
    out: dict[str, str] = {}
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise ValueError(f"{key!r} items must be non-empty strings, got {item!r}")
        if not any(ch.isalnum() for ch in item):  # the prompt's own "..." echoed back
            raise ValueError(f"{key!r} items must hold words, got the placeholder {item!r}")
        text = " ".join(item.split())
        out.setdefault(text.casefold(), text)
    return list(out.values())


def subqueries_value(value: Any) -> list[str]:
    """Validator of a query decomposition reply.

    Examples:
        Duplicates (case and spaces folded) are dropped; an item without a letter or digit
        (the prompt's ``"..."`` echoed back) is refused, so the reply is retried:

        >>> subqueries_value({"subqueries": ["Who wrote Emma?", " who wrote  emma? ", "When?"]})
        ['Who wrote Emma?', 'When?']
        >>> subqueries_value({"subqueries": ["...", "..."]})
        Traceback (most recent call last):
        ...
        ValueError: 'subqueries' items must hold words, got the placeholder '...'
    """
    return _string_list(value, "subqueries")


def claims_value(value: Any) -> list[str]:
    """Validator of an answer decomposition reply.

    Examples:
        >>> claims_value(["Austen  wrote Emma."])
        ['Austen wrote Emma.']
        >>> claims_value([])
        Traceback (most recent call last):
        ...
        ValueError: 'claims' must be a non-empty list of strings
    """
    return _string_list(value, "claims")


subqueries_value.cache_id = "udcg.qcare:subqueries-v2"  # type: ignore[attr-defined]
claims_value.cache_id = "udcg.qcare:claims-v2"  # type: ignore[attr-defined]


def _generate(
    judge: Judge, prompts: list[Messages], validate: Any, retries: int, label: str, counts: Counter
) -> list[JSONResult]:
    """``judge.generate_json`` in batches with a progress bar; counts the model calls a cold
    run makes (``generation prompts``, retries included) and the retried items."""
    results = in_batches(
        prompts,
        16,
        lambda chunk: judge.generate_json(list(chunk), validate, _GENERATE_TOKENS, retries),
        label,
    )
    for result in results:
        counts["generation prompts"] += result.attempts
        counts["retried decompositions"] += int(result.attempts > 1)
    return results


def _histories(histories: Sequence[History] | None, n: int) -> list[History]:
    if histories is None:
        return [()] * n
    if len(histories) != n:
        raise ValueError(f"{len(histories)} histories for {n} questions")
    return list(histories)


def decompose_queries(
    judge: Judge,
    questions: Sequence[str],
    retries: int = 2,
    counts: Counter | None = None,
    histories: Sequence[History] | None = None,
) -> list[list[str]]:
    """Sub-queries of each question; ``counts["subquery fallback"]`` counts failures.
    ``histories[i]``: the earlier turns of question i's conversation (``(role, content)``
    pairs; empty for a single-turn query).

    Examples:
        >>> from udcg.judge import Judge
        >>> class Replies(Judge):  # generates one fixed text, has no log-probs
        ...     name = fingerprint = "replies"
        ...     def __init__(self, text):
        ...         self.text = text
        ...     def yes_prob(self, prompts):
        ...         raise NotImplementedError("no log-probs")
        ...     abstain_prob = None  # not used here
        ...     def generate(self, prompts, max_new_tokens=64):
        ...         return [self.text] * len(prompts)
        >>> judge = Replies('["Who wrote Emma?", "When was Emma published?"]')
        >>> decompose_queries(judge, ["Who wrote Emma, and when?"])
        [['Who wrote Emma?', 'When was Emma published?']]
        >>> decompose_queries(Replies("no JSON here"), ["Who wrote Emma?"], retries=0)
        [['Who wrote Emma?']]

        In a conversation, a single sub-query is the judge's standalone rewrite:

        >>> history = [("user", "Who wrote Emma?"), ("assistant", "Jane Austen.")]
        >>> judge = Replies('["When was Emma published?"]')
        >>> decompose_queries(judge, ["When was it published?"], histories=[history])
        [['When was Emma published?']]
    """
    counts = Counter() if counts is None else counts
    histories = _histories(histories, len(questions))
    results = _generate(
        judge,
        [qp.query_decomposition(q, h) for q, h in zip(questions, histories, strict=True)],
        subqueries_value,
        retries,
        "sub-queries",
        counts,
    )
    out = []
    for question, history, result in zip(questions, histories, results, strict=True):
        if not result.ok:
            counts["subquery fallback"] += 1
            out.append([question])
        elif len(result.value) == 1 and not history:
            out.append([question])  # single-focus: the query stays as it is
        else:
            out.append(list(result.value))
    return out


def decompose_answers(
    judge: Judge,
    questions: Sequence[str],
    answers: Sequence[str],
    retries: int = 2,
    counts: Counter | None = None,
    histories: Sequence[History] | None = None,
) -> list[list[str]]:
    """Claims of each answer (see the module docstring for the special cases);
    ``histories[i]``: the earlier turns of question i's conversation.

    Examples:
        An abstention makes no claim and a 2-character answer is its own (neither asks the
        judge):

        >>> from udcg.judge import Judge
        >>> class Replies(Judge):  # generates one fixed text, has no log-probs
        ...     name = fingerprint = "replies"
        ...     def __init__(self, text):
        ...         self.text = text
        ...     def yes_prob(self, prompts):
        ...         raise NotImplementedError("no log-probs")
        ...     abstain_prob = None  # not used here
        ...     def generate(self, prompts, max_new_tokens=64):
        ...         return [self.text] * len(prompts)
        >>> judge = Replies('["Austen wrote Emma.", "Emma appeared in 1815."]')
        >>> decompose_answers(judge, ["q"] * 3, ["Jane Austen, in 1815.", "NO-RESPONSE", "42"])
        [['Austen wrote Emma.', 'Emma appeared in 1815.'], [], ['42']]
    """
    counts = Counter() if counts is None else counts
    histories = _histories(histories, len(answers))
    out: list[list[str] | None] = [None] * len(answers)
    ask = []
    for i, answer in enumerate(answers):
        text = " ".join(answer.split())
        if not text or is_abstention(text):
            counts["no claims (empty or abstained answer)"] += 1
            out[i] = []
        elif len(text) < MIN_ANSWER_CHARS:
            counts["short answer is its own claim"] += 1
            out[i] = [text]
        else:
            ask.append(i)
    results = _generate(
        judge,
        [qp.answer_decomposition(questions[i], answers[i], histories[i]) for i in ask],
        claims_value,
        retries,
        "claims",
        counts,
    )
    for i, result in zip(ask, results, strict=True):
        if result.ok:
            out[i] = list(result.value)
        else:
            counts["claim fallback"] += 1
            out[i] = [" ".join(answers[i].split())]
    return [claims for claims in out if claims is not None]
