"""eRAG scores through ``udcg.evaluate``: the eRAG labels as qrels (each list its own qrels)
give the eRAG package's per-query values (pytrec_eval over the same labels) to 1e-9."""

from __future__ import annotations

import numpy as np
import pytest

import udcg
from udcg.io.contexts.jsonl import Context, Passage
from udcg.labels.erag import erag_qrels


@pytest.mark.parametrize(("seed", "n", "k"), [(1, 40, 5), (2, 25, 10), (3, 60, 3)])
def test_udcg_evaluate_on_erag_qrels_equals_the_erag_package(seed: int, n: int, k: int) -> None:
    erag = pytest.importorskip("erag")
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=(n, k))
    labels[0] = 0  # a list without any useful passage
    contexts = [
        Context(
            f"q{i}",
            [Passage(f"d{i}-{j}", extra={"erag": {"m": int(g)}}) for j, g in enumerate(row)],
        )
        for i, row in enumerate(labels)
    ]
    run = {c.qid: {p.doc_id: float(k - j) for j, p in enumerate(c.passages)} for c in contexts}
    ours = udcg.evaluate(erag_qrels(contexts, "m"), run, [f"nDCG@{k}", "AP", f"P@{k}", "RR"])
    docs = {c.qid: [f"{p.doc_id}|{p.extra['erag']['m']}" for p in c.passages] for c in contexts}
    reference = erag.eval(
        retrieval_results=docs,
        expected_outputs={q: ["unused"] for q in docs},
        text_generator=lambda inputs: {q: d[0] for q, d in inputs.items()},
        downstream_metric=lambda outputs, _: {q: int(d[-1]) for q, d in outputs.items()},
        retrieval_metrics={f"ndcg_cut_{k}", "map", f"P_{k}", "recip_rank"},
    )["per_input"]
    assert set(ours) == set(reference)
    names = {f"nDCG@{k}": f"ndcg_cut_{k}", "AP": "map", f"P@{k}": f"P_{k}", "RR": "recip_rank"}
    for qid, values in ours.items():
        for name, measure in names.items():
            assert values[name] == pytest.approx(reference[qid][measure], abs=1e-9), (qid, name)
