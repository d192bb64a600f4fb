"""trec_eval parity of udcg.evaluate against pytrec_eval, and its error handling."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import pytrec_eval

from udcg import evaluate
from udcg.errors import UDCGInputError
from udcg.io import arrow
from udcg.io.formats.trec import (
    Qrels,
    Run,
    qrels_from_dict,
    read_trec_qrels,
    read_trec_run,
    run_from_dict,
    trec_order,
)
from udcg.metrics import _kernels
from udcg.trec.engine import _lookup, evaluate_table

# ir_measures name -> pytrec_eval name
PARITY = {
    "nDCG@1": "ndcg_cut_1",
    "nDCG@3": "ndcg_cut_3",
    "nDCG@10": "ndcg_cut_10",
    "nDCG": "ndcg",
    "AP": "map",
    "AP@5": "map_cut_5",
    "RR": "recip_rank",
    "P@1": "P_1",
    "P@5": "P_5",
    "P@30": "P_30",
    "R@5": "recall_5",
    "R@100": "recall_100",
    "Hits@1": "success_1",
    "Hits@10": "success_10",
}


def _random_case(
    rng: np.random.Generator,
    n_queries: int,
    depth: int | None = None,
    grades: tuple[int, ...] = (-1, 0, 0, 1, 2, 3),
) -> tuple[dict, dict]:
    """Random qrels of ``grades`` and a run; every ranked list is ``depth`` long when given."""
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for q in range(n_queries):
        size = depth or int(rng.integers(1, 40))
        pool = [f"d{i}" for i in rng.choice(200, size=size, replace=False)]
        ranked = depth or int(rng.integers(0, len(pool) + 1))
        # coarse scores: many ties, which trec_eval breaks by document id descending
        run[f"q{q}"] = {d: float(rng.integers(0, 4)) for d in pool[:ranked]}
        if rng.random() < 0.9:
            judged = rng.choice(pool + [f"x{i}" for i in range(5)], size=int(rng.integers(1, 20)))
            qrels[f"q{q}"] = {str(d): int(rng.choice(grades)) for d in judged}
    run = {q: docs for q, docs in run.items() if docs}
    return qrels, run


def _pytrec(qrels: dict, run: dict) -> dict:
    return pytrec_eval.RelevanceEvaluator(qrels, set(PARITY.values())).evaluate(run)


def _assert_parity(ours: dict, ref: dict) -> None:
    assert set(ours) == set(ref)
    for qid, values in ref.items():
        for ours_name, ref_name in PARITY.items():
            assert ours[qid][ours_name] == pytest.approx(values[ref_name], abs=1e-9), (
                qid,
                ours_name,
            )


@pytest.mark.parametrize("seed", range(8))
def test_random_runs_with_ties_match_pytrec_eval(seed: int) -> None:
    qrels, run = _random_case(np.random.default_rng(seed), n_queries=60)
    _assert_parity(evaluate(qrels, run, list(PARITY)), _pytrec(qrels, run))


@pytest.mark.parametrize("seed", range(3))
def test_fixed_depth_runs_match_pytrec_eval(seed: int) -> None:
    # every list equally long: the engine reshapes the ranked rows instead of scattering
    qrels, run = _random_case(np.random.default_rng(seed), n_queries=60, depth=25)
    _assert_parity(evaluate(qrels, run, list(PARITY)), _pytrec(qrels, run))


@pytest.mark.parametrize("seed", range(3))
def test_large_and_sparse_grades_match_pytrec_eval(seed: int) -> None:
    """Grades far above the levels of a table (10**9 for 60 queries would be 480 GB of
    counts) are counted by the levels present; thresholds fall between them."""
    rng = np.random.default_rng(seed)
    for grades in ((-1, 0, 1, 3, 65, 1000), tuple(range(-1, 1000))):  # few levels, or many
        qrels, run = _random_case(rng, n_queries=60, grades=grades)
        _assert_parity(evaluate(qrels, run, list(PARITY)), _pytrec(qrels, run))
    qrels, run = _random_case(rng, n_queries=60, grades=(-1, 0, 1, 3, 65, 1000, 10**9))
    # AP and R see grade >= rel only; pytrec_eval takes minutes over a grade of 10**9
    lowered = {q: {d: min(g, 10**5) for d, g in docs.items()} for q, docs in qrels.items()}
    for rel, ref_rel in ((2, 2), (65, 65), (66, 66), (10**9, 10**5)):
        ours = evaluate(qrels, run, [f"AP(rel={rel})", f"R(rel={rel})@5"])
        ref = pytrec_eval.RelevanceEvaluator(lowered, {"map", "recall_5"}, ref_rel).evaluate(run)
        for qid, values in ref.items():
            assert ours[qid][f"AP(rel={rel})"] == pytest.approx(values["map"], abs=1e-9)
            assert ours[qid][f"R(rel={rel})@5"] == pytest.approx(values["recall_5"], abs=1e-9)
    ideal = {q: {d: float(g) for d, g in docs.items()} for q, docs in qrels.items()}
    assert {v["nDCG"] for v in evaluate(qrels, ideal, ["nDCG"]).values()} <= {0.0, 1.0}


def test_shipped_example_matches_pytrec_eval(examples: Path) -> None:
    qrels_path, run_path = examples / "trec" / "qrels.trec", examples / "trec" / "run.trec"
    with open(qrels_path) as f:
        qrels = pytrec_eval.parse_qrel(f)
    with open(run_path) as f:
        run = pytrec_eval.parse_run(f)
    ours = evaluate(qrels_path, run_path, list(PARITY))
    assert len(ours) > 40
    _assert_parity(ours, _pytrec(qrels, run))


def test_file_dict_and_object_entry_points_agree(tmp_path: Path) -> None:
    qrels, run = _random_case(np.random.default_rng(11), n_queries=30)
    run_path, qrels_path = tmp_path / "run.gz", tmp_path / "qrels.txt"
    with gzip.open(run_path, "wt") as f:
        for q, docs in run.items():
            for rank, (d, s) in enumerate(docs.items(), start=1):
                f.write(f"{q}\tQ0\t{d}  {rank} {s} tag\n")  # tabs, double spaces, gzip
    with open(qrels_path, "w") as f:
        f.writelines(f"{q} 0 {d} {r}\n" for q, docs in qrels.items() for d, r in docs.items())
    from_dicts = evaluate(qrels, run, ["nDCG@10", "AP"])
    assert evaluate(qrels_path, run_path, ["nDCG@10", "AP"]) == from_dicts
    assert (
        evaluate(read_trec_qrels(qrels_path), read_trec_run(run_path), ["nDCG@10", "AP"])
        == from_dicts
    )
    assert read_trec_run(run_path).to_dict() == run
    assert qrels_from_dict(qrels).to_dict() == read_trec_qrels(qrels_path).to_dict()


def _recoded(strings: pa.Array, rng: np.random.Generator) -> pa.DictionaryArray:
    """``strings`` as a dictionary array whose dictionary repeats values, holds unused ones
    and is shuffled, with int8 or int16 indices."""
    values = strings.to_pylist()
    dictionary = sorted(set(values)) * 2 + ["unused"]
    rng.shuffle(dictionary)
    where = {v: i for i, v in enumerate(dictionary)}  # the last of the two copies
    kind = np.int8 if len(dictionary) < 128 else np.int16
    indices = pa.array(np.array([where[v] for v in values], dtype=kind))
    return pa.DictionaryArray.from_arrays(indices, pa.array(dictionary))


def test_dictionary_encoded_ids_evaluate_like_plain_strings() -> None:
    rng = np.random.default_rng(13)
    qrels, run = _random_case(rng, n_queries=40)
    plain_run, plain_qrels = run_from_dict(run), qrels_from_dict(qrels)
    coded_run = Run(
        _recoded(plain_run.qids, rng), _recoded(plain_run.doc_ids, rng), plain_run.scores
    )
    coded_qrels = Qrels(
        _recoded(plain_qrels.qids, rng), _recoded(plain_qrels.doc_ids, rng), plain_qrels.relevance
    )
    assert coded_run.to_dict() == run
    assert evaluate(coded_qrels, coded_run, list(PARITY)) == evaluate(qrels, run, list(PARITY))


@pytest.mark.parametrize("spacing", [" ", "\t", "  "])
def test_plain_files_read_alike_whatever_the_spacing(tmp_path: Path, spacing: str) -> None:
    # single spaces take Arrow's read of the file itself, the others the in-memory retry
    qrels, run = _random_case(np.random.default_rng(12), n_queries=20)
    run_path = tmp_path / "run.txt"
    run_path.write_text(
        "".join(
            spacing.join((q, "Q0", d, str(rank), repr(s), "tag")) + "\n"
            for q, docs in run.items()
            for rank, (d, s) in enumerate(docs.items(), start=1)
        )
    )
    assert read_trec_run(run_path).to_dict() == run
    assert evaluate(qrels, run_path, ["nDCG@10", "AP"]) == evaluate(qrels, run, ["nDCG@10", "AP"])


def test_queries_missing_from_either_side_are_ignored() -> None:
    qrels = {"a": {"d1": 1}, "b": {"d2": 1}}
    run = {"a": {"d1": 1.0}, "c": {"d9": 3.0}}
    assert evaluate(qrels, run, "P@1") == {"a": {"P@1": 1.0}}


def test_tie_break_is_document_id_descending() -> None:
    qrels = {"q": {"a": 1}}
    run = {"q": {"a": 1.0, "b": 1.0, "c": 1.0}}
    assert evaluate(qrels, run, "RR")["q"]["RR"] == pytest.approx(1 / 3)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("written", ["sorted", "shuffled"])
def test_scores_equal_in_float32_tie_as_in_trec_eval(
    tmp_path: Path, seed: int, written: str
) -> None:
    """trec_eval keeps each score as a C float: scores apart only beyond float32's precision
    (a float64 reranker's 9 decimals) tie and are ranked by document id descending."""
    rng = np.random.default_rng(seed)
    qrels, run = {}, {}
    for q in range(40):
        base = rng.random(6)
        # pairs 3e-9 apart: distinct as float64, equal as float32 (mostly)
        scores = np.repeat(base, 2) + np.tile([0.0, 3e-9], 6)
        docs = [f"d{i}" for i in rng.permutation(12)]
        run[f"q{q}"] = {d: float(s) for d, s in zip(docs, scores, strict=True)}
        qrels[f"q{q}"] = {d: int(rng.integers(0, 3)) for d in docs[::2]}
    rows = [(q, d, s) for q, docs in run.items() for d, s in docs.items()]
    if written == "sorted":  # the engine's path for files in ranking order
        rows.sort(key=lambda r: (r[0], -r[2]))
    else:
        rows = [rows[i] for i in rng.permutation(len(rows))]
    path = tmp_path / "run.trec"
    path.write_text("".join(f"{q} Q0 {d} 1 {s!r} t\n" for q, d, s in rows))
    ref = _pytrec(qrels, run)
    assert any(v["recip_rank"] != 1.0 for v in ref.values())
    _assert_parity(evaluate(qrels, path, list(PARITY)), ref)
    _assert_parity(evaluate(qrels, run, list(PARITY)), ref)


@pytest.mark.parametrize("form", ["plain", "dictionary", "chunked dictionary"])
def test_trec_order_takes_ids_in_every_arrow_form(form: str) -> None:
    qids, docs = pa.array(["q2", "q1", "q1", "q1"]), pa.array(["a", "b", "c", "d"])
    if form != "plain":
        qids, docs = qids.dictionary_encode(), docs.dictionary_encode()
    if form == "chunked dictionary":
        qids, docs = pa.chunked_array([qids[:2], qids[2:]]), pa.chunked_array([docs])
    order = trec_order(qids, np.array([5.0, 1.0, 2.0, 2.0]), docs)
    assert order.tolist() == [3, 2, 1, 0]  # q1 by score, the tie by doc id descending; q2


def test_measure_parameters_and_means() -> None:
    qrels = {"q": {"a": 1, "b": 2}}
    run = {"q": {"a": 2.0, "b": 1.0}}
    table = evaluate_table(qrels, run, ["P(rel=2)@2", "P@2", "RR(rel=2)"])
    assert table.to_dict() == {"q": {"P(rel=2)@2": 0.5, "P@2": 1.0, "RR(rel=2)": 0.5}}
    assert table.mean() == {"P(rel=2)@2": 0.5, "P@2": 1.0, "RR(rel=2)": 0.5}


@pytest.mark.parametrize(
    ("name", "content", "line", "fragment"),
    [
        ("run", "q1 Q0 d1 1 1.0 t\nq1 Q0 d2 2 0.5\n", 2, "expected 6 columns"),
        (
            "run",
            "q1 Q0 d1 1 1.0 t\nq1 Q0 d2 2 high t\n",
            2,
            "field 'score': 'high' is not a number",
        ),
        ("run", "q1 Q0 d1 1 nan t\n", 1, "field 'score': 'nan' is not finite"),
        ("run", "q1 Q0 d1 1 1.0 t\nq1 Q0 d2 2 inf t\n", 2, "not finite"),
        (
            "run",
            "q1 Q0 d1 1 1.0 t\nq1 Q0 d1 2 0.5 t\n",
            2,
            "duplicate document 'd1' for query 'q1'",
        ),
        ("run", '{"qid": 1}\n', 1, "expected 6 columns"),
        ("qrels", "q1 0 d1 1\nq1 0 d2\n", 2, "expected 4 columns"),
        ("qrels", "q1 0 d1 1\nq1 0 d2 0.5\n", 2, "field 'relevance': '0.5' is not an integer"),
        ("qrels", "q1 0 d1 1\nq1 0 d1 0\n", 2, "duplicate document 'd1'"),
        # Arrow reads hexadecimal integers: 0x10 as 16, 0xffffffffffffffff as -1
        ("qrels", "q1 0 0x1 1\nq1 0 d2 0x10\n", 2, "field 'relevance': '0x10' is not"),
        ("qrels", "q1 0 d1 0xffffffffffffffff\r\n", 1, "'0xffffffffffffffff' is not"),
        ("qrels", "q1 0 d1 1\rq1 0 d2 0x10\rq1 0 d3 1\r", 2, "'0x10' is not"),  # CR ends lines
        ("run", "q1 Q0 d1 1 1.0 t\rq1 Q0 d2 2 high t\r", 2, "'high' is not a number"),
    ],
)
def test_bad_files_are_located(
    tmp_path: Path, name: str, content: str, line: int, fragment: str
) -> None:
    path = tmp_path / f"{name}.txt"
    path.write_text(content)
    good = tmp_path / "good.txt"
    good.write_text("q1 0 d1 1\n" if name == "run" else "q1 Q0 d1 1 1.0 t\n")
    qrels, run = (good, path) if name == "run" else (path, good)
    with pytest.raises(UDCGInputError) as err:
        evaluate(qrels, run, "AP")
    assert f"{path}:{line}: " in str(err.value)
    assert fragment in str(err.value)


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_files_are_errors(tmp_path: Path, content: str) -> None:
    path = tmp_path / "run.txt"
    path.write_text(content)
    with pytest.raises(UDCGInputError, match="empty file"):
        read_trec_run(path)


def test_bad_dict_values_are_errors() -> None:
    with pytest.raises(UDCGInputError, match="not finite"):
        run_from_dict({"q": {"d": float("nan")}})
    with pytest.raises(UDCGInputError, match="not a number"):
        run_from_dict({"q": {"d": "1.0"}})
    with pytest.raises(UDCGInputError, match="not an integer grade"):
        qrels_from_dict({"q": {"d": 1.5}})


@pytest.mark.parametrize(
    "measure", ["nDCG@x", "MAP@@1", "foo", "P", "P@0", "nDCG(rel=2)@3", "AP(rel=0)"]
)
def test_unknown_or_malformed_measures_are_errors(measure: str) -> None:
    with pytest.raises(UDCGInputError, match="measures"):
        evaluate({"q": {"d": 1}}, {"q": {"d": 1.0}}, measure)


def test_evaluation_allocates_from_udcgs_pool_not_arrows_default(
    examples: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    default = pa.default_memory_pool()
    outside = default.backend_name, default.bytes_allocated(), arrow.memory_pool().bytes_allocated()
    seen = []
    precision = _kernels.precision

    def spy(*args: object) -> object:
        pools = pa.default_memory_pool(), arrow.memory_pool()
        seen.append((pools[0].backend_name, pools[0].bytes_allocated(), pools[1].bytes_allocated()))
        return precision(*args)

    monkeypatch.setattr(_kernels, "precision", spy)
    evaluate(examples / "trec" / "qrels.trec", examples / "trec" / "run.trec", "P@1")
    ((backend, default_bytes, ours),) = seen
    assert (backend, default_bytes) == outside[:2]  # the columns live in udcg's pool
    assert ours > outside[2]
    assert arrow.memory_pool().backend_name in ("jemalloc", "system")  # not mimalloc's pages


def test_system_allocator_where_arrow_lacks_jemalloc(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> None:
        raise NotImplementedError("jemalloc support is not enabled")

    monkeypatch.setattr(pa, "jemalloc_memory_pool", missing)
    arrow.memory_pool.cache_clear()
    try:
        assert arrow.memory_pool().backend_name == "system"
        qrels, run = _random_case(np.random.default_rng(5), n_queries=20)
        _assert_parity(evaluate(qrels, run, list(PARITY)), _pytrec(qrels, run))
    finally:
        arrow.memory_pool.cache_clear()


@pytest.mark.parametrize("n_keys", [10**6, 2**62])  # grades in the key bits, argsort
@pytest.mark.parametrize("span", [4, 1000])  # grade codes of 3 and 10 bits
def test_judged_grades_match_a_dict_lookup(n_keys: int, span: int) -> None:
    rng = np.random.default_rng(span)
    qrel_keys = rng.choice(10**6, size=5000, replace=False).astype(np.int64)
    grades = rng.integers(-1, span, size=5000)
    run_keys = np.concatenate([rng.choice(qrel_keys, 3000), rng.integers(0, 10**6, 3000)])
    expected = dict(zip(qrel_keys.tolist(), grades.tolist(), strict=True))
    repeats, found, _ = _lookup(qrel_keys.copy(), grades, n_keys, run_keys.copy())
    assert not repeats
    assert found.tolist() == [expected.get(k, 0) for k in run_keys.tolist()]
    assert _lookup(np.array([3, 5, 3]), np.array([1, 2, 1]), n_keys, np.array([5]))[0]


@pytest.mark.parametrize("grade", [float("nan"), float("inf"), 1e30, 10**30, 1.5])
def test_qrels_dict_grade_that_is_no_int64_is_a_located_input_error(grade) -> None:
    with pytest.raises(UDCGInputError, match=r"query q, document a: .* is not an integer grade"):
        evaluate({"q": {"a": grade, "b": 0}}, {"q": {"a": 1.0, "b": 2.0}}, ["nDCG"])


@pytest.mark.parametrize("sep", [b" ", b"\t", b"  "])
def test_cr_ends_lines_whatever_separates_the_columns(tmp_path: Path, sep: bytes) -> None:
    """CR, LF and CRLF end lines alike, on the fast path (single spaces) and on the one that
    normalises tabs and repeated spaces (found by bench/fuzz_readers.py)."""
    lines = [sep.join(b"q1 Q0 d1 1 2.5 t".split()), sep.join(b"q1 Q0 d2 2 1.5 t".split())]
    want = {"q1": {"d1": 2.5, "d2": 1.5}}
    for end in (b"\n", b"\r", b"\r\n"):
        path = tmp_path / "run.txt"
        path.write_bytes(end.join(lines) + end)
        assert read_trec_run(path).to_dict() == want, (sep, end)


def test_large_grades_take_memory_of_the_judged_documents_not_a_table() -> None:
    """The ideal DCG above 64 grades: 8,000 queries, one with 8,000 relevant documents, was a
    queries x 8,000 table (512 MB); now arrays of the judged documents."""
    import tracemalloc

    from udcg.metrics._kernels import discounts
    from udcg.trec.engine import _sorted_ideal_dcg

    q = np.concatenate([np.zeros(8_000, dtype=np.int64), np.arange(1, 8_000)])
    gains = np.full(len(q), 100, dtype=np.int64)
    tracemalloc.start()
    try:
        ideal = _sorted_ideal_dcg(q, gains, 8_000, None)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20, peak
    assert ideal[1] == 100.0 and ideal[0] == pytest.approx(100 * discounts(8_000).sum())
