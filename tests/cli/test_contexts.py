"""``udcg contexts``: a run, topics and collection in, contexts JSONL out (readable by
read_contexts), a one-line summary on stderr, user mistakes as one located line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from udcg.cli.contexts import main
from udcg.io.contexts.jsonl import read_contexts


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {
        "run": "q1 Q0 d1 1 3.0 bm25\nq1 Q0 d2 2 2.0 bm25\nq1 Q0 d3 3 1.0 bm25\nq2 Q0 d2 1 1 bm25\n",
        "topics": "q1\tfirst question\nq2\tsecond question\n",
        "collection": "d1\tone\nd2\ttwo\nd3\tthree\nd4\tfour\n",
        "qrels": "q1 0 d2 1\n",
        "answers": '{"qid": "q1", "answers": ["one"]}\n',
    }
    out = {}
    for name, text in paths.items():
        out[name] = tmp_path / name
        out[name].write_text(text)
    return out


def args(files: dict[str, Path], *extra: str) -> list[str]:
    return [
        str(files["run"]),
        "--topics",
        str(files["topics"]),
        "--collection",
        str(files["collection"]),
        *extra,
    ]


def test_writes_contexts_and_a_summary(files, tmp_path, capsys):
    out = tmp_path / "contexts.jsonl"
    extra = ["--k", "2", "--qrels", str(files["qrels"]), "--answers", str(files["answers"])]
    assert main(args(files, *extra, "--out", str(out))) == 0
    contexts = list(read_contexts(out))
    assert [(c.qid, c.run, c.question, c.answers) for c in contexts] == [
        ("q1", "bm25", "first question", ["one"]),
        ("q2", "bm25", "second question", None),
    ]
    assert [[(p.doc_id, p.text, p.relevant) for p in c.passages] for c in contexts] == [
        [("d1", "one", False), ("d2", "two", True)],
        [("d2", "two", None)],
    ]
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(
        "udcg contexts: 2 queries, 3 passages (k=2; 1 query with fewer than 2; "
        f"1 query without qrels: relevance left unset) -> {out} in "
    )
    assert captured.err.count("\n") == 1


def test_standard_output_and_run_name(files, capsys):
    assert main(args(files, "-k", "1", "--name", "mine", "--out", "-")) == 0
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert [(c["qid"], c["run"], [p["doc_id"] for p in c["passages"]]) for c in lines] == [
        ("q1", "mine", ["d1"]),
        ("q2", "mine", ["d2"]),
    ]
    assert "-> standard output" in captured.err


@pytest.mark.parametrize(
    ("extra", "change", "message"),
    [
        (
            ["--k", "3"],
            ("collection", "d1\tone\nd2\ttwo\n"),
            "{run}:3: field 'doc_id': 'd3' is not in the collection {collection}",
        ),
        (["--k", "0"], None, "field 'k': must be a positive integer, got 0"),
        (["--k", "2", "--topics", "-"], None, "field 'topics': only RUN may be - (standard"),
        (["--k", "2"], ("topics", "q1\ta\nq1\tb\n"), "{topics}:2: field 'qid': duplicate topic"),
    ],
)
def test_user_mistakes_exit_2_with_one_line(files, tmp_path, capsys, extra, change, message):
    if change is not None:
        files[change[0]].write_text(change[1])
    out = tmp_path / "out.jsonl"
    assert main([*args(files, *extra), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"udcg contexts: error: {message.format(**files)}")
    assert err.count("\n") == 1
    assert not out.exists()


def test_runs_as_a_module_from_standard_input(files):
    proc = subprocess.run(
        [sys.executable, "-m", "udcg.cli.contexts", "-", *args(files)[1:], "-k", "5", "--out", "-"],
        input=files["run"].read_text(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line)["qid"] for line in proc.stdout.splitlines()] == ["q1", "q2"]


def test_an_hf_output_naming_a_split_is_refused(files, tmp_path, capsys):
    """``-o hf:DS#dev`` would be read back as the split ``dev`` of ``DS``, not what was
    written (a folder named ``DS#dev``): refused before any work."""
    out = tmp_path / "DS"
    assert main([*args(files, "--k", "2"), "--out", f"hf:{out}#dev"]) == 2
    assert capsys.readouterr().err == (
        f"udcg contexts: error: field 'out': hf:{out}#dev would be read as the split 'dev' of "
        f"{out}, and -o hf:DIR writes one dataset: name its folder without #SPLIT\n"
    )
    for spelled in ("#dev/", "#dev//", "#dev/."):  # the folder DS#dev all the same
        assert main([*args(files, "--k", "2"), "--out", f"hf:{out}{spelled}"]) == 2
        assert "would be read as the split 'dev'" in capsys.readouterr().err
    assert list(tmp_path.glob("DS*")) == []
