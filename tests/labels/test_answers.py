"""Normalised sub-span matching of answers."""

from __future__ import annotations

import pytest

from udcg.labels.answers import contains_answer, grade_span, normalize


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The  Eiffel Tower!", "eiffel tower"),
        ("Wilhelm Conrad Röntgen", "wilhelm conrad rontgen"),
        ("an apple, a pear", "apple pear"),
        ("U.S.A.", "u s"),
    ],
)
def test_normalize(text: str, expected: str) -> None:
    assert normalize(text) == expected


def test_contains_answer_on_word_boundaries() -> None:
    assert contains_answer("It was Röntgen, in 1901.", ["Wilhelm Röntgen", "Rontgen"])
    assert contains_answer("landed in 1969", ["1969"])
    assert not contains_answer("landed in 19690", ["1969"])
    assert not contains_answer("Parisian cafes", ["Paris"])
    assert not contains_answer("anything", ["", "  "])


def test_grade_span() -> None:
    assert grade_span("Paris is the capital.", ["paris"]) == "CORRECT"
    assert grade_span("NO-RESPONSE", ["paris"]) == "ABSTAINED"
    assert grade_span("Lyon", ["paris"]) == "INCORRECT"
