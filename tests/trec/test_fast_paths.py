"""The TREC engine's shortcuts give what the general paths give: runs read in ranked order,
the merged qrels lookup, the packed sort, the one-pass id encoding, the concurrent file reads;
and the import-time promise (``import udcg`` loads neither numpy nor Arrow)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import pytrec_eval

from udcg import evaluate
from udcg.errors import UDCGInputError
from udcg.io import arrow
from udcg.trec import engine

PARITY = {
    "nDCG@10": "ndcg_cut_10",
    "nDCG": "ndcg",
    "AP": "map",
    "RR": "recip_rank",
    "P@5": "P_5",
    "R@100": "recall_100",
    "Hits@10": "success_10",
}


def _case(rng: np.random.Generator, n_queries: int, values: int) -> tuple[dict, dict]:
    """Random qrels and run; scores drawn from ``values`` levels (few levels: many ties)."""
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for q in range(n_queries):
        docs = [f"d{i}" for i in rng.choice(300, size=int(rng.integers(1, 60)), replace=False)]
        run[f"q{q}"] = {d: float(rng.integers(0, values)) / 4 for d in docs}
        if rng.random() < 0.9:
            judged = rng.choice([*docs, "x1", "x2"], size=int(rng.integers(1, 30)))
            qrels[f"q{q}"] = {str(d): int(rng.choice([-1, 0, 0, 1, 2, 3])) for d in judged}
    return qrels, run


def _write(tmp_path: Path, qrels: dict, run: dict, order: str) -> tuple[Path, Path]:
    """The qrels and run as files; the run ranked (score descending, ties in random order, as
    a retrieval system writes it) or shuffled."""
    rng = np.random.default_rng(0)
    rows = [(q, d, s) for q, docs in run.items() for d, s in docs.items()]
    if order == "ranked":
        keys = [(int(q[1:]), -s, rng.random()) for q, _, s in rows]
        rows = [rows[i] for i in sorted(range(len(rows)), key=keys.__getitem__)]
    else:
        rows = [rows[i] for i in rng.permutation(len(rows))]
    qrels_path, run_path = tmp_path / "qrels.txt", tmp_path / f"run-{order}.txt"
    run_path.write_text("".join(f"{q} Q0 {d} 0 {s!r} t\n" for q, d, s in rows))
    qrels_path.write_text(
        "".join(f"{q} 0 {d} {g}\n" for q, docs in qrels.items() for d, g in docs.items())
    )
    return qrels_path, run_path


@pytest.mark.parametrize("values", [3, 40, 10**6])  # many, some, almost no ties
def test_ranked_and_shuffled_run_files_match_pytrec_eval(tmp_path: Path, values: int) -> None:
    qrels, run = _case(np.random.default_rng(values), n_queries=80, values=values)
    ref = pytrec_eval.RelevanceEvaluator(qrels, set(PARITY.values())).evaluate(run)
    for order in ("ranked", "shuffled"):
        ours = evaluate(*_write(tmp_path, qrels, run, order), list(PARITY))
        assert set(ours) == set(ref)
        for qid, expected in ref.items():
            for name, ref_name in PARITY.items():
                assert ours[qid][name] == pytest.approx(expected[ref_name], abs=1e-9)


def test_file_ranking_breaks_ties_by_document_id_descending() -> None:
    names = pa.array(["a", "b", "c", "d"])
    q = np.array([0, 0, 0, 0, 1, 1], dtype=np.int32)
    scores = np.array([3.0, 2.0, 2.0, 2.0, 1.0, 1.0])
    d = np.array([0, 1, 3, 2, 0, 3], dtype=np.int32)  # a | b d c (tied) | a d (tied)
    assert engine._file_ranking(q, scores, d, names)[1].tolist() == [0, 2, 3, 1, 5, 4]
    assert engine._file_ranking(q, np.arange(6.0)[::-1].copy(), d, names) == (True, None)
    assert engine._file_ranking(q, scores[::-1].copy(), d, names) == (False, None)  # rising
    assert engine._file_ranking(q[::-1].copy(), scores, d, names) == (False, None)  # queries


@pytest.mark.parametrize("seed", range(4))
def test_merged_lookup_matches_the_binary_search(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_queries, n_docs = 50, 400
    pairs = rng.choice(n_queries * n_docs, size=3000, replace=False)
    q_qrels, d_qrels = (pairs // n_docs).astype(np.int32), (pairs % n_docs).astype(np.int32)
    grades = rng.integers(-2, 5, size=len(pairs))
    wanted = np.concatenate([rng.choice(pairs, 1000, replace=False), rng.integers(0, 20000, 500)])
    wanted = np.unique(wanted)
    rng.shuffle(wanted)
    q_run, d_run = (wanted // n_docs).astype(np.int32), (wanted % n_docs).astype(np.int32)
    args = (q_qrels, d_qrels, grades, q_run, d_run)
    merged = engine._merged_lookup(*args, n_queries * n_docs, n_docs)
    keys = engine._pair_keys(q_qrels, d_qrels, n_docs)
    reference = engine._lookup(keys, grades, n_queries * n_docs, wanted.astype(np.int64))
    assert merged is not None
    assert merged[0] == reference[0] and merged[2] == reference[2]
    assert merged[1].tolist() == reference[1].tolist()
    # a repeated pair on either side is found
    q2, d2, g2 = (
        np.append(q_qrels, q_qrels[0]),
        np.append(d_qrels, d_qrels[0]),
        np.append(grades, 1),
    )
    assert engine._merged_lookup(q2, d2, g2, q_run, d_run, n_queries * n_docs, n_docs)[0]
    q3, d3 = np.append(q_run, q_run[-1]), np.append(d_run, d_run[-1])
    found = engine._merged_lookup(q_qrels, d_qrels, grades, q3, d3, n_queries * n_docs, n_docs)
    assert found[0] is False and found[2] is True
    # keys too wide for the packed sort: the caller falls back to the binary search
    assert engine._merged_lookup(*args, 2**60, n_docs) is None


def test_packed_argsort_matches_argsort() -> None:
    keys = np.random.default_rng(3).integers(0, 1000, size=5000)
    assert engine._argsort_distinct(keys).tolist() == np.argsort(keys, kind="stable").tolist()
    wide = keys + 2**55  # no room for the row number: argsort itself
    assert engine._argsort_distinct(wide).tolist() == np.argsort(wide, kind="stable").tolist()


def test_one_pass_encoding_keeps_first_appearance_codes() -> None:
    column = pa.chunked_array([["b", "a"], ["c", "b"], pa.array([], pa.string()), ["d", "a"]])
    codes = arrow.encoded(column)
    assert codes.dictionary.to_pylist() == ["b", "a", "c", "d"]
    assert codes.indices.to_pylist() == [0, 1, 2, 0, 3, 1]
    assert len(arrow.encoded(pa.chunked_array([], pa.string()))) == 0


def test_byte_search_sees_only_the_array_slice() -> None:
    strings = pa.array(["a\tb", "cd", "e\x0bf"])
    assert arrow.has_any_byte(strings, b"\t")
    assert not arrow.has_any_byte(strings[1:2], b"\t\x0b")
    assert arrow.has_any_byte(strings[2:], b"\x0b")
    assert not arrow.has_any_byte(pa.array(["", ""]), b"\t")


def test_public_compute_module_gives_the_same_results(
    monkeypatch: pytest.MonkeyPatch, examples: Path
) -> None:
    files = examples / "trec" / "qrels.trec", examples / "trec" / "run.trec"
    expected = evaluate(*files, list(PARITY))
    monkeypatch.setattr(arrow, "_compute", lambda: pc)
    assert evaluate(*files, list(PARITY)) == expected


def test_both_files_bad_reports_the_qrels_first(tmp_path: Path) -> None:
    qrels, run = tmp_path / "qrels.txt", tmp_path / "run.txt"
    qrels.write_text("q1 0 d1 x\n")
    run.write_text("q1 Q0 d1 1 y t\n")
    with pytest.raises(UDCGInputError, match=r"qrels\.txt:1: field 'relevance'"):
        evaluate(qrels, run, "AP")


def _python(code: str, **env: str) -> str:
    variables = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    done = subprocess.run(
        [sys.executable, "-c", code], env=variables | env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_importing_udcg_loads_neither_numpy_nor_arrow() -> None:
    code = (
        "import sys, udcg, udcg.trec; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'pyarrow')))"
    )
    assert _python(code) == "[]"


def test_evaluating_trec_files_loads_no_pandas(examples: Path) -> None:
    # pandas is installed here (the dev extra); Arrow's DataType.to_pandas_dtype imported it
    # on every evaluation, a quarter of a second of every `udcg trec`
    pytest.importorskip("pandas")
    code = (
        "import sys, udcg; "
        f"udcg.evaluate({str(examples / 'trec' / 'qrels.trec')!r}, "
        f"{str(examples / 'trec' / 'run.trec')!r}, ['P@5', 'nDCG@10', 'AP']); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas'))"
    )
    assert _python(code) == "[]"


def test_one_blas_thread_only_where_nothing_is_set() -> None:
    code = (
        "import os; from udcg._threads import one_blas_thread; one_blas_thread(); "
        "print(os.environ.get('OPENBLAS_NUM_THREADS'))"
    )
    assert _python(code) == "1"
    assert _python(code, OMP_NUM_THREADS="3") == "None"
    assert _python("import numpy; " + code) == "None"  # too late: numpy is loaded
