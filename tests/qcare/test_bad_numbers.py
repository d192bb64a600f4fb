"""Numbers that would silently change a verdict or end in numpy's traceback are refused in one
line: a negative seed (``qcare rankings``, ``udcg demo``) and a tolerance that is NaN or
negative (``qcare published --check``: NaN called every value equal)."""

from __future__ import annotations

import math

import pytest

from udcg.errors import UDCGInputError
from udcg.io.contexts.model import Context, Passage
from udcg.qcare.published import PublishedQuery, compare_published
from udcg.qcare.rankings import ranking_agreement


def _ctx(qid: str, run: str, hit: bool, kind: str) -> Context:
    passages = [Passage("d1", relevant=hit, covers=[hit]), Passage("d2", covers=[False])]
    return Context(qid, passages, run=run, subqueries=["s"], extra={"query_type": kind})


def test_a_negative_seed_is_refused() -> None:
    from udcg.demo_data.demo import build_contexts

    contexts = [_ctx("q1", "a", True, "close"), _ctx("q1", "b", False, "close"),
                _ctx("q2", "a", True, "open"), _ctx("q2", "b", False, "open")]  # fmt: skip
    with pytest.raises(UDCGInputError, match="field 'seed': must be a non-negative integer"):
        ranking_agreement(contexts, n_resamples=20, seed=-1)
    with pytest.raises(UDCGInputError, match="field 'seed': must be a non-negative integer"):
        build_contexts([], seed=-1)


@pytest.mark.parametrize("tolerance", [math.nan, -1e-9, math.inf])
def test_a_tolerance_must_be_a_finite_nonnegative_number(tolerance: float) -> None:
    ctx = Context("nq_1", [Passage("1", covers=[False])], subqueries=["who?"],
                  outcomes={"GPT-5": {"claims": []}})  # fmt: skip
    published = PublishedQuery("nq_1", "nq_", "GPT-5", "close_ended", {"C-Prec": 1.0})
    with pytest.raises(UDCGInputError, match="field 'tolerance': must be finite and >= 0"):
        compare_published([ctx], [published], k=1, tolerance=tolerance)
