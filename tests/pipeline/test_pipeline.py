"""Pipeline pieces: datasets, stage cache, cross-fitted gamma, gold positions, sweep summary,
the correlation plot, the early check of a judge that cannot load."""

from __future__ import annotations

import gzip
import json
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from udcg import metrics
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, Passage
from udcg.pipeline.benchmark import check_hub_judge
from udcg.pipeline.correlate import accuracy_by_gold_position
from udcg.pipeline.datasets import answer_relevance, demo_source, nq_open
from udcg.pipeline.report import plot_correlations
from udcg.pipeline.scoring import crossfit_gamma, crossfit_theta, score_table
from udcg.pipeline.stages import StageCache, missing_steps, stage_key
from udcg.pipeline.sweep import markdown, member_names, qids_sha256, summarize, write_summary
from udcg.theta import split_by_query, tune_gamma


def test_answer_relevance_is_word_boundary_match() -> None:
    corpus = [
        Passage(text="Born in 1969."),
        Passage(text="In 19690 AD"),
        Passage(text="The Röntgen"),
    ]
    assert answer_relevance([["1969"], ["Rontgen"], [""]], corpus) == [
        frozenset({0}),
        frozenset({2}),
        frozenset(),
    ]


def test_demo_source_limit_and_gold() -> None:
    data = demo_source(limit=3)
    assert len(data.queries) == 3 and len(data.corpus) == 420
    for q in data.queries:
        kinds = {data.corpus[i].extra["kind"] for i in q.relevant}
        assert "relevant" in kinds
    with pytest.raises(UDCGInputError, match="field 'limit'"):
        demo_source(limit=0)


def _nq_line(question: str, answer: str, text: str) -> str:
    ctx = {"title": "t", "text": text, "hasanswer": True, "isgold": True}
    return json.dumps({"question": question, "answers": [answer], "ctxs": [ctx]})


def test_nq_open_corpus_is_every_gold_passage(tmp_path: Path) -> None:
    path = tmp_path / "nq.jsonl.gz"
    lines = [
        _nq_line("q1", "Paris", "Paris is in France"),
        _nq_line("q2", "Rome", "Rome is in Italy"),
        _nq_line("q3", "Paris", "Paris is in France"),
    ]
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    data = nq_open(path, limit=1)
    assert [q.qid for q in data.queries] == ["nq-1"]
    assert [p.text for p in data.corpus] == ["Paris is in France", "Rome is in Italy"]
    assert data.queries[0].relevant == frozenset({0})
    path.write_text("{}\n")
    with pytest.raises(UDCGInputError, match=r"nq.jsonl.gz:1: not an NQ-open line"):
        nq_open(path)


def test_nq_open_shared_data(shared_data: Path) -> None:
    data = nq_open(shared_data / "nq-open-oracle.jsonl.gz", limit=5)
    assert len(data.queries) == 5 and len(data.corpus) > 2000
    assert all(q.relevant for q in data.queries)


def test_a_dataset_file_edited_in_place_has_another_fingerprint(tmp_path: Path) -> None:
    """What a stage reads from the file: questions, corpus and answers (an answer corrected
    leaves relevance and corpus as they were, but changes the grades)."""
    path = tmp_path / "nq.jsonl"
    row = {
        "question": "who wrote emma",
        "answers": ["Austen"],
        "ctxs": [{"title": "Emma", "text": "Emma is a novel by Jane Austen.", "isgold": True}],
    }
    path.write_text(json.dumps(row) + "\n")
    first = nq_open(path)
    assert nq_open(path).fingerprint() == first.fingerprint()
    path.write_text(json.dumps({**row, "answers": ["Jane Austen"]}) + "\n")
    corrected = nq_open(path)
    assert corrected.queries[0].relevant == first.queries[0].relevant
    assert corrected.fingerprint() != first.fingerprint()
    path.write_text(json.dumps({**row, "question": "who wrote the novel emma"}) + "\n")
    assert nq_open(path).fingerprint() not in {first.fingerprint(), corrected.fingerprint()}


def test_stage_cache_reuses_outputs(tmp_path: Path) -> None:
    calls = []

    def compute() -> list[Context]:
        calls.append(1)
        return [Context("q", [Passage(doc_id="d", text="t", relevant=True)])]

    cache = StageCache(tmp_path)
    key = stage_key({"a": 1}, 3)
    first = cache.run("retrieve", key, compute)
    second = StageCache(tmp_path).run("retrieve", key, compute)
    assert first == second and len(calls) == 1
    StageCache(tmp_path).run("retrieve", stage_key({"a": 2}, 3), compute)
    assert len(calls) == 2


def test_missing_steps() -> None:
    done = Passage(text="t", relevant=True, abstain_prob={"j": 0.2})
    ctx = Context("q", [done], outcomes={"j": {"correct": True}})
    assert missing_steps([ctx], "j", "abstention", "string") == []
    assert missing_steps([ctx], "other", "abstention", "llm") == [
        "abstain",
        "relevance",
        "outcomes",
    ]
    with pytest.raises(UDCGInputError, match="unknown utility source"):
        missing_steps([ctx], "j", "nope", "string")
    # outcomes graded by another grader, or answered with another token budget, are made
    # again as asked; given ones record neither
    made = {"correct": True, "grader": "span", "max_new_tokens": 32}
    graded = Context("q", [done], outcomes={"j": made})
    for asked, missing in [
        ({"grader": "llm"}, ["outcomes"]),
        ({"grader": "span"}, []),
        ({"grader": "span", "max_new_tokens": 16}, ["outcomes"]),
        ({"grader": "span", "max_new_tokens": 32}, []),
    ]:
        assert missing_steps([graded], "j", "abstention", "string", outcome=asked) == missing
    asked = {"grader": "llm", "max_new_tokens": 16}
    assert missing_steps([ctx], "j", "abstention", "string", outcome=asked) == []
    # eRAG labels likewise: answered with another budget, they are made again
    extra = {"erag": {"j": 1}, "erag_made": {"j": {"grader": "span", "max_new_tokens": 1}}}
    labelled = Context("q", [replace(done, extra=extra)], outcomes={"j": made})
    asked = {"grader": "span", "max_new_tokens": 32}
    assert missing_steps([labelled], "j", "abstention", "string", True, asked) == ["erag"]
    asked["max_new_tokens"] = 1
    assert missing_steps([labelled], "j", "abstention", "string", True, asked) == ["outcomes"]


def test_crossfit_gamma_scores_each_half_with_the_other_halfs_gamma() -> None:
    rng = np.random.default_rng(0)
    n = 60
    rel = (rng.random((n, 3)) < 0.4).astype(float)
    util = rng.random((n, 3))
    correct = (rng.random(n) < 0.2 + 0.6 * rel.mean(axis=1)).astype(float)
    qids = np.array([f"q{i // 2}" for i in range(n)], dtype=object)
    values, gammas = crossfit_gamma(rel, util, correct, qids, "spearman", seed=1)
    a, b = split_by_query(qids, 0.5, 1)
    g_a = tune_gamma(rel[a], util[a], correct[a]).gamma
    g_b = tune_gamma(rel[b], util[b], correct[b]).gamma
    assert gammas == [g_a, g_b]
    np.testing.assert_allclose(values[b], metrics.udcg(rel[b], util[b], g_a))
    np.testing.assert_allclose(values[a], metrics.udcg(rel[a], util[a], g_b))


@pytest.mark.parametrize("l2", [0.0, 0.05])
def test_crossfit_theta_scores_each_half_with_a_model_fitted_on_the_other(l2: float) -> None:
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(2)
    n, k = 400, 3
    rel = (rng.random((n, k)) < 0.4).astype(float)
    util = rng.random((n, k))
    logit = 2.0 * (rel * util).sum(1) - 1.5 * ((1 - rel) * util).sum(1)
    correct = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(float)
    qids = np.array([f"q{i // 2}" for i in range(n)], dtype=object)
    values, models = crossfit_theta(rel, util, correct, qids, seed=3, l2=l2)
    a, b = split_by_query(qids, 0.5, 3)
    for fit, apply, model in ((a, b, models[0]), (b, a, models[1])):
        features = np.hstack([rel[fit] * util[fit], (1 - rel[fit]) * util[fit]])
        c = 1 / (l2 * len(fit)) if l2 else np.inf  # mean BCE + l2/2 |w|^2 in sklearn's terms
        reference = LogisticRegression(C=c, fit_intercept=False, tol=1e-10, max_iter=10_000)
        reference.fit(features, correct[fit])
        np.testing.assert_allclose(np.r_[model.alpha_, model.beta_], reference.coef_[0], atol=1e-3)
        held_out = np.hstack([rel[apply] * util[apply], (1 - rel[apply]) * util[apply]])
        np.testing.assert_allclose(
            values[apply], reference.predict_proba(held_out)[:, 1], atol=1e-3
        )


def test_ablations_drop_the_distraction_term_or_the_utility() -> None:
    rel = [[True, False, False], [False, False, True], [False, True, True]]
    p_abstain = [[0.2, 0.5, 0.9], [0.0, 0.4, 0.7], [1.0, 0.1, 0.6]]
    contexts = [
        Context(
            f"q{i}",
            [
                Passage(doc_id=f"d{j}", text=f"t{j}", relevant=r, abstain_prob={"j": p})
                for j, (r, p) in enumerate(zip(rel[i], p_abstain[i], strict=True))
            ],
            outcomes={"j": {"correct": i != 1}},
        )
        for i in range(3)
    ]
    table = score_table(contexts, 3, "j", ablations=True)
    r, u = np.array(rel, dtype=float), 1 - np.array(p_abstain)

    def sigmoid(x: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-x))

    np.testing.assert_allclose(table.scores["UDCG w/o distraction"], sigmoid((r * u).sum(1) / 3))
    no_utility = sigmoid((r - (1 - r) / 3).sum(1) / 3)
    np.testing.assert_allclose(table.scores["UDCG w/o utility"], no_utility)
    assert "UDCG w/o utility" not in score_table(contexts, 3, "j").scores


def test_accuracy_by_gold_position() -> None:
    rel = np.array([[0, 1, 0], [1, 1, 0], [0, 0, 0], [0, 1, 1]], dtype=float)
    correct = np.array([1.0, 1.0, 0.0, 0.0])
    assert accuracy_by_gold_position(rel, correct) == [
        {"position": None, "n": 1, "accuracy": 0.0},
        {"position": 1, "n": 1, "accuracy": 1.0},
        {"position": 2, "n": 2, "accuracy": 0.5},
    ]


def _report(run: str, accuracy: float, means: dict[str, float], **setup: object) -> dict:
    return {
        "setup": {"run": run, "accuracy": accuracy, "n_contexts": 10, **setup},
        "means": means,
    }


def test_sweep_summary_ranks_retrievers_like_scipy() -> None:
    reports = [
        _report("bm25", 0.5, {"UDCG": 0.6, "nDCG": 0.9}),
        _report("dense", 0.7, {"UDCG": 0.7, "nDCG": 0.8}),
        _report("random", 0.1, {"UDCG": 0.3, "nDCG": 0.85}),
    ]
    summary = summarize(reports)
    assert [r["run"] for r in summary["runs"]] == ["dense", "bm25", "random"]
    taus = {a["metric"]: a["kendall_tau"] for a in summary["ranking_agreement"]}
    acc = [0.5, 0.7, 0.1]
    assert taus["UDCG"] == pytest.approx(sps.kendalltau([0.6, 0.7, 0.3], acc)[0])
    assert taus["nDCG"] == pytest.approx(sps.kendalltau([0.9, 0.8, 0.85], acc)[0])
    assert summary["ranking_agreement"][0]["metric"] == "UDCG"


def test_sweep_summary_lists_metrics_fitted_per_run_last_and_marked() -> None:
    reports = [
        _report("bm25", 0.5, {"UDCG-gamma": 0.6, "nDCG": 0.1}),
        _report("dense", 0.7, {"UDCG-gamma": 0.7, "nDCG": 0.2}),
    ]
    summary = summarize(reports)
    assert [(a["metric"], a["fitted_per_run"]) for a in summary["ranking_agreement"]] == [
        ("nDCG", False),
        ("UDCG-gamma", True),
    ]
    text = markdown(summary)
    assert "| UDCG-gamma * | +1.000 |" in text and "do not compare across runs" in text


def test_a_summary_of_runs_over_other_queries_says_so() -> None:
    """Two runs scored over other query sets (a run leaving judged queries out) are noted."""
    same = qids_sha256(["q1", "q2"])
    reports = [
        _report("a", 0.5, {"nDCG": 0.5}, n_queries=2, qids_sha256=same),
        _report("b", 1.0, {"nDCG": 1.0}, n_queries=1, qids_sha256=qids_sha256(["q1"])),
    ]
    text = markdown(summarize(reports))
    assert "scored over different queries (queries: a 2, b 1)" in text
    reports[1]["setup"].update(n_queries=2, qids_sha256=same)
    assert summarize(reports)["notes"] == []


def test_a_summary_of_means_over_other_numbers_of_contexts_says_so() -> None:
    """adv40 7: a member whose C-Prec and C-nDCG are missing for some contexts (null coverage
    labels) has means over fewer contexts: the summary names those metrics and the counts."""
    means = {"nDCG": 0.5, "C-Prec": 0.4, "C-nDCG": 0.6}
    reports = [
        {**_report("a", 0.5, means), "mean_counts": {"nDCG": 30, "C-Prec": 30, "C-nDCG": 30}},
        {**_report("b", 0.6, means), "mean_counts": {"nDCG": 30, "C-Prec": 20, "C-nDCG": 20}},
    ]
    (note,) = summarize(reports)["notes"]
    assert note.startswith("C-Prec, C-nDCG: the means are over different contexts")
    assert "(a: 30; b: 20)" in note and "nDCG," not in note.replace("C-nDCG:", "")
    reports[1]["mean_counts"].update({"C-Prec": 30, "C-nDCG": 30})
    assert summarize(reports)["notes"] == []
    # as many contexts, of other queries (adv43 3): said too
    for report, missing in zip(reports, ("q0", "q1"), strict=True):
        left = [f"q{i}" for i in range(31) if f"q{i}" != missing]
        report["mean_qids_sha256"] = {m: qids_sha256(left) for m in means}
    (note,) = summarize(reports)["notes"]
    assert note.startswith("nDCG, C-Prec, C-nDCG: the means are over different contexts (a: 30")
    del reports[0]["mean_qids_sha256"]  # an earlier udcg's report: its counts alone compared
    assert summarize(reports)["notes"] == []
    del reports[1]["mean_counts"]  # a report of an earlier udcg: nothing to compare
    assert summarize(reports)["notes"] == []


def test_sweep_members_of_one_retriever_stay_apart() -> None:
    over_k = [
        _report("bm25", 0.1, {"UDCG": 0.2}, k=1, utility="abstention"),
        _report("bm25", 0.3, {"UDCG": 0.5}, k=3, utility="abstention"),
        _report("bm25", 0.2, {"UDCG": 0.4}, k=10, utility="abstention"),
    ]
    summary = summarize(over_k)
    assert [r["run"] for r in summary["runs"]] == ["k=3", "k=10", "k=1"]
    assert summary["ranking_agreement"][0]["kendall_tau"] == pytest.approx(1.0)
    mixed = [
        _report("bm25", 0.1, {"UDCG": 0.2}, k=5, utility="abstention"),
        _report("dense", 0.3, {"UDCG": 0.5}, k=5, utility="answer_likelihood"),
    ]
    assert member_names(mixed) == ["bm25, utility=abstention", "dense, utility=answer_likelihood"]
    same = [_report("bm25", 0.1, {"UDCG": 0.2}), _report("bm25", 0.2, {"UDCG": 0.3})]
    assert member_names(same) == ["bm25 #1", "bm25 #2"]


def _member(run: str, sweep_id: str, n_contexts: int, *overrides: str) -> dict:
    report = _report(run, 0.5, {"UDCG": 0.6})
    report["setup"]["n_contexts"] = n_contexts
    return {**report, "sweep": {"id": sweep_id, "overrides": list(overrides)}}


def _write_member(sweep: Path, name: str, report: dict) -> None:
    (sweep / name).mkdir(parents=True, exist_ok=True)
    (sweep / name / "report.json").write_text(json.dumps(report))


def test_the_summary_takes_the_members_of_its_own_sweep_only(tmp_path: Path) -> None:
    first, second = "sweep-1", "sweep-2"
    _write_member(tmp_path, "0-bm25", _member("bm25", first, 4, "retriever=bm25"))
    _write_member(tmp_path, "1-random", _member("random", first, 4, "retriever=random"))
    # the second sweep reruns bm25 on 3 questions; its random member failed, its old report stays
    _write_member(tmp_path, "0-bm25", _member("bm25", second, 3, "retriever=bm25"))
    write_summary(tmp_path, second)
    summary = json.loads((tmp_path / "sweep_summary.json").read_text())
    assert summary["sweep_id"] == second
    assert [(r["run"], r["n_contexts"]) for r in summary["runs"]] == [("bm25", 3)]
    assert summary["runs"][0]["overrides"] == ["retriever=bm25"]
    # a third sweep whose members all failed: no summary, none left over
    assert write_summary(tmp_path, "sweep-3") is None
    assert not (tmp_path / "sweep_summary.json").exists()
    assert not (tmp_path / "sweep_summary.md").exists()


def test_members_alike_but_for_an_override_are_named_by_it() -> None:
    common = ("dataset.limit=4", "k=2")
    reports = [
        _member("distractors", "s", 4, "retriever=distractors", f"retriever.kind={kind}", *common)
        for kind in ("weak", "hard")
    ]
    assert member_names(reports) == [
        "distractors, retriever.kind=weak",
        "distractors, retriever.kind=hard",
    ]
    summary = summarize(reports)
    assert "| distractors, retriever.kind=hard |" in markdown(summary)
    assert [r["overrides"][1] for r in summary["runs"]] == [
        "retriever.kind=weak",
        "retriever.kind=hard",
    ]


# ------------------------------------------------------------------- the correlation plot


def test_an_interval_that_excludes_its_estimate_is_drawn_from_its_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matplotlib.axes import Axes

    drawn = {}
    real = Axes.errorbar

    def errorbar(ax: Axes, x, y, yerr=None, **kwargs):
        drawn["low"], drawn["high"] = np.asarray(y) - yerr, np.asarray(y) + yerr
        return real(ax, x, y, yerr=yerr, **kwargs)

    monkeypatch.setattr(Axes, "errorbar", errorbar)
    report = {
        "config": {"correlation": "spearman"},
        "setup": {"run": "x"},
        "correlations": [
            {"metric": "MRR", "spearman": -0.1, "ci95": [-0.7, -0.2]},
            {"metric": "UDCG", "spearman": 0.4, "ci95": [0.1, 0.6]},
        ],
    }
    plot_correlations(report, tmp_path / "c.png")
    assert (tmp_path / "c.png").is_file()
    assert drawn["low"] == pytest.approx([-0.7, 0.1])
    assert drawn["high"] == pytest.approx([-0.2, 0.6])


# ---------------------------------------------------------------- a judge that cannot load


def test_hub_judge_offline_fails_at_once(monkeypatch, tmp_path: Path) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(UDCGInputError) as raised:
        check_hub_judge("nosuch/model")
    assert str(raised.value) == (
        "field 'judge': 'nosuch/model' is not a local path and not in the Hugging Face cache, "
        "and offline mode is on (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE): give a local path or "
        "download the model first"
    )
    for fine in ("smollm2-135m", "openai:m@http://h/v1", "precomputed:x.jsonl", str(tmp_path)):
        check_hub_judge(fine)


def test_hub_judge_with_the_hub_unreachable_fails_at_once(monkeypatch) -> None:
    from huggingface_hub import constants

    def refuse(address, timeout):
        assert timeout <= 3
        raise OSError("no route")

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "https://hub.invalid")
    monkeypatch.setattr("socket.create_connection", refuse)
    with pytest.raises(UDCGInputError, match=r"and hub\.invalid cannot be reached: give a local"):
        check_hub_judge("nosuch/model")


def collinear_contexts(n: int = 400) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(relevant, utility, correct, qids)`` of ``n`` contexts of 3 passages whose utilities are
    all about 1, so that an unpenalised UDCG-theta fit of half of them runs to its epoch cap."""
    rng = np.random.default_rng(1)
    relevant = (rng.random((n, 3)) < 0.5).astype(float)
    utility = 1 - 1e-3 * rng.random((n, 3))
    correct = (rng.random(n) < 0.1).astype(float)
    return relevant, utility, correct, np.array([f"q{i}" for i in range(n)], dtype=object)


def test_a_crossfit_that_does_not_converge_is_one_warning_naming_theta_l2() -> None:
    """Utilities all about 1 (as from a small judge that never abstains): u_i and the
    positions' two terms are nearly collinear, so the unpenalised fit of a half runs to its
    epoch cap with weights in the hundreds; one warning counts the halves that did and names
    ``theta_l2``; a penalty converges without any. Whether the second half's ill-conditioned
    fit gets under the gradient tolerance before the cap depends on the processor's rounding,
    so the count is checked against the fitted models, not pinned."""
    from udcg.theta import UDCGThetaConvergenceWarning

    rel, util, correct, qids = collinear_contexts()
    with pytest.warns(UDCGThetaConvergenceWarning) as warned:
        _, models = crossfit_theta(rel, util, correct, qids, seed=0)
    stuck = sum(not m.converged_ for m in models)
    assert len(models) == 2 and stuck in (1, 2)
    assert [str(w.message) for w in warned] == [
        f"UDCG-theta (cross-fitted) did not converge on {stuck} of 2 halves: its weights may "
        "diverge and its probabilities be over-confident; set a small penalty, e.g. theta_l2=0.01"
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UDCGThetaConvergenceWarning)
        crossfit_theta(rel, util, correct, qids, seed=0, l2=0.01)


def test_paired_tests_choose_a_on_the_shared_contexts_and_count_undefined_resamples() -> None:
    """B correlates perfectly on the six contexts A scores (and not at all on the six A leaves
    missing): on the contexts both score B is the better one, whatever A's own estimate.
    Resamples with constant correctness are counted, as in the correlation rows."""
    from udcg.pipeline.correlate import correlations, paired_tests

    correct = np.array([1, 0] * 6, dtype=float)
    b = np.array([0.9, 0.1, 0.8, 0.2, 0.7, 0.3, 0.1, 0.9, 0.2, 0.8, 0.3, 0.7])
    a = np.array([0.6, 0.4, 0.3, 0.5, 0.7, 0.2] + [np.nan] * 6)
    (row,) = paired_tests({"A": a, "B": b}, correct, np.arange(12), n_resamples=200)
    assert (row["a"], row["b"]) == ("B", "A") and row["difference"] > 0
    assert row["resamples"] == 200 and 0 < row["undefined_resamples"] < 200
    few = np.array([1, 0, 0, 0, 0, 0], dtype=float)  # a resample missing query 0: undefined
    (only,) = correlations({"m": np.linspace(0.9, 0.4, 6)}, few, np.arange(6), n_resamples=200)
    drawn_without_0 = (5 / 6) ** 6  # the share of resamples that miss query 0
    assert only["undefined_resamples"] == pytest.approx(200 * drawn_without_0, abs=25)
