"""UDCG@k and UDCGtheta@k of a run: parity with udcg.metrics.udcg, with the reference UDCG
sample and with UDCGTheta.predict_proba on the same contexts, and the located errors."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from udcg import compare, evaluate, evaluate_table
from udcg.errors import UDCGInputError
from udcg.io.weights.files import ThetaWeights, write_weights
from udcg.metrics import udcg, utility
from udcg.theta import UDCGTheta

REFERENCE = (
    Path(__file__).resolve().parents[2].parent
    / "shared"
    / "data"
    / "udcg-official-sample"
    / "dataset_with_udcg.json"
)
MODEL = "meta-llama/Llama-3.2-3B-Instruct"


def _random_case(rng: np.random.Generator, n_queries: int = 80) -> tuple[dict, dict, dict]:
    """Random graded qrels, a run with many tied scores (lists of 1..12 documents) and
    P(abstain) for every ranked document of a judged query; a tenth of the run's queries have
    no qrels and no utilities."""
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    probs: dict[str, dict[str, float]] = {}
    for q in range(n_queries):
        qid = f"q{q}"
        docs = [f"d{i}" for i in rng.choice(60, size=int(rng.integers(1, 13)), replace=False)]
        run[qid] = {d: float(rng.integers(0, 3)) for d in docs}  # coarse scores: ties
        if rng.random() < 0.1:
            continue
        judged = rng.choice([*docs, "x1", "x2"], size=int(rng.integers(1, 8)))
        qrels[qid] = {str(d): int(rng.choice([-1, 0, 0, 1, 2, 3])) for d in judged}
        probs[qid] = {d: float(rng.random()) for d in docs}
    return qrels, run, probs


def _top(run: dict, qid: str, k: int) -> list[str]:
    """The query's top k in trec_eval order: score descending, document id descending."""
    return sorted(run[qid], key=lambda d: (run[qid][d], d), reverse=True)[:k]


def _expected(qrels: dict, run: dict, probs: dict, k: int, gamma: float) -> dict[str, float]:
    """udcg.metrics.udcg on each judged query's top-k passages (a ragged batch)."""
    qids = [q for q in run if q in qrels]
    rel = [[qrels[q].get(d, 0) >= 1 for d in _top(run, q, k)] for q in qids]
    u = [[1.0 - probs[q][d] for d in _top(run, q, k)] for q in qids]
    return dict(zip(qids, udcg(rel, u, gamma=gamma).tolist(), strict=True))


def _write_tsv(path: Path, probs: dict) -> Path:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt") as f:
        for q, docs in probs.items():
            f.writelines(f"{q}\t{d}  {p!r}\n" for d, p in docs.items())  # tabs and spaces
    return path


def _write_trec(tmp_path: Path, qrels: dict, run: dict) -> tuple[Path, Path]:
    qrels_path, run_path = tmp_path / "qrels.txt", tmp_path / "run.txt"
    qrels_path.write_text(
        "".join(f"{q} 0 {d} {g}\n" for q, docs in qrels.items() for d, g in docs.items())
    )
    run_path.write_text(
        "".join(
            f"{q} Q0 {d} {i} {s} t\n"
            for q, docs in run.items()
            for i, (d, s) in enumerate(docs.items(), start=1)
        )
    )
    return qrels_path, run_path


# --- UDCG@k parity ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_udcg_from_files_equals_the_array_metric(tmp_path: Path, seed: int) -> None:
    qrels, run, probs = _random_case(np.random.default_rng(seed))
    qrels_path, run_path = _write_trec(tmp_path, qrels, run)
    utilities = _write_tsv(tmp_path / "u.tsv.gz", probs)
    measures = ["UDCG@5", "UDCG(gamma=0.75)@3", "UDCG@20", "nDCG@10"]
    got = evaluate(qrels_path, run_path, measures, utilities=utilities)
    assert set(got) == {q for q in run if q in qrels}
    for measure, k, gamma in [("UDCG@5", 5, 1 / 3), ("UDCG(gamma=0.75)@3", 3, 0.75)]:
        want = _expected(qrels, run, probs, k, gamma)
        diff = max(abs(got[q][measure] - want[q]) for q in want)
        assert diff <= 1e-12, (measure, diff)
    # a cutoff beyond every list: each query is averaged over the documents it has
    want = _expected(qrels, run, probs, 20, 1 / 3)
    assert max(abs(got[q]["UDCG@20"] - want[q]) for q in want) <= 1e-12
    # the other measures are unchanged by the utility measures beside them
    alone = evaluate(qrels_path, run_path, ["nDCG@10"])
    assert {q: v["nDCG@10"] for q, v in got.items()} == {q: v["nDCG@10"] for q, v in alone.items()}


def test_dict_file_and_field_forms_agree(tmp_path: Path) -> None:
    qrels, run, probs = _random_case(np.random.default_rng(7), n_queries=30)
    from_dict = evaluate(qrels, run, "UDCG@4", utilities=probs, utility_field="abstain_prob")
    assert evaluate(qrels, run, "UDCG@4", utilities=_write_tsv(tmp_path / "u.tsv", probs)) == (
        from_dict
    )
    ready = {q: {d: 1.0 - p for d, p in docs.items()} for q, docs in probs.items()}
    as_u = evaluate(qrels, run, "UDCG@4", utilities=ready, utility_field="utility")
    assert max(abs(as_u[q]["UDCG@4"] - from_dict[q]["UDCG@4"]) for q in as_u) <= 1e-15
    jsonl = tmp_path / "u.jsonl"
    jsonl.write_text(
        "".join(
            json.dumps({"qid": q, "doc_id": d, "utility": u}) + "\n"
            for q, docs in ready.items()
            for d, u in docs.items()
        )
    )
    assert evaluate(qrels, run, "UDCG@4", utilities=jsonl) == as_u
    # answer_prob: u = p, as for dataset=trec
    answer = evaluate(qrels, run, "UDCG@4", utilities=ready, utility_field="answer_prob")
    assert answer == as_u


def test_reference_sample_through_a_run() -> None:
    if not REFERENCE.exists():
        pytest.skip(f"reference UDCG sample not found at {REFERENCE} (shared data absent)")
    items = json.loads(REFERENCE.read_text())
    # the stored outputs used gamma = 0.333; the passages' order is the run's (scores 5..1)
    run = {
        item["example_id"]: {
            p["doc_id"]: float(len(item["passages"]) - i) for i, p in enumerate(item["passages"])
        }
        for item in items
    }
    qrels = {
        item["example_id"]: {p["doc_id"]: int(p["is_relevant"]) for p in item["passages"]}
        for item in items
    }
    probs = {
        item["example_id"]: {
            p["doc_id"]: p["models_info"][MODEL]["no_res_prob"] for p in item["passages"]
        }
        for item in items
    }
    got = evaluate(qrels, run, "UDCG(gamma=0.333)@5", utilities=probs, utility_field="abstain_prob")
    stored = {item["example_id"]: item["udcg"][MODEL] for item in items}
    assert len(got) == len(stored) == len(items) > 0
    diff = max(abs(got[q]["UDCG(gamma=0.333)@5"] - stored[q]) for q in stored)
    assert diff <= 1e-9, diff


# --- UDCGtheta@k parity --------------------------------------------------------------------


def _weights(tmp_path: Path, k: int, seed: int, bias: bool = False, **card) -> Path:
    rng = np.random.default_rng(seed)
    path = tmp_path / f"theta_k{k}.safetensors"
    weights = ThetaWeights(
        rng.normal(size=k), rng.normal(size=k), float(rng.normal()) if bias else 0.0, bias
    )
    write_weights(path, weights, card)
    return path


def test_udcg_theta_equals_predict_proba(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    qrels, run, probs = _random_case(rng, n_queries=120)
    run = {q: docs for q, docs in run.items() if len(docs) >= 5 or q not in qrels}
    path = _weights(tmp_path, 5, seed=1, bias=True, utility="abstention")
    got = evaluate(
        qrels,
        run,
        ["UDCGtheta@5", "UDCG-theta@5"],
        utilities=probs,
        weights=path,
        utility_field="abstain_prob",
    )
    qids = [q for q in run if q in qrels]
    rel = np.array([[qrels[q].get(d, 0) >= 1 for d in _top(run, q, 5)] for q in qids])
    u = utility(abstain_prob=np.array([[probs[q][d] for d in _top(run, q, 5)] for q in qids]))
    want = UDCGTheta.load(path, k=5).predict_proba(rel, u)
    assert list(got) == qids
    assert [got[q]["UDCGtheta@5"] for q in qids] == want.tolist()


def test_udcg_theta_weights_are_matched_by_k(tmp_path: Path) -> None:
    qrels, run, probs = _random_case(np.random.default_rng(5), n_queries=40)
    run = {q: docs for q, docs in run.items() if len(docs) >= 3}
    w2, w3 = _weights(tmp_path, 2, seed=2), _weights(tmp_path, 3, seed=3)
    both = evaluate(
        qrels,
        run,
        ["UDCGtheta@3", "UDCGtheta@2"],
        utilities=probs,
        weights=[w3, w2],
        utility_field="abstain_prob",
    )
    only3 = evaluate(
        qrels, run, "UDCGtheta@3", utilities=probs, weights=w3, utility_field="abstain_prob"
    )
    assert {q: v["UDCGtheta@3"] for q, v in both.items()} == {
        q: v["UDCGtheta@3"] for q, v in only3.items()
    }
    with pytest.raises(UDCGInputError) as err:
        evaluate(
            qrels, run, "UDCGtheta@2", utilities=probs, weights=w3, utility_field="abstain_prob"
        )
    assert "UDCGtheta@2 needs weights for k=2" in str(err.value)
    assert "k=3" in str(err.value) and "theta_k3.safetensors" in str(err.value)


def test_udcg_theta_needs_k_ranked_documents(tmp_path: Path) -> None:
    path = _weights(tmp_path, 3, seed=0)
    qrels = {"a": {"d1": 1}, "b": {"d1": 1}}
    run = {"a": {"d1": 3.0, "d2": 2.0, "d3": 1.0}, "b": {"d1": 1.0, "d2": 0.5}}
    utilities = {"a": {"d1": 0.1, "d2": 0.2, "d3": 0.3}, "b": {"d1": 0.1, "d2": 0.2}}
    with pytest.raises(UDCGInputError, match="query 'b' has 2") as err:
        evaluate(
            qrels,
            run,
            "UDCGtheta@3",
            utilities=utilities,
            weights=path,
            utility_field="abstain_prob",
        )
    assert err.value.field == "run"
    # UDCG@3 takes the shorter list, averaged over its 2 documents
    got = evaluate(qrels, run, "UDCG@3", utilities=utilities, utility_field="abstain_prob")["b"][
        "UDCG@3"
    ]
    assert got == udcg([[True, False]], [[0.9, 0.8]])[0]


def test_weights_of_another_utility_source_are_refused(tmp_path: Path) -> None:
    path = _weights(tmp_path, 1, seed=0, utility="answer_likelihood")
    qrels, run, probs = {"q": {"d": 1}}, {"q": {"d": 1.0}}, {"q": {"d": 0.4}}
    with pytest.raises(
        UDCGInputError, match="fitted with utility source 'answer_likelihood', not 'abstention'"
    ):
        evaluate(
            qrels, run, "UDCGtheta@1", utilities=probs, weights=path, utility_field="abstain_prob"
        )
    fine = evaluate(
        qrels, run, "UDCGtheta@1", utilities=probs, weights=path, utility_field="answer_prob"
    )
    assert 0 < fine["q"]["UDCGtheta@1"] < 1
    # ready utilities carry no source: accepted
    evaluate(qrels, run, "UDCGtheta@1", utilities=probs, weights=path, utility_field="utility")


def test_another_utility_source_allowed_on_purpose_is_recorded(tmp_path: Path) -> None:
    from udcg.errors import UDCGWarning
    from udcg.io.weights.files import write_pretrained

    folder = tmp_path / "theta"
    write_pretrained(folder, ThetaWeights(np.array([1.5]), np.array([-1.0])), {"utility": "x"})
    qrels, run, probs = {"q": {"d": 1}}, {"q": {"d": 1.0}}, {"q": {"d": 0.4}}
    with pytest.raises(UDCGInputError) as err:
        evaluate(
            qrels, run, "UDCGtheta@1", utilities=probs, weights=folder, utility_field="abstain_prob"
        )
    assert str(err.value) == (
        "field 'utility': the weights were fitted with utility source 'x', not 'abstention' "
        "(allow_mismatch=['utility'] to use them anyway)"
    )
    with pytest.warns(UDCGWarning, match=r"UDCGtheta@1 weights: field 'utility'.*on purpose"):
        got = evaluate(
            qrels,
            run,
            "UDCGtheta@1",
            utilities=probs,
            weights=folder,
            allow_mismatch=["utility"],
            utility_field="abstain_prob",
        )
    assert got["q"]["UDCGtheta@1"] == pytest.approx(1 / (1 + np.exp(-1.5 * 0.6)))


# --- errors ------------------------------------------------------------------------------------


def test_a_ranked_document_without_utility_is_a_located_error(tmp_path: Path) -> None:
    qrels = {"q1": {"d1": 1}, "q3": {"d7": 0}}
    run = {"q1": {"d1": 2.0, "d2": 1.0}, "q3": {"d1": 2.0, "d7": 1.0, "d9": 0.5}}
    path = tmp_path / "u.tsv"
    path.write_text("q1 d1 0.1\nq1 d2 0.2\nq3 d1 0.3\nq3 d9 0.4\n")
    with pytest.raises(UDCGInputError) as err:
        evaluate(qrels, run, ["UDCG@5"], utilities=path)
    assert str(err.value).startswith(
        f"{path}: field 'utilities': no utility for query 'q3' document 'd7'"
    )
    # below the cutoff it is not needed; queries without qrels need none
    run["q9"] = {"zz": 1.0}
    assert set(evaluate(qrels, run, ["UDCG@1"], utilities=path)) == {"q1", "q3"}


def test_utility_measures_say_what_they_need() -> None:
    qrels, run = {"q": {"d": 1}}, {"q": {"d": 1.0}}
    assert evaluate(
        qrels, run, "UDCG@5", utilities={"q": {"d": 0.0}}, utility_field="abstain_prob"
    ) == {"q": {"UDCG@5": udcg([[True]], [[1.0]])[0]}}
    with pytest.raises(UDCGInputError) as err:
        evaluate(
            qrels, run, "UDCGtheta@5", utilities={"q": {"d": 0.0}}, utility_field="abstain_prob"
        )
    assert len(str(err.value).splitlines()) == 1
    assert "weights=" in str(err.value) and "--weights" in str(err.value)
    with pytest.raises(UDCGInputError, match=r"utilities=.*--utilities"):
        evaluate(qrels, run, "UDCG@5")
    with pytest.raises(UDCGInputError, match="utility_field"):
        evaluate(qrels, run, "UDCG@5", utilities={"q": {"d": 0.0}}, utility_field="p")
    with pytest.raises(UDCGInputError, match="UDCG needs a cutoff"):
        evaluate(qrels, run, "UDCG", utilities={"q": {"d": 0.0}}, utility_field="abstain_prob")
    with pytest.raises(UDCGInputError, match=r"query 'q', document 'd'.*1\.5 is not in \[0, 1\]"):
        evaluate(qrels, run, "UDCG@1", utilities={"q": {"d": 1.5}}, utility_field="abstain_prob")


def test_a_plain_dict_of_numbers_must_say_what_its_values_are(tmp_path: Path) -> None:
    """A number alone could be P(abstain), P(answer) or u: read the wrong way, u becomes
    1 - u. A dict is refused without utility_field, naming the choices; a TSV file keeps
    its documented default (abstain_prob) and a JSONL line says it by its key."""
    qrels, run, probs = {"q": {"d": 1}}, {"q": {"d": 1.0}}, {"q": {"d": 0.2}}
    with pytest.raises(UDCGInputError) as err:
        evaluate(qrels, run, ["UDCG@5"], utilities=probs)
    message = str(err.value)
    assert err.value.field == "utility_field" and len(message.splitlines()) == 1
    assert "does not say what its values are" in message
    for choice in (
        "'abstain_prob' (u = 1 - P(abstain))",
        "'answer_prob' (u = P(answer)",
        "'utility'",
    ):
        assert choice in message, message
    with pytest.raises(UDCGInputError, match="does not say what its values are"):
        compare(qrels | {"r": {"d": 1}}, {"a": run, "b": run}, "UDCG@5", utilities=probs)

    def score(utilities, field=None) -> float:
        return evaluate(qrels, run, "UDCG@5", utilities=utilities, utility_field=field)["q"][
            "UDCG@5"
        ]

    assert score(probs, "abstain_prob") == udcg([[True]], [[0.8]])[0]
    assert score(probs, "answer_prob") == score(probs, "utility") == udcg([[True]], [[0.2]])[0]
    tsv = tmp_path / "u.tsv"
    tsv.write_text("q d 0.2\n")
    assert score(tsv) == score(probs, "abstain_prob")
    jsonl = tmp_path / "u.jsonl"
    jsonl.write_text('{"qid": "q", "doc_id": "d", "utility": 0.2}\n')
    assert score(jsonl) == score(probs, "utility")


def test_no_utility_measure_reads_no_utilities_and_imports_nothing_more() -> None:
    # a path that does not exist is never opened; the utility modules are never imported
    code = (
        "import sys; from udcg.cli.trec import main; "
        "from udcg import evaluate; "
        "print(evaluate({'q': {'d': 1}}, {'q': {'d': 1.0}}, 'AP', utilities='/nonexistent')); "
        "print(sorted(m for m in sys.modules if m.startswith(('udcg.io.joins.utilities', "
        "'udcg.io.weights.files', 'udcg.trec.utility_measures', 'safetensors', 'scipy'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["{'q': {'AP': 1.0}}", "[]"]


def test_the_table_keeps_the_measure_order_and_names(tmp_path: Path) -> None:
    qrels, run, probs = _random_case(np.random.default_rng(9), n_queries=20)
    measures = ["AP", "UDCG(gamma=0.5)@5", "UDCG@5"]
    table = evaluate_table(qrels, run, measures, utilities=probs, utility_field="abstain_prob")
    assert [str(m) for m in table.measures] == ["AP", "UDCG(gamma=0.5)@5", "UDCG@5"]
    assert table.values.shape == (len(table.qids), 3)
    assert np.isfinite(table.values).all()


def test_udcg_trec_allow_mismatch_utility(tmp_path: Path, capsys) -> None:
    from udcg.cli.trec import main
    from udcg.io.weights.files import write_pretrained

    folder = tmp_path / "theta"
    write_pretrained(folder, ThetaWeights(np.array([1.5]), np.array([-1.0])), {"utility": "x"})
    (tmp_path / "qrels").write_text("q 0 d 1\n")
    (tmp_path / "run").write_text("q Q0 d 1 1.0 r\n")
    (tmp_path / "u.tsv").write_text("q d 0.4\n")
    args = [str(tmp_path / n) for n in ("qrels", "run")]
    args += ["-m", "UDCGtheta@1", "--utilities", str(tmp_path / "u.tsv"), "--weights", str(folder)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "field 'utility'" in err and "--allow-mismatch utility to use them anyway" in err
    assert main([*args, "--allow-mismatch", "utility"]) == 0
    captured = capsys.readouterr()
    assert "UDCGtheta@1" in captured.out
    assert "field 'utility'" in captured.err and "allowed on purpose" in captured.err
