"""The top-level Python path: each of the five jobs with ``import udcg`` alone (plus pandas where
a DataFrame is the output), in a fresh interpreter, checked against independent references
(pytrec_eval, scipy, the formulas written out here)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import pytrec_eval
from scipy import stats as sps
from scipy.special import expit

from udcg.demo_data import demo_contexts
from udcg.io.contexts.jsonl import read_contexts

REPO = Path(__file__).resolve().parents[1]
QRELS = REPO / "examples" / "trec" / "qrels.trec"
RUN = REPO / "examples" / "trec" / "run.trec"


def run_snippet(code: str, tmp_path: Path) -> object:
    """Run ``code`` in a fresh interpreter (cwd ``tmp_path``); it prints one JSON value."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _imports(code: str) -> set[str]:
    return {line.split()[1] for line in code.splitlines() if line.strip().startswith("import ")}


def _trec(path: Path) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4:  # qrels: qid iteration doc grade
            out.setdefault(parts[0], {})[parts[2]] = int(parts[3])
        else:  # run: qid Q0 doc rank score tag
            out.setdefault(parts[0], {})[parts[2]] = float(parts[4])
    return out


SCORE_RUN = """
import json
import udcg
print(json.dumps(udcg.evaluate(r"{qrels}", r"{run}", ["nDCG@10", "P@5"])))
"""


def test_score_a_run_equals_pytrec_eval(tmp_path: Path) -> None:
    code = SCORE_RUN.format(qrels=QRELS, run=RUN)
    assert _imports(code) == {"json", "udcg"}
    got = run_snippet(code, tmp_path)
    qrels, run = _trec(QRELS), _trec(RUN)
    expected = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "P.5"}).evaluate(run)
    assert set(got) == set(expected)
    for qid, values in expected.items():
        assert got[qid]["nDCG@10"] == pytest.approx(values["ndcg_cut_10"], abs=1e-12)
        assert got[qid]["P@5"] == pytest.approx(values["P_5"], abs=1e-12)


COMPARE = """
import json
import udcg
run = udcg.read_trec_run(r"{run}")
weaker = {{q: {{d: -s for d, s in docs.items()}} for q, docs in {swapped}.items()}}
report = udcg.compare(r"{qrels}", {{"run": r"{run}", "reversed": weaker}}, ["AP"])
c = report.comparison("run", "reversed", "AP")
print(json.dumps({{"difference": c.difference, "p": c.p_value}}))
"""


def test_compare_runs_equals_scipy_paired_t_test(tmp_path: Path) -> None:
    qrels, run = _trec(QRELS), _trec(RUN)
    code = COMPARE.format(qrels=QRELS, run=RUN, swapped=json.dumps(run))
    assert _imports(code) == {"json", "udcg"}
    got = run_snippet(code, tmp_path)
    reversed_run = {q: {d: -s for d, s in docs.items()} for q, docs in run.items()}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"map"})
    ap = evaluator.evaluate(run)
    ap_reversed = evaluator.evaluate(reversed_run)
    qids = sorted(qrels)
    a = np.array([ap.get(q, {"map": 0.0})["map"] for q in qids])
    b = np.array([ap_reversed.get(q, {"map": 0.0})["map"] for q in qids])
    assert got["difference"] == pytest.approx(float((a - b).mean()), abs=1e-12)
    assert got["p"] == pytest.approx(float(sps.ttest_rel(a, b).pvalue), abs=1e-9)


LABEL = """
import json
import udcg
contexts = list(udcg.demo_contexts())[:3]
with open("probs.jsonl", "w") as out:
    for i, c in enumerate(contexts):
        for j, p in enumerate(c.passages):
            row = {{"question": c.question, "passage": p.text, "abstain_prob": (i + j) / 20}}
            out.write(json.dumps(row) + "\\n")
judge = udcg.load_judge("precomputed:probs.jsonl", name="{name}")
labelled = udcg.label(contexts, judge, ["abstain", "relevance"], relevance="string")
udcg.write_contexts("labelled.jsonl", labelled)
print(json.dumps(judge.name))
"""


def test_label_contexts_with_a_judge(tmp_path: Path) -> None:
    code = LABEL.format(name="file-judge")
    assert _imports(code) == {"json", "udcg"}
    assert run_snippet(code, tmp_path) == "file-judge"
    labelled = list(read_contexts(tmp_path / "labelled.jsonl"))
    given = list(demo_contexts())[:3]
    assert len(labelled) == 3
    for i, (ctx, before) in enumerate(zip(labelled, given, strict=True)):
        for j, (passage, old) in enumerate(zip(ctx.passages, before.passages, strict=True)):
            assert passage.abstain_prob == {**old.abstain_prob, "file-judge": (i + j) / 20}
            assert passage.relevant == old.relevant  # given labels are kept


SCORE_CONTEXTS = """
import json
import pandas
import udcg
frame = udcg.score_contexts(udcg.demo_contexts(), gamma=0.5)
assert isinstance(frame, pandas.DataFrame)
print(frame.to_json(orient="records", double_precision=15))
"""


def test_score_labelled_contexts_into_a_dataframe(tmp_path: Path) -> None:
    assert _imports(SCORE_CONTEXTS) == {"json", "pandas", "udcg"}
    rows = run_snippet(SCORE_CONTEXTS, tmp_path)
    contexts = list(demo_contexts())
    assert len(rows) == len(contexts)
    for row, ctx in zip(rows, contexts, strict=True):
        rel = np.array([float(p.relevant) for p in ctx.passages])
        u = 1 - np.array([p.abstain_prob["smollm2-135m"] for p in ctx.passages])
        udcg_value = expit(np.mean(rel * u - 0.5 * (1 - rel) * u))
        hits = np.flatnonzero(rel)
        assert (row["qid"], row["k"]) == (ctx.qid, len(ctx.passages))
        assert row["correct"] == float(ctx.outcomes["smollm2-135m"]["correct"])
        assert row["UDCG"] == pytest.approx(udcg_value, abs=1e-12)
        assert row["Precision"] == pytest.approx(rel.mean(), abs=1e-12)
        assert row["MRR"] == pytest.approx(1 / (hits[0] + 1) if len(hits) else 0.0, abs=1e-12)


FIT = """
import json
import udcg
model = udcg.fit_theta(udcg.demo_contexts(), 3, val_fraction=0.0)
model.save_pretrained("weights")
loaded = udcg.UDCGTheta.from_pretrained("weights")
frame = udcg.score_contexts(udcg.demo_contexts(), weights="weights")
three = frame[frame["k"] == 3]
print(json.dumps({{
    "alpha": loaded.alpha_.tolist(), "beta": loaded.beta_.tolist(),
    "same": model.alpha_.tolist() == loaded.alpha_.tolist(),
    "theta": three["UDCG-theta"].tolist(), "qids": three["qid"].tolist(),
    "other_sizes_nan": bool(frame[frame["k"] != 3]["UDCG-theta"].isna().all()),
}}))
"""


def test_fit_save_and_load_udcg_theta(tmp_path: Path) -> None:
    code = FIT.format()
    assert _imports(code) == {"json", "udcg"}
    got = run_snippet(code, tmp_path)
    assert got["same"] and got["other_sizes_nan"]
    alpha, beta = np.array(got["alpha"]), np.array(got["beta"])
    threes = [c for c in demo_contexts() if len(c.passages) == 3]
    assert [c.qid for c in threes] == got["qids"]
    for ctx, theta in zip(threes, got["theta"], strict=True):
        rel = np.array([float(p.relevant) for p in ctx.passages])
        u = 1 - np.array([p.abstain_prob["smollm2-135m"] for p in ctx.passages])
        expected = expit(alpha @ (rel * u) + beta @ ((1 - rel) * u))
        assert theta == pytest.approx(expected, abs=1e-9)


def test_label_adds_qcare_labels_through_the_cache(tag_judge, tmp_path: Path) -> None:
    import udcg
    from udcg.qcare import label_contexts

    contexts = [
        udcg.Context(
            "q1",
            [
                udcg.Passage(doc_id="p1", text="Paris is the capital #fr"),
                udcg.Passage(doc_id="p2", text="Nothing useful here"),
            ],
            question="capital #fr and river #rv",
        )
    ]
    expected, _ = label_contexts(contexts, tag_judge())
    assert expected[0].passages[0].covers == [True, False]
    cache = tmp_path / "judge.sqlite"
    assert udcg.label(contexts, tag_judge(), ["qcare"], cache=cache) == expected
    again, closed = tag_judge(), []
    again.close = lambda: closed.append(1)  # the caller's judge: label closes only its cache
    assert udcg.label(contexts, again, ["qcare"], cache=cache) == expected
    assert sum(again.calls.values()) == 0  # every call answered by the cache
    assert closed == []
    with pytest.raises(udcg.UDCGInputError, match="unknown step 'qcar'"):
        udcg.label(contexts, tag_judge(), ["qcar"])


def test_label_qcare_is_qcare_label(tag_judge) -> None:
    """adv38 7, 8: step qcare labels the claims of the judge's answers, recomputes the judge's
    own labels and refuses another judge's (as `udcg qcare label`), unless relabel."""
    import udcg
    from udcg.qcare import label_contexts

    passages = [udcg.Passage(doc_id="p1", text="Paris is the capital #fr")]
    answer = {"tag": {"answer": "Paris #fr; the Seine #rv", "correct": True}}
    contexts = [udcg.Context("q1", passages, question="capital #fr", outcomes=answer)]
    expected, _ = label_contexts(contexts, tag_judge(), answers_from="tag")
    (labelled,) = udcg.label(contexts, tag_judge(), ["qcare"], cache=False)
    assert labelled == expected[0] and labelled.outcomes["tag"]["claims"] == [
        "Paris #fr",
        "the Seine #rv",
    ]
    assert udcg.label([labelled], tag_judge(), ["qcare"], cache=False) == [labelled]

    class Other(tag_judge):
        name, fingerprint = "other", "other-v1"

    with pytest.raises(udcg.UDCGInputError, match=r"passages\[0\]\.covers.*judge 'tag'"):
        udcg.label([labelled], Other(), ["qcare"], cache=False)
    (replaced,) = udcg.label([labelled], Other(), ["qcare"], cache=False, relabel=True)
    assert replaced.extra["qcare_labels"]["judge"] == "other"


def test_label_qcare_claims_only_where_the_judge_answered(tag_judge) -> None:
    """adv40 8: contexts of which only some carry the judge's answer get claim labels there
    and coverage everywhere, in the given order, instead of a refusal for the others."""
    import udcg
    from udcg.qcare import label_contexts

    passages = [udcg.Passage(doc_id="p1", text="Paris is the capital #fr")]
    answer = {"tag": {"answer": "Paris #fr", "correct": True}}
    contexts = [
        udcg.Context("q1", passages, question="capital #fr"),
        udcg.Context("q2", passages, question="capital #fr", outcomes=answer),
        udcg.Context("q3", passages, question="river #rv"),
    ]
    labelled = udcg.label(contexts, tag_judge(), ["qcare"], cache=False)
    (answered,), _ = label_contexts(contexts[1:2], tag_judge(), answers_from="tag")
    bare, _ = label_contexts([contexts[0], contexts[2]], tag_judge())
    assert labelled == [bare[0], answered, bare[1]]
    assert labelled[1].outcomes["tag"]["claims"] == ["Paris #fr"]
    assert all(p.covers is not None for c in labelled for p in c.passages)


def test_label_leaves_no_file_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``udcg.label`` with a spec opens the judge, its cache and a precomputed index, and
    closes them before it returns (a caller with the garbage collector off would run out of
    descriptors); an annotate run in-process likewise."""
    import gc
    import os

    import udcg
    from udcg.cli.main import main

    monkeypatch.setenv("UDCG_CACHE_DIR", str(tmp_path / "cache"))
    contexts = list(udcg.demo_contexts())[:5]
    probs = tmp_path / "p.jsonl"
    rows = [{"question": c.question, "passage": p.text, "abstain_prob": 0.3}
            for c in contexts for p in c.passages]  # fmt: skip
    probs.write_text("".join(json.dumps(row) + "\n" for row in rows))

    def held() -> list[str]:
        names = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                names.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:  # the descriptor listdir read with, closed since
                pass
        return [name for name in names if name.startswith(str(tmp_path))]

    udcg.write_contexts(tmp_path / "in.jsonl", contexts)
    gc.disable()
    try:
        udcg.label(contexts, f"precomputed:{probs}", ["abstain"])
        assert held() == []
        argv = [str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl")]
        assert (
            main(["annotate", *argv, "--judge", f"precomputed:{probs}", "--steps", "abstain"]) == 0
        )
        assert held() == []
    finally:
        gc.enable()


def _qcare_contexts(**extra_probs: float) -> list:
    import udcg

    return [
        udcg.Context(
            "q1",
            [
                udcg.Passage(text="a", relevant=True, abstain_prob={"j": 0.2, **extra_probs}),
                udcg.Passage(text="b", relevant=False, abstain_prob={"j": 0.5, **extra_probs}),
            ],
            subqueries=["s1", "s2"],
        ),
        udcg.Context(
            "q2", [udcg.Passage(text="c", relevant=True, abstain_prob={"j": 0.1, **extra_probs})]
        ),
    ]


def test_score_contexts_adds_qcare_columns_where_labelled() -> None:
    import dataclasses

    import udcg

    contexts = _qcare_contexts()
    covers = [[True, False], [False, False]]
    contexts[0].passages[:] = [
        dataclasses.replace(p, covers=c) for p, c in zip(contexts[0].passages, covers, strict=True)
    ]
    frame = udcg.score_contexts(contexts)
    # r = (1/2, 0): C-Prec = mean(r); C-nDCG = DCG(r) / IDCG(r) = 1 (already ideal)
    assert frame["C-Prec"].iloc[0] == pytest.approx(0.25)
    assert frame["C-nDCG"].iloc[0] == pytest.approx(1.0)
    assert np.isnan(frame["C-Prec"].iloc[1])  # no Q-CARE labels
    assert "C-Prec and C-nDCG missing for 1 of 2 contexts (no labels 1)" in frame.attrs["notes"]
    assert frame["UDCG"].iloc[1] == pytest.approx(expit(0.9))
    assert "C-Prec" not in udcg.score_contexts(contexts, qcare=False)


def test_score_contexts_notes_a_null_coverage_label() -> None:
    """adv40: a check without a usable answer leaves C-Prec and C-nDCG NaN, and the notes say
    so as `udcg qcare score` does."""
    import dataclasses

    import udcg

    contexts = _qcare_contexts()[:1]
    covers = [[None, True], [False, False]]
    contexts[0].passages[:] = [
        dataclasses.replace(p, covers=c) for p, c in zip(contexts[0].passages, covers, strict=True)
    ]
    frame = udcg.score_contexts(contexts, qcare=True)
    assert np.isnan(frame["C-Prec"].iloc[0]) and np.isnan(frame["C-nDCG"].iloc[0])
    assert frame.attrs["notes"] == [
        "C-Prec and C-nDCG missing for 1 of 1 contexts (a check without a usable answer 1)"
    ]


def test_score_contexts_asks_for_the_judge_key_when_two_judges_labelled() -> None:
    import udcg

    contexts = _qcare_contexts(other=0.3)
    with pytest.raises(udcg.UDCGInputError, match="abstain_prob of j, other; pass judge_key"):
        udcg.score_contexts(contexts)
    frame = udcg.score_contexts(contexts, judge_key="other", qcare=False)
    assert frame["UDCG"].iloc[0] == pytest.approx(expit((0.7 - 0.7 / 3) / 2))


def _p(doc_id: str, relevant: object = True, prob: object = 0.1) -> object:
    import udcg

    return udcg.Passage(doc_id, relevant=relevant, abstain_prob={"j": prob})


# contexts built in memory with a labelling mistake: (passages, outcomes, field, message)
IN_MEMORY_MISTAKES = {
    "duplicate doc_id": (
        [("a",), ("a",), ("b", False, 0.3)],
        {"j": {"correct": True}},
        "passages[1].doc_id",
        "duplicate doc_id 'a' (already at passages[0])",
    ),
    "correct 2": ([("a",)], {"j": {"correct": 2}}, "outcomes.j.correct", "must be true or false"),
    "correct yes": ([("a",)], {"j": {"correct": "yes"}}, "outcomes.j.correct", "must be true"),
    "outcome True": ([("a",)], {"j": True}, "outcomes.j", "must be an object, got a boolean"),
    "relevant yes": ([("a", "yes")], {}, "passages[0].relevant", "must be true, false or a"),
    "abstain_prob x": ([("a", True, "x")], {}, "passages[0].abstain_prob.j", "must be a prob"),
    "abstain_prob 1.5": (
        [("a", True, 1.5)],
        {},
        "passages[0].abstain_prob.j",
        "must be a probability in [0, 1], got 1.5",
    ),
}


@pytest.mark.parametrize("case", IN_MEMORY_MISTAKES, ids=list(IN_MEMORY_MISTAKES))
@pytest.mark.parametrize("job", ["score_contexts", "fit_theta"])
def test_contexts_in_memory_get_the_readers_checks(case: str, job: str) -> None:
    import udcg

    passages, outcomes, field, message = IN_MEMORY_MISTAKES[case]
    good = udcg.Context("q0", [_p("x"), _p("y", False, 0.4)], outcomes={"j": {"correct": False}})
    bad = udcg.Context("q1", [_p(*p) for p in passages], outcomes=outcomes)
    call = udcg.score_contexts if job == "score_contexts" else lambda c: udcg.fit_theta(c, 2)
    with pytest.raises(udcg.UDCGInputError) as err:
        call([good, bad])
    assert str(err.value).startswith(f"contexts[1] (qid 'q1'): field '{field}': {message}")


def test_one_context_instead_of_a_list_is_one_line() -> None:
    import udcg

    one = udcg.Context("q0", [_p("x")], outcomes={"j": {"correct": True}})
    for call in (udcg.score_contexts, lambda c: udcg.fit_theta(c, 1)):
        with pytest.raises(udcg.UDCGInputError) as err:
            call(one)
        assert str(err.value) == (
            "field 'contexts': got one Context, expected an iterable of them: pass [context]"
        )


def test_numpy_labels_in_memory_still_score() -> None:
    import udcg

    ctx = udcg.Context(
        "q0",
        [udcg.Passage("x", relevant=np.bool_(True), abstain_prob={"j": np.float32(0.25)})],
        outcomes={"j": {"correct": np.bool_(True)}},
    )
    frame = udcg.score_contexts([ctx])
    assert frame["correct"].tolist() == [1.0] and frame["UDCG"].iloc[0] > 0
