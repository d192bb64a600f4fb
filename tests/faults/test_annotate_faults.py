"""Faults around ``udcg annotate`` and ``udcg merge-shards``: two writers on one output, a kill,
resuming with another judge / other steps / an edited input, inputs from pipes, shards from
another judge, other steps or an edited input, edited shards, outputs that name an input."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from udcg.cli.annotate import main as annotate_main
from udcg.cli.main import main as udcg_main
from udcg.io.contexts.jsonl import Context, Passage, write_contexts
from udcg.labels.shards import shard_of
from udcg.labels.stream import partial_path

DRIVER = '''
"""udcg annotate with a slow deterministic judge (name, fingerprint and delay from the env)."""
import hashlib, os, sys, time

import numpy as np

from udcg.judge.base import Judge


class SlowJudge(Judge):
    name = os.environ.get("SLOW_NAME", "slow")
    fingerprint = os.environ.get("SLOW_FINGERPRINT", "slow-v1")
    delay = float(os.environ.get("SLOW_DELAY", "0"))

    def batch_settings(self, operations=None):  # a local model's: values move with the batch
        return {"batch_size": int(os.environ["SLOW_BATCH"])} if "SLOW_BATCH" in os.environ else {}

    def abstain_prob(self, questions, passages, mode="first_token"):
        out = []
        for q, p in zip(questions, passages, strict=True):
            time.sleep(self.delay)
            digest = hashlib.blake2b(f"{q}|{p}".encode(), digest_size=8).digest()
            out.append(int.from_bytes(digest, "big") / 2**64)
        return np.array(out)

    def yes_prob(self, prompts):
        raise NotImplementedError

    def generate(self, prompts, max_new_tokens=64):
        raise NotImplementedError


if __name__ == "__main__":
    import udcg.cli.annotate as cli

    def open_judge(args):
        if os.environ.get("SLOW_LOADED"):  # a file that counts the judges loaded
            with open(os.environ["SLOW_LOADED"], "a") as mark:
                mark.write("loaded")
        return type("Cached", (), {
            "__getattr__": lambda self, a: getattr(SlowJudge(), a),
            "cache": type("Counts", (), {"hits": 0, "misses": 0})(),
        })()

    cli.open_cli_judge = open_judge
    sys.exit(cli.main(sys.argv[1:]))
'''


def manifest_path(output: Path) -> Path:
    """The manifest udcg writes beside a finished output."""
    return Path(f"{output}.manifest.json")


def _contexts(n: int = 18) -> list[Context]:
    return [
        Context(
            f"q{i}",
            [Passage(doc_id=f"d{j}", text=f"passage {i}-{j}") for j in range(3)],
            question=f"question {i}?",
            answers=[f"{i}-1"],
        )
        for i in range(n)
    ]


def _driver(tmp_path: Path) -> Path:
    driver = tmp_path / "slow_driver.py"
    driver.write_text(DRIVER)
    return driver


def _start(driver: Path, src: Path, out: Path, *extra: str, **env: str) -> subprocess.Popen:
    """``udcg annotate SRC -o OUT --steps abstain --chunk 2`` with the slow judge, in a process."""
    command = [sys.executable, str(driver), str(src), "-o", str(out), "--chunk", "2"]
    command += extra if "--steps" in extra else ["--steps", "abstain", *extra]
    environ = {**os.environ, "HF_HUB_OFFLINE": "1", "SLOW_DELAY": "0"} | env
    return subprocess.Popen(
        command, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _run(driver: Path, src: Path, out: Path, *extra: str, **env: str) -> tuple[int, str, str]:
    run = _start(driver, src, out, *extra, **env)
    stdout, stderr = run.communicate(timeout=60)
    return run.returncode, stdout, stderr


def _killed_midway(driver: Path, src: Path, out: Path, **env: str) -> subprocess.Popen:
    """A slow run started and, once OUT.partial holds a line, left running."""
    run = _start(driver, src, out, SLOW_DELAY="0.05", **env)
    deadline = time.monotonic() + 60
    partial = partial_path(out)
    while not (partial.exists() and partial.read_bytes().count(b"\n") >= 1):
        assert run.poll() is None and time.monotonic() < deadline, "finished too early"
        time.sleep(0.01)
    return run


def _reference(driver: Path, tmp_path: Path, src: Path) -> bytes:
    out = tmp_path / "reference.jsonl"
    assert _run(driver, src, out)[0] == 0
    return out.read_bytes()


def test_a_second_writer_of_one_output_is_refused_and_a_kill_leaves_no_stuck_lock(
    tmp_path: Path,
) -> None:
    driver, src = _driver(tmp_path), tmp_path / "in.jsonl"
    write_contexts(src, _contexts())
    reference = _reference(driver, tmp_path, src)
    out = tmp_path / "out.jsonl"
    first = _killed_midway(driver, src, out)
    loaded = tmp_path / "loaded.txt"
    code, _, stderr = _run(driver, src, out, SLOW_LOADED=str(loaded))
    assert code == 2 and stderr.count("\n") == 1, stderr
    assert stderr.startswith(f"udcg annotate: error: {out}: another process is writing")
    assert not loaded.exists()  # refused before it loaded a judge
    first.send_signal(signal.SIGKILL)
    assert first.wait() == -signal.SIGKILL
    code, stdout, stderr = _run(driver, src, out)  # the lock died with its holder
    assert code == 0, stderr
    assert "resumed after" in stdout and out.read_bytes() == reference
    assert not Path(f"{out}.lock").exists() and not partial_path(out).exists()
    manifest = json.loads(manifest_path(out).read_text())
    assert manifest["contexts"] == 18 and manifest["judge_fingerprint"] == "slow-v1"


def test_resume_refuses_another_judge_other_steps_and_an_edited_input(tmp_path: Path) -> None:
    driver, src = _driver(tmp_path), tmp_path / "in.jsonl"
    contexts = _contexts()
    write_contexts(src, contexts)
    reference = _reference(driver, tmp_path, src)
    out = tmp_path / "out.jsonl"
    run = _killed_midway(driver, src, out)
    run.send_signal(signal.SIGKILL)
    run.wait()
    partial = partial_path(out).read_bytes()
    edited = tmp_path / "edited.jsonl"
    texts = contexts[0].passages
    write_contexts(edited, [replace(contexts[0], passages=[replace(texts[0], text="new")]),
                            *contexts[1:]])  # fmt: skip
    cases = [
        ((src,), {"SLOW_FINGERPRINT": "slow-v2"},
         'was written with judge_fingerprint "slow-v1", this run has judge_fingerprint "slow-v2"'),
        ((src,), {"SLOW_NAME": "other"},
         'was written with judge "slow", this run has judge "other"'),
        ((src, "--steps", "abstain,relevance"), {},
         'was written with steps ["abstain"], this run has steps ["abstain", "relevance"]'),
        ((src, "--mode", "sequence"), {}, 'mode "first_token", this run has mode "sequence"'),
        ((edited,), {}, f"{partial_path(out)}:1: was annotated from another version of the input "
         f"context at {edited}:1 (query 'q0'): the input was edited"),
    ]  # fmt: skip
    for (source, *extra), env, message in cases:
        code, _, stderr = _run(driver, source, out, *extra, **env)
        assert code == 2 and message in stderr and stderr.count("\n") == 1, stderr
        assert partial_path(out).read_bytes() == partial and not out.exists()
    code, stdout, stderr = _run(driver, src, out)
    assert code == 0 and "resumed after" in stdout, stderr
    assert out.read_bytes() == reference


def test_resume_of_a_judge_whose_values_move_with_the_batch_must_batch_alike(
    tmp_path: Path,
) -> None:
    """A local model's values depend on the rows batched together: the chunk and its batch
    limits are recorded, and a resume with others is refused (its output would match no
    uninterrupted run)."""
    driver, src = _driver(tmp_path), tmp_path / "in.jsonl"
    write_contexts(src, _contexts())
    out = tmp_path / "out.jsonl"
    run = _killed_midway(driver, src, out, SLOW_BATCH="8")
    run.send_signal(signal.SIGKILL)
    run.wait()
    partial = partial_path(out).read_bytes()
    for extra, batch, message in [
        (("--chunk", "1"), "8", 'batching.chunk 2, this run has batching.chunk 1'),
        ((), "4", 'batching.batch_size 8, this run has batching.batch_size 4'),
    ]:  # fmt: skip
        code, _, stderr = _run(driver, src, out, *extra, SLOW_BATCH=batch)
        assert code == 2 and message in stderr and stderr.count("\n") == 1, stderr
        assert partial_path(out).read_bytes() == partial
    code, stdout, stderr = _run(driver, src, out, SLOW_BATCH="8")
    assert code == 0 and "resumed after" in stdout, stderr
    assert json.loads(manifest_path(out).read_text())["batching"] == {"chunk": 2, "batch_size": 8}


def _probs(path: Path, *inputs: list[Context]) -> Path:
    """A precomputed judge file for every (question, passage) pair of ``inputs``."""
    pairs = sorted({(c.question, p.text) for ctxs in inputs for c in ctxs for p in c.passages})
    rows = [
        {"question": q, "passage": t, "abstain_prob": (n + 1) / (len(pairs) + 1)}
        for n, (q, t) in enumerate(pairs)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _pipe_input(tmp_path: Path) -> tuple[list[Context], Path, list[str], bytes]:
    """200 contexts (far more than one pipe buffer), a judge, and the bytes of a file run."""
    contexts = [
        replace(c, passages=[replace(p, text=p.text + " " + "words " * 20) for p in c.passages])
        for c in _contexts(200)
    ]
    src = tmp_path / "in.jsonl"
    write_contexts(src, contexts)
    judge = ["--judge", f"precomputed:{_probs(tmp_path / 'p.jsonl', contexts)}"]
    base = [*judge, "--steps", "abstain,relevance", "--chunk", "16"]
    out = tmp_path / "from-file.jsonl"
    assert annotate_main([str(src), "-o", str(out), *base]) == 0
    return contexts, src, base, out.read_bytes()


def test_annotate_reads_a_process_substitution_once(tmp_path: Path) -> None:
    _, src, base, reference = _pipe_input(tmp_path)
    out = tmp_path / "out.jsonl"
    udcg = f"{sys.executable} -m udcg annotate"
    for producer in (f"cat {src}", f"gzip -c {src}"):
        script = f"{udcg} <({producer}) -o {out} {' '.join(base)} --cache {tmp_path}/c.sqlite"
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "annotated 200 contexts" in done.stdout
        assert out.read_bytes() == reference
        out.unlink()
    bad = f'{udcg} <(printf \'{{"qid": "q"}}\\n\') -o {out} {" ".join(base)}'
    done = subprocess.run(["bash", "-c", bad], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "udcg-annotate-" not in done.stderr
    assert done.stderr.startswith("udcg annotate: error: /dev/fd/"), done.stderr


def test_annotate_reads_a_fifo_once(tmp_path: Path) -> None:
    _, src, base, reference = _pipe_input(tmp_path)
    fifo, out = tmp_path / "contexts.fifo", tmp_path / "out.jsonl"
    os.mkfifo(fifo)

    def feed() -> None:
        try:
            with fifo.open("wb") as pipe:
                pipe.write(src.read_bytes())
        except BrokenPipeError:
            pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    command = [sys.executable, "-m", "udcg", "annotate", str(fifo), "-o", str(out), *base]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    finally:
        if writer.is_alive():  # a reader that opens the FIFO twice waits for a second writer
            with fifo.open("wb"):
                pass
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == reference


def _shards(tmp_path: Path, contexts: list[Context], judge: Path) -> tuple[Path, list[Path]]:
    src = tmp_path / "in.jsonl"
    write_contexts(src, contexts)
    parts = [tmp_path / f"part-{i}-of-3.jsonl" for i in (1, 2, 3)]
    for i, part in enumerate(parts, start=1):
        assert annotate_main([str(src), "-o", str(part), "--judge", f"precomputed:{judge}",
                              "--steps", "abstain", "--shard", f"{i}/3"]) == 0  # fmt: skip
    return src, parts


def _merge(src: Path, out: Path, parts: list[Path], capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = udcg_main(["merge-shards", str(src), *map(str, parts), "-o", str(out)])
    return code, capsys.readouterr().err


def test_merge_refuses_shards_of_another_judge_steps_or_input_and_edited_shards(
    tmp_path: Path, capsys
) -> None:
    contexts = _contexts(30)
    second = [c for c in contexts if shard_of(c.qid, 3) == 2]
    edited_contexts = [
        replace(c, passages=[replace(c.passages[0], text="edited"), *c.passages[1:]])
        if c is second[0]
        else c
        for c in contexts
    ]
    judge = _probs(tmp_path / "p.jsonl", contexts, edited_contexts)
    src, parts = _shards(tmp_path, contexts, judge)
    merged = tmp_path / "merged.jsonl"
    assert _merge(src, merged, parts, capsys)[0] == 0
    merged.unlink()
    good = parts[1].read_bytes(), manifest_path(parts[1]).read_bytes()
    one = ["--steps", "abstain", "--shard", "2/3"]

    def refused(message: str) -> None:
        code, err = _merge(src, merged, parts, capsys)
        assert code == 2 and message in err and err.count("\n") == 1, err
        assert not merged.exists()
        parts[1].write_bytes(good[0])
        manifest_path(parts[1]).write_bytes(good[1])

    other = tmp_path / "other" / "q.jsonl"
    other.parent.mkdir()
    other.write_bytes(judge.read_bytes().replace(b'"abstain_prob": 0.', b'"abstain_prob": 0.0'))
    assert (
        annotate_main([str(src), "-o", str(parts[1]), "--judge", f"precomputed:{other}", *one]) == 0
    )
    refused(f'{parts[1]}: was annotated with judge "q", {parts[0]} with judge "p"')
    steps = ["--steps", "abstain,relevance", "--shard", "2/3"]
    assert (
        annotate_main([str(src), "-o", str(parts[1]), "--judge", f"precomputed:{judge}", *steps])
        == 0
    )
    refused('was annotated with steps ["abstain", "relevance"], ')
    edited_src = tmp_path / "edited-in.jsonl"
    write_contexts(edited_src, edited_contexts)
    assert annotate_main([str(edited_src), "-o", str(parts[1]), "--judge", f"precomputed:{judge}",
                          *one]) == 0  # fmt: skip
    refused(f"{parts[1]}: was annotated from other contexts than shard 2 of 3 of {src}")
    parts[1].write_bytes(good[0].replace(b'"d0"', b'"d9"', 1))  # an edited shard
    refused(f"{parts[1]}: is not the file udcg annotate wrote")
    manifest_path(parts[1]).unlink()
    refused(f"{parts[1]}: no manifest part-2-of-3.jsonl.manifest.json beside it")
    manifest_path(parts[1]).write_bytes(good[1].replace(b'"2/3"', b'"1/3"'))
    refused(f"{parts[1]}: was annotated as shard 1/3 where shard 2/3 belongs")
    assert _merge(src, merged, parts, capsys)[0] == 0
    assert json.loads(manifest_path(merged).read_text())["contexts"] == 30


def test_outputs_that_name_an_input_are_refused(tmp_path: Path, capsys) -> None:
    contexts = _contexts(6)
    judge = _probs(tmp_path / "p.jsonl", contexts)
    src, parts = _shards(tmp_path, contexts, judge)
    before = src.read_bytes()
    code = annotate_main([str(src), "-o", str(src), "--judge", f"precomputed:{judge}",
                          "--steps", "abstain"])  # fmt: skip
    assert code == 2 and "the output names the input IN" in capsys.readouterr().err
    partial_input = tmp_path / "x.jsonl.partial"
    partial_input.write_bytes(before)
    code = annotate_main([str(partial_input), "-o", str(tmp_path / "x.jsonl"), "--judge",
                          f"precomputed:{judge}", "--steps", "abstain"])  # fmt: skip
    assert code == 2 and "the output names the input IN" in capsys.readouterr().err
    for output in (src, parts[2]):
        code, err = _merge(src, output, parts, capsys)
        assert code == 2 and "the output names the input" in err
    assert src.read_bytes() == before
    # nor the manifest beside an input, read as its record (IN's, a shard's)
    for output in (manifest_path(src), manifest_path(parts[0])):
        recorded = output.read_bytes() if output.exists() else None
        code, err = _merge(src, output, parts, capsys)
        assert code == 2 and "the output names the input" in err and "'s manifest" in err, err
        assert (output.read_bytes() if output.exists() else None) == recorded
    code = annotate_main([str(parts[0]), "-o", str(manifest_path(parts[0])), "--judge",
                          f"precomputed:{judge}", "--steps", "abstain"])  # fmt: skip
    assert code == 2 and "the output names the input IN's manifest" in capsys.readouterr().err
    # nor is a cache one of the files written beside OUT (its manifests, its lock)
    cache = tmp_path / "c.sqlite"
    out = tmp_path / "y.jsonl"
    for beside in ("y.jsonl.manifest.json", "y.jsonl.partial.manifest", "y.jsonl.lock"):
        (tmp_path / beside).unlink(missing_ok=True)
        (tmp_path / beside).symlink_to(cache)
        cache.write_bytes(b"kept")
        code = annotate_main([str(src), "-o", str(out), "--judge", f"precomputed:{judge}",
                              "--steps", "abstain", "--cache", str(tmp_path / beside)])  # fmt: skip
        assert code == 2 and "the output names the input --cache" in capsys.readouterr().err
        assert cache.read_bytes() == b"kept" and not out.exists()


def test_stdout_output_takes_no_lock_and_writes_no_manifest(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    contexts = _contexts(4)
    write_contexts(tmp_path / "in.jsonl", contexts)
    judge = _probs(tmp_path / "p.jsonl", contexts)
    monkeypatch.chdir(tmp_path)
    assert (
        annotate_main(
            ["in.jsonl", "-o", "-", "--judge", f"precomputed:{judge}", "--steps", "abstain"]
        )
        == 0
    )
    assert capsys.readouterr().out.count("\n") == 4
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("-")]


def test_the_summary_after_a_kill_and_a_rerun_counts_the_whole_output(tmp_path: Path) -> None:
    driver, src = _driver(tmp_path), tmp_path / "in.jsonl"
    write_contexts(src, _contexts())
    out = tmp_path / "out.jsonl"
    run = _killed_midway(driver, src, out)
    run.send_signal(signal.SIGKILL)
    assert run.wait() == -signal.SIGKILL
    code, stdout, stderr = _run(driver, src, out)
    assert code == 0, stderr
    found = re.search(
        rf"annotated 18 contexts \((\d+) resumed from {re.escape(str(out))}\.partial, (\d+) now\)",
        stdout,
    )
    assert found, stdout
    resumed, now = map(int, found.groups())
    assert resumed >= 1 and resumed + now == 18
    assert f"resumed after {resumed} contexts already written" in stdout
    assert f"judge calls now: {3 * now} passage pairs" in stdout  # 3 distinct passages each


@pytest.mark.parametrize(
    "command",
    [
        ["qcare", "label", "IN", "-o", "OUT"],
        ["batch", "export", "IN", "-o", "OUT"],
        ["batch", "import", "RESULTS", "--calls", "CALLS", "--contexts", "IN", "-o", "OUT"],
        ["demo", "-o", "OUT"],
    ],
)
def test_no_command_takes_a_file_it_writes_beside_out_as_its_cache(
    tmp_path: Path, capsys, command: list[str]
) -> None:
    """``--cache OUT.lock`` would be written as the cache, then deleted with the lock."""
    names = {"IN": "in.jsonl", "OUT": "out.jsonl", "RESULTS": "r.jsonl", "CALLS": "c.jsonl"}
    args = [str(tmp_path / names[a]) if a in names else a for a in command]
    for beside in ("out.jsonl.lock", "out.jsonl.partial", "out.jsonl.manifest.json"):
        cache = tmp_path / beside
        code = udcg_main([*args, "--judge", "smollm2-135m", "--cache", str(cache)])
        assert code == 2 and "the output names the input --cache" in capsys.readouterr().err
        assert not cache.exists()


def test_an_output_named_as_the_cache_s_sqlite_files_is_refused(tmp_path: Path, capsys) -> None:
    """SQLite deletes a cache's -wal when it closes: an OUT of that name would be lost."""
    write_contexts(tmp_path / "in.jsonl", _contexts(2))
    for side in ("-wal", "-shm", "-journal"):
        out = tmp_path / f"c.sqlite{side}"
        args = [str(tmp_path / "in.jsonl"), "-o", str(out), "--cache", str(tmp_path / "c.sqlite")]
        assert annotate_main([*args, "--judge", "smollm2-135m"]) == 2
        assert f"the output names the input --cache ({side})" in capsys.readouterr().err


def test_sqlite_files_of_the_default_a_linked_or_a_merged_cache_are_no_output(
    tmp_path: Path, capsys, shared_judge_cache: Path
) -> None:
    """The default cache (no --cache), a cache given through a link (SQLite deletes the -wal of
    the file it names) and the inputs of ``cache merge`` are checked as --cache is."""
    from udcg.judge.cache import JudgeCache

    write_contexts(tmp_path / "in.jsonl", _contexts(2))
    run = [str(tmp_path / "in.jsonl"), "--judge", "smollm2-135m", "-o"]
    assert annotate_main([*run, f"{shared_judge_cache}-wal"]) == 2
    assert "the output names the input --cache (-wal)" in capsys.readouterr().err
    (tmp_path / "link.sqlite").symlink_to(tmp_path / "real.sqlite")
    linked = [*run, str(tmp_path / "real.sqlite-wal"), "--cache", str(tmp_path / "link.sqlite")]
    assert annotate_main(linked) == 2
    assert "the output names the input --cache (-wal)" in capsys.readouterr().err
    with JudgeCache(tmp_path / "a.sqlite") as cache:
        cache.put_many({"k": 0.5})
    merge = ["cache", "merge", str(tmp_path / "a.sqlite-wal"), str(tmp_path / "a.sqlite")]
    assert udcg_main(merge) == 2
    assert (
        f"the output names the input IN {tmp_path / 'a.sqlite'} (-wal)" in capsys.readouterr().err
    )


def test_report_and_merge_shards_refuse_inputs_named_as_files_they_write_beside(
    tmp_path: Path, capsys
) -> None:
    """A report's cache named as a label file's lock or manifest, a merge input named as the
    output's lock or manifest: each would be deleted or replaced."""
    runs = [str(tmp_path / "a.trec"), str(tmp_path / "b.trec")]
    report = [
        "report",
        *runs,
        "--topics",
        "t",
        "--collection",
        "c",
        "--qrels",
        "q",
        "-o",
        str(tmp_path),
    ]
    for beside in ("labels/a.jsonl.lock", "labels/b.jsonl.manifest.json", "report.json.lock"):
        cache = tmp_path / beside
        code = udcg_main([*report, "--judge", "smollm2-135m", "--cache", str(cache)])
        assert code == 2 and "the output names the input --cache" in capsys.readouterr().err
        assert not cache.exists()
    out = tmp_path / "merged.jsonl"
    for beside in ("merged.jsonl.lock", "merged.jsonl.manifest.json"):
        source = tmp_path / beside
        source.write_text("{}\n")
        code = udcg_main(["merge-shards", str(source), str(tmp_path / "part-1-of-1.jsonl"),
                          "-o", str(out)])  # fmt: skip
        assert code == 2 and "the output names the input IN" in capsys.readouterr().err
        assert source.read_text() == "{}\n"
