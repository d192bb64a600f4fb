"""The shared checks of udcg.validation: one wording per check, plain numbers in messages."""

from __future__ import annotations

import numpy as np
import pytest

from udcg import metrics
from udcg.errors import UDCGInputError
from udcg.qcare.coverage import c_precision
from udcg.retrieval import check_depth
from udcg.theta import UDCGTheta
from udcg.validation import binary_vector, positive_int, show


@pytest.mark.parametrize(
    ("value", "shown"),
    [(np.float64(1.2), "1.2"), (np.int64(3), "3"), (1.5, "1.5"), (True, "True"), ("abc", "'abc'")],
)
def test_show_prints_numbers_plainly(value, shown: str) -> None:
    assert show(value) == shown


@pytest.mark.parametrize("k", ["abc", -1, 1.5, 0, True, np.float64(2.0)])
def test_k_has_one_message_everywhere(k) -> None:
    message = f"field 'k': must be a positive integer, got {show(k)}"
    for check in (
        lambda: positive_int(k, "k"),
        lambda: metrics.context_ndcg([[1, 0]], k=k),
        lambda: c_precision([[0.5, 0.0]], k=k),
        lambda: check_depth(k, []),
        lambda: UDCGTheta(k).fit(np.ones((4, 2)), np.ones((4, 2)), [0, 1, 0, 1]),
    ):
        with pytest.raises(UDCGInputError) as raised:
            check()
        assert str(raised.value) == message


def test_messages_show_numpy_values_plainly() -> None:
    with pytest.raises(UDCGInputError) as raised:
        binary_vector(np.array([0.0, 1.2]), "correct")
    assert str(raised.value) == "field 'correct': position 1: 1.2 is not 0/1"
    with pytest.raises(UDCGInputError) as raised:
        metrics.udcg([[1.0]], [[0.5]], np.float64(-1.5))
    assert str(raised.value) == "field 'gamma': gamma must be finite and >= 0, got -1.5"
