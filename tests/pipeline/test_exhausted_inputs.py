"""Contexts that are not there (an empty list, an iterator consumed by an earlier call) are
refused as such, not as a missing judge key or an empty result."""

from __future__ import annotations

import importlib.util

import pytest

import udcg
from udcg.errors import UDCGInputError

JUDGE = "smollm2-135m"
_PANDAS = pytest.mark.skipif(
    importlib.util.find_spec("pandas") is None, reason="score_contexts needs pandas"
)
CALLS = [
    pytest.param(udcg.score_contexts, id="score_contexts", marks=_PANDAS),
    pytest.param(
        lambda c: udcg.score_contexts(c, judge_key=JUDGE),
        id="score_contexts(judge_key)",
        marks=_PANDAS,
    ),
    pytest.param(lambda c: udcg.fit_theta(c, 5, l2=0.01), id="fit_theta"),
]


@pytest.mark.parametrize("call", CALLS)
def test_a_consumed_iterator_is_refused_as_consumed(call) -> None:
    contexts = udcg.demo_contexts()
    assert len(list(contexts)) == 1020
    with pytest.raises(UDCGInputError) as err:
        call(contexts)
    assert err.value.field == "contexts"
    assert "no contexts" in str(err.value) and "consumed already" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("call", CALLS)
def test_an_empty_list_is_refused(call) -> None:
    with pytest.raises(UDCGInputError, match=r"^field 'contexts': no contexts$"):
        call([])
