"""One judge identity: for every spec form the labels are written, looked up and read under one
key (:func:`udcg.judge.judge_key`), and ``udcg annotate`` and the evaluation pipeline share one
judge cache."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from udcg.cli.annotate import main as annotate_main
from udcg.cli.score import main as score_main
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, Passage, read_contexts, write_contexts
from udcg.judge import judge_key
from udcg.pipeline.benchmark import run_benchmark
from udcg.pipeline.datasets import Dataset
from udcg.pipeline.settings import EvaluateSettings, TrainSettings
from udcg.pipeline.stages import missing_steps
from udcg.pipeline.training import select

SPECS = [
    "smollm2-135m",
    "HuggingFaceTB/SmolLM2-135M-Instruct",
    "openai:Qwen/Qwen2.5-7B@http://127.0.0.1:9/v1",
    "precomputed:runs/llama3.jsonl.gz",
]
QUESTIONS = [
    ("What is the capital of France?", "Paris", "Paris is the capital of France."),
    ("Who wrote Hamlet?", "Shakespeare", "Hamlet is a play by Shakespeare."),
    ("What is the largest planet?", "Jupiter", "Jupiter is the largest planet."),
    ("Which metal is liquid at room temperature?", "Mercury", "Mercury is a liquid metal."),
    ("What is the boiling point of water in Celsius?", "100", "Water boils at 100 degrees."),
    ("Who painted the Mona Lisa?", "Leonardo", "The Mona Lisa is by Leonardo da Vinci."),
]
DISTRACTOR = "The weather was mild that year."


def _contexts(key: str | None = None, outcomes: str | None = None) -> list[Context]:
    """Six contexts of two passages (the gold one first in every other), with abstention
    probabilities under ``key`` and outcomes under ``outcomes`` (default: ``key``)."""
    outcomes = outcomes or key
    out = []
    for i, (question, answer, gold) in enumerate(QUESTIONS):
        texts = [gold, DISTRACTOR] if i % 2 else [DISTRACTOR, gold]
        passages = [
            Passage(
                doc_id=f"d{i}-{j}",
                text=text,
                relevant=text == gold if key else None,
                abstain_prob={key: 0.1 + 0.1 * i + 0.3 * j} if key else {},
            )
            for j, text in enumerate(texts)
        ]
        labels = {outcomes: {"answer": answer, "correct": i % 3 != 0}} if outcomes else {}
        out.append(Context(f"q{i}", passages, question=question, answers=[answer], outcomes=labels))
    return out


def _evaluate(contexts: list[Context], tmp_path: Path, **options: Any) -> dict[str, Any]:
    settings = EvaluateSettings(k=2, n_bootstrap=20, cache_dir=tmp_path / "stages", **options)
    dataset = Dataset("given", [], [], contexts=contexts)
    report, _ = run_benchmark(dataset, None, settings, tmp_path / f"report-{time.monotonic_ns()}")
    return report


@pytest.fixture
def no_judge(monkeypatch) -> None:
    def refuse(spec: str, **options: Any) -> None:
        raise AssertionError(f"judge {spec!r} loaded: its labels were not found")

    monkeypatch.setattr("udcg.judge.load_judge", refuse)


@pytest.mark.parametrize("spec", SPECS)
def test_labels_under_the_key_are_found_by_every_reader(
    spec: str, tmp_path: Path, no_judge, capsys
) -> None:
    key = judge_key(spec)
    contexts = _contexts(key)
    assert missing_steps(contexts, key, "abstention", "string") == []
    report = _evaluate(contexts, tmp_path, judge=spec)  # no judge loaded, nothing missing
    assert report["setup"]["judge"] == key and report["setup"]["judge_cache"] is None
    assert report["setup"]["n_contexts"] == 6
    assert len(select(contexts, 2, TrainSettings(k=2, judge=spec).judge_key).data) == 6
    write_contexts(tmp_path / "labelled.jsonl", contexts)
    assert score_main([str(tmp_path / "labelled.jsonl"), "--judge", spec]) == 0
    assert f"6 contexts, judge {key}, utility abstention" in capsys.readouterr().out


def test_a_judge_name_replaces_the_key(tmp_path: Path, no_judge, capsys) -> None:
    contexts = _contexts("prod-judge")
    spec = "openai:Qwen/Qwen2.5-7B@http://127.0.0.1:9/v1"
    report = _evaluate(contexts, tmp_path, judge=spec, judge_name="prod-judge")
    assert report["setup"]["judge"] == "prod-judge"
    write_contexts(tmp_path / "labelled.jsonl", contexts)
    args = [str(tmp_path / "labelled.jsonl"), "--judge", spec, "--judge-key", "prod-judge"]
    assert score_main(args) == 0


def _probabilities(path: Path) -> None:
    rows = [
        {"question": q, "passage": text, "abstain_prob": 0.2 if text == gold else 0.7}
        for q, _, gold in QUESTIONS
        for text in (gold, DISTRACTOR)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.mark.parametrize(
    ("file", "name"), [("llama3.jsonl", None), ("probs.jsonl", "llama3")], ids=["stem", "name"]
)
def test_precomputed_judge_annotate_then_evaluate(
    file: str, name: str | None, tmp_path: Path, capsys, monkeypatch
) -> None:
    spec = f"precomputed:{tmp_path / file}"
    _probabilities(tmp_path / file)
    unlabelled = _contexts(outcomes="llama3")  # outcomes from elsewhere, under the judge's key
    write_contexts(tmp_path / "in.jsonl", unlabelled)
    named = ["--judge-key", name] if name else []
    args = [str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl"), "--judge", spec, *named]
    assert annotate_main([*args, "--steps", "abstain", "relevance"]) == 0
    assert "cache hits 0, misses 12" in capsys.readouterr().out
    labelled = list(read_contexts(tmp_path / "out.jsonl"))
    # evaluate finds every label: it loads no judge and reports no missing outcome
    with monkeypatch.context() as patch:
        patch.setattr("udcg.judge.load_judge", lambda spec, **options: pytest.fail("loaded"))
        report = _evaluate(labelled, tmp_path, judge=spec, judge_name=name)
    assert report["setup"]["judge"] == "llama3"
    # on the unlabelled input it annotates, from the cache that annotate filled
    report = _evaluate(unlabelled, tmp_path, judge=spec, judge_name=name)
    assert report["setup"]["judge_cache"] == {"hits": 12, "misses": 0, "writes": 0}


def test_annotate_then_evaluate_makes_no_new_judge_calls(
    tmp_path: Path, shared_judge_cache: Path, capsys
) -> None:
    """The embedded judge end to end: utilities and answers are asked once, by annotate."""
    unlabelled = _contexts()
    write_contexts(tmp_path / "in.jsonl", unlabelled)
    args = [str(tmp_path / "in.jsonl"), str(tmp_path / "out.jsonl"), "--max-new-tokens", "4"]
    assert annotate_main(args) == 0
    assert "misses 18" in capsys.readouterr().out  # 12 pairs + 6 answers
    report = _evaluate(unlabelled, tmp_path, judge="smollm2-135m", max_new_tokens=4)
    assert report["setup"]["judge_cache"] == {"hits": 18, "misses": 0, "writes": 0}
    assert shared_judge_cache.is_file()


def test_evaluate_stops_at_a_server_that_does_not_answer(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    start = time.monotonic()
    with pytest.raises(UDCGInputError) as err:
        _evaluate(_contexts(), tmp_path, judge=f"openai:m@{url}")
    assert time.monotonic() - start < 10
    assert str(err.value) == (
        f"field 'judge': the server at {url} does not answer (connection refused)"
    )


def test_evaluate_options_are_checked_before_any_work() -> None:
    with pytest.raises(UDCGInputError, match="not an option of the embedded judge") as err:
        EvaluateSettings(judge_options={"timeout": 5})
    assert err.value.field == "judge_options.timeout"
    with pytest.raises(UDCGInputError, match="expected openai:MODEL@BASE_URL"):
        EvaluateSettings(judge="openai:m")
    with pytest.raises(UDCGInputError) as err:
        TrainSettings(judge_name="")
    assert err.value.field == "judge_name"
