"""udcg's measures inside ir_measures: calc_aggregate and iter_calc give udcg.evaluate's values
(UDCG, UDCG(gamma), UDCGtheta) and the Q-CARE formulas (C-Prec, C-nDCG) per query, beside
ir_measures' own measures; missing data sources are one-line errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import ir_measures
import numpy as np
import pytest

from udcg.errors import UDCGInputError
from udcg.integrations.ir_measures import UDCG, CnDCG, CPrec, UDCGtheta, parse_measure
from udcg.io.contexts.jsonl import write_contexts
from udcg.io.contexts.model import Context, Passage
from udcg.qcare.scores import qcare_scores
from udcg.theta import UDCGTheta
from udcg.theta.simulate import simulate_arrays
from udcg.trec import evaluate

TOL = 1e-12


def _case(seed: int, n_queries: int, max_docs: int) -> tuple[dict, dict, dict]:
    """Graded qrels, a run with tied scores (1..max_docs documents per query; a tenth of the
    queries unjudged) and P(abstain) of every ranked document."""
    rng = np.random.default_rng(seed)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    probs: dict[str, dict[str, float]] = {}
    for q in range(n_queries):
        qid = f"q{q}"
        docs = [f"d{i}" for i in rng.choice(40, size=int(rng.integers(1, max_docs)), replace=False)]
        run[qid] = {d: float(rng.integers(0, 3)) for d in docs}
        probs[qid] = {d: float(rng.random()) for d in docs}
        if rng.random() < 0.1:
            continue
        judged = rng.choice([*docs, "x1"], size=int(rng.integers(1, 6)))
        qrels[qid] = {str(d): int(rng.choice([0, 0, 1, 2])) for d in judged}
    return qrels, run, probs


def _per_query(measures: list, qrels: dict, run: dict) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for metric in ir_measures.iter_calc(measures, qrels, run):
        name = getattr(metric.measure, "udcg_name", str(metric.measure))
        out.setdefault(metric.query_id, {})[name] = metric.value
    return out


def _max_diff(got: dict, want: dict, name: str) -> float:
    """Largest |difference| over the queries udcg scores; ir_measures gives the same queries."""
    assert set(want) <= set(got)
    return max(abs(got[q][name] - want[q][name]) for q in want)


def _write_tsv(path: Path, probs: dict) -> Path:
    path.write_text("".join(f"{q}\t{d}\t{p!r}\n" for q, ds in probs.items() for d, p in ds.items()))
    return path


def _write_contexts(path: Path, probs: dict) -> Path:
    """An annotated contexts JSONL with two judges' P(abstain): ``j1`` holds ``probs``."""
    lines = [
        {
            "qid": q,
            "passages": [
                {"doc_id": d, "abstain_prob": {"j1": p, "j2": 1.0 - p}} for d, p in ds.items()
            ],
        }
        for q, ds in probs.items()
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.mark.parametrize(("seed", "n_queries", "max_docs"), [(0, 60, 12), (1, 30, 4), (2, 90, 20)])
def test_udcg_equals_evaluate(tmp_path: Path, seed: int, n_queries: int, max_docs: int) -> None:
    qrels, run, probs = _case(seed, n_queries, max_docs)
    tsv = _write_tsv(tmp_path / "u.tsv", probs)
    contexts = _write_contexts(tmp_path / "ctx.jsonl", probs)
    measures = [
        UDCG(utilities=tsv) @ 5,
        UDCG(utilities=tsv, gamma=0.5) @ 3,
        UDCG(utilities=str(contexts), judge_key="j1") @ 10,
        ir_measures.nDCG @ 10,
    ]
    got = _per_query(measures, qrels, run)
    want = evaluate(qrels, run, ["UDCG@5", "UDCG(gamma=0.5)@3", "nDCG@10"], utilities=tsv)
    from_contexts = evaluate(qrels, run, "UDCG@10", utilities=tsv)
    diffs = [_max_diff(got, want, n) for n in ("UDCG@5", "UDCG(gamma=0.5)@3", "nDCG@10")]
    diffs.append(_max_diff(got, from_contexts, "UDCG@10"))
    assert max(diffs) <= TOL, diffs
    # the mean over the judged queries, as calc_aggregate gives it
    agg = ir_measures.calc_aggregate(measures[:1], qrels, run)[measures[0]]
    judged = [q for q in qrels]
    expected = sum(want[q]["UDCG@5"] if q in want else 0.0 for q in judged) / len(judged)
    assert math.isclose(agg, expected, rel_tol=0, abs_tol=TOL)


def test_udcg_theta_with_saved_weights_equals_evaluate(tmp_path: Path) -> None:
    k = 5
    model = UDCGTheta(k, val_fraction=0.0).fit(*simulate_arrays(200, k, seed=4))
    folder = model.save_pretrained(tmp_path / "theta", card={"utility": "abstention"})
    qrels, run, probs = _case(5, 50, 12)
    run = {q: docs for q, docs in run.items() if len(docs) >= k}  # UDCGtheta needs k documents
    tsv = _write_tsv(tmp_path / "u.tsv", probs)
    measure = UDCGtheta(utilities=tsv, weights=folder) @ k
    got = _per_query([measure, UDCG(utilities=tsv) @ k], qrels, run)
    want = evaluate(qrels, run, [f"UDCGtheta@{k}", f"UDCG@{k}"], utilities=tsv, weights=folder)
    assert _max_diff(got, want, f"UDCGtheta@{k}") <= TOL
    assert _max_diff(got, want, f"UDCG@{k}") <= TOL
    assert len({round(v[f"UDCGtheta@{k}"], 6) for v in want.values()}) > 5  # not a constant


def _coverage_reference(run: dict, gains: dict, qid: str, k: int) -> tuple[float, float]:
    """C-Prec@k and C-nDCG@k of the query's top k in trec_eval order, written out."""
    top = sorted(run[qid], key=lambda d: (run[qid][d], d), reverse=True)[:k]
    r = [gains[qid][d] for d in top]
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(r))
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(sorted(r, reverse=True)))
    return sum(r) / k, dcg / idcg if idcg > 0 else 0.0


def _coverage_gap(
    got: dict, qrels: dict, run: dict, prec: tuple[str, dict], ndcg: tuple[str, dict]
) -> float:
    """Largest |got - reference| of a C-Prec@5 and a C-nDCG@10 column (name, gains) over the
    queries of both qrels and run."""
    diffs = []
    for q in qrels:
        if q in run:
            diffs.append(abs(got[q][prec[0]] - _coverage_reference(run, prec[1], q, 5)[0]))
            diffs.append(abs(got[q][ndcg[0]] - _coverage_reference(run, ndcg[1], q, 10)[1]))
    return max(diffs)


@pytest.mark.parametrize("seed", range(3))
def test_coverage_measures_equal_their_formulas(tmp_path: Path, seed: int) -> None:
    qrels, run, _ = _case(seed, 50, 12)
    rng = np.random.default_rng(seed)
    gains = {q: {d: float(rng.choice([0.0, 0.25, 0.5, 1.0])) for d in ds} for q, ds in run.items()}
    path = tmp_path / "coverage.tsv"
    path.write_text("".join(f"{q} {d} {r!r}\n" for q, ds in gains.items() for d, r in ds.items()))
    measures = [CPrec(coverage=gains) @ 5, CnDCG(coverage=path) @ 10]
    got = _per_query(measures, qrels, run)
    assert _coverage_gap(got, qrels, run, ("C-Prec@5", gains), ("C-nDCG@10", gains)) <= TOL


def test_coverage_from_labelled_contexts(tmp_path: Path) -> None:
    """Gains from ``udcg qcare`` contexts: |covered sub-queries| / |SQ| (binary: any), null
    labels outside the top k are harmless, a null label inside is the located error."""
    rng = np.random.default_rng(7)
    qrels, run, _ = _case(7, 40, 12)
    covers = {
        q: {d: [bool(rng.random() < 0.3) for _ in range(3)] for d in ds} for q, ds in run.items()
    }
    lines = [
        {
            "qid": q,
            "subqueries": ["a", "b", "c"],
            "passages": [{"doc_id": d, "covers": c} for d, c in cs.items()],
        }
        for q, cs in covers.items()
    ]
    lines.append(
        {"qid": "q0", "subqueries": ["a"], "passages": [{"doc_id": "x9", "covers": [None]}]}
    )
    path = tmp_path / "labelled.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    graded = {q: {d: sum(c) / 3 for d, c in cs.items()} for q, cs in covers.items()}
    binary = {q: {d: float(any(c)) for d, c in cs.items()} for q, cs in covers.items()}
    measures = [CPrec(coverage=path) @ 5, CnDCG(coverage=path, binary=True) @ 10]
    assert [m.udcg_name for m in measures] == ["C-Prec@5", "C-nDCG(binary=True)@10"]
    got = _per_query(measures, qrels, run)
    prec, ndcg = ("C-Prec@5", graded), ("C-nDCG(binary=True)@10", binary)
    assert _coverage_gap(got, qrels, run, prec, ndcg) <= TOL
    q = next(q for q in run if q in qrels)
    lines.append({"qid": q, "subqueries": ["a"], "passages": [{"doc_id": "z", "covers": [None]}]})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(UDCGInputError, match=f"no coverage for query '{q}' document 'z'"):
        ir_measures.calc_aggregate([CPrec(coverage=path) @ 20], qrels, {q: {"z": 99.0}})


@pytest.fixture(scope="module")
def theta_k5(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """UDCG-theta weights for k = 5, fitted on simulated lists and saved."""
    model = UDCGTheta(5, val_fraction=0.0).fit(*simulate_arrays(200, 5, seed=4))
    return model.save_pretrained(tmp_path_factory.mktemp("theta"), card={"utility": "abstention"})


def _top_contexts(run: dict, covers: dict, k: int) -> list[Context]:
    """Each query's top k in trec_eval order (score descending, ties by doc id descending) as a
    context labelled with ``covers``, for :func:`udcg.qcare.scores.qcare_scores`."""
    contexts = []
    for qid, docs in run.items():
        top = sorted(docs, key=lambda d: (docs[d], d), reverse=True)[:k]
        passages = [Passage(d, covers=covers[qid][d]) for d in top]
        contexts.append(Context(qid, passages, subqueries=["a", "b", "c"]))
    return contexts


@pytest.mark.parametrize(
    ("seed", "n_queries", "max_docs"), [(10, 40, 8), (11, 80, 16), (12, 25, 30), (13, 120, 11)]
)
def test_acceptance_udcg_theta_and_c_ndcg(
    tmp_path: Path, theta_k5: Path, seed: int, n_queries: int, max_docs: int
) -> None:
    """UDCG@5, UDCGtheta@5 and C-nDCG@10 (linear and exponential gain) through iter_calc and
    calc_aggregate: per query equal to udcg.evaluate, whose C-nDCG equals udcg's Q-CARE scores
    of the same top 10 (:func:`udcg.qcare.scores.qcare_scores`); the aggregate is the mean over
    the judged queries, a judged query the run lacks counting 0."""
    qrels, run, probs = _case(seed, n_queries, max_docs)
    run = {q: docs for q, docs in run.items() if len(docs) >= 5}  # UDCGtheta needs k documents
    rng = np.random.default_rng(seed)
    covers = {
        q: {d: [bool(rng.random() < 0.4) for _ in range(3)] for d in ds} for q, ds in run.items()
    }
    path = tmp_path / "labelled.jsonl"
    write_contexts(path, _top_contexts(run, covers, 20))
    tsv = _write_tsv(tmp_path / "u.tsv", probs)
    measures = [
        UDCG(utilities=tsv) @ 5,
        UDCGtheta(utilities=tsv, weights=theta_k5) @ 5,
        CnDCG(coverage=path) @ 10,
        CnDCG(coverage=path, gain="exponential") @ 10,
    ]
    names = [m.udcg_name for m in measures]
    got = _per_query(measures, qrels, run)
    want = evaluate(qrels, run, names, utilities=tsv, weights=theta_k5, coverage=path)
    # C-nDCG: udcg.evaluate's equals udcg's Q-CARE scores of the same top 10
    top = _top_contexts(run, covers, 10)
    for gain, name in (("linear", "C-nDCG@10"), ("exponential", "C-nDCG(gain=exponential)@10")):
        qcare = qcare_scores(top, k=10, gain=gain).values["C-nDCG"].tolist()
        want_cndcg = dict(zip(run, qcare, strict=True))
        assert max(abs(want[q][name] - want_cndcg[q]) for q in want) <= TOL, name
    assert set(want) == {q for q in qrels if q in run} and set(got) == set(qrels)
    assert all(v == 0.0 for q in set(got) - set(want) for v in got[q].values())
    assert max(_max_diff(got, want, m.udcg_name) for m in measures) <= TOL
    assert len({round(v["UDCGtheta@5"], 6) for v in want.values()}) > 5  # not a constant
    assert len({round(v["C-nDCG@10"], 6) for v in want.values()}) > 3
    aggregate = ir_measures.calc_aggregate(measures, qrels, run)
    for m in measures:
        mean = sum(want[q][m.udcg_name] if q in want else 0.0 for q in qrels) / len(qrels)
        assert math.isclose(aggregate[m], mean, rel_tol=0, abs_tol=TOL), m


def test_values_from_run_frame_columns(tmp_path: Path) -> None:
    """``utility_column`` / ``coverage_column`` read the run DataFrame (PyTerrier's result
    frames): the same values as the dict sources; a missing column is a one-line error."""
    pd = pytest.importorskip("pandas")
    qrels, run, probs = _case(21, 50, 12)
    rng = np.random.default_rng(21)
    gains = {q: {d: float(rng.choice([0.0, 0.5, 1.0])) for d in ds} for q, ds in run.items()}
    frame = pd.DataFrame(
        [
            {"query_id": q, "doc_id": d, "score": s, "p": probs[q][d], "cov": gains[q][d]}
            for q, ds in run.items()
            for d, s in ds.items()
        ]
    )
    from_columns = [
        UDCG(utility_column="p", utility_field="abstain_prob") @ 5,
        CnDCG(coverage_column="cov") @ 10,
    ]
    from_dicts = [
        UDCG(utilities=probs, utility_field="abstain_prob") @ 5,
        CnDCG(coverage=gains) @ 10,
    ]
    assert from_columns[0].RUN_INPUTS == ("query_id", "doc_id", "score", "p")
    got, want = _per_query(from_columns, qrels, frame), _per_query(from_dicts, qrels, run)
    assert max(_max_diff(got, want, m.udcg_name) for m in from_dicts) <= TOL
    assert len({round(v["UDCG@5"], 6) for v in want.values()}) > 5
    with pytest.raises(UDCGInputError, match="utility_column='u': the run has no such column"):
        ir_measures.calc_aggregate([UDCG(utility_column="u") @ 5], qrels, frame)
    # a column named after its field needs no utility_field; another name does
    renamed = frame.rename(columns={"p": "abstain_prob"})
    got = _per_query([UDCG(utility_column="abstain_prob") @ 5], qrels, renamed)
    assert _max_diff(got, want, "UDCG@5") <= TOL
    with pytest.raises(UDCGInputError, match="utility_field"):
        ir_measures.calc_aggregate([UDCG(utility_column="p") @ 5], qrels, frame)


def test_parse_measure_names() -> None:
    """udcg's names through parse_measure with their sources; ir_measures' own through
    ir_measures; ir_measures.parse_measure itself is left untouched (no registration)."""
    u = {"q1": {"d1": 0.9, "d2": 0.6}}
    qrels, run = {"q1": {"d1": 1}}, {"q1": {"d1": 2.0, "d2": 1.0}}
    cases = {
        "UDCG@2": UDCG(utilities=u, utility_field="utility") @ 2,
        "UDCG(gamma=0.5)@2": UDCG(utilities=u, utility_field="utility", gamma=0.5) @ 2,
        "UDCG(rel=2)@2": UDCG(utilities=u, utility_field="utility", rel=2) @ 2,
    }
    for name, measure in cases.items():
        parsed = parse_measure(name, utilities=u, utility_field="utility")
        assert parsed == measure and parsed.udcg_name == name
        assert parsed.calc_aggregate(qrels, run) == measure.calc_aggregate(qrels, run)
    assert (
        parse_measure("C-nDCG(binary=True)@10", coverage=u) == CnDCG(coverage=u, binary=True) @ 10
    )
    assert parse_measure("C-Prec@3", coverage=u) == CPrec(coverage=u) @ 3
    exponential = parse_measure("C-nDCG(binary=True,gain=exponential)@10", coverage=u)
    assert exponential == CnDCG(coverage=u, binary=True, gain="exponential") @ 10
    assert exponential.udcg_name == "C-nDCG(binary=True,gain=exponential)@10"
    assert exponential != CnDCG(coverage=u, binary=True) @ 10
    assert parse_measure("UDCGtheta@5", utilities=u, weights="w").udcg_name == "UDCGtheta@5"
    assert parse_measure("nDCG@10") == ir_measures.nDCG @ 10
    # the names ir_measures shows (a PyTerrier column) parse back with the same sources
    for measure in [*cases.values(), UDCG(utilities="a.tsv", judge_key="j", gamma=0.5) @ 5]:
        given = {k: v for k, v in measure.params.items() if k in ("utilities", "judge_key")}
        field = measure.params.get("utility_field")
        back = parse_measure(str(measure), **given, **({"utility_field": field} if field else {}))
        assert back == measure and str(back) == str(measure)
    with pytest.raises(UDCGInputError, match=r"names a utilities other than the one given \(b"):
        parse_measure("UDCG(utilities=a.tsv)@5", utilities="b.tsv")
    with pytest.raises(UDCGInputError, match=r"names a utilities other than the one given \(a\)"):
        parse_measure("UDCG(utilities=a,b.tsv)@5", utilities="a")  # a prefix up to a comma
    for path in ("utilities (1).tsv", "runs/a,b.tsv"):  # what the name's syntax also uses
        measure = UDCG(utilities=path, gamma=0.5) @ 5
        assert parse_measure(str(measure), utilities=path) == measure
    with pytest.raises(UDCGInputError, match="'nDCG@10' is not a udcg measure"):
        parse_measure("nDCG@10", utilities=u)
    with pytest.raises(UDCGInputError, match="UDCG needs a cutoff"):
        parse_measure("UDCG", utilities=u)
    with pytest.raises(NameError):
        ir_measures.parse_measure("UDCG@5")


def test_missing_sources_are_one_line_errors(tmp_path: Path) -> None:
    qrels, run = {"q1": {"d1": 1}}, {"q1": {"d1": 2.0, "d2": 1.0}}
    cases = [
        (UDCG @ 5, "UDCG needs utilities: pass UDCG(utilities=...) or UDCG(utility_column=...)"),
        (UDCG(utilities={}, utility_column="u") @ 5, "takes utilities or utility_column, not both"),
        (UDCGtheta(utilities={}) @ 5, "UDCGtheta needs weights: pass UDCGtheta(weights=...)"),
        (CnDCG @ 10, "C-nDCG needs coverage: pass CnDCG(coverage=...)"),
        (UDCG(utilities={}), "UDCG needs a cutoff, e.g. UDCG@10"),
        (
            UDCG(utilities={"q1": {"d1": 0.5}}, utility_field="utility") @ 5,
            "no utility for query 'q1' document 'd2' (rank 2)",
        ),
        (CPrec(coverage={"q1": {"d1": 0.5}}) @ 5, "no coverage for query 'q1' document 'd2'"),
        (CPrec(coverage={"q1": {"d1": 1.5}}) @ 1, "coverage 1.5 is not in [0, 1]"),
        (CnDCG(coverage={"q1": {"d1": 1.0}}, gain="log") @ 1, "field 'gain': must be one of"),
    ]
    for measure, message in cases:
        with pytest.raises(UDCGInputError) as error:
            ir_measures.calc_aggregate([measure, ir_measures.P @ 1], qrels, run)
        assert message in str(error.value)
        assert "\n" not in str(error.value)


def test_names_and_identity() -> None:
    u = {"q1": {"d1": 0.5}}
    assert [str(UDCG), str(CnDCG)] == ["UDCG", "C-nDCG"]
    assert (UDCG(utilities=u, gamma=0.5) @ 5).udcg_name == "UDCG(gamma=0.5)@5"
    assert (UDCGtheta(utilities=u, weights="w") @ 5).udcg_name == "UDCGtheta@5"
    coverage = [CPrec(coverage=u) @ 3, CnDCG(coverage=u) @ 3]
    assert [m.udcg_name for m in coverage] == ["C-Prec@3", "C-nDCG@3"]
    # the names ir_measures and PyTerrier show (columns, keys) name the sources: two measures
    # on other sources never share one
    digest = "dict:dabbcb34"  # of u's content, the same in every process
    assert str(UDCG(utilities=u, gamma=0.5) @ 5) == f"UDCG(gamma=0.5,utilities={digest})@5"
    assert str(UDCGtheta(utilities="a.jsonl", judge_key="j", weights="w") @ 5) == (
        "UDCGtheta(utilities=a.jsonl,judge_key=j,weights=w)@5"
    )
    assert [str(m) for m in coverage] == [
        f"C-Prec(coverage={digest})@3",
        f"C-nDCG(coverage={digest})@3",
    ]
    assert str(UDCG(utility_column="abstain_prob") @ 5) == "UDCG(utility_column=abstain_prob)@5"
    assert str(UDCG(utility_column="utility") @ 5) == "UDCG@5"  # PyTerrier's own column
    assert str(UDCG(utilities=u) @ 5) != str(UDCG(utilities={"q1": {"d1": 0.6}}) @ 5)
    assert UDCG(utilities="a.tsv") @ 5 == UDCG(utilities="a.tsv") @ 5
    assert UDCG(utilities="a.tsv") @ 5 != UDCG(utilities="b.tsv") @ 5
    assert UDCG(utilities=u) @ 5 != UDCG(utilities=dict(u)) @ 5


def test_without_ir_measures_the_import_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['ir_measures'] = None\n"
        "try:\n"
        "    import udcg.integrations.ir_measures\n"
        "except ModuleNotFoundError as error:\n"
        "    print(error.name, '|', error)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == (
        "ir_measures | udcg.integrations.ir_measures needs the 'ir-measures' extra: "
        "pip install 'udcg[ir-measures]'\n"
    )
