"""A file holding one context twice (two label files concatenated) is refused wherever a mean
or a fit over its contexts would count it twice: ``udcg score``, ``qcare score``, ``qcare
rankings``, ``weights calibrate``, ``udcg.score_contexts`` and ``udcg.fit_theta``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import udcg
from udcg.cli.qcare import main as qcare_main
from udcg.cli.weights import main as weights_main
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import write_contexts
from udcg.theta import UDCGTheta
from udcg.theta.simulate import simulate_contexts

REPEATED = "a second context with the same qid, run and passages"


def _coverage(path: Path, twice: bool) -> Path:
    rows = [
        {"qid": "q1", "run": "a", "question": "x?", "subqueries": ["s1", "s2"], "passages": [
            {"doc_id": "d1", "text": "t1", "covers": [True, False]},
            {"doc_id": "d2", "text": "t2", "covers": [False, False]}]},
        {"qid": "q2", "run": "a", "question": "y?", "subqueries": ["s1"], "passages": [
            {"doc_id": "d3", "text": "t3", "covers": [True]},
            {"doc_id": "d4", "text": "t4", "covers": [True]}]},
    ]  # fmt: skip
    if twice:  # the first context labelled again, appended
        again = json.loads(json.dumps(rows[0]))
        again["passages"][1]["covers"] = [True, True]
        rows.append(again)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.parametrize("command", ["score", "rankings"])
def test_qcare_refuses_a_context_held_twice(tmp_path: Path, command: str, capsys) -> None:
    once, twice = _coverage(tmp_path / "once.jsonl", False), _coverage(tmp_path / "b.jsonl", True)
    assert qcare_main([command, str(once), *([str(once)] if command == "rankings" else [])]) in (
        0,
        2,  # rankings needs more queries than two: whatever it says, not the repeat
    )
    assert REPEATED not in capsys.readouterr().err
    args = [command, str(twice), *([str(once)] if command == "rankings" else [])]
    assert qcare_main(args) == 2
    err = capsys.readouterr().err
    assert REPEATED in err and f"{twice}:3:" in err and "\n" not in err.strip()


def test_the_library_and_calibrate_refuse_a_context_held_twice(tmp_path: Path, capsys) -> None:
    contexts = simulate_contexts(30, 3, per_query=1, seed=3)
    twice = tmp_path / "twice.jsonl"
    write_contexts(twice, [*contexts, contexts[4]])
    for call in (udcg.score_contexts, lambda p: udcg.fit_theta(p, 3, val_fraction=0.0)):
        with pytest.raises(UDCGInputError, match=REPEATED):
            call(twice)
    model = UDCGTheta(k=3)
    model.alpha_, model.beta_, model.intercept_ = np.ones(3), -np.ones(3), 0.0
    folder = model.save_pretrained(tmp_path / "w", card={"judge_model": "sim"})
    assert weights_main(["calibrate", str(folder), str(twice), "-o", str(tmp_path / "c")]) == 2
    assert REPEATED in capsys.readouterr().err


def test_contexts_in_memory_and_the_pipelines_refuse_a_context_held_twice(tmp_path: Path) -> None:
    """The documented flow ``udcg.label`` then ``score_contexts`` or ``fit_theta`` holds its
    contexts in memory; ``train.py`` and ``evaluate.py`` read a file through their own loaders."""
    import subprocess
    import sys

    from udcg.pipeline.datasets import contexts_jsonl

    contexts = simulate_contexts(30, 3, per_query=1, seed=3)
    twice = [*contexts, contexts[4]]
    for call in (udcg.score_contexts, lambda c: udcg.fit_theta(c, 3, val_fraction=0.0)):
        with pytest.raises(UDCGInputError, match=REPEATED):
            call(twice)
    path = tmp_path / "twice.jsonl"
    write_contexts(path, twice)
    with pytest.raises(UDCGInputError, match=REPEATED):
        contexts_jsonl(path)
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "train.py", "data=jsonl", f"data.path={path}", "judge=sim", "k=3",
         f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=repo, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2 and REPEATED in done.stderr, done.stderr
