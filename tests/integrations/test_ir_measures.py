"""udcg's measures in ir_measures with the query ids of any type the caller's frames hold
(``pd.read_csv`` gives ints): values reported under the qrels' own ids, so ir_measures joins
them, and the aggregates equal ``udcg.evaluate``'s."""

from __future__ import annotations

import math

import numpy as np
import pytest

ir_measures = pytest.importorskip("ir_measures", reason="needs the 'ir-measures' extra")
pd = pytest.importorskip("pandas")

from udcg.integrations.ir_measures import UDCG, CnDCG, CPrec  # noqa: E402
from udcg.trec import evaluate  # noqa: E402

TOL = 1e-12
N_QUERIES, N_DOCS, K = 6, 5, 3


def _frames(seed: int) -> tuple[pd.DataFrame, pd.DataFrame, dict, dict]:
    """Qrels and run frames with int query ids 1..N_QUERIES (every query judged and ranked,
    distinct scores), utilities and coverage gains keyed by the ids' text."""
    rng = np.random.default_rng(seed)
    qrels, run, utilities, coverage = [], [], {}, {}
    for qid in range(1, N_QUERIES + 1):
        for d, score in enumerate(rng.permutation(N_DOCS)):
            doc = f"d{d}"
            run.append({"query_id": qid, "doc_id": doc, "score": float(score)})
            qrels.append({"query_id": qid, "doc_id": doc, "relevance": int(rng.integers(0, 3))})
            utilities.setdefault(str(qid), {})[doc] = float(rng.random())
            coverage.setdefault(str(qid), {})[doc] = float(rng.random())
    return pd.DataFrame(qrels), pd.DataFrame(run), utilities, coverage


def _with_ids(frame: pd.DataFrame, kind: str) -> pd.DataFrame:
    """``frame`` with its int query ids as ``int`` or as ``str``."""
    return frame.assign(query_id=frame["query_id"].astype(kind))


@pytest.mark.parametrize("kind", ["int64", "str"])
def test_query_ids_of_any_type_give_evaluates_values(kind: str) -> None:
    qrels, run, utilities, coverage = _frames(seed=5)
    qrels, run = _with_ids(qrels, kind), _with_ids(run, kind)
    measures = {
        f"UDCG@{K}": UDCG(utilities=utilities, utility_field="utility") @ K,
        f"C-Prec@{K}": CPrec(coverage=coverage) @ K,
        f"C-nDCG@{K}": CnDCG(coverage=coverage) @ K,
    }
    text = (_with_ids(qrels, "str"), _with_ids(run, "str"))
    udcg_ = evaluate(*text, [f"UDCG@{K}"], utilities=utilities, utility_field="utility")
    cov = evaluate(*text, [f"C-Prec@{K}", f"C-nDCG@{K}"], coverage=coverage)
    want = {q: {**udcg_[q], **cov[q]} for q in udcg_}
    assert len(want) == N_QUERIES

    got = ir_measures.calc_aggregate(list(measures.values()), qrels, run)
    for name, measure in measures.items():
        mean = sum(v[name] for v in want.values()) / N_QUERIES
        assert math.isclose(got[measure], mean, abs_tol=TOL), name

    rows = list(ir_measures.iter_calc(list(measures.values()), qrels, run))
    assert len(rows) == N_QUERIES * len(measures)
    assert {(m.measure.udcg_name, m.query_id) for m in rows} == {
        (name, qid) for name in measures for qid in qrels["query_id"].unique().tolist()
    }
    for m in rows:
        assert math.isclose(m.value, want[str(m.query_id)][m.measure.udcg_name], abs_tol=TOL)
