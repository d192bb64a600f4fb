"""A sharded annotation whose shard is killed with SIGKILL midway: rerun, merge, same bytes.

The judge is a deterministic stand-in that takes real time per call (run by a small driver
script in a subprocess, behind the on-disk cache), so the kill lands mid-run.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from udcg.io.contexts.jsonl import Context, Passage, write_contexts
from udcg.labels.annotate import annotate
from udcg.labels.shards import merge_shards, shard_of
from udcg.labels.stream import partial_path

DRIVER = '''
"""udcg annotate with a slow deterministic judge; logs every pair it computes."""
import hashlib, os, sys, time

import numpy as np

from udcg.judge.base import Judge


class SlowJudge(Judge):
    name = "slow"
    fingerprint = "slow-v1"
    delay = float(os.environ.get("SLOW_DELAY", "0"))

    def abstain_prob(self, questions, passages, mode="first_token"):
        out = []
        for q, p in zip(questions, passages, strict=True):
            time.sleep(self.delay)
            digest = hashlib.blake2b(f"{q}|{p}".encode(), digest_size=8).digest()
            out.append(int.from_bytes(digest, "big") / 2**64)
            if "SLOW_LOG" in os.environ:
                with open(os.environ["SLOW_LOG"], "a") as log:
                    log.write(f"{q}|{p}\\n")
        return np.array(out)

    def yes_prob(self, prompts):
        raise NotImplementedError

    def generate(self, prompts, max_new_tokens=64):
        raise NotImplementedError


if __name__ == "__main__":
    import udcg.cli.annotate as cli
    from udcg.judge.cached import CachedJudge

    cli.open_cli_judge = lambda args: CachedJudge(SlowJudge(), args.cache, chunk_size=2)
    sys.exit(cli.main(sys.argv[1:]))
'''
SHARDS = 3


def _contexts() -> list[Context]:
    return [
        Context(
            f"q{i}",
            [Passage(doc_id=f"d{j}", text=f"passage {i}-{j}") for j in range(3)],
            question=f"question {i}?",
        )
        for i in range(18)
    ]


def _run(driver: Path, src: Path, out: Path, shard: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "SLOW_DELAY": "0.04", "SLOW_LOG": str(log), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, str(driver), str(src), "-o", str(out), "--steps", "abstain"]
    command += ["--chunk", "2", "--shard", f"{shard}/{SHARDS}"]
    command += ["--cache", str(out.parent / f"cache-{shard}.sqlite")]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_killed_shard_resumes_and_merges_to_the_uninterrupted_bytes(tmp_path: Path) -> None:
    driver = tmp_path / "slow_driver.py"
    driver.write_text(DRIVER)
    spec = importlib.util.spec_from_file_location("slow_driver", driver)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    contexts = _contexts()
    src = tmp_path / "in.jsonl"
    write_contexts(src, contexts)
    reference = tmp_path / "whole.jsonl"  # one uninterrupted, unsharded run, in process
    write_contexts(reference, annotate(contexts, module.SlowJudge(), ["abstain"])[0])

    sizes = {i: sum(shard_of(c.qid, SHARDS) == i for c in contexts) for i in (1, 2, 3)}
    victim = max(sizes, key=sizes.get)
    parts = [tmp_path / f"part-{i}-of-{SHARDS}.jsonl" for i in (1, 2, 3)]
    logs = [tmp_path / f"log-{i}.txt" for i in (1, 2, 3)]
    runs = [_run(driver, src, parts[i - 1], i, logs[i - 1]) for i in (1, 2, 3)]
    killed, partial = runs[victim - 1], partial_path(parts[victim - 1])
    deadline = time.monotonic() + 60
    while not (partial.exists() and partial.read_bytes().count(b"\n") >= 1):
        assert killed.poll() is None and time.monotonic() < deadline, "finished before the kill"
        time.sleep(0.01)
    killed.send_signal(signal.SIGKILL)
    assert killed.wait() == -signal.SIGKILL
    for i, run in enumerate(runs, start=1):
        if i != victim:
            assert run.wait(60) == 0, run.stderr.read()
    assert not parts[victim - 1].exists()
    written = partial.read_bytes().count(b"\n")
    before = logs[victim - 1].read_text().splitlines()

    logs[victim - 1].rename(tmp_path / "log-killed.txt")
    rerun = _run(driver, src, parts[victim - 1], victim, logs[victim - 1])
    stdout, stderr = rerun.communicate(timeout=60)
    assert rerun.returncode == 0, stderr
    assert f"resumed after {written} contexts already written" in stdout
    after = logs[victim - 1].read_text().splitlines() if logs[victim - 1].exists() else []
    # a finished call is never repeated: at most the batch in flight (2 pairs) is redone
    assert len(set(before) & set(after)) <= 2
    assert len(set(before) | set(after)) == 3 * sizes[victim]

    merged = tmp_path / "merged.jsonl"
    assert merge_shards(src, parts, merged) == len(contexts)
    assert merged.read_bytes() == reference.read_bytes()
