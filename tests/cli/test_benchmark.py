"""evaluate.py end to end on the demo source with a fake judge, pre-annotated input, the sweep
summary, and one test per bad configuration."""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hydra.errors import MissingConfigException
from matplotlib.axes import Axes
from omegaconf import OmegaConf
from scipy import stats as sps
from sklearn.metrics import ndcg_score

from udcg import metrics
from udcg.cli.benchmark import main, run_evaluate
from udcg.cli.hydra_config import SweepSummary, build_retriever, plain
from udcg.errors import UDCGInputError, UDCGWarning
from udcg.io.contexts.jsonl import Context, Passage, read_contexts, write_contexts
from udcg.judge.base import Judge
from udcg.pipeline.stages import stage_key
from udcg.pipeline.sweep import current_sweep, write_summary
from udcg.retrieval.base import retriever_identity

REPO = Path(__file__).resolve().parents[2]


class WordJudge(Judge):
    """Abstains unless question and passage share two words; answers with the prompt's first
    60 characters of documents (so it is right when the first passage starts with the answer)."""

    name = "fake"
    fingerprint = "fake-word-judge-v1"

    def __init__(self) -> None:
        self.calls = 0

    @staticmethod
    def prob(question: str, passage: str) -> float:
        shared = set(question.lower().split()) & set(passage.lower().split())
        return 0.1 if len(shared) >= 2 else 0.8

    def abstain_prob(self, questions, passages, mode="first_token") -> np.ndarray:
        self.calls += 1
        return np.array([self.prob(q, p) for q, p in zip(questions, passages, strict=True)])

    @staticmethod
    def likelihood(passage: str, answers: Sequence[str]) -> float:
        return 0.6 if any(a.lower() in passage.lower() for a in answers) else 0.05

    def answer_prob(self, questions, passages, answers) -> np.ndarray:
        self.calls += 1
        return np.array([self.likelihood(p, a) for p, a in zip(passages, answers, strict=True)])

    def yes_prob(self, prompts) -> np.ndarray:
        raise AssertionError("not used")

    def generate(self, prompts: Sequence, max_new_tokens: int = 64) -> list[str]:
        self.calls += 1
        return [self.answer(p[-1]["content"]) for p in prompts]

    @staticmethod
    def answer(content: str) -> str:
        return content.split("Document", 1)[-1][:60]


@pytest.fixture
def fake_judge(monkeypatch) -> WordJudge:
    judge = WordJudge()
    monkeypatch.setattr("udcg.judge.load_judge", lambda spec, **options: judge)
    monkeypatch.setattr("udcg.pipeline.benchmark.check_hub_judge", lambda spec: None)
    return judge


def test_demo_end_to_end_with_a_fake_judge(
    tmp_path: Path, fake_judge: WordJudge, evaluate_config
) -> None:
    cfg = evaluate_config("dataset.limit=12", "k=4", "judge=fake")
    report, files = run_evaluate(cfg, tmp_path / "out")
    names = {f.name for f in files}
    assert {"report.json", "report.md", "correlations.png", "gold_position.png"} <= names
    assert json.loads((tmp_path / "out" / "report.json").read_text())["means"] == report["means"]
    assert "| UDCG |" in (tmp_path / "out" / "report.md").read_text()

    (annotated,) = (tmp_path / "cache").glob("annotate-*.jsonl.gz")
    contexts = list(read_contexts(annotated))
    assert len(contexts) == 12 and all(len(c.passages) == 4 for c in contexts)
    rel = np.array([[float(p.relevant) for p in c.passages] for c in contexts])
    util = np.array(
        [[1 - WordJudge.prob(c.question, p.text) for p in c.passages] for c in contexts]
    )
    correct = np.array([float(c.outcomes["fake"]["correct"]) for c in contexts])
    assert report["setup"]["accuracy"] == pytest.approx(correct.mean())
    assert report["means"]["UDCG"] == pytest.approx(metrics.udcg(rel, util).mean())
    ideal_scores = np.tile(np.arange(4, 0, -1), (12, 1))
    expected_ndcg = np.mean(
        [ndcg_score([r], [s]) if r.any() else 0.0 for r, s in zip(rel, ideal_scores, strict=True)]
    )
    assert report["means"]["nDCG"] == pytest.approx(expected_ndcg)
    row = next(r for r in report["correlations"] if r["metric"] == "UDCG")
    assert row["spearman"] == pytest.approx(sps.spearmanr(metrics.udcg(rel, util), correct)[0])

    calls = fake_judge.calls
    again, _ = run_evaluate(cfg, tmp_path / "out2")
    assert fake_judge.calls == calls and again["setup"]["cached_stages"] == ["retrieve", "annotate"]
    assert again["correlations"] == report["correlations"]


def _nq_file(path: Path, capital: str) -> None:
    """An NQ-open file of four questions, the first about the capital of France."""
    facts = [
        ("what is the capital of france", capital, f"The capital of France is {capital}."),
        ("who wrote the play hamlet", "Shakespeare", "The play Hamlet was written by Shakespeare."),
        ("what colour is the sky", "blue", "The sky is blue because of Rayleigh scattering."),
        ("which planet is the largest", "Jupiter", "Jupiter is the largest planet of all."),
    ]
    rows = [
        {"question": q, "answers": [a], "ctxs": [{"title": "t", "text": t, "isgold": True}]}
        for q, a, t in facts
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_a_dataset_file_edited_in_place_is_retrieved_again(
    tmp_path: Path, fake_judge: WordJudge, evaluate_config
) -> None:
    data = tmp_path / "nq.jsonl"
    _nq_file(data, "Paris")
    cfg = evaluate_config("dataset=nq_open", f"dataset.path={data}", "k=2", "judge=fake")
    first, _ = run_evaluate(cfg, tmp_path / "a")
    again, _ = run_evaluate(cfg, tmp_path / "b")
    assert again["setup"]["cached_stages"] == ["retrieve", "annotate"]
    assert again["setup"]["dataset_sha256"] == first["setup"]["dataset_sha256"]
    _nq_file(data, "Lyon")  # the same path, another content
    edited, _ = run_evaluate(cfg, tmp_path / "c")
    assert edited["setup"]["cached_stages"] == []
    assert edited["setup"]["dataset_sha256"] != first["setup"]["dataset_sha256"]
    recorded = json.loads((tmp_path / "c" / "report.json").read_text())["setup"]
    assert recorded["dataset_sha256"] == edited["setup"]["dataset_sha256"]
    retrieved = [read_contexts(p) for p in (tmp_path / "cache").glob("retrieve-*.jsonl.gz")]
    texts = {p.text for contexts in retrieved for c in contexts for p in c.passages}
    assert {"The capital of France is Paris.", "The capital of France is Lyon."} <= texts


def test_answer_likelihood_utility(tmp_path: Path, fake_judge: WordJudge, evaluate_config) -> None:
    cfg = evaluate_config("dataset.limit=12", "k=3", "judge=fake", "utility=answer_likelihood")
    report, _ = run_evaluate(cfg, tmp_path / "out")
    (annotated,) = (tmp_path / "cache").glob("annotate-*.jsonl.gz")
    contexts = list(read_contexts(annotated))
    assert all(not p.abstain_prob for c in contexts for p in c.passages)  # only the asked source
    rel = np.array([[float(p.relevant) for p in c.passages] for c in contexts])
    util = np.array(
        [[WordJudge.likelihood(p.text, c.answers) for p in c.passages] for c in contexts]
    )
    assert report["setup"]["utility"] == "answer_likelihood"
    assert report["means"]["UDCG"] == pytest.approx(metrics.udcg(rel, util).mean())


def _annotated(path: Path) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    contexts, udcg_values, correct = [], [], []
    for i in range(30):
        rel = rng.random(3) < 0.5
        probs = rng.random(3)
        ok = bool(rng.random() < 0.3 + 0.5 * rel.mean())
        passages = [
            Passage(doc_id=f"d{j}", text="t", relevant=bool(r), abstain_prob={"m": float(p)})
            for j, (r, p) in enumerate(zip(rel, probs, strict=True))
        ]
        contexts.append(Context(f"q{i}", passages, outcomes={"m": {"correct": ok}}))
        udcg_values.append(metrics.udcg([rel.astype(float)], [1 - probs])[0])
        correct.append(float(ok))
    write_contexts(path, contexts)
    return np.array(udcg_values), np.array(correct)


def _given(evaluate_config, tmp_path: Path, *overrides: str):
    """The config of a run on the given contexts ``tmp_path/in.jsonl`` with judge ``m``."""
    return evaluate_config(
        "dataset=jsonl",
        f"dataset.path={tmp_path / 'in.jsonl'}",
        "retriever=given",
        "judge=m",
        *overrides,
    )


def test_annotated_input_needs_no_judge(tmp_path: Path, monkeypatch, evaluate_config) -> None:
    def refuse(spec, **options):
        raise AssertionError("no judge should be loaded")

    monkeypatch.setattr("udcg.judge.load_judge", refuse)
    udcg_values, correct = _annotated(tmp_path / "in.jsonl")
    cfg = _given(evaluate_config, tmp_path)
    report, _ = run_evaluate(cfg, tmp_path / "out")
    row = next(r for r in report["correlations"] if r["metric"] == "UDCG")
    assert row["spearman"] == pytest.approx(sps.spearmanr(udcg_values, correct)[0])
    assert "UDCG-gamma" in report["means"]


CROSSFIT_WARNING = (
    "UDCG-theta (cross-fitted on each half) fits 6 parameters on 15 contexts (2.5 contexts per "
    "parameter, fewer than 20): its weights may not generalise; use more queries or a smaller k"
)


def test_crossfit_theta_is_reported_and_plotted(tmp_path: Path, evaluate_config) -> None:
    _annotated(tmp_path / "in.jsonl")
    cfg = _given(evaluate_config, tmp_path, "theta_crossfit=true")
    with pytest.warns(UDCGWarning) as warned:
        report, files = run_evaluate(cfg, tmp_path / "out")
    assert [str(w.message) for w in warned] == [CROSSFIT_WARNING]
    assert "UDCG-theta (cross-fitted)" in report["means"]
    halves = report["crossfit_theta_weights"]
    assert len(halves) == 2 and all(len(h["alpha"]) == len(h["beta"]) == 3 for h in halves)
    assert tmp_path / "out" / "theta_weights.png" in files


def test_a_rerun_into_a_used_folder_leaves_no_plot_of_the_earlier_run(
    tmp_path: Path, evaluate_config
) -> None:
    _annotated(tmp_path / "in.jsonl")
    crossfit = _given(evaluate_config, tmp_path, "theta_crossfit=true")
    with pytest.warns(UDCGWarning):  # cross-fitted: theta_weights.png and reliability.png
        _, first = run_evaluate(crossfit, tmp_path / "out")
    assert {"theta_weights.png", "reliability.png"} <= {f.name for f in first}
    (tmp_path / "out" / "notes.txt").write_text("mine")  # not a report's file: kept
    report, files = run_evaluate(_given(evaluate_config, tmp_path), tmp_path / "out")
    assert "calibration" not in report
    on_disk = {p.name for p in (tmp_path / "out").iterdir()}
    assert on_disk == {f.name for f in files} | {"notes.txt"}
    assert "theta_weights.png" not in on_disk and "reliability.png" not in on_disk


def test_the_judge_a_run_opens_is_closed_when_it_ends(
    tmp_path: Path, fake_judge: WordJudge, evaluate_config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process, a run closes the judge it opened (and the judge cache in front of it)."""
    closed: list[str] = []
    monkeypatch.setattr(fake_judge, "close", lambda: closed.append("judge"), raising=False)
    assert main(evaluate_config("dataset.limit=4", "k=2", "judge=fake")).status == 0
    assert closed == ["judge"]


def test_crossfit_warning_is_one_line_on_stderr(
    tmp_path: Path, evaluate_config, capsys: pytest.CaptureFixture[str]
) -> None:
    _annotated(tmp_path / "in.jsonl")
    cfg = _given(evaluate_config, tmp_path, "theta_crossfit=true")
    assert main(cfg).status == 0
    assert capsys.readouterr().err == f"evaluate.py: warning: {CROSSFIT_WARNING}\n"


def test_theta_l2_penalises_the_crossfit(tmp_path: Path, evaluate_config) -> None:
    """``theta_l2`` reaches both cross-fitted models: their weights are the penalised fit's
    (smaller than the unpenalised ones) and the value is in report.json."""
    _annotated(tmp_path / "in.jsonl")
    norms = {}
    for l2 in (0.0, 0.5):
        cfg = _given(evaluate_config, tmp_path, "theta_crossfit=true", f"theta_l2={l2}")
        with pytest.warns(UDCGWarning):
            report, _ = run_evaluate(cfg, tmp_path / f"out{l2}")
        assert report["config"]["theta_l2"] == l2
        norms[l2] = [
            np.linalg.norm(h["alpha"] + h["beta"]) for h in report["crossfit_theta_weights"]
        ]
    assert all(p < u for p, u in zip(norms[0.5], norms[0.0], strict=True))


def test_negative_theta_l2_is_refused(tmp_path: Path, evaluate_config) -> None:
    cfg = evaluate_config("theta_crossfit=true", "theta_l2=-1")
    with pytest.raises(UDCGInputError) as err:
        run_evaluate(cfg, tmp_path / "out")
    assert str(err.value) == "field 'theta_l2': must be finite and >= 0, got -1"


def test_undefined_correlations_say_why_everywhere(
    tmp_path: Path, evaluate_config, monkeypatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every context has its one relevant passage first: nDCG, MAP, MRR, Precision and Hits
    are constant, so their correlations are undefined; the table, the summary, report.md,
    report.json and correlations.png say so in the same words."""
    rng = np.random.default_rng(1)
    contexts = [
        Context(
            f"q{i}",
            [
                Passage(doc_id=f"d{j}", relevant=j == 0, abstain_prob={"m": float(rng.random())})
                for j in range(3)
            ],
            outcomes={"m": {"correct": bool(rng.random() < 0.5)}},
        )
        for i in range(20)
    ]
    write_contexts(tmp_path / "in.jsonl", contexts)
    labels = []  # the texts written on the plots
    real_text = Axes.text

    def text(ax: Axes, x: float, y: float, s: str, **kwargs):
        labels.append((x, y, s))
        return real_text(ax, x, y, s, **kwargs)

    monkeypatch.setattr(Axes, "text", text)
    cfg = _given(evaluate_config, tmp_path)
    assert main(cfg).status == 0
    out = tmp_path / "out"
    said = "undefined (metric is constant)"
    assert f"  nDCG         spearman {said}" in capsys.readouterr().out.splitlines()
    assert f"| nDCG | 1.000 | {said} | | | |" in (out / "report.md").read_text().splitlines()
    rows = json.loads((out / "report.json").read_text())["correlations"]
    undefined = {r["metric"] for r in rows if r["undefined"] == "metric is constant"}
    assert undefined == {"nDCG", "MAP", "MRR", "Precision", "Hits"}
    position = {r["metric"]: i for i, r in enumerate(rows)}
    assert sorted(labels) == sorted((position[m], 0, said) for m in undefined)


def test_sweep_summary_over_two_retrievers(
    tmp_path: Path, fake_judge: WordJudge, evaluate_config
) -> None:
    for i, name in enumerate(["bm25", "reversed", "oracle_first"]):
        cfg = evaluate_config("dataset.limit=8", "k=3", "judge=fake", f"retriever={name}")
        run_evaluate(cfg, tmp_path / "sweep" / f"{i}-{name}")
    path = write_summary(tmp_path / "sweep")
    summary = json.loads((tmp_path / "sweep" / "sweep_summary.json").read_text())
    assert {r["run"] for r in summary["runs"]} == {"bm25", "reversed", "oracle_first"}
    assert {a["metric"] for a in summary["ranking_agreement"]} == set(summary["runs"][0]["means"])
    assert "Kendall tau-b" in path.read_text()


def test_a_sweep_records_its_id_once_its_folder_is_locked(tmp_path: Path) -> None:
    """The record members read (also members another launcher runs in other processes) is
    written under the folder's lock: a second sweep into the folder is refused before it can
    replace it (the next test)."""
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}, "job": {"name": "e"}}})
    callback = SweepSummary()
    callback.on_multirun_start(config)
    assert current_sweep(tmp_path) == callback.sweep_id
    assert sorted(os.listdir(tmp_path)) == [".hydra.lock", "sweep.json"]
    callback.on_multirun_end(config)  # no member wrote a report: no summary
    assert os.listdir(tmp_path) == ["sweep.json"]


@pytest.mark.parametrize("sweep", [True, False], ids=["sweep", "run"])
def test_a_second_writer_of_a_run_or_sweep_folder_is_refused(tmp_path: Path, sweep: bool) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    where = ["-m", f"hydra.sweep.dir={folder}"] if sweep else [f"hydra.run.dir={folder}"]
    with open(folder / ".hydra.lock", "a") as lock:  # another process's run or sweep
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run(
            [sys.executable, "evaluate.py", *where, "k=1,3" if sweep else "k=1"],
            cwd=REPO,
            capture_output=True,
            text=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
            timeout=120,
        )
    assert done.returncode == 2
    kind = "sweep" if sweep else "run"
    assert done.stderr.splitlines() == [
        f"evaluate.py: error: {folder}/.hydra: another process is writing this {kind} folder "
        f"(lock {folder}/.hydra.lock); wait for it to finish or choose another output path"
    ]
    assert os.listdir(folder) == [".hydra.lock"]  # refused before Hydra wrote anything


def test_an_output_dir_another_process_writes_is_refused(
    tmp_path: Path, fake_judge: WordJudge, evaluate_config
) -> None:
    """``output_dir=X`` outside the locked run folder (or a sweep member's folder) takes X's
    lock: a run another process writes there keeps its files."""
    folder = tmp_path / "X"
    folder.mkdir()
    (folder / "theta_weights.png").write_text("the other run's figure")
    with open(folder / ".hydra.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with pytest.raises(UDCGInputError, match="another process is writing this run folder"):
            run_evaluate(evaluate_config("k=1", "judge=fake"), folder)
    assert sorted(os.listdir(folder)) == [".hydra.lock", "theta_weights.png"]
    assert fake_judge.calls == 0


# ------------------------------------------------------------------------ bad configuration


def test_unknown_retriever(tmp_path: Path, evaluate_config) -> None:
    with pytest.raises(MissingConfigException, match="retriever"):
        evaluate_config("retriever=nope")


def test_k_larger_than_the_corpus(tmp_path: Path, fake_judge: WordJudge, evaluate_config) -> None:
    with pytest.raises(UDCGInputError, match=r"k=500 is larger than the corpus \(420 passages\)"):
        run_evaluate(evaluate_config("k=500", "judge=fake"), tmp_path / "out")
    assert fake_judge.calls == 0


def test_weights_of_the_wrong_k(tmp_path: Path, fake_judge: WordJudge, evaluate_config) -> None:
    from udcg.theta import UDCGTheta

    rng = np.random.default_rng(0)
    rel, util = (rng.random((40, 2)) < 0.5).astype(float), rng.random((40, 2))
    model = UDCGTheta(k=2).fit(rel, util, (rng.random(40) < 0.5).astype(float))
    model.save(tmp_path / "w.safetensors")
    cfg = evaluate_config("k=3", "judge=fake", f"theta_weights={tmp_path / 'w.safetensors'}")
    with pytest.raises(UDCGInputError, match="weights are for k=2, data has k=3"):
        run_evaluate(cfg, tmp_path / "out")
    assert fake_judge.calls == 0


def test_weights_of_another_utility_source(
    tmp_path: Path, fake_judge: WordJudge, evaluate_config
) -> None:
    from udcg.theta import UDCGTheta

    rng = np.random.default_rng(0)
    rel, util = (rng.random((40, 3)) < 0.5).astype(float), rng.random((40, 3))
    model = UDCGTheta(k=3).fit(rel, util, (rng.random(40) < 0.5).astype(float))
    model.save(tmp_path / "w.safetensors", card={"utility": "answer_likelihood"})
    cfg = evaluate_config("k=3", "judge=fake", f"theta_weights={tmp_path / 'w.safetensors'}")
    with pytest.raises(
        UDCGInputError, match="fitted with utility source 'answer_likelihood', not 'abstention'"
    ):
        run_evaluate(cfg, tmp_path / "out")
    assert fake_judge.calls == 0


def test_judge_not_reachable(tmp_path: Path, evaluate_config) -> None:
    cfg = evaluate_config("dataset.limit=2", "judge=openai:m@http://127.0.0.1:9/v1")
    with pytest.raises(UDCGInputError) as err:
        run_evaluate(cfg, tmp_path / "out")
    assert str(err.value) == (
        "field 'judge': the server at http://127.0.0.1:9/v1 does not answer (connection refused)"
    )
    assert not (tmp_path / "out" / "report.json").exists()


def test_given_retriever_without_contexts(tmp_path: Path, evaluate_config) -> None:
    with pytest.raises(UDCGInputError, match="retriever=given needs retrieved contexts"):
        run_evaluate(evaluate_config("retriever=given"), tmp_path / "out")


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "evaluate.py", f"hydra.run.dir={tmp_path}", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    done = _cli(tmp_path, "k=1000", f"cache_dir={tmp_path}")
    assert done.returncode == 2
    assert "evaluate.py: error: field 'k': k=1000 is larger than the corpus" in done.stderr
    assert "Traceback" not in done.stderr
    done = _cli(tmp_path, "retriever=nope")
    assert done.returncode != 0 and "Available options" in done.stderr
    assert "Traceback" not in done.stderr


def test_coverage_labels_in_the_input_give_c_prec_and_c_ndcg(
    tmp_path: Path, evaluate_config
) -> None:
    _annotated(tmp_path / "in.jsonl")
    contexts = list(read_contexts(tmp_path / "in.jsonl"))
    covers = [[[j == 0, j == i % 3] for j in range(3)] for i in range(len(contexts))]
    labelled = [
        Context(
            c.qid,
            [replace(p, covers=cov) for p, cov in zip(c.passages, rows, strict=True)],
            subqueries=["s1", "s2"],
            outcomes=c.outcomes,
        )
        for c, rows in zip(contexts, covers, strict=True)
    ]
    write_contexts(tmp_path / "cov.jsonl", labelled)
    cfg = evaluate_config(
        "dataset=jsonl",
        f"dataset.path={tmp_path / 'cov.jsonl'}",
        "retriever=given",
        "judge=m",
    )
    report, _ = run_evaluate(cfg, tmp_path / "out")
    gains = np.array([[sum(cov) / 2 for cov in rows] for rows in covers])
    assert report["means"]["C-Prec"] == pytest.approx(gains.mean())
    ideal = np.sort(gains, axis=1)[:, ::-1]
    disc = 1 / np.log2(np.arange(2, 5))
    assert report["means"]["C-nDCG"] == pytest.approx(np.mean((gains @ disc) / (ideal @ disc)))


def test_weights_of_another_judge_refused_then_allowed_and_recorded(
    tmp_path: Path, fake_judge: WordJudge, evaluate_config
) -> None:
    from udcg.theta import UDCGTheta

    rng = np.random.default_rng(0)
    rel, util = (rng.random((40, 3)) < 0.5).astype(float), rng.random((40, 3))
    model = UDCGTheta(k=3).fit(rel, util, (rng.random(40) < 0.5).astype(float))
    folder = tmp_path / "theta"
    model.save_pretrained(folder, card={"judge_model": "other", "abstention_mode": "first_token"})
    options = ("dataset.limit=8", "k=3", "judge=fake", f"theta_weights={folder}")
    with pytest.raises(UDCGInputError) as info:
        run_evaluate(evaluate_config(*options), tmp_path / "out")
    assert str(info.value) == (
        "field 'judge': the weights were fitted with judge 'other', not 'fake' "
        "(allow_mismatch=[judge] to use them anyway)"
    )
    assert fake_judge.calls == 0
    cfg = evaluate_config(*options, "allow_mismatch=[judge]")
    report, _ = run_evaluate(cfg, tmp_path / "out")
    (note,) = report["setup"]["theta_weights_overrides"]
    assert note.startswith("field 'judge'") and note.endswith("(allowed on purpose)")
    # the report names the weights by their digest, not only by a path that may change
    digest = UDCGTheta.from_pretrained(folder).card_["weights_sha256"]
    assert report["setup"]["theta_weights_sha256"] == digest
    assert f"UDCG-theta weights: {note}" in report["notes"]
    # the mode this pipeline annotates with is checked too
    model.save_pretrained(folder, card={"judge_model": "fake", "abstention_mode": "sequence"})
    with pytest.raises(UDCGInputError, match="abstention mode 'sequence', not 'first_token'"):
        run_evaluate(evaluate_config(*options), tmp_path / "out2")


def test_allow_mismatch_names_known_fields() -> None:
    from udcg.pipeline.settings import EvaluateSettings

    assert EvaluateSettings(allow_mismatch=["judge", "prompt"]).allow_mismatch == [
        "judge",
        "prompt",
    ]
    with pytest.raises(
        UDCGInputError,
        match="must be one of k, utility, judge, fingerprint, relevance, prompt, mode",
    ):
        EvaluateSettings(allow_mismatch=["judges"])
    with pytest.raises(UDCGInputError, match="must be a list of fields"):
        EvaluateSettings(allow_mismatch="judge")


# ------------------------------------------------------------------------ order=...


def _stage(tmp_path: Path, stage: str) -> list[list[Context]]:
    """The contexts of every cached ``stage`` file."""
    return [list(read_contexts(p)) for p in sorted((tmp_path / "cache").glob(f"{stage}-*"))]


def _answered(tmp_path: Path, run_suffix: str) -> dict[str, Context]:
    """The answered contexts of the annotate stage whose run name ends with ``run_suffix``."""
    for contexts in _stage(tmp_path, "annotate"):
        if contexts[0].run.endswith(run_suffix) and contexts[0].outcomes:
            return {c.qid: c for c in contexts}
    raise AssertionError(f"no answered contexts of run *{run_suffix}")


def test_order_retriever_is_the_plain_run(
    tmp_path: Path, fake_judge: WordJudge, evaluate_config
) -> None:
    plain_report, _ = run_evaluate(evaluate_config("dataset.limit=8", "judge=fake"), tmp_path / "a")
    cfg = evaluate_config("dataset.limit=8", "judge=fake", "order=retriever", "order_candidates=9")
    report, files = run_evaluate(cfg, tmp_path / "b")
    assert report["setup"]["cached_stages"] == ["retrieve", "annotate"]  # the same stages
    assert "ordering" not in report and "calibration" not in report
    assert "reliability.png" not in {f.name for f in files}
    for key in ("means", "correlations", "paired_tests", "accuracy_by_gold_position", "notes"):
        assert report[key] == plain_report[key]
    (retrieved,) = _stage(tmp_path, "retrieve")
    assert all(len(c.passages) == 3 for c in retrieved)
    # the retrieve stage is keyed by the dataset and retriever options, the run name, the
    # retriever's description, the dataset's content, k and the depth; order=retriever asks
    # for no more candidates than a plain run
    sha256 = report["setup"]["dataset_sha256"]
    name, searcher = build_retriever(cfg.retriever)
    identity = retriever_identity(searcher)
    key = stage_key(plain(cfg.dataset), plain(cfg.retriever), name, identity, sha256, 3, 3)
    assert (tmp_path / "cache" / f"retrieve-{key}.jsonl.gz").is_file()


def _random_theta(k: int, seed: int = 0):
    from udcg.theta import UDCGTheta

    rng = np.random.default_rng(seed)
    rel, util = (rng.random((80, k)) < 0.5).astype(float), rng.random((80, k))
    correct = (rng.random(80) < 0.2 + 0.6 * (rel * util)[:, 0]).astype(float)
    return UDCGTheta(k=k, val_fraction=0.0).fit(rel, util, correct)


def test_order_theta_chooses_the_best_context_of_the_candidates(
    tmp_path: Path, fake_judge: WordJudge, evaluate_config
) -> None:
    model = _random_theta(3)
    model.save(tmp_path / "w.safetensors")
    cfg = evaluate_config(
        "dataset.limit=10",
        "judge=fake",
        "order=theta",
        "order_candidates=6",
        f"theta_weights={tmp_path / 'w.safetensors'}",
    )
    report, _ = run_evaluate(cfg, tmp_path / "out")
    (candidates,) = _stage(tmp_path, "retrieve")
    chosen = _answered(tmp_path, "order=theta")
    baseline = _answered(tmp_path, "bm25")
    best_probs, base_probs = [], []
    for cand in candidates:
        assert len(cand.passages) == 6
        rel = np.array([float(p.relevant) for p in cand.passages])
        util = np.array([1 - WordJudge.prob(cand.question, p.text) for p in cand.passages])
        # brute force over every ordered choice of 3 of the 6, first (lexicographic) best wins
        perms = list(itertools.permutations(range(6), 3))
        probs = model.predict_proba(np.array([rel[list(p)] for p in perms]), util[list(perms)])
        best = perms[int(np.flatnonzero(probs >= probs.max() - 1e-12)[0])]
        got = [p.doc_id for p in chosen[cand.qid].passages]
        assert got == [cand.passages[i].doc_id for i in best]
        best_probs.append(probs.max())
        base_probs.append(probs[perms.index((0, 1, 2))])
        assert [p.doc_id for p in baseline[cand.qid].passages] == [
            p.doc_id for p in cand.passages[:3]
        ]
    ordering = report["ordering"]
    assert ordering["mean_theta"] == pytest.approx(np.mean(best_probs))
    assert ordering["retriever_mean_theta"] == pytest.approx(np.mean(base_probs))
    ok = np.array([float(chosen[c.qid].outcomes["fake"]["correct"]) for c in candidates])
    base_ok = np.array([float(baseline[c.qid].outcomes["fake"]["correct"]) for c in candidates])
    assert ordering["accuracy"] == report["setup"]["accuracy"] == pytest.approx(ok.mean())
    assert ordering["retriever_accuracy"] == pytest.approx(base_ok.mean())
    assert ordering["difference"] == pytest.approx(ok.mean() - base_ok.mean())
    assert "## Context order: theta vs. retriever order" in (tmp_path / "out/report.md").read_text()


@pytest.mark.parametrize(
    ("order", "expected"),
    [("reversed", [2, 1, 0]), ("ends", [0, 2, 1]), ("gold_first", None)],
)
def test_heuristic_orders(
    tmp_path: Path, fake_judge: WordJudge, evaluate_config, order: str, expected
) -> None:
    cfg = evaluate_config("dataset.limit=6", "judge=fake", f"order={order}", "order_candidates=5")
    report, _ = run_evaluate(cfg, tmp_path / "out")
    (candidates,) = _stage(tmp_path, "retrieve")
    chosen = _answered(tmp_path, f"order={order}")
    for cand in candidates:
        if expected is None:  # relevant candidates first, then the rest, each as ranked
            ranked = sorted(range(5), key=lambda i: not cand.passages[i].relevant)[:3]
        else:
            ranked = expected
        got = [p.doc_id for p in chosen[cand.qid].passages]
        assert got == [cand.passages[i].doc_id for i in ranked]
    assert report["ordering"]["mean_theta"] is None  # no weights, not cross-fitted


def test_order_theta_crossfit_chooses_with_the_other_half(
    tmp_path: Path, fake_judge: WordJudge, evaluate_config
) -> None:
    from udcg.theta import UDCGTheta, split_by_query

    cfg = evaluate_config(
        "dataset.limit=12", "judge=fake", "k=2", "order=theta", "theta_crossfit=true"
    )
    with pytest.warns(UDCGWarning):
        report, files = run_evaluate(cfg, tmp_path / "out")
    (candidates,) = _stage(tmp_path, "retrieve")
    baseline = _answered(tmp_path, "bm25")
    chosen = _answered(tmp_path, "order=theta")
    qids = np.array([c.qid for c in candidates], dtype=object)
    rel = np.array([[float(p.relevant) for p in baseline[q].passages] for q in qids])
    util = np.array(
        [
            [1 - WordJudge.prob(baseline[q].question, p.text) for p in baseline[q].passages]
            for q in qids
        ]
    )
    correct = np.array([float(baseline[q].outcomes["fake"]["correct"]) for q in qids])
    first, second = split_by_query(qids, 0.5, 0)
    for fit, apply in ((first, second), (second, first)):
        model = UDCGTheta(2, val_fraction=0.0).fit(rel[fit], util[fit], correct[fit])
        for i in apply:
            cand = candidates[i]
            r = np.array([float(p.relevant) for p in cand.passages])
            u = np.array([1 - WordJudge.prob(cand.question, p.text) for p in cand.passages])
            perms = list(itertools.permutations(range(len(r)), 2))
            probs = model.predict_proba(r[list(perms)], u[list(perms)])
            best = perms[int(np.flatnonzero(probs >= probs.max() - 1e-9)[0])]
            got = [p.doc_id for p in chosen[cand.qid].passages]
            assert got == [cand.passages[j].doc_id for j in best]
    assert report["ordering"]["theta"] == "cross-fitted"
    assert tmp_path / "out" / "reliability.png" in files


def test_calibration_report_is_the_calibration_functions_on_held_out_predictions(
    tmp_path: Path, evaluate_config
) -> None:
    from sklearn.linear_model import LogisticRegression

    from udcg.theta import split_by_query
    from udcg.theta.calibration import (
        bootstrap_ci,
        brier_score,
        expected_calibration_error,
        fit_score_calibration,
        forecast_accuracy,
    )

    udcg_values, correct = _annotated(tmp_path / "in.jsonl")
    contexts = list(read_contexts(tmp_path / "in.jsonl"))
    cfg = _given(evaluate_config, tmp_path, "theta_crossfit=true", "n_bootstrap=200")
    with pytest.warns(UDCGWarning):
        report, files = run_evaluate(cfg, tmp_path / "out")
    qids = np.array([c.qid for c in contexts], dtype=object)
    rel = np.array([[float(p.relevant) for p in c.passages] for c in contexts])
    util = np.array([[1 - p.abstain_prob["m"] for p in c.passages] for c in contexts])
    features = np.hstack([rel * util, (1 - rel) * util])
    theta = np.empty(len(qids))
    udcg_cal = np.empty(len(qids))
    first, second = split_by_query(qids, 0.5, 0)
    for fit, apply in ((first, second), (second, first)):
        lr = LogisticRegression(C=np.inf, fit_intercept=False, tol=1e-10, max_iter=10000).fit(
            features[fit], correct[fit]
        )
        theta[apply] = lr.predict_proba(features[apply])[:, 1]
        udcg_cal[apply] = fit_score_calibration(udcg_values[fit], correct[fit]).apply(
            udcg_values[apply]
        )
    cal = report["calibration"]
    assert set(cal) == {"UDCG-theta (cross-fitted)", "UDCG (calibrated, cross-fitted)"}
    for name, prob, tol in (
        ("UDCG-theta (cross-fitted)", theta, 2e-3),
        ("UDCG (calibrated, cross-fitted)", udcg_cal, 1e-9),
    ):
        for key, statistic in (("brier", brier_score), ("ece", expected_calibration_error)):
            value, low, high = bootstrap_ci(statistic, prob, correct, groups=qids, n_resamples=200)
            assert cal[name][key]["value"] == pytest.approx(value, abs=tol)
            assert cal[name][key]["ci95"] == pytest.approx([low, high], abs=tol)
        expected = forecast_accuracy(prob, correct, n_resamples=200, seed=0, groups=qids)
        assert cal[name]["forecast"]["forecast"] == pytest.approx(prob.mean(), abs=tol)
        assert cal[name]["forecast"]["measured"] == pytest.approx(correct.mean())
        assert cal[name]["forecast"]["forecast_ci"] == pytest.approx(
            expected["forecast_ci"], abs=tol
        )
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Calibration of held-out probabilities" in md
    assert tmp_path / "out" / "reliability.png" in files
    assert (tmp_path / "out" / "reliability.png").stat().st_size > 0


def test_sweep_summary_of_orderings(tmp_path: Path, fake_judge: WordJudge, evaluate_config) -> None:
    orders = ["retriever", "reversed", "gold_first"]
    for i, order in enumerate(orders):
        cfg = evaluate_config("dataset.limit=8", "judge=fake", f"order={order}")
        run_evaluate(cfg, tmp_path / "sweep" / f"{i}-bm25")
    text = write_summary(tmp_path / "sweep").read_text()
    summary = json.loads((tmp_path / "sweep" / "sweep_summary.json").read_text())
    rows = {r["run"]: r for r in summary["orderings"]}
    assert set(rows) == {f"order={o}" for o in orders}
    reports = {
        o: json.loads((tmp_path / "sweep" / f"{i}-bm25" / "report.json").read_text())
        for i, o in enumerate(orders)
    }
    base = reports["retriever"]["setup"]["accuracy"]
    for order in orders:
        row = rows[f"order={order}"]
        assert row["accuracy"] == reports[order]["setup"]["accuracy"]
        assert row["retriever_accuracy"] == pytest.approx(base)  # the same questions' top-k
        assert row["difference"] == pytest.approx(row["accuracy"] - base)
    assert "## Context orderings vs. the retriever order" in text
    assert "forecasts" not in summary  # no UDCG-theta, no forecast


def test_weights_with_a_recalibration_are_reported_both_ways(
    tmp_path: Path, evaluate_config
) -> None:
    from udcg.theta.calibration import brier_score, expected_calibration_error
    from udcg.theta.simulate import simulate_arrays

    _, correct = _annotated(tmp_path / "in.jsonl")
    contexts = list(read_contexts(tmp_path / "in.jsonl"))
    rel = np.array([[float(p.relevant) for p in c.passages] for c in contexts])
    util = np.array([[1 - p.abstain_prob["m"] for p in c.passages] for c in contexts])
    model = _random_theta(3, seed=1)
    held_out = simulate_arrays(200, 3, seed=5)  # a recalibration fitted on other data
    model.calibrate(*held_out, "platt")
    model.save(tmp_path / "w.safetensors")
    cfg = _given(evaluate_config, tmp_path, f"theta_weights={tmp_path / 'w.safetensors'}")
    report, _ = run_evaluate(cfg, tmp_path / "out")
    cal = report["calibration"]
    for name, prob in (
        ("UDCG-theta", model.predict_proba(rel, util)),
        ("UDCG-theta (recalibrated)", model.predict_proba(rel, util, calibrated=True)),
    ):
        assert cal[name]["brier"]["value"] == pytest.approx(brier_score(prob, correct))
        assert cal[name]["ece"]["value"] == pytest.approx(expected_calibration_error(prob, correct))
        assert cal[name]["forecast"]["forecast"] == pytest.approx(prob.mean())
