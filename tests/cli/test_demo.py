"""``udcg demo``: the rebuilt set records what produced it, as ``udcg annotate``'s output does,
and a second writer on its output is refused."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from udcg.cli import demo
from udcg.demo_data.demo import SOURCE, STEPS
from udcg.io.contexts.jsonl import read_contexts
from udcg.judge import Judge
from udcg.labels.provenance import read_manifest


class Fixed(Judge):
    """Abstains less on longer passages, answers 'Paris'."""

    name, fingerprint = "fixed", "fixed-v3"

    def abstain_prob(self, questions, passages, mode="first_token"):
        return np.array([1.0 / (1.0 + len(p)) for p in passages])

    def answer_prob(self, questions, passages, answers):
        return np.full(len(questions), 0.5)

    def generate(self, prompts, max_new_tokens=64):
        return ["Paris"] * len(prompts)


@pytest.fixture
def small_source(tmp_path: Path) -> Path:
    data = json.loads(SOURCE.read_text(encoding="utf-8"))
    path = tmp_path / "source.json"
    path.write_text(json.dumps({**data, "questions": data["questions"][:3]}), encoding="utf-8")
    return path


def test_the_demo_output_has_a_manifest_of_its_judge_and_input(
    tmp_path: Path, small_source: Path, monkeypatch, capsys
) -> None:
    monkeypatch.setattr("udcg.judge.load_judge", lambda spec, **options: Fixed())
    out = tmp_path / "demo.jsonl.gz"
    assert demo.main(["--source", str(small_source), "-o", str(out), "--judge", "x"]) == 0
    manifest = read_manifest(out)
    contexts = list(read_contexts(out))
    assert (manifest["judge"], manifest["judge_fingerprint"]) == ("fixed", "fixed-v3")
    assert manifest["steps"] == list(STEPS) and manifest["contexts"] == len(contexts) > 0
    assert manifest["output_sha256"] == hashlib.sha256(gzip.open(out).read()).hexdigest()
    passage = contexts[0].passages[0]
    assert passage.abstain_prob == {"fixed": pytest.approx(1.0 / (1.0 + len(passage.text)))}
    assert f"wrote {len(contexts)} contexts to {out}" in capsys.readouterr().out


def test_a_second_writer_on_the_demo_output_is_refused(
    tmp_path: Path, small_source: Path, monkeypatch, capsys, another_writer
) -> None:
    monkeypatch.setattr("udcg.judge.load_judge", lambda spec, **options: Fixed())
    out = tmp_path / "demo.jsonl"
    with another_writer(out):
        assert demo.main(["--source", str(small_source), "-o", str(out), "--judge", "x"]) == 2
    err = capsys.readouterr().err
    assert "another process is writing this" in err and len(err.splitlines()) == 1, err
    assert not out.exists()
