"""``udcg annotate --engine ray`` as a user runs it (a subprocess that starts its own local Ray
instance): the output file is byte-identical to the single-process run's; without the ``ray``
extra (also ``udcg benchmark engine=ray``), and with a Ray flag but no ``--engine ray``, the
command is one line and exit 2."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from udcg.cli.annotate import main
from udcg.io.contexts.jsonl import Context, Passage, write_contexts


def _inputs(folder: Path) -> tuple[Path, Path]:
    """A contexts file (6 contexts of 3 passages) and the precomputed judge file for it."""
    rng = random.Random(1)
    contexts, rows = [], []
    for q in range(6):
        question = f"question {q}?"
        passages = [Passage(doc_id=f"d{q}-{j}", text=f"passage {q} {j}") for j in range(3)]
        contexts.append(Context(f"q{q}", passages, question=question, answers=[f"answer {q}"]))
        for p in passages:
            row = {"question": question, "passage": p.text, "abstain_prob": rng.random()}
            rows.append({**row, "answer_prob": rng.random()})
    write_contexts(folder / "in.jsonl", contexts)
    (folder / "judge.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder / "in.jsonl", folder / "judge.jsonl"


def _annotate(folder: Path, out: str, *extra: str, code: str = "") -> subprocess.CompletedProcess:
    """``python -c CODE; udcg annotate ...`` in ``folder``, cache in ``folder``."""
    argv = [
        "annotate", "in.jsonl", "-o", out, "--judge", "precomputed:judge.jsonl",
        "--steps", "abstain,answer_likelihood,relevance", "--cache", f"{out}.sqlite", *extra,
    ]  # fmt: skip
    program = f"{code}import sys; from udcg.cli.main import main; sys.exit(main({argv!r}))"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_DEDUP_LOGS": "0"}
    return subprocess.run(
        [sys.executable, "-c", program],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_ray_output_is_byte_identical_to_the_single_process_output(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    _inputs(tmp_path)
    local = _annotate(tmp_path, "local.jsonl")
    assert local.returncode == 0, local.stderr
    ray = _annotate(tmp_path, "ray.jsonl", "--engine", "ray", "--ray-workers", "2")
    assert ray.returncode == 0, ray.stderr
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()
    assert "cache hits 0, misses 36" in ray.stdout  # 18 abstention + 18 answer pairs
    assert ray.stdout.replace("ray.jsonl", "local.jsonl") == local.stdout


def test_without_ray_the_command_names_the_extra(tmp_path: Path) -> None:
    _inputs(tmp_path)
    done = _annotate(
        tmp_path, "out.jsonl", "--engine", "ray", code="import sys; sys.modules['ray'] = None; "
    )
    assert (done.returncode, done.stderr) == (
        2,
        "udcg annotate: error: needs the 'ray' extra: pip install 'udcg[ray]'\n",
    )
    assert not (tmp_path / "out.jsonl").exists()


def test_without_ray_the_benchmark_names_the_extra_as_annotate_does(tmp_path: Path) -> None:
    program = (
        "import sys; sys.modules['ray'] = None; from udcg.cli.main import main; "
        f"sys.exit(main(['benchmark', 'engine=ray', 'hydra.run.dir={tmp_path / 'run'}']))"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert (done.returncode, done.stderr) == (
        2,
        "udcg benchmark: error: needs the 'ray' extra: pip install 'udcg[ray]'\n",
    )


def test_a_ray_flag_needs_the_ray_engine(tmp_path: Path, capsys) -> None:
    inp, judge = _inputs(tmp_path)
    argv = [str(inp), "-o", str(tmp_path / "out.jsonl"), "--judge", f"precomputed:{judge}"]
    assert main([*argv, "--ray-workers", "2", "--ray-servers", "http://a/v1"]) == 2
    assert capsys.readouterr().err == (
        "udcg annotate: error: --ray-workers, --ray-servers needs --engine ray\n"
    )
    assert main([*argv, "--engine", "ray", "--ray-workers", "0"]) == 2
    assert "field '--ray-workers': must be a positive integer" in capsys.readouterr().err
