"""udcg order: contexts and TREC runs reordered, checked against an independent brute force."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.special import expit

from udcg.cli.order import main
from udcg.io.contexts.jsonl import read_contexts, write_contexts
from udcg.theta import UDCGTheta
from udcg.theta.simulate import simulate_contexts

ALPHA = np.array([2.5, -0.5, 1.5])
BETA = np.array([-1.0, 0.8, -2.0])
INTERCEPT = -0.3


def best_by_enumeration(rel, u, k):
    """The first (lexicographically) ordered choice of min(k, n) candidates with the largest
    UDCG-theta probability, computed term by term."""
    best, best_p = None, -1.0
    for perm in itertools.permutations(range(len(rel)), min(k, len(rel))):
        logit = INTERCEPT + sum(
            ALPHA[i] * rel[j] * u[j] + BETA[i] * (1 - rel[j]) * u[j] for i, j in enumerate(perm)
        )
        if expit(logit) > best_p + 1e-12:
            best, best_p = list(perm), float(expit(logit))
    return best, best_p


def udcg(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "udcg", "order", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=120,
    )


def save_weights(folder: Path, **card) -> Path:
    model = UDCGTheta(k=3, bias=True)
    model.alpha_, model.beta_, model.intercept_ = ALPHA, BETA, INTERCEPT
    return model.save_pretrained(folder, card={"judge_model": "sim", **card})


@pytest.fixture
def weights(tmp_path: Path) -> Path:
    return save_weights(tmp_path / "w")


def test_contexts_mode_matches_enumeration(tmp_path: Path, weights: Path) -> None:
    contexts = simulate_contexts(4, 5, per_query=2, seed=7)[:7]
    contexts.append(simulate_contexts(1, 2, per_query=1, seed=2)[0])  # fewer than k passages
    data, out = tmp_path / "c.jsonl", tmp_path / "o.jsonl"
    write_contexts(data, contexts)
    done = udcg(str(data), str(out), "--weights", str(weights))
    assert done.returncode == 0, done.stderr
    ordered = list(read_contexts(out))
    assert len(ordered) == len(contexts)
    before, after = [], []
    for old, new in zip(contexts, ordered, strict=True):
        rel = [float(p.relevant) for p in old.passages]
        u = [1 - p.abstain_prob["sim"] for p in old.passages]
        best, p = best_by_enumeration(rel, u, 3)
        assert [q.doc_id for q in new.passages] == [old.passages[i].doc_id for i in best]
        changed = best != list(range(len(old.passages)))
        assert new.outcomes == ({} if changed else old.outcomes)
        assert new.extra["ordered_by"] == {
            "ordering": "theta",
            "k": 3,
            "judge": "sim",
            "utility": "abstention",
            "weights_sha256": UDCGTheta.from_pretrained(weights).card_["weights_sha256"],
            "card_sha256": UDCGTheta.from_pretrained(weights).card_["card_sha256"],
        }
        after.append(p)
        before.append(
            expit(
                INTERCEPT
                + sum(
                    ALPHA[i] * rel[i] * u[i] + BETA[i] * (1 - rel[i]) * u[i]
                    for i in range(min(3, len(rel)))
                )
            )
        )
    line = done.stdout.strip()
    assert line.startswith("contexts: 8 reordered by theta (k=3)")
    assert f"{np.mean(before):.4f} -> {np.mean(after):.4f}" in line


def test_heuristic_orderings_and_k(tmp_path: Path, weights: Path, capsys) -> None:
    contexts = simulate_contexts(2, 5, per_query=1, seed=3)
    data = tmp_path / "c.jsonl"
    write_contexts(data, contexts)
    for ordering, k, expected in [
        ("ends", "3", [0, 2, 1]),
        ("reversed", "2", [1, 0]),
        ("retriever", "3", [0, 1, 2]),
    ]:
        out = tmp_path / f"{ordering}.jsonl"
        args = [
            str(data),
            "-o",
            str(out),
            "--weights",
            str(weights),
            "--ordering",
            ordering,
            "-k",
            k,
        ]
        assert main(args) == 0
        for old, new in zip(contexts, read_contexts(out), strict=True):
            assert [p.doc_id for p in new.passages] == [old.passages[i].doc_id for i in expected]
    out = tmp_path / "gold.jsonl"
    assert (
        main([str(data), "-o", str(out), "--weights", str(weights), "--ordering", "gold_first"])
        == 0
    )
    for old, new in zip(contexts, read_contexts(out), strict=True):
        gold = [p.doc_id for p in old.passages if p.relevant]
        other = [p.doc_id for p in old.passages if not p.relevant]
        assert [p.doc_id for p in new.passages] == (gold + other)[:3]
    capsys.readouterr()


def write_trec(tmp_path: Path, rng: np.random.Generator):
    """A run whose queries are not sorted and whose file order is not the rank order."""
    run, qrels, utilities, truth = [], [], [], {}
    for qid in ("q9", "q1", "q5"):
        docs = [f"{qid}-d{i}" for i in range(6)]
        scores = np.sort(rng.random(6))[::-1] * 10
        rel = (rng.random(6) < 0.5).astype(float)
        u = rng.random(6)
        truth[qid] = (docs, rel, u)
        for i in rng.permutation(6):
            run.append(f"{qid} Q0 {docs[i]} {i + 1} {scores[i]:.6f} bm25\n")
            qrels.append(f"{qid} 0 {docs[i]} {2 if rel[i] else 0}\n")
            utilities.append(f"{qid}\t{docs[i]}\t{float(1 - u[i])!r}\n")
    paths = {name: tmp_path / f"{name}.txt" for name in ("run", "qrels", "u")}
    for name, lines in zip(paths, (run, qrels, utilities), strict=True):
        paths[name].write_text("".join(lines))
    return paths, truth


def test_trec_mode_matches_enumeration(tmp_path: Path, weights: Path) -> None:
    paths, truth = write_trec(tmp_path, np.random.default_rng(5))
    out = tmp_path / "out.run"
    done = udcg(
        "--run",
        str(paths["run"]),
        "--qrels",
        str(paths["qrels"]),
        "--utilities",
        str(paths["u"]),
        "--weights",
        str(weights),
        "-o",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in out.read_text().splitlines()]
    assert list(dict.fromkeys(r[0] for r in rows)) == ["q9", "q1", "q5"]
    for qid, (docs, rel, u) in truth.items():
        mine = [r for r in rows if r[0] == qid]
        best, _ = best_by_enumeration(rel, u, 3)
        expected = [docs[i] for i in best] + [d for i, d in enumerate(docs) if i not in best]
        assert [r[2] for r in mine] == expected
        assert [int(r[3]) for r in mine] == list(range(1, 7))
        scores = [float(r[4]) for r in mine]
        assert all(a > b for a, b in itertools.pairwise(scores))
    assert done.stdout.startswith("queries: 3 reordered by theta (k=3)")


def run_error(capsys, args: list[str]) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err and err.startswith("udcg order: error:")
    return err


def test_errors_are_one_line(tmp_path: Path, weights: Path, capsys) -> None:
    paths, _ = write_trec(tmp_path, np.random.default_rng(1))
    lines = paths["u"].read_text().splitlines(keepends=True)
    paths["u"].write_text("".join(lines[1:]))  # the first document loses its utility
    trec = ["--run", str(paths["run"]), "--qrels", str(paths["qrels"]), "--weights", str(weights)]
    missing = lines[0].split()[1]
    err = run_error(capsys, [*trec, "--utilities", str(paths["u"]), "-o", str(tmp_path / "o")])
    assert missing in err and "no utility" in err

    data = tmp_path / "c.jsonl"
    write_contexts(data, simulate_contexts(1, 4, per_query=1))
    err = run_error(
        capsys, [str(data), "-o", str(tmp_path / "o"), "--weights", str(weights), "--k", "4"]
    )
    assert "k=3" in err
    other = save_weights(tmp_path / "other", utility="answer_likelihood")
    err = run_error(capsys, [str(data), "-o", str(tmp_path / "o"), "--weights", str(other)])
    assert "answer_likelihood" in err
    err = run_error(
        capsys,
        [str(data), "-o", str(tmp_path / "o"), "--weights", str(weights), "--judge-key", "nobody"],
    )
    assert "nobody" in err
    with pytest.raises(SystemExit) as exit_:  # a usage error: argparse's usage and one line
        main([str(data), "--weights", str(weights)])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "udcg order: error: the following arguments are required: -o/--out"
    )
    assert not (tmp_path / "o").exists()


def test_trec_mode_refuses_a_pair_given_twice(tmp_path: Path, weights: Path, capsys) -> None:
    """A qrels judging one (query, document) twice, or a run ranking one document twice, is
    refused at its line, as udcg trec refuses them (the last line won, or the document was
    placed twice in the output)."""
    paths, _ = write_trec(tmp_path, np.random.default_rng(2))
    args = ["--utilities", str(paths["u"]), "--weights", str(weights), "-o", str(tmp_path / "o")]
    first = paths["qrels"].read_text().splitlines(keepends=True)[0]
    qid, _, doc, grade = first.split()
    again = tmp_path / "qrels_again"
    again.write_text(paths["qrels"].read_text() + f"{qid} 0 {doc} {1 - int(grade > '0')}\n")
    err = run_error(capsys, ["--run", str(paths["run"]), "--qrels", str(again), *args])
    n = len(again.read_text().splitlines())
    assert f"qrels_again:{n}: field 'doc_id': duplicate document {doc!r} for query {qid!r}" in err
    q, _, d = paths["run"].read_text().split()[:3]
    twice = tmp_path / "run_twice"
    twice.write_text(paths["run"].read_text() + f"{q} Q0 {d} 7 0.5 bm25\n")
    err = run_error(capsys, ["--run", str(twice), "--qrels", str(paths["qrels"]), *args])
    assert f"run_twice:19: field 'doc_id': duplicate document {d!r} for query {q!r}" in err
    assert not (tmp_path / "o").exists()


def test_output_is_json_lines(tmp_path: Path, weights: Path, capsys) -> None:
    data = tmp_path / "c.jsonl"
    write_contexts(data, simulate_contexts(1, 4, per_query=2))
    assert main([str(data), "-o", "-", "--weights", str(weights)]) == 0
    captured = capsys.readouterr()
    assert [json.loads(line)["qid"] for line in captured.out.splitlines()] == ["q0", "q0"]
    assert captured.err.startswith("contexts: 2 reordered")


def test_trec_mode_checks_the_judge_of_annotated_utilities_and_the_qrels(
    tmp_path: Path, weights: Path, capsys
) -> None:
    """An annotated contexts file names its judge: weights of another are refused (or allowed
    on purpose); qrels judging none of the run's queries are refused, some missing noted."""
    paths, _ = write_trec(tmp_path, np.random.default_rng(2))
    contexts = []
    for line in paths["u"].read_text().splitlines():
        qid, doc, p = line.split("\t")
        contexts.append(
            {"qid": qid, "passages": [{"doc_id": doc, "abstain_prob": {"llama": float(p)}}]}
        )
    annotated = tmp_path / "u.jsonl"
    annotated.write_text("".join(json.dumps(c) + "\n" for c in contexts))
    trec = ["--run", str(paths["run"]), "--qrels", str(paths["qrels"]), "--weights", str(weights)]
    out = ["-o", str(tmp_path / "o.run")]
    err = run_error(capsys, [*trec, "--utilities", str(annotated), *out])
    assert "field 'judge': the weights were fitted with judge 'sim', not 'llama'" in err
    assert main([*trec, "--utilities", str(annotated), *out, "--allow-mismatch", "judge"]) == 0
    assert "(allowed on purpose)" in capsys.readouterr().err
    lines = paths["qrels"].read_text().splitlines(keepends=True)
    other = tmp_path / "other.qrels"
    other.write_text("".join(x.replace("q", "Q", 1) for x in lines))
    base = ["--run", str(paths["run"]), "--weights", str(weights), "--utilities", str(paths["u"])]
    err = run_error(capsys, [*base, "--qrels", str(other), *out])
    assert "judges none of the run's 3 queries (run query 'q9')" in err
    other.write_text("".join(x for x in lines if not x.startswith("q9")))
    assert main([*base, "--qrels", str(other), *out]) == 0
    assert "1 of 3 run queries have no qrels (first 'q9')" in capsys.readouterr().err


def test_allowed_mismatches_are_recorded_in_the_ordered_contexts(tmp_path: Path) -> None:
    data, out = tmp_path / "c.jsonl", tmp_path / "o.jsonl"
    write_contexts(data, simulate_contexts(3, 3, per_query=1))
    other = save_weights(tmp_path / "other", judge_model="llama")
    args = [str(data), "-o", str(out), "--weights", str(other), "--judge-key", "sim"]
    assert main(args) == 2
    assert main([*args, "--allow-mismatch", "judge"]) == 0
    for ctx in read_contexts(out):
        (note,) = ctx.extra["weights_overrides"]
        assert "judge 'llama', not 'sim'" in note
    # ordered again with weights of its judge: no earlier ordering's override stays
    again = tmp_path / "again.jsonl"
    own = save_weights(tmp_path / "own", judge_model="sim")
    assert main([str(out), "-o", str(again), "--weights", str(own)]) == 0
    assert all("weights_overrides" not in ctx.extra for ctx in read_contexts(again))
