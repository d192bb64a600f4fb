"""Inputs that are pipes (a FIFO, ``<(...)``) and outputs that name an input.

A pipe can be opened and read once: every reader must read it through one open handle, and a
reader that needs a second look (the run's tag, the line of a duplicate, the kind of a
utilities file) keeps what it read. Each FIFO here is fed by a writer thread with more than a
pipe buffer (64 KiB), so a reader that opens it twice loses data or waits forever; a reader
stuck that way is released after a time limit and the test fails.

An output that names one of the command's inputs (its path, another spelling of it, a hard
link) is refused in one line with exit 2, and the input is left as it was.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import context_line, read_contexts, write_contexts
from udcg.io.formats.trec import read_trec_run
from udcg.theta import UDCGTheta
from udcg.theta.simulate import simulate_contexts

PIPE_BUFFER = 1 << 16
LIMIT_S = 20.0

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")


def _release(fifo: Path, flags: int) -> None:
    """Let a thread blocked opening ``fifo`` go on: open the other end without waiting."""
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, flags | os.O_NONBLOCK))


@contextlib.contextmanager
def fed(fifo: Path, data: bytes) -> Iterator[Path]:
    """``fifo`` created and written ``data`` by a thread; after the block the writer is
    released if no reader took everything."""
    os.mkfifo(fifo)

    def write() -> None:
        with contextlib.suppress(BrokenPipeError), open(fifo, "wb") as handle:
            handle.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        yield fifo
    finally:
        writer.join(0.2)
        if writer.is_alive():
            _release(fifo, os.O_RDONLY)
            writer.join(LIMIT_S)


def within_limit(fifos: list[Path], call: Callable[[], Any]) -> Any:
    """``call()``; one still waiting (a second open of a drained FIFO) after the limit fails
    the test, its waits released so that the thread ends."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the test below
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(LIMIT_S)
    if worker.is_alive():
        for _ in range(50):
            for fifo in fifos:
                _release(fifo, os.O_WRONLY)
            worker.join(0.1)
            if not worker.is_alive():
                break
        pytest.fail(f"a reader waited more than {LIMIT_S} s: it opened a pipe twice")
    if "error" in box:
        raise box["error"]
    return box["value"]


def contexts_bytes(n: int = 60, k: int = 5) -> tuple[bytes, int]:
    """A contexts JSONL of more than a pipe buffer, and its number of contexts."""
    contexts = simulate_contexts(n, k, seed=4)
    data = "".join(map(context_line, contexts)).encode()
    assert len(data) > 2 * PIPE_BUFFER
    return data, len(contexts)


def test_read_contexts_reads_every_line_of_a_fifo(tmp_path: Path) -> None:
    data, n = contexts_bytes()
    with fed(tmp_path / "c.fifo", data) as fifo:
        read = within_limit([fifo], lambda: list(read_contexts(fifo)))
    assert len(read) == n
    assert "".join(map(context_line, read)).encode() == data


def test_read_contexts_checks_a_fifo_without_opening_it(tmp_path: Path) -> None:
    fifo = tmp_path / "c.fifo"
    os.mkfifo(fifo)
    within_limit([fifo], lambda: read_contexts(fifo).close())  # no writer: an open would wait
    with pytest.raises(UDCGInputError, match="no such file"):
        read_contexts(tmp_path / "missing.jsonl")
    with pytest.raises(UDCGInputError, match="is a directory"):
        read_contexts(tmp_path)


def _python_udcg() -> str:
    return f"{shlex.quote(sys.executable)} -m udcg"


def test_score_reads_every_context_of_a_process_substitution(tmp_path: Path) -> None:
    data, n = contexts_bytes()
    path, out = tmp_path / "c.jsonl", tmp_path / "scores.jsonl"
    path.write_bytes(data)
    script = (
        f"{_python_udcg()} score <(cat {shlex.quote(str(path))}) --judge sim "
        f"--out {shlex.quote(str(out))}"
    )
    done = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"{n} contexts" in done.stdout
    assert len(out.read_text().splitlines()) == n


@pytest.fixture
def weights(tmp_path: Path) -> Path:
    model = UDCGTheta(k=5)
    model.alpha_, model.beta_ = np.linspace(2, 0.5, 5), -np.linspace(1, 0.2, 5)
    model.intercept_ = 0.0
    return model.save_pretrained(tmp_path / "w", card={"judge_model": "sim"})


def _qcare_bytes(n: int = 400) -> bytes:
    line = {
        "question": "q?",
        "subqueries": ["s1", "s2"],
        "passages": [
            {"doc_id": "d0", "text": "t" * 40, "covers": [True, False]},
            {"doc_id": "d1", "text": "t" * 40, "covers": [False, False]},
        ],
    }
    return "".join(json.dumps({"qid": f"q{i}", **line}) + "\n" for i in range(n)).encode()


@pytest.mark.parametrize("command", ["score", "order", "qcare score"])
def test_commands_read_every_context_of_a_fifo(tmp_path: Path, weights: Path, command: str) -> None:
    from udcg.cli import order, qcare, score

    out = tmp_path / "out.jsonl"
    if command == "qcare score":
        data, n = _qcare_bytes(), 400
        main, argv = qcare.main, ["score", "{}", "--out", str(out)]
    else:
        data, n = contexts_bytes()
        main = score.main if command == "score" else order.main
        argv = (
            ["{}", "--judge", "sim", "--out", str(out)]
            if command == "score"
            else ["{}", str(out), "--weights", str(weights)]
        )
    with fed(tmp_path / "in.fifo", data) as fifo:
        args = [str(fifo) if a == "{}" else a for a in argv]
        assert within_limit([fifo], lambda: main(args)) == 0
    assert len(out.read_text().splitlines()) == n


def _trec_files(tmp_path: Path, n_queries: int = 300, depth: int = 10) -> dict[str, bytes]:
    rng = np.random.default_rng(5)
    run, qrels, topics, collection, utilities = [], [], [], [], []
    for q in range(n_queries):
        topics.append(f"q{q}\tquestion {q}\n")
        for d in range(depth):
            doc = f"d{q}_{d}"
            run.append(f"q{q} Q0 {doc} {d + 1} {100 - d}.5 mytag\n")
            qrels.append(f"q{q} 0 {doc} {int(rng.random() < 0.3)}\n")
            collection.append(f"{doc}\tpassage {q} {d}\n")
            utilities.append(f"q{q}\t{doc}\t{rng.random():.6f}\n")
    files = {
        "run": run,
        "qrels": qrels,
        "topics": topics,
        "collection": collection,
        "utilities": utilities,
    }
    return {name: "".join(lines).encode() for name, lines in files.items()}


def test_contexts_from_a_piped_run_keep_its_tag(tmp_path: Path) -> None:
    from udcg.cli.contexts import main

    files = _trec_files(tmp_path)
    assert len(files["run"]) > PIPE_BUFFER
    for name in ("topics", "collection"):
        (tmp_path / name).write_bytes(files[name])
    out = tmp_path / "c.jsonl"
    args = ["--topics", str(tmp_path / "topics"), "--collection", str(tmp_path / "collection")]
    with fed(tmp_path / "run.fifo", files["run"]) as fifo:
        status = within_limit(
            [fifo], lambda: main([str(fifo), *args, "-k", "3", "--out", str(out)])
        )
    assert status == 0
    contexts = list(read_contexts(out))
    assert len(contexts) == 300
    assert {ctx.run for ctx in contexts} == {"mytag"}


def test_trec_reads_piped_utilities_and_run_as_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from udcg.cli.trec import main

    files = _trec_files(tmp_path)
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    measures = ["-m", "UDCG@5", "nDCG@10"]
    given = [str(tmp_path / "qrels"), str(tmp_path / "run")]
    assert main([*given, *measures, "--utilities", str(tmp_path / "utilities")]) == 0
    expected = capsys.readouterr().out
    with fed(tmp_path / "u.fifo", files["utilities"]) as u, fed(tmp_path / "r.fifo", files["run"]):
        fifos = [u, tmp_path / "r.fifo"]
        piped = [str(tmp_path / "qrels"), str(fifos[1]), *measures, "--utilities", str(u)]
        assert within_limit(fifos, lambda: main(piped)) == 0
    assert capsys.readouterr().out == expected


def test_a_duplicate_in_a_piped_run_is_located_at_its_line(tmp_path: Path) -> None:
    from udcg.trec.engine import evaluate

    files = _trec_files(tmp_path)
    lines = files["run"].splitlines(keepends=True)
    data = b"".join([*lines[:2500], lines[7], *lines[2500:]])
    (tmp_path / "qrels").write_bytes(files["qrels"])
    with fed(tmp_path / "r.fifo", data) as fifo:

        def scored() -> Any:
            return evaluate(tmp_path / "qrels", read_trec_run(fifo), ["nDCG@10"])

        with pytest.raises(UDCGInputError, match=r"r\.fifo:2501: .*duplicate"):
            within_limit([fifo], scored)


# -- outputs that name an input ----------------------------------------------------------


def _files(tmp_path: Path, weights: Path) -> dict[str, Path]:
    files = _trec_files(tmp_path, n_queries=4, depth=3)
    paths = {name: tmp_path / name for name in files}
    for name, data in files.items():
        paths[name].write_bytes(data)
    write_contexts(tmp_path / "c.jsonl", simulate_contexts(3, 5, seed=2))
    paths["contexts"] = tmp_path / "c.jsonl"
    paths["qcare"] = tmp_path / "qcare.jsonl"
    paths["qcare"].write_bytes(_qcare_bytes(3))
    paths["cache"] = tmp_path / "judge.sqlite"
    paths["cache"].write_bytes(b"not touched")
    paths["source"] = tmp_path / "source.json"
    paths["source"].write_text("[]")
    paths["card"] = weights / "config.json"
    return paths


GUARDED = [
    # (command, arguments with {name} for a path, the input the output names)
    ("score", "{contexts} --judge sim --out {contexts}", "contexts"),
    ("score", "{contexts} --judge sim --weights {weights} --out {card}", "card"),
    ("order", "{contexts} -o {contexts} --weights {weights}", "contexts"),
    ("order", "{contexts} -o {card} --weights {weights}", "card"),
    (
        "order",
        "--run {run} --qrels {qrels} --utilities {utilities} --weights {weights} --out {run}",
        "run",
    ),
    (
        "order",
        "--run {run} --qrels {qrels} --utilities {utilities} --weights {weights} --out {qrels}",
        "qrels",
    ),
    (
        "order",
        "--run {run} --qrels {qrels} --utilities {utilities} --weights {weights} --out {utilities}",
        "utilities",
    ),
    ("qcare", "label {qcare} -o {qcare} --judge precomputed:{contexts}", "qcare"),
    ("qcare", "label {qcare} -o {cache} --judge precomputed:{contexts} --cache {cache}", "cache"),
    ("qcare", "label {qcare} -o {contexts} --judge precomputed:{contexts}", "contexts"),
    ("qcare", "score {qcare} --out {qcare}", "qcare"),
    ("contexts", "{run} --topics {topics} --collection {collection} -k 2 --out {run}", "run"),
    (
        "contexts",
        "{run} --topics {topics} --collection {collection} -k 2 --out {collection}",
        "collection",
    ),
    (
        "contexts",
        "{run} --topics {topics} --collection {collection} -k 2 --out {topics}",
        "topics",
    ),
    (
        "contexts",
        "{run} --topics {topics} --collection {collection} -k 2 --qrels {qrels} --out {qrels}",
        "qrels",
    ),
    (
        "contexts",
        "{run} --topics {topics} --collection {collection} -k 2 --answers {topics} --out {topics}",
        "topics",
    ),
    ("demo", "--source {source} --out {source} --judge precomputed:{contexts}", "source"),
    (
        "demo",
        "--source {source} --out {cache} --cache {cache} --judge precomputed:{contexts}",
        "cache",
    ),
]


def _main(command: str) -> Callable[[list[str]], int]:
    from udcg.cli import contexts, demo, order, qcare, score

    modules = {"score": score, "order": order, "qcare": qcare, "contexts": contexts}
    return {**modules, "demo": demo}[command].main


@pytest.mark.parametrize(("command", "template", "named"), GUARDED)
def test_an_output_naming_an_input_is_refused(
    tmp_path: Path,
    weights: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    template: str,
    named: str,
) -> None:
    paths = _files(tmp_path, weights)
    before = {name: path.read_bytes() for name, path in paths.items()}
    args = template.format(weights=weights, **paths).split()
    assert _main(command)(args) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert "the output names the input" in err and str(paths[named]) in err
    assert {name: path.read_bytes() for name, path in paths.items()} == before


@pytest.mark.parametrize("spelling", ["dotted", "hard link", "symlink"])
def test_another_spelling_of_the_input_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spelling: str
) -> None:
    from udcg.cli.score import main

    data = tmp_path / "c.jsonl"
    write_contexts(data, simulate_contexts(3, 5, seed=2))
    before = data.read_bytes()
    (tmp_path / "sub").mkdir()
    out = tmp_path / "sub" / ".." / "c.jsonl"
    if spelling != "dotted":
        out = tmp_path / "other.jsonl"
        (os.link if spelling == "hard link" else os.symlink)(data, out)
    assert main([str(data), "--judge", "sim", "--out", str(out)]) == 2
    assert "the output names the input CONTEXTS" in capsys.readouterr().err
    assert data.read_bytes() == before


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda d: {**d, "questions": d["questions"][:1]}, "questions"),
        (lambda d: {**d, "questions": "q"}, "questions"),
        (lambda d: _set(d, 0, answers="Canberra"), "questions[0].answers"),
        (lambda d: _set(d, 1, passages=[{"doc_id": "x", "text": "t"}]),
         "questions[1].passages[0].kind"),
        (lambda d: _set(d, 0, passages=d["questions"][0]["passages"][:3]), "questions[0].passages"),
    ],
)  # fmt: skip
def test_a_malformed_demo_source_is_one_line_before_the_judge(tmp_path, capsys, edit, field):
    """``udcg demo --source``: a source that cannot build the demo lists is refused at its
    field (a string of answers is not split into letters), before any judge call."""
    import json as json_module

    from udcg.cli import demo
    from udcg.demo_data.demo import SOURCE

    data = edit(json_module.loads(SOURCE.read_text()))
    source = tmp_path / "source.json"
    source.write_text(json_module.dumps(data))
    args = ["--source", str(source), "--out", str(tmp_path / "o.jsonl"), "--judge", "nobody/x"]
    assert demo.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert f"field '{field}'" in err and len(err.splitlines()) == 1, err


def _set(data: dict, i: int, **fields) -> dict:
    questions = [dict(q) for q in data["questions"]]
    questions[i].update(fields)
    return {**data, "questions": questions}
