"""``udcg tables``: UDCG's Table 1 and Table 2 from the command line, on a generated NQ-open
file with the embedded judge; the rerun is answered from the caches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from udcg.cli.tables import main

WORDS = ["river", "castle", "violin", "harbour", "glacier", "orchard", "lantern", "meadow"]


def _nq_open(path: Path, n: int) -> Path:
    """NQ-open oracle lines: question i's gold passage holds 'answer i', three more passages
    on its topic do not."""
    with path.open("w") as handle:
        for i in range(n):
            topic = f"{WORDS[i % 8]} {WORDS[(i + 3) % 8]}"
            ctxs = [
                {"title": topic, "text": f"The {topic} story ends with answer{i}.", "isgold": True}
            ]
            ctxs += [
                {"title": topic, "text": f"The {topic} story, part {j}.", "isgold": False}
                for j in range(3)
            ]
            line = {"question": f"Which {topic} story?", "answers": [f"answer{i}"], "ctxs": ctxs}
            handle.write(json.dumps(line) + "\n")
    return path


@pytest.mark.parametrize("study", ["selection", "distractors"])
def test_tables_writes_every_condition_and_reruns_from_the_caches(
    tmp_path: Path, study: str, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _nq_open(tmp_path / "nq.jsonl", 5)
    out, cache = tmp_path / "out", tmp_path / "stages"
    argv = [study, "--data", str(data), "--limit", "4", "-k", "2", "--candidates", "3"]
    argv += ["-o", str(out), "--cache-dir", str(cache), "--n-bootstrap", "50"]
    assert main(argv) == 0
    first = json.loads((out / f"{study}.json").read_text())
    assert first["n_questions"] == 4 and first["k"] == 2
    assert first["command"] == "udcg tables " + " ".join(argv)
    expected = {"bm25", "select_by=relevance", "select_by=utility", "select_by=erag"}
    if study == "distractors":
        expected = {"weak", "hard"}
    assert set(first["conditions"]) == expected
    assert first["judge_cache"]["misses"] > 0
    markdown = (out / f"{study}.md").read_text()
    assert markdown.startswith(f"    {first['command']}\n\n|")
    assert "4 questions" in capsys.readouterr().out

    assert main(argv) == 0
    again = json.loads((out / f"{study}.json").read_text())
    assert again["judge_cache"]["misses"] == 0
    assert again["conditions"] == first["conditions"]


def test_tables_closes_the_judge_it_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from udcg.pipeline import benchmark

    closed: list[str] = []

    def connect(settings):
        judge = connect_judge(settings)
        close = judge.close
        judge.close = lambda: (closed.append(judge.name), close())
        return judge

    connect_judge = benchmark.connect_judge
    monkeypatch.setattr(benchmark, "connect_judge", connect)
    data = _nq_open(tmp_path / "nq.jsonl", 2)
    argv = ["distractors", "--data", str(data), "--limit", "2", "-k", "1", "--no-erag"]
    argv += ["-o", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "stages")]
    assert main([*argv, "--n-bootstrap", "10"]) == 0
    assert closed == ["smollm2-135m"]


def test_tables_names_a_missing_data_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["selection", "--data", str(tmp_path / "none.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("udcg tables: error: ") and "none.jsonl: no such file" in err
    assert len(err.splitlines()) == 1


def test_a_second_process_on_the_same_output_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], another_writer
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with another_writer(out / "selection.json"):
        data = _nq_open(tmp_path / "nq.jsonl", 2)
        argv = ["selection", "--data", str(data), "--limit", "2", "-o", str(out)]
        assert main([*argv, "--cache-dir", str(tmp_path / "stages")]) == 2
        err = capsys.readouterr().err
        assert "another process is writing this tables output" in err
        assert len(err.strip().splitlines()) == 1
        assert not (out / "selection.md").exists()
