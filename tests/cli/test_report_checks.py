"""``udcg report``'s checks of its forecast weights and the labels of its plots: a forecast over
the same queries as the measures, weights whose k, abstention mode or a run's ranking depth
cannot work refused in one line before any judge call, and plot labels that tell every system
apart. The commands run as subprocesses on the three runs of :mod:`tests.e2e.test_one_command`
with a ``precomputed:`` judge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.e2e.test_one_command import SYSTEMS, TOPICS, _Plots, _refused, write_data, write_probs
from udcg.pipeline.journey_report import to_html


def _setup(root: Path, card: dict | None = None, k: int = 5) -> tuple[Path, Path, list[str]]:
    """The data, UDCG-theta weights of ``k`` (judge ``probs``, ``card`` entries added) and the
    common arguments of ``udcg report`` (its judge, cache and output folder ``root/out``)."""
    from udcg.theta import UDCGTheta

    data = write_data(root / "data")
    probs = write_probs(data, 0.1)
    model = UDCGTheta(k)
    model.alpha_, model.beta_, model.intercept_ = np.linspace(2.0, 0.4, k), -np.ones(k), 0.0
    weights = model.save_pretrained(root / "theta", card={"judge_model": "probs", **(card or {})})
    common = [
        "--topics", str(data / "topics.tsv"), "--collection", str(data / "collection.tsv"),
        "--qrels", str(data / "qrels.trec"), "--judge", f"precomputed:{probs}",
        "--cache", str(root / "judge.sqlite"), "--out", str(root / "out"),
        "--n-resamples", "200",
    ]  # fmt: skip
    return data, weights, common


def _runs(data: Path) -> list[str]:
    return [str(data / f"{s}.trec") for s in SYSTEMS]


def _no_judge_call(root: Path) -> None:
    """Nothing was labelled: the refusal came before the judge was asked."""
    assert not (root / "out" / "labels").exists()
    assert not (root / "judge.sqlite").exists()


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "udcg", "report", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        input=stdin,
    )


def test_forecast_refuses_a_system_that_ranks_no_document_for_a_compared_query(
    tmp_path: Path,
) -> None:
    """Every measure scores an unranked judged query 0; a forecast over the ranked queries
    only would rank a run higher for dropping its worst queries. Refused before labelling."""
    data, weights, common = _setup(tmp_path)
    lines = (data / "a.trec").read_text().splitlines()
    (data / "a_minus.trec").write_text("".join(f"{x}\n" for x in lines if x.split()[0] != "q3"))
    line = _refused(str(data / "a.trec"), str(data / "a_minus.trec"), *common,
                    "--weights", str(weights))  # fmt: skip
    assert (
        f"{data / 'a_minus.trec'}: field 'run': system 'a_minus' ranks no document for 1 of the "
        "4 compared queries (first 'q3')"
    ) in line
    assert "leave the forecast (--weights) out" in line
    _no_judge_call(tmp_path)


def test_forecasts_average_every_system_over_the_compared_queries(tmp_path: Path) -> None:
    """``qids`` fixes the rows (and so the bootstrap's resamples): a context outside them is not
    counted, a query missing from a system is refused."""
    from udcg.errors import UDCGInputError
    from udcg.io.contexts.jsonl import Context, Passage, write_contexts
    from udcg.pipeline.journey import forecasts
    from udcg.theta import UDCGTheta

    model = UDCGTheta(1)
    model.alpha_, model.beta_, model.intercept_ = np.array([2.0]), -np.ones(1), 0.0
    model.calibration_ = None

    def context(qid: str, relevant: bool) -> Context:
        return Context(qid, [Passage("d1", relevant=relevant, abstain_prob={"j": 0.0})])

    path = tmp_path / "a.jsonl"
    write_contexts(path, [context("q2", False), context("q1", True), context("q9", True)])
    found = forecasts({"a": path}, model, "j", "abstention", qids=["q1", "q2"], n_resamples=50)
    expected = model.predict_proba([[1.0]], [[1.0]]) + model.predict_proba([[0.0]], [[1.0]])
    assert found["a"]["UDCG-theta"]["forecast"] == pytest.approx(expected[0] / 2)
    with pytest.raises(UDCGInputError, match="ranks no document for 1 of the 3 queries"):
        forecasts({"a": path}, model, "j", "abstention", qids=["q1", "q2", "q3"])


def test_allow_mismatch_k_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    data, weights, common = _setup(tmp_path)
    line = _refused(*_runs(data), *common, "-k", "6", "--weights", str(weights),
                    "--allow-mismatch", "k")  # fmt: skip
    assert "field '--allow-mismatch': k cannot be overridden" in line
    assert "give -k the weights' k" in line
    assert not (tmp_path / "out").exists()


def test_weights_of_another_k_are_refused_with_the_k_to_give(tmp_path: Path) -> None:
    data, weights, common = _setup(tmp_path)
    line = _refused(*_runs(data), *common, "-k", "6", "--weights", str(weights))
    assert f"{weights}: field 'k': the UDCG-theta weights forecast contexts of exactly 5" in line
    assert "give -k 5" in line and "--allow-mismatch" not in line
    # a measure deeper than -k: the weights' k is the remedy, not a shallower measure
    line = _refused(*_runs(data), *common, "-k", "3", "-m", "UDCG@5", "--weights", str(weights))
    assert "exactly 5 passages, and -k 3 labels the top 3: give -k 5, or weights" in line
    _no_judge_call(tmp_path)


def test_a_calibration_fitted_with_another_judge_fingerprint_is_refused(tmp_path: Path) -> None:
    """Weights whose calibration was fitted on values of another judge fingerprint (allowed
    when calibrating) are refused where the report applies the calibration, and recorded when
    allowed again."""
    from udcg.theta import UDCGTheta
    from udcg.theta.calibration import Calibration

    data, weights, common = _setup(tmp_path)
    model = UDCGTheta.from_pretrained(weights)
    model.calibration_ = Calibration("platt", {"a": 0.8, "b": 0.3}, 40)
    card = {"judge_model": "probs", "calibration_fitted_on": {"judge_fingerprint": "fp-other"}}
    calibrated = model.save_pretrained(tmp_path / "calibrated", card=card)
    done = _run(*_runs(data), *common, "--weights", str(calibrated))
    assert done.returncode == 2
    assert "calibration was fitted with judge fingerprint 'fp-other'" in done.stderr
    assert not (tmp_path / "out" / "labels").exists()  # before any judge call
    argv = [*_runs(data), *common, "--weights", str(calibrated), "--allow-mismatch", "fingerprint"]
    assert _run(*argv).returncode == 0
    overrides = json.loads((tmp_path / "out" / "report.json").read_text())["forecast"]["overrides"]
    assert any("fp-other" in note for note in overrides), overrides


def test_weights_of_a_smaller_k_name_the_measures_to_give(tmp_path: Path) -> None:
    """k=3 weights and the default UDCG@5: both refusals name -m within the top 3, which the
    report then takes."""
    data, weights, common = _setup(tmp_path, k=3)
    line = _refused(*_runs(data), *common, "--weights", str(weights))
    assert "give -k 3 -m UDCG@3,nDCG@10,AP,RR,P@5, or weights fitted for k 5" in line
    line = _refused(*_runs(data), *common, "--weights", str(weights), "-k", "3")
    assert "labels the top 3: give measures within the top 3 (-m UDCG@3,nDCG@10,AP,RR,P@5)" in line
    _no_judge_call(tmp_path)


def test_a_run_ranking_fewer_than_k_documents_is_refused_before_labelling(
    tmp_path: Path,
) -> None:
    data, weights, common = _setup(tmp_path)
    lines = (data / "b.trec").read_text().splitlines()
    short = [x for x in lines if not (x.startswith("q2 ") and int(x.split()[3]) > 3)]
    (data / "b.trec").write_text("".join(f"{x}\n" for x in short))
    line = _refused(*_runs(data), *common, "--weights", str(weights))
    assert f"{data / 'b.trec'}: field 'run': system 'b' ranks 3 documents for query 'q2'" in line
    assert "exactly 5 passages" in line and "rank at least 5 documents" in line
    _no_judge_call(tmp_path)


def test_the_weights_abstention_mode_is_checked_as_udcg_score_checks_it(tmp_path: Path) -> None:
    data, weights, common = _setup(tmp_path, {"abstention_mode": "sequence"})
    line = _refused(*_runs(data), *common, "--weights", str(weights))
    expected = (
        "field 'mode': the weights were fitted with abstention mode 'sequence', not "
        "'first_token' (--allow-mismatch mode to use them anyway)"
    )
    assert line == f"udcg report: error: {weights}: {expected}"
    _no_judge_call(tmp_path)
    # allowed on purpose: the report is made, the override recorded
    done = _run(*_runs(data), *common, "--weights", str(weights), "--allow-mismatch", "mode")
    assert done.returncode == 0, done.stderr
    found = json.loads((tmp_path / "out" / "report.json").read_text())
    assert found["forecast"]["overrides"] == [
        "field 'mode': the weights were fitted with abstention mode 'sequence', not "
        "'first_token' (allowed on purpose)"
    ]
    assert found["forecast"]["queries"] == len(TOPICS)
    manifest = json.loads((tmp_path / "out" / "labels" / "a.jsonl.manifest.json").read_text())
    assert '"mode": "first_token"' in json.dumps(manifest)
    # udcg score says the same of the labels the report wrote
    score = subprocess.run(
        [sys.executable, "-m", "udcg", "score", str(tmp_path / "out" / "labels" / "a.jsonl"),
         "--judge", "probs", "--weights", str(weights), "--mode", "first_token"],
        capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert score.returncode == 2 and expected in score.stderr


def test_report_json_records_its_inputs_judge_and_weights(tmp_path: Path) -> None:
    """Two reports of two judges of one key (the same file name in two folders) and two qrels
    files record what tells them apart: each input's path and SHA-256 (the topics read from
    standard input), the judge's spec and fingerprint, the weights' SHA-256."""
    from udcg.io.manifests import file_sha256
    from udcg.theta import UDCGTheta

    data, weights, common = _setup(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "collection.tsv").write_text((data / "collection.tsv").read_text())
    probs = write_probs(other, 0.15)  # other/probs.jsonl: another judge of the key "probs"
    binary = data / "binary.trec"
    binary.write_text((data / "qrels.trec").read_text().replace(" 0\n", " 1\n"))
    topics = common.index("--topics") + 1
    common[topics] = "-"
    first = _run(*_runs(data), *common, "--weights", str(weights),
                 stdin=(data / "topics.tsv").read_text())  # fmt: skip
    assert first.returncode == 0, first.stderr
    common[common.index("--qrels") + 1] = str(binary)
    common[common.index("--judge") + 1] = f"precomputed:{probs}"
    common[common.index("--out") + 1] = str(tmp_path / "out2")
    common[topics] = str(data / "topics.tsv")
    second = _run(*_runs(data), *common)
    assert second.returncode == 0, second.stderr
    found = json.loads((tmp_path / "out" / "report.json").read_text())
    again = json.loads((tmp_path / "out2" / "report.json").read_text())

    def record(path: Path, given: str | None = None) -> dict:
        return {"path": given or str(path), "sha256": file_sha256(path)}

    assert found["inputs"] == {
        "dataset": None,
        "runs": {s: record(data / f"{s}.trec") for s in SYSTEMS},
        "topics": record(data / "topics.tsv", "-"),
        "collection": record(data / "collection.tsv"),
        "qrels": record(data / "qrels.trec"),
        "answers": None,
    }
    assert again["inputs"]["qrels"] == record(binary) != found["inputs"]["qrels"]
    assert again["inputs"]["topics"]["sha256"] == found["inputs"]["topics"]["sha256"]
    judges = found["judge"], again["judge"]
    assert [j["name"] for j in judges] == ["probs", "probs"]
    assert [j["spec"] for j in judges] == [f"precomputed:{data / 'probs.jsonl'}",
                                           f"precomputed:{probs}"]  # fmt: skip
    assert judges[0]["fingerprint"] != judges[1]["fingerprint"]
    assert all(j["fingerprint"].startswith("precomputed:") for j in judges)
    card = UDCGTheta.from_pretrained(weights).card_
    assert found["forecast"]["weights_sha256"] == card["weights_sha256"]
    assert len(card["weights_sha256"]) == 64


def _answers_args(root: Path, lines: list[str], name: str = "answers.tsv") -> list[str]:
    """The data, an answers file of ``lines`` and ``udcg report``'s arguments (no qrels)."""
    data, _, common = _setup(root)
    (data / name).write_text("".join(f"{line}\n" for line in lines))
    at = common.index("--qrels")
    return [*_runs(data), *common[:at], *common[at + 2 :], "--answers", str(data / name)]


def _refused_early(root: Path, *args: str) -> str:
    """The one line ``udcg report ARGS`` is refused with, before any file is written in OUT
    or the judge asked."""
    line = _refused(*args)
    assert not (root / "out" / "contexts").exists()
    _no_judge_call(root)
    return line


def test_a_query_without_answers_is_refused_naming_the_answers_file(tmp_path: Path) -> None:
    """Without qrels, relevance comes from the answers: q3's are missing."""
    args = _answers_args(tmp_path, ["q1\tParis", "q2\tShakespeare", "q4\tMercury"])
    line = _refused_early(tmp_path, *args)
    assert line == (
        f"udcg report: error: {tmp_path / 'data' / 'answers.tsv'}: field 'answers': step "
        "relevance needs reference answers: 1 of the 4 queries that need them have none "
        "(first 'q3')"
    )


def test_an_empty_answer_list_or_answer_is_refused_at_its_line(tmp_path: Path) -> None:
    lines = ['{"qid": "q1", "answers": ["Paris"]}', '{"qid": "q2", "answers": []}']
    args = _answers_args(tmp_path, lines, "answers.jsonl")
    line = _refused_early(tmp_path, *args)
    assert f"{tmp_path / 'data' / 'answers.jsonl'}:2: field 'answers': step relevance" in line
    args = _answers_args(tmp_path, ["q1\tParis", "q2\t \tBard", "q3\tJupiter", "q4\tHg"])
    line = _refused_early(tmp_path, *args, "--utility", "answer_likelihood")
    assert line == (
        f"udcg report: error: {tmp_path / 'data' / 'answers.tsv'}:2: field 'answers[0]': "
        "query 'q2': empty answer (step answer_likelihood scores each answer)"
    )


def test_answer_likelihood_without_answers_is_refused_naming_the_option(tmp_path: Path) -> None:
    data, _, common = _setup(tmp_path)
    line = _refused_early(tmp_path, *_runs(data), *common, "--utility", "answer_likelihood")
    assert line == (
        "udcg report: error: field '--answers': step answer_likelihood needs reference "
        "answers, and the topics give none for 4 of the 4 queries that need them (first 'q1'): "
        "give --answers"
    )


def _fake_report(systems: list[str]) -> dict:
    """A report.json with one measure, enough for :func:`to_html`."""
    per_query = {s: {"UDCG@5": [0.1 * i, 0.2 * i]} for i, s in enumerate(systems, 1)}
    return {
        "comparison": {
            "systems": systems,
            "baseline": systems[0],
            "measures": ["UDCG@5"],
            "qids": ["q1", "q2"],
            "confidence": 0.95,
            "n_resamples": 10,
            "test": "t",
            "correction": "holm",
            "alpha": 0.05,
            "unranked": {s: 0 for s in systems},
            "per_query": per_query,
            "means": {s: {"UDCG@5": {"mean": 0.5, "ci": [0.4, 0.6]}} for s in systems},
            "differences": {
                s: {
                    "UDCG@5": {
                        "difference": 0.1,
                        "ci": [0.0, 0.2],
                        "p_value": 0.5,
                        "p_corrected": 0.5,
                        "significant": False,
                    }
                }
                for s in systems[1:]
            },
        },
        "relevance_from": "qrels",
        "utility": "abstention",
        "judge": {"name": "j", "calls": 0, "cache_hits": 0, "cache": "c.sqlite"},
        "warnings": [],
        "forecast": None,
    }


class _Labels(_Plots):
    """The axis labels of each plot (``font-size="11"`` texts) and their tooltips."""

    def __init__(self) -> None:
        super().__init__()
        self.labels: list[list[str]] = []
        self.titles: list[list[str]] = []
        self.key: list[str] = []
        self._into: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        super().handle_starttag(tag, attrs)
        found = dict(attrs)
        if tag == "svg":
            self.labels.append([])
            self.titles.append([])
        if tag != "span":  # a key item's text follows its colour swatch
            self._into = None
        if tag == "text" and found.get("font-size") == "11":
            self._into = self.labels[-1]
        elif tag == "title" and self.section:
            self._into = self.titles[-1]
        elif tag == "li":
            self._into = self.key

    def handle_data(self, data: str) -> None:
        if self._into is not None:
            self._into.append(data)
            self._into = None


def test_plot_labels_tell_systems_with_a_long_common_prefix_apart() -> None:
    systems = ["bm25-tuned-k1-0.9-b0.4", "bm25-tuned-k1-0.9-b0.7", "dense"]
    page = _Labels()
    page.feed(to_html(_fake_report(systems)))
    page.close()
    assert page.stack == []
    means, differences = page.labels
    assert means == ["bm25-tun….9-b0.4", "bm25-tun….9-b0.7", "dense"]
    assert differences == means[1:]
    assert page.titles == [systems, systems[1:]]  # the full names as tooltips
    assert page.key == [f"{label}: {name}" for label, name in zip(means, systems, strict=True)]
    # names that fit are the labels, and no key is drawn
    short = to_html(_fake_report(["bm25", "dense"]))
    assert 'id="key"' not in short and ">bm25</text>" in short


@pytest.mark.parametrize(
    "names",
    [
        [f"run-with-a-very-long-common-prefix-{i}" for i in range(12)],
        [f"{i}-run-with-a-very-long-common-suffix" for i in range(12)],
        ["x" * 20 + "a" + "y" * 20, "x" * 20 + "b" + "y" * 20, "short"],
        ["x" * 16, "x" * 17, "x" * 18],
    ],
)
def test_plot_labels_are_distinct_and_fit(names: list[str]) -> None:
    from udcg.pipeline.journey_report import plot_labels

    labels = plot_labels(names)
    assert len(set(labels)) == len(names)
    assert all(len(label) <= 16 for label in labels)
    assert [n for n, label in zip(names, labels, strict=True) if len(n) <= 16 and label != n] in (
        [],
        [n for n in names if len(n) <= 16],  # numbered only when no split tells them apart
    )


def test_weights_fitted_on_another_judge_of_the_key_are_refused_before_labelling(
    tmp_path: Path,
) -> None:
    """The card's judge fingerprint against the judge that labels (same key ``probs``)."""
    other = "precomputed:" + "0" * 64
    data, weights, common = _setup(tmp_path, {"judge_fingerprint": other})
    refused = _run(*_runs(data), *common, "--weights", str(weights))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    line = refused.stderr.splitlines()[-1]  # after the contexts (the judge opens after them)
    assert line.startswith(f"udcg report: error: {weights}: field 'fingerprint': the weights ")
    assert f"were fitted with judge fingerprint '{other}', not 'precomputed:" in line
    assert not (tmp_path / "out" / "labels").exists()
    done = _run(*_runs(data), *common, "--weights", str(weights), "--allow-mismatch", "fingerprint")
    assert done.returncode == 0, done.stderr
    (note,) = json.loads((tmp_path / "out" / "report.json").read_text())["forecast"]["overrides"]
    assert note.startswith("field 'fingerprint'") and note.endswith("(allowed on purpose)")


def test_a_folder_holding_another_reports_systems_is_refused(tmp_path: Path) -> None:
    """A report of a and b into the folder of an earlier report of a, b and c would leave c's
    contexts and labels beside it, as if they were this report's: refused before any work,
    naming them; the files of the systems compared (a killed run's temporary ones too) are
    not in the way."""
    data, _, common = _setup(tmp_path)
    assert _run(*_runs(data), *common).returncode == 0
    stale = tmp_path / "out" / "contexts" / "c.jsonl"
    before = stale.read_bytes()
    (tmp_path / "out" / "labels" / ".a.jsonl.0123456789ab.tmp").write_text("")
    line = _refused(*_runs(data)[:2], *common)
    assert f"field '--out': {stale} and 2 other file(s) are not of the systems" in line
    assert "(a, b)" in line and stale.read_bytes() == before
    for path in (tmp_path / "out").glob("*/c.jsonl*"):
        path.unlink()
    assert _run(*_runs(data)[:2], *common).returncode == 0
    # a system named a.jsonl leaves a.jsonl.jsonl: not a's, though it starts with a's name
    (tmp_path / "out" / "labels" / "a.jsonl.jsonl").write_text("")
    assert "a.jsonl.jsonl are not of the systems" in _refused(*_runs(data)[:2], *common)


def test_a_failed_rerun_leaves_no_earlier_report_beside_its_contexts(tmp_path: Path) -> None:
    """A rerun into an earlier report's folder that fails after writing its contexts (here its
    judge has no value for most pairs) leaves no report: the earlier one would be read as the
    report of the contexts beside it."""
    data, _, common = _setup(tmp_path)
    assert _run(*_runs(data), *common).returncode == 0
    probs = data / "probs.jsonl"
    partial = data / "partial.jsonl"
    partial.write_text("".join(probs.read_text().splitlines(keepends=True)[:3]))
    rerun = [a.replace(str(probs), str(partial)) for a in common]
    rerun[rerun.index(str(tmp_path / "judge.sqlite"))] = str(tmp_path / "other.sqlite")
    data.joinpath("b.trec").write_text(data.joinpath("c.trec").read_text())
    failed = _run(*_runs(data), *rerun)
    assert failed.returncode == 2 and "partial.jsonl" in failed.stderr, failed.stderr
    out = tmp_path / "out"
    assert (out / "contexts" / "b.jsonl").exists()
    assert not [p.name for p in out.glob("report.*") if not p.name.endswith(".lock")]
