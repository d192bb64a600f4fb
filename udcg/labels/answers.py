"""Answer matching without an LLM: SQuAD-style normalisation and sub-span containment."""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Sequence

from udcg.judge.prompts import ABSTAIN_MARKER

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans({c: " " for c in string.punctuation + "‘’“”–—"})


def normalize(text: str) -> str:
    """Lower-case, strip accents, punctuation and articles, collapse whitespace.

    Examples:
        >>> normalize("The  Café, in Zürich!")
        'cafe in zurich'
    """
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if not unicodedata.combining(c)).lower()
    text = _ARTICLES.sub(" ", text.translate(_PUNCTUATION))
    return " ".join(text.split())


def contains_answer(text: str, answers: Sequence[str]) -> bool:
    """True when a normalised acceptable answer occurs in the normalised text, on word
    boundaries (``"1969"`` does not match ``"19690"``); empty answers never match.

    Examples:
        >>> contains_answer("It landed in July 1969.", ["1969"])
        True
        >>> contains_answer("Code 19690.", ["1969", ""])
        False
    """
    haystack = f" {normalize(text)} "
    return any(needle and f" {needle} " in haystack for needle in (normalize(a) for a in answers))


def is_abstention(text: str) -> bool:
    """The generator declined: its answer contains the abstention marker.

    Examples:
        >>> is_abstention("no-response"), is_abstention("Paris")
        (True, False)
    """
    return ABSTAIN_MARKER.lower() in text.lower()


def grade_span(generated: str, answers: Sequence[str]) -> str:
    """``CORRECT`` if an acceptable answer is a sub-span of the generated answer,
    ``ABSTAINED`` if it holds the abstention marker, else ``INCORRECT``.

    Examples:
        >>> [grade_span(g, ["Jane Austen"]) for g in ("jane austen.", "NO-RESPONSE", "Brontë")]
        ['CORRECT', 'ABSTAINED', 'INCORRECT']
    """
    if is_abstention(generated):
        return "ABSTAINED"
    return "CORRECT" if contains_answer(generated, answers) else "INCORRECT"
