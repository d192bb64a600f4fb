"""Run-level Q-CARE measures of ``udcg.evaluate``: C-Prec@k and C-nDCG@k (linear and
exponential gain, graded and binary r) equal udcg.qcare's scores of each query's top k in
trec_eval order, from every coverage source (label rows, gains, TSV, JSONL, labelled contexts),
through ``udcg trec --coverage`` and ``udcg.trec.compare``; bad inputs are one-line errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from udcg.cli import trec as trec_cli
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import write_contexts
from udcg.io.contexts.model import Context, Passage
from udcg.qcare.scores import qcare_scores
from udcg.trec import compare, evaluate, parse_measures

TOL = 1e-12
LOG3 = math.log2(3)
LOG4 = 2.0


def test_hand_checked_case() -> None:
    """Three ranked documents, d2 and d3 tied (d3 first: ids descending), two sub-queries;
    an unjudged query is not scored, a document past k needs no labels."""
    qrels = {"q1": {"d1": 0}, "q2": {"x": 1}}
    run = {
        "q1": {"d1": 3.0, "d2": 2.0, "d3": 2.0, "d4": 1.0},
        "unjudged": {"d1": 1.0},
    }
    covers = {"q1": {"d1": [False, False], "d2": [True, True], "d3": [True, False]}}
    names = [
        "C-Prec@3",
        "C-nDCG@3",
        "C-nDCG(gain=exponential)@3",
        "C-Prec(binary=True)@3",
        "C-nDCG(binary=True)@3",
        "C-Prec@5",
    ]
    got = evaluate(qrels, run, names[:5], coverage=covers)
    assert list(got) == ["q1"]
    # ranked r = (0, 0.5, 1): d1, d3, d2
    r = [0.0, 0.5, 1.0]
    dcg = r[1] / LOG3 + r[2] / LOG4
    idcg = r[2] + r[1] / LOG3
    g = [0.0, 31.0, 1023.0]
    exp = (g[1] / LOG3 + g[2] / LOG4) / (g[2] + g[1] / LOG3)
    binary_ndcg = (1 / LOG3 + 1 / LOG4) / (1 + 1 / LOG3)
    want = [0.5, dcg / idcg, exp, 2 / 3, binary_ndcg]
    assert [got["q1"][n] for n in names[:5]] == pytest.approx(want, abs=TOL)
    # k = 5 reaches d4, which has no labels: the located error
    with pytest.raises(UDCGInputError, match=r"no coverage for query 'q1' document 'd4' \(rank 4"):
        evaluate(qrels, run, names[5], coverage=covers)
    covers["q1"]["d4"] = [True, True]
    assert evaluate(qrels, run, "C-Prec@5", coverage=covers)["q1"]["C-Prec@5"] == pytest.approx(
        2.5 / 5, abs=TOL
    )


def _case(seed: int, n_queries: int, max_docs: int, fractional: bool) -> tuple:
    """Qrels (a tenth of the queries unjudged), a run with tied scores and 1..max_docs
    documents, and per query 1-4 sub-queries with a label row per ranked document (booleans,
    or fractions in [0, 1])."""
    rng = np.random.default_rng(seed)
    qrels: dict = {}
    run: dict = {}
    covers: dict = {}
    for q in range(n_queries):
        qid = f"q{q}"
        size = int(rng.integers(1, max_docs + 1))
        docs = [f"d{i}" for i in rng.choice(60, size=size, replace=False)]
        run[qid] = {d: float(rng.integers(0, 4)) for d in docs}
        n_sub = int(rng.integers(1, 5))
        if fractional:
            covers[qid] = {
                d: [float(rng.choice([0.0, 0.25, 0.5, 1.0])) for _ in range(n_sub)] for d in docs
            }
        else:
            covers[qid] = {d: [bool(rng.random() < 0.35) for _ in range(n_sub)] for d in docs}
        if rng.random() < 0.9:
            qrels[qid] = {str(d): int(rng.choice([0, 1, 2])) for d in rng.choice(docs, size=2)}
    return qrels, run, covers


def _top_contexts(run: dict, covers: dict, k: int, fractional: bool) -> list[Context]:
    """Each query's top k in trec_eval order (score descending, then doc id descending) as a
    context with its label rows, for udcg.qcare.scores.qcare_scores."""
    contexts = []
    for qid, docs in run.items():
        top = sorted(docs, key=lambda d: (docs[d], d), reverse=True)[:k]
        n_sub = len(next(iter(covers[qid].values())))
        if fractional:
            passages = [Passage(d, extra={"covers_prob": covers[qid][d]}) for d in top]
        else:
            passages = [Passage(d, covers=covers[qid][d]) for d in top]
        contexts.append(Context(qid, passages, subqueries=[f"s{i}" for i in range(n_sub)]))
    return contexts


@pytest.mark.parametrize(
    ("seed", "n_queries", "max_docs", "fractional"),
    [(0, 50, 14, False), (1, 120, 4, False), (2, 30, 25, True), (3, 200, 10, True)],
)
def test_generated_runs_equal_qcare_scores(
    seed: int, n_queries: int, max_docs: int, fractional: bool
) -> None:
    qrels, run, covers = _case(seed, n_queries, max_docs, fractional)
    ks = (10, 3)
    names = []
    for k in ks:
        names += [
            f"C-Prec@{k}",
            f"C-nDCG@{k}",
            f"C-nDCG(gain=exponential)@{k}",
            f"C-Prec(binary=True)@{k}",
            f"C-nDCG(binary=True,gain=exponential)@{k}",
        ]
    got = evaluate(qrels, run, [*names, "nDCG@10"], coverage=covers)
    assert set(got) == {q for q in qrels if q in run}
    label = "fractional" if fractional else "boolean"
    gaps = []
    for k in ks:
        contexts = _top_contexts(run, covers, k, fractional)
        row_of = {c.qid: i for i, c in enumerate(contexts)}
        for binary in (False, True):
            for gain in ("linear", "exponential"):
                ref = qcare_scores(contexts, k=k, binary=binary, gain=gain, coverage=label)
                ref_prec, ref_ndcg = ref.values["C-Prec"], ref.values["C-nDCG"]
                assert not np.ma.getmaskarray(ref_ndcg).any()
                params = [p for p, on in (("binary=True", binary),) if on]
                prec = "C-Prec" + (f"({','.join(params)})" if params else "") + f"@{k}"
                ndcg_params = params + (["gain=exponential"] if gain != "linear" else [])
                ndcg = "C-nDCG" + (f"({','.join(ndcg_params)})" if ndcg_params else "") + f"@{k}"
                for q in got:
                    if prec in got[q]:
                        gaps.append(abs(got[q][prec] - float(ref_prec[row_of[q]])))
                    if ndcg in got[q]:
                        gaps.append(abs(got[q][ndcg] - float(ref_ndcg[row_of[q]])))
    assert len(gaps) >= len(got) * len(names) and max(gaps) <= TOL
    distinct = {round(v["C-nDCG@10"], 6) for v in got.values()}
    assert len(distinct) > 3  # not a constant


def _write_sources(tmp_path: Path, run: dict, covers: dict) -> dict[str, object]:
    """The same coverage as a dict of rows, a dict of gains, a TSV of gains, JSONL lines
    (rows for some pairs, gains for the others) and labelled contexts."""
    gains = {q: {d: sum(row) / len(row) for d, row in ds.items()} for q, ds in covers.items()}
    tsv = tmp_path / "coverage.tsv"
    tsv.write_text("".join(f"{q}\t{d}\t{r!r}\n" for q, ds in gains.items() for d, r in ds.items()))
    lines = tmp_path / "coverage.jsonl"
    with lines.open("w") as out:
        for i, (q, ds) in enumerate(covers.items()):
            for d, row in ds.items():
                value = {"covers": row} if i % 2 else {"coverage": gains[q][d]}
                out.write(json.dumps({"qid": q, "doc_id": d, **value}) + "\n")
    contexts = tmp_path / "labelled.jsonl"
    write_contexts(contexts, _top_contexts(run, covers, 100, fractional=False))
    return {"rows": covers, "gains": gains, "tsv": tsv, "jsonl": lines, "contexts": contexts}


def test_every_source_gives_the_same_values(tmp_path: Path) -> None:
    qrels, run, covers = _case(7, 60, 12, fractional=False)
    names = ["C-Prec@5", "C-nDCG@10", "C-nDCG(binary=True)@10", "C-Prec(binary=True)@4"]
    sources = _write_sources(tmp_path, run, covers)
    results = {name: evaluate(qrels, run, names, coverage=s) for name, s in sources.items()}
    reference = results.pop("rows")
    for name, values in results.items():
        assert values.keys() == reference.keys(), name
        gap = max(abs(values[q][m] - reference[q][m]) for q in reference for m in names)
        assert gap <= TOL, (name, gap)
    # udcg trec --coverage prints the same per-query values (CSV, full precision)
    for source in ("tsv", "contexts"):
        qrels_path, run_path = tmp_path / "qrels", tmp_path / "run"
        qrels_path.write_text(
            "".join(f"{q} 0 {d} {g}\n" for q, ds in qrels.items() for d, g in ds.items())
        )
        run_path.write_text(
            "".join(
                f"{q} Q0 {d} {i + 1} {s!r} t\n"
                for q, ds in run.items()
                for i, (d, s) in enumerate(ds.items())
            )
        )
        argv = [str(qrels_path), str(run_path), "-m", ",".join(names), "-q", "--format", "csv"]
        rows = _run_cli([*argv, "--coverage", str(sources[source])])
        for measure, qid, value in rows:
            if qid != "all":
                assert abs(float(value) - reference[qid][measure]) <= TOL


def _run_cli(argv: list[str]) -> list[list[str]]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert trec_cli.main(argv) == 0
    return [line.split(",") for line in out.getvalue().splitlines()[1:]]


def test_compare_takes_coverage() -> None:
    """compare's per-system means are evaluate's, and ``good`` (covering passages first) beats
    ``bad`` on C-nDCG."""
    qrels = {f"q{i}": {"a": 1} for i in range(8)}
    covers = {q: {"a": [True, True], "b": [False, True], "c": [False, False]} for q in qrels}
    good = {q: {"a": 3.0, "b": 2.0, "c": 1.0} for q in qrels}
    bad = {q: {"a": 1.0, "b": 2.0, "c": 3.0} for q in qrels}
    report = compare(qrels, {"good": good, "bad": bad}, "C-nDCG@3", coverage=covers)
    means = {
        name: np.mean(
            [v["C-nDCG@3"] for v in evaluate(qrels, run, "C-nDCG@3", coverage=covers).values()]
        )
        for name, run in (("good", good), ("bad", bad))
    }
    c = report.comparison("good", "bad", "C-nDCG@3")
    assert c.difference == pytest.approx(means["good"] - means["bad"], abs=TOL)
    assert means["good"] == pytest.approx(1.0, abs=TOL) and c.difference > 0
    with pytest.raises(UDCGInputError, match="C-nDCG@3 needs coverage"):
        compare(qrels, {"good": good, "bad": bad}, "C-nDCG@3")


def test_names_parse_and_print() -> None:
    parsed = parse_measures(
        ["c-ndcg@10", "CnDCG(gain=exponential)@10", "CPrec(binary=true)@5", "C-Prec@5"]
    )
    assert [str(m) for m in parsed] == [
        "C-nDCG@10",
        "C-nDCG(gain=exponential)@10",
        "C-Prec(binary=True)@5",
        "C-Prec@5",
    ]
    assert parsed[0].gain == "linear" and parsed[1].gain == "exponential"
    assert parse_measures("C-nDCG(gain=linear)@10") == parse_measures("C-nDCG@10")


@pytest.mark.parametrize(
    ("measure", "message"),
    [
        ("C-nDCG", "C-nDCG needs a cutoff"),
        ("C-nDCG(gain=log)@10", "gain must be one of linear, exponential"),
        ("C-Prec(gain=exponential)@10", "unsupported parameter 'gain=exponential'"),
        ("C-Prec(rel=2)@10", "unsupported parameter 'rel=2'"),
        ("C-nDCG(binary=maybe)@10", "binary must be True or False"),
    ],
)
def test_bad_names(measure: str, message: str) -> None:
    with pytest.raises(UDCGInputError, match=message.replace("(", r"\(")):
        parse_measures(measure)


@pytest.mark.parametrize(
    ("coverage", "message"),
    [
        (None, "C-nDCG@2 needs coverage gains: pass coverage="),
        ({"q1": {"d1": 1.5, "d2": 0.0}}, "query 'q1', document 'd1': coverage 1.5 is not in"),
        ({"q1": {"d1": "yes", "d2": 0.0}}, "expected a coverage gain or a list of labels"),
        ({"q1": {"d1": [True], "d2": [True, False]}}, "label rows of 1 and 2 sub-queries"),
        ({"q1": {"d1": [2.0], "d2": [1.0]}}, "query 'q1'"),
        ({"q1": {"d1": [None], "d2": [True]}}, "no coverage for query 'q1' document 'd1'"),
        ({"q1": {"d2": 1.0}}, r"no coverage for query 'q1' document 'd1' \(rank 1\)"),
        ([("q1", "d1", 1.0)], "expected {qid: {doc_id: gain or labels}}"),
    ],
)
def test_bad_coverage(coverage: object, message: str) -> None:
    qrels, run = {"q1": {"d1": 1}}, {"q1": {"d1": 2.0, "d2": 1.0}}
    with pytest.raises(UDCGInputError, match=message.replace("{", r"\{")):
        evaluate(qrels, run, "C-nDCG@2", coverage=coverage)


def test_bad_coverage_files_are_located(tmp_path: Path) -> None:
    qrels, run = {"q1": {"d1": 1}}, {"q1": {"d1": 2.0, "d2": 1.0}}
    tsv = tmp_path / "c.tsv"
    tsv.write_text("q1 d1 0.5\nq1 d2 0.25\nq1 d1 1.0\n")
    with pytest.raises(UDCGInputError, match=r"c\.tsv:3: .*two coverage gains"):
        evaluate(qrels, run, "C-Prec@2", coverage=tsv)
    tsv.write_text("q1 d1 0.5\nq1 d2 2\n")
    with pytest.raises(UDCGInputError, match=r"c\.tsv:2: .*coverage 2\.0 is not in"):
        evaluate(qrels, run, "C-Prec@2", coverage=tsv)
    lines = tmp_path / "c.jsonl"
    lines.write_text('{"qid": "q1", "doc_id": "d1", "covers": [true]}\n{"qid": "q1"}\n')
    with pytest.raises(UDCGInputError, match=r"c\.jsonl:2: .*doc_id"):
        evaluate(qrels, run, "C-Prec@2", coverage=lines)
    contexts = tmp_path / "ctx.jsonl"
    bad = Context("q1", [Passage("d1", covers=[True])], subqueries=["a", "b"])
    write_contexts(contexts, [bad], check=False)  # a file the reader refuses
    with pytest.raises(
        UDCGInputError, match=r"ctx\.jsonl:1: .*covers'?: has 1 entries but the context has 2"
    ):
        evaluate(qrels, run, "C-Prec@2", coverage=contexts)
    # the command line: a one-line error, exit status 2
    (tmp_path / "q").write_text("q1 0 d1 1\n")
    (tmp_path / "r").write_text("q1 Q0 d1 1 2 t\n")
    argv = [str(tmp_path / "q"), str(tmp_path / "r"), "-m", "C-Prec@2"]
    assert trec_cli.main([*argv, "--coverage", str(tsv)]) == 2
    assert trec_cli.main([*argv, "--coverage", "-"]) == 2


def test_compare_command_takes_coverage(tmp_path: Path) -> None:
    """``udcg compare --coverage FILE``: the JSON report's means are evaluate's."""
    import contextlib
    import io

    from udcg.cli import compare as compare_cli

    qrels = {f"q{i}": {"a": 1} for i in range(4)}
    runs = {
        "good": {q: {"a": 3.0, "b": 2.0, "c": 1.0} for q in qrels},
        "bad": {q: {"a": 2.0, "b": 1.0, "c": 3.0} for q in qrels},
    }
    (tmp_path / "qrels").write_text("".join(f"{q} 0 a 1\n" for q in qrels))
    for name, run in runs.items():
        (tmp_path / name).write_text(
            "".join(f"{q} Q0 {d} 1 {s} t\n" for q, ds in run.items() for d, s in ds.items())
        )
    cov = tmp_path / "cov.tsv"
    cov.write_text(
        "".join(f"{q}\t{d}\t{r}\n" for q in qrels for d, r in zip("abc", (1, 0.5, 0), strict=True))
    )
    argv = [str(tmp_path / p) for p in ("qrels", "good", "bad")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = compare_cli.main(
            [*argv, "-m", "C-nDCG@2", "--coverage", str(cov), "--format", "json"]
        )
    assert code == 0
    means = json.loads(out.getvalue())["means"]
    for name, run in runs.items():
        values = evaluate(qrels, run, "C-nDCG@2", coverage=str(cov))
        want = np.mean([v["C-nDCG@2"] for v in values.values()])
        assert abs(means[name]["C-nDCG@2"] - want) <= TOL, name
    assert means["good"]["C-nDCG@2"] > means["bad"]["C-nDCG@2"]
