"""A torch older than the installed transformers supports: transformers turns PyTorch off (a log
line) and then fails deep in a model load; the local judge and the dense retriever say so in
one line instead. Each test runs a fresh interpreter whose package metadata reports torch 2.0.0
(a ``sitecustomize`` on ``PYTHONPATH``), which every transformers 5 release turns off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
OLD = "2.0.0"
SHIM = f"""
import importlib.metadata as metadata
real = metadata.version
metadata.version = lambda name: {OLD!r} if name == "torch" else real(name)
"""
MESSAGE = (
    "needs PyTorch, which transformers {} turns off: the installed torch " + OLD + " is older "
    "than it supports. Upgrade torch, or install an older transformers"
)


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "sitecustomize.py").write_text(SHIM)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run(
        [sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True
    )


def expected(tmp_path: Path, what: str) -> str:
    probe = "import transformers.utils as u; print(u.is_torch_available(), u.__version__)"
    available, version = run(tmp_path, "-c", probe).stdout.split()
    assert available == "False"  # the shim works: this transformers turns torch off
    return f"{what} {MESSAGE.format(version)}"


def test_the_local_judge_refuses_in_one_line(tmp_path: Path) -> None:
    row = {"qid": "q1", "question": "Who?", "answers": ["x"], "passages": [{"text": "Text."}]}
    (tmp_path / "in.jsonl").write_text(json.dumps(row) + "\n")
    done = run(
        tmp_path, "-m", "udcg", "annotate", "in.jsonl", "-o", "out.jsonl", "--steps", "abstain",
        "--cache", "judge.sqlite",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    message = expected(tmp_path, "the judge 'smollm2-135m'")
    assert done.stderr.splitlines()[-1] == f"udcg annotate: error: {message}"
    assert not (tmp_path / "out.jsonl").exists()


def test_the_dense_retriever_refuses_in_one_line(tmp_path: Path) -> None:
    pytest.importorskip("sentence_transformers")
    done = run(tmp_path, str(ROOT / "evaluate.py"), "retriever=dense", "k=3")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    message = expected(tmp_path, "the dense retriever 'embedded'")
    assert done.stderr.splitlines()[-1] == f"evaluate.py: error: {message}"
