"""``udcg contexts --dataset ID``: topics, passages (by id, from the docs store) and qrels of an
ir_datasets dataset, checked against the same contexts built from the equivalent files.

Datasets are registered from local files through ir_datasets' own formats (``TsvDocs``,
``TsvQueries``, ``TrecQrels`` over ``LocalDownload``); nothing is downloaded. ir_datasets' home
is a temporary folder in every test."""

from __future__ import annotations

import atexit
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, Tuple  # noqa: UP035 (TsvIter compares with typing.Tuple)

import numpy as np
import pytest

from udcg.cli.contexts import main
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import read_contexts

# ir_datasets makes its folders under its home when imported: a temporary one, removed at exit
# (unless an earlier test imported it already)
_HOME = tempfile.mkdtemp(prefix="udcg-ir_datasets-home-")
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)
with pytest.MonkeyPatch.context() as _patch:
    _patch.setenv("IR_DATASETS_HOME", _HOME)
    ir_datasets = pytest.importorskip("ir_datasets")
from ir_datasets.formats import GenericDoc, TrecQrels, TrecQuery, TsvDocs, TsvQueries  # noqa: E402
from ir_datasets.util import LocalDownload  # noqa: E402

from udcg.io.formats.ir_datasets import load_ir_dataset  # noqa: E402


#: a document with a title, in the column order of a headerless 3-column collection TSV
class TitledDoc(NamedTuple):
    doc_id: str
    title: str
    text: str


#: a query with answers: TsvQueries reads the columns after the text as one tuple
#: (functional form: with postponed annotations the class form would hold strings)
AnswerQuery = NamedTuple(  # noqa: UP014
    "AnswerQuery",
    [("query_id", str), ("text", str), ("answers", Tuple[str, ...])],  # noqa: UP006
)

_WORDS = (
    "the of Canberra Austen Röntgen Zürich 東京 naïve prize physics capital wrote 1901 Ω".split()
)


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ir_datasets keeps its files under a temporary home (it reads IR_DATASETS_HOME)."""
    monkeypatch.setenv("IR_DATASETS_HOME", str(tmp_path / "ir_datasets_home"))


@pytest.fixture
def register(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """``register(docs=..., queries=..., qrels=...)``: a dataset of those parts under a new
    ``local-test/...`` id (removed from the registry afterwards)."""
    names: list[str] = []

    def add(**parts: Any) -> str:
        name = f"local-test/{tmp_path.name}-{len(names)}"
        ir_datasets.registry.register(name, ir_datasets.Dataset(*parts.values()))
        names.append(name)
        return name

    yield add
    for name in names:
        ir_datasets.registry._registered.pop(name, None)


def _text(rng: np.random.Generator) -> str:
    return " ".join(rng.choice(_WORDS, size=int(rng.integers(1, 12))))


def _files(tmp_path: Path, seed: int, titles: bool, answers: bool) -> dict[str, Path]:
    """A generated collection, topics, answers, qrels and run (ids in shuffled order, tied
    scores, documents the qrels do not judge, queries without qrels)."""
    rng = np.random.default_rng(seed)
    n_docs, n_queries = int(rng.integers(50, 200)), int(rng.integers(5, 30))
    doc_ids = [f"D{i}" if i % 3 else str(i * 7) for i in rng.permutation(n_docs)]
    qids = [f"q{i}" for i in rng.permutation(n_queries)]
    docs = []
    for doc_id in doc_ids:
        title = _text(rng) if rng.random() < 0.8 else ""
        docs.append(f"{doc_id}\t{title}\t{_text(rng)}" if titles else f"{doc_id}\t{_text(rng)}")
    run, qrels, answer_lines = [], [], []
    for qid in qids:
        ranked = rng.choice(doc_ids, size=int(rng.integers(1, 15)), replace=False)
        scores = np.round(rng.normal(size=len(ranked)), 1)  # ties
        run += [
            f"{qid} Q0 {d} {r} {s} sys"
            for r, (d, s) in enumerate(zip(ranked, scores, strict=True), 1)
        ]
        if rng.random() < 0.8:
            judged = rng.choice(doc_ids, size=int(rng.integers(1, 10)), replace=False)
            qrels += [f"{qid} 0 {d} {rng.integers(0, 4)}" for d in judged]
        answer_lines.append("\t".join([qid, *(_text(rng) for _ in range(rng.integers(1, 3)))]))
    topics = [f"{qid}\t{_text(rng)}" for qid in qids]
    texts = {
        "docs.tsv": docs,
        "topics.tsv": topics,
        "answers.tsv": answer_lines,
        "queries.tsv": [
            f"{t}\t{a.partition(chr(9))[2]}" for t, a in zip(topics, answer_lines, strict=True)
        ]
        if answers
        else topics,
        "qrels.txt": qrels,
        "run.trec": run,
    }
    paths = {}
    for name, lines in texts.items():
        paths[name] = tmp_path / name
        paths[name].write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return paths


def _contexts(*args: str) -> None:
    assert main(list(args)) == 0


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("titles", "answers"), [(False, False), (True, True)])
@pytest.mark.parametrize("k", [1, 5])
def test_output_is_byte_identical_to_the_files(
    tmp_path: Path, register: Callable[..., str], seed: int, titles: bool, answers: bool, k: int
) -> None:
    files = _files(tmp_path, seed, titles, answers)
    name = register(
        docs=TsvDocs(LocalDownload(files["docs.tsv"]), TitledDoc if titles else GenericDoc),
        queries=TsvQueries(LocalDownload(files["queries.tsv"]), AnswerQuery)
        if answers
        else TsvQueries(LocalDownload(files["queries.tsv"])),
        qrels=TrecQrels(LocalDownload(files["qrels.txt"]), {}),
    )
    run, out = str(files["run.trec"]), tmp_path / "out"
    from_files = [
        *("--topics", str(files["topics.tsv"]), "--collection", str(files["docs.tsv"])),
        *("--qrels", str(files["qrels.txt"])),
        *(("--answers", str(files["answers.tsv"])) if answers else ()),
    ]
    _contexts(run, *from_files, "-k", str(k), "-o", str(out / "files.jsonl"))
    _contexts(run, "--dataset", name, "-k", str(k), "-o", str(out / "dataset.jsonl"))
    # twice: the second run reads the docs store built by the first
    _contexts(run, "--dataset", name, "-k", str(k), "-o", str(out / "again.jsonl"))
    expected = (out / "files.jsonl").read_bytes()
    assert (out / "dataset.jsonl").read_bytes() == expected
    assert (out / "again.jsonl").read_bytes() == expected
    contexts = list(read_contexts(out / "dataset.jsonl"))
    passages = [p for c in contexts for p in c.passages]
    assert len(contexts) == len({line.split()[0] for line in files["run.trec"].open()})
    assert all(len(c.passages) <= k for c in contexts) and passages
    assert {p.relevant for p in passages} >= {True, False} or k == 1
    assert any("title" in p.extra for p in passages) == titles
    assert all(c.answers for c in contexts) == answers


def test_passages_come_from_the_docs_store_without_a_scan(
    tmp_path: Path, register: Callable[..., str]
) -> None:
    """Only ``docs_store().get_many`` is asked, for the ranked ids; iterating the docs fails."""
    files = _files(tmp_path, 3, titles=False, answers=False)
    texts = dict(line.rstrip("\n").split("\t") for line in files["docs.tsv"].open())
    asked: list[list[str]] = []

    class Store:
        def get_many(self, ids: list[str]) -> dict[str, GenericDoc]:
            asked.append(sorted(ids))
            return {i: GenericDoc(i, texts[i]) for i in ids if i in texts}

    class Docs(ir_datasets.formats.BaseDocs):
        def docs_iter(self) -> Iterator[GenericDoc]:
            raise AssertionError("the collection was scanned")

        def docs_store(self) -> Store:
            return Store()

    name = register(
        docs=Docs(),
        queries=TsvQueries(LocalDownload(files["topics.tsv"])),
        qrels=TrecQrels(LocalDownload(files["qrels.txt"]), {}),
    )
    run = str(files["run.trec"])
    _contexts(run, "--dataset", name, "-k", "3", "-o", str(tmp_path / "a.jsonl"))
    expected_ids = {p.doc_id for c in read_contexts(tmp_path / "a.jsonl") for p in c.passages}
    assert asked == [sorted(expected_ids)]
    _contexts(
        run, "--topics", str(files["topics.tsv"]), "--collection", str(files["docs.tsv"]),
        "--qrels", str(files["qrels.txt"]), "-k", "3", "-o", str(tmp_path / "b.jsonl"),
    )  # fmt: skip
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


def _error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The one line of the command's error (ir_datasets' own log lines may come before it)."""
    assert main(list(args)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    ours = [line for line in err if line.startswith("udcg contexts")]
    assert ours == err[-1:], err
    return err[-1]


def test_user_mistakes_are_one_line(
    tmp_path: Path, register: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    files = _files(tmp_path, 4, titles=False, answers=False)
    docs = TsvDocs(LocalDownload(files["docs.tsv"]))
    queries = TsvQueries(LocalDownload(files["topics.tsv"]))
    qrels = TrecQrels(LocalDownload(files["qrels.txt"]), {})
    run, out = str(files["run.trec"]), str(tmp_path / "out.jsonl")
    common = ("-k", "3", "-o", out)
    full = register(docs=docs, queries=queries, qrels=qrels)
    assert _error(capsys, run, "--dataset", "local-test/no-such-set", *common) == (
        "udcg contexts: error: unknown ir_datasets id 'local-test/no-such-set'"
    )
    typo = full.replace("local-test", "local-tset")
    assert _error(capsys, run, "--dataset", typo, *common) == (
        f"udcg contexts: error: unknown ir_datasets id {typo!r} (did you mean {full}?)"
    )
    only_docs = register(docs=docs)
    assert _error(capsys, run, "--dataset", only_docs, *common) == (
        f"udcg contexts: error: ir_datasets {only_docs!r} has no queries (it has: docs): "
        "give --topics"
    )
    no_docs = register(queries=queries, qrels=qrels)
    assert _error(capsys, run, "--dataset", no_docs, *common) == (
        f"udcg contexts: error: ir_datasets {no_docs!r} has no docs (it has: queries, qrels): "
        "give --collection"
    )
    # a ranked document the docs store lacks: located at its line of the run
    lines = files["run.trec"].read_text().splitlines()
    qid, _, _, rank, _, tag = lines[2].split()
    lines[2] = f"{qid} Q0 NOT-A-DOC {rank} 99 {tag}"  # ranked first
    files["run.trec"].write_text("\n".join(lines) + "\n")
    message = _error(capsys, run, "--dataset", full, *common)
    assert message == (
        f"udcg contexts: error: {run}:3: field 'doc_id': 'NOT-A-DOC' is not in the collection "
        f"ir_datasets {full!r} docs store"
    )
    assert not Path(out).exists()


def test_parts_given_as_files_replace_the_dataset_s(
    tmp_path: Path, register: Callable[..., str]
) -> None:
    """A dataset of docs only, with --topics; a dataset without qrels leaves relevance unset;
    --qrels replaces a dataset's qrels."""
    files = _files(tmp_path, 5, titles=False, answers=False)
    docs = TsvDocs(LocalDownload(files["docs.tsv"]))
    run, topics = str(files["run.trec"]), str(files["topics.tsv"])
    only_docs = register(docs=docs)
    _contexts(run, "--dataset", only_docs, "--topics", topics, "-k", "4", "-o", str(tmp_path / "a"))
    _contexts(run, "--topics", topics, "--collection", str(files["docs.tsv"]), "-k", "4", "-o",
              str(tmp_path / "b"))  # fmt: skip
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()
    assert all(p.relevant is None for c in read_contexts(tmp_path / "a") for p in c.passages)
    with pytest.raises(UDCGInputError, match=r"has no qrels \(it has: docs\)$"):
        load_ir_dataset(only_docs).qrels()
    # the dataset's qrels judge nothing relevant; the file's are used instead
    (tmp_path / "none.txt").write_text(
        re.sub(r" \d$", " 0", files["qrels.txt"].read_text(), flags=re.M)
    )
    full = register(
        docs=docs,
        queries=TsvQueries(LocalDownload(files["topics.tsv"])),
        qrels=TrecQrels(LocalDownload(tmp_path / "none.txt"), {}),
    )
    qrels = ("--qrels", str(files["qrels.txt"]))
    _contexts(run, "--dataset", full, *qrels, "-k", "4", "-o", str(tmp_path / "c"))
    _contexts(run, "--topics", topics, "--collection", str(files["docs.tsv"]), *qrels, "-k", "4",
              "-o", str(tmp_path / "d"))  # fmt: skip
    assert (tmp_path / "c").read_bytes() == (tmp_path / "d").read_bytes()
    _contexts(run, "--dataset", full, "-k", "4", "-o", str(tmp_path / "e"))
    assert not any(p.relevant for c in read_contexts(tmp_path / "e") for p in c.passages)


def test_a_query_without_a_text_field_reads_its_default_text(
    tmp_path: Path, register: Callable[..., str]
) -> None:
    (tmp_path / "topics.tsv").write_text("t1\tcapital of Australia\tWhich city?\tAny.\n")
    (tmp_path / "docs.tsv").write_text("d1\tCanberra\n")
    name = register(
        docs=TsvDocs(LocalDownload(tmp_path / "docs.tsv")),
        queries=TsvQueries(LocalDownload(tmp_path / "topics.tsv"), TrecQuery),
    )
    assert load_ir_dataset(name).topics(["t1", "t2"]) == {
        "t1": load_ir_dataset(name).topics(["t1"])["t1"]
    }
    (topic,) = load_ir_dataset(name).topics(["t1"]).values()
    assert (topic.qid, topic.text, topic.answers) == ("t1", "capital of Australia", None)


def test_a_query_given_twice_with_other_texts_is_an_error(
    tmp_path: Path, register: Callable[..., str]
) -> None:
    (tmp_path / "topics.tsv").write_text("q1\tfirst text\nq2\tother\nq1\tfirst text\n")
    name = register(queries=TsvQueries(LocalDownload(tmp_path / "topics.tsv")))
    assert load_ir_dataset(name).topics(["q1"])["q1"].text == "first text"  # the same twice
    (tmp_path / "topics.tsv").write_text("q1\tfirst text\nq2\tother\nq1\tsecond text\n")
    name = register(queries=TsvQueries(LocalDownload(tmp_path / "topics.tsv")))
    assert load_ir_dataset(name).topics(["q2"])["q2"].text == "other"
    with pytest.raises(
        UDCGInputError, match=r"gives? query 'q1' twice, as 'first text' and 'second text'$"
    ):
        load_ir_dataset(name).topics(["q1"])


def test_a_pair_judged_twice_is_an_error(tmp_path: Path, register: Callable[..., str]) -> None:
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d1 0\nq1 0 d1 2\n")
    name = register(qrels=TrecQrels(LocalDownload(tmp_path / "qrels.txt"), {}))
    assert load_ir_dataset(name).qrels(["q2"]) == {"q2": {"d1": 0}}
    with pytest.raises(UDCGInputError, match=r"judge query 'q1', document 'd1' twice$"):
        load_ir_dataset(name).qrels()


def test_a_failed_download_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real id goes through ir_datasets' download; without a network it fails in one line."""
    requests = pytest.importorskip("requests")

    def refuse(*args: object, **kwargs: object) -> None:
        raise requests.exceptions.ConnectionError("no network in this test")

    monkeypatch.setattr(requests, "get", refuse)
    (tmp_path / "run").write_text("1048585 Q0 7187158 1 12.5 bm25\n")
    message = _error(
        capsys, str(tmp_path / "run"), "--dataset", "msmarco-passage/dev/small", "-k", "1",
        "-o", str(tmp_path / "out.jsonl"),
    )  # fmt: skip
    assert message.startswith(
        "udcg contexts: error: cannot read ir_datasets 'msmarco-passage/dev/small': "
    )
    assert "no network in this test" in message


def test_the_environment_is_left_as_it_was(tmp_path: Path, register: Callable[..., str]) -> None:
    files = _files(tmp_path, 6, titles=True, answers=False)
    name = register(
        docs=TsvDocs(LocalDownload(files["docs.tsv"]), TitledDoc),
        queries=TsvQueries(LocalDownload(files["topics.tsv"])),
    )
    before = dict(os.environ)
    _contexts(str(files["run.trec"]), "--dataset", name, "-k", "2", "-o", str(tmp_path / "o"))
    assert dict(os.environ) == before


def test_without_ir_datasets_the_error_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "ir_datasets", None)
    (tmp_path / "run").write_text("q1 Q0 d1 1 1 bm25\n")
    message = _error(
        capsys, str(tmp_path / "run"), "--dataset", "msmarco-passage/dev/small", "-k", "1",
        "-o", str(tmp_path / "out.jsonl"),
    )  # fmt: skip
    assert message == (
        "udcg contexts: error: ir_datasets needs the 'ir-datasets' extra: "
        "pip install 'udcg[ir-datasets]'"
    )


def test_without_a_dataset_topics_and_collection_are_required(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "run").write_text("q1 Q0 d1 1 1 bm25\n")
    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path / "run"), "--topics", "t.tsv", "-k", "1", "-o", "-"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "udcg contexts: error: the following arguments are required without --dataset: --collection"
    )


def test_evaluate_dataset_from_a_run_equals_udcg_contexts(
    tmp_path: Path, register: Callable[..., str]
) -> None:
    """``dataset=ir_datasets dataset.run=RUN``: the contexts ``udcg contexts`` writes."""
    from udcg.pipeline.datasets import ir_datasets_source

    files = _files(tmp_path, 7, titles=True, answers=False)
    name = register(
        docs=TsvDocs(LocalDownload(files["docs.tsv"]), TitledDoc),
        queries=TsvQueries(LocalDownload(files["topics.tsv"])),
        qrels=TrecQrels(LocalDownload(files["qrels.txt"]), {}),
    )
    data = ir_datasets_source(name, run=files["run.trec"], k=4)
    _contexts(
        str(files["run.trec"]), "--topics", str(files["topics.tsv"]), "--collection",
        str(files["docs.tsv"]), "--qrels", str(files["qrels.txt"]), "-k", "4", "-o",
        str(tmp_path / "c.jsonl"),
    )  # fmt: skip
    assert data.contexts == list(read_contexts(tmp_path / "c.jsonl"))
    assert (data.name, data.queries, data.corpus) == ("ir_datasets", [], [])


def test_evaluate_dataset_without_a_run_is_queries_and_corpus(
    tmp_path: Path, register: Callable[..., str]
) -> None:
    """Corpus = every document in file order; the first ``limit`` judged queries in file
    order; relevant = the corpus positions of grade >= 1 (compared with the files read
    independently)."""
    from udcg.pipeline.datasets import ir_datasets_source

    files = _files(tmp_path, 8, titles=True, answers=True)
    name = register(
        docs=TsvDocs(LocalDownload(files["docs.tsv"]), TitledDoc),
        queries=TsvQueries(LocalDownload(files["queries.tsv"]), AnswerQuery),
        qrels=TrecQrels(LocalDownload(files["qrels.txt"]), {}),
    )
    docs = [line.rstrip("\n").split("\t") for line in files["docs.tsv"].open()]
    queries = [line.rstrip("\n").split("\t") for line in files["queries.tsv"].open()]
    grades: dict[str, dict[str, int]] = {}
    for line in files["qrels.txt"].open():
        qid, _, doc_id, grade = line.split()
        grades.setdefault(qid, {})[doc_id] = int(grade)
    judged = [q for q in queries if q[0] in grades]
    assert len(judged) < len(queries)  # some are skipped
    data = ir_datasets_source(name, limit=5)
    assert [(p.doc_id, p.text, p.extra.get("title")) for p in data.corpus] == [
        (d, text, title or None) for d, title, text in docs
    ]
    assert [(q.qid, q.question, q.answers) for q in data.queries] == [
        (q[0], q[1], q[2:]) for q in judged[:5]
    ]
    position = {d[0]: i for i, d in enumerate(docs)}
    assert [q.relevant for q in data.queries] == [
        frozenset(position[d] for d, g in grades[q[0]].items() if g >= 1) for q in judged[:5]
    ]
    first_five = queries[: queries.index(judged[4]) + 1]
    skipped = len(first_five) - 5
    assert data.notes == ([f"{skipped} queries without qrels skipped"] if skipped else [])
    assert len(ir_datasets_source(name, limit=None).queries) == len(judged)


def test_the_evaluate_config_group_builds_it(
    tmp_path: Path, register: Callable[..., str], evaluate_config: Callable[..., Any]
) -> None:
    pytest.importorskip("hydra")
    from udcg.cli.hydra_config import build

    files = _files(tmp_path, 9, titles=False, answers=False)
    name = register(
        docs=TsvDocs(LocalDownload(files["docs.tsv"])),
        queries=TsvQueries(LocalDownload(files["topics.tsv"])),
        qrels=TrecQrels(LocalDownload(files["qrels.txt"]), {}),
    )
    cfg = evaluate_config("dataset=ir_datasets", f"dataset.id={name}", "k=3")
    data = build(cfg.dataset, "dataset")
    assert len(data.queries) == min(200, len(load_ir_dataset(name).qrels()))
    given = evaluate_config(
        "dataset=ir_datasets", f"dataset.id={name}", f"dataset.run={files['run.trec']}", "k=3"
    )
    contexts = build(given.dataset, "dataset").contexts
    assert contexts and all(len(c.passages) <= 3 for c in contexts)
    with pytest.raises(UDCGInputError, match=r"set dataset.id=\.\.\."):
        build(evaluate_config("dataset=ir_datasets").dataset, "dataset")


def _report_json(out: Path) -> dict[str, Any]:
    """report.json without what names files or times the run."""
    import json

    found = json.loads((out / "report.json").read_text())
    for key in ("runs", "seconds", "inputs"):  # inputs: the dataset id or the files
        found.pop(key)
    found["judge"].pop("cache")
    found["judge"].pop("calls")
    found["judge"].pop("cache_hits")
    for entry in found["labels"].values():
        entry.pop("file")
        entry.pop("resumed")
    return found


def test_udcg_report_takes_a_dataset_like_the_files(
    tmp_path: Path, register: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The one-command comparison: ``udcg report A B --dataset ID`` reports what the same
    runs give with ``--topics --collection --qrels`` (a precomputed judge)."""
    import json

    from udcg.cli.report import main as report

    files = _files(tmp_path, 10, titles=False, answers=False)
    texts = dict(line.rstrip("\n").split("\t") for line in files["docs.tsv"].open())
    questions = dict(line.rstrip("\n").split("\t") for line in files["topics.tsv"].open())
    rng = np.random.default_rng(10)
    probs = tmp_path / "probs.jsonl"
    probs.write_text(
        "".join(
            json.dumps({"question": q, "passage": t, "abstain_prob": float(rng.random())}) + "\n"
            for q in set(questions.values())
            for t in set(texts.values())
        )
    )
    judged = {line.split()[0] for line in files["qrels.txt"].open()}
    lines = [line for line in files["run.trec"].open() if line.split()[0] in judged]
    files["run.trec"].write_text("".join(lines))  # judged queries only: relevance from qrels
    (tmp_path / "b.trec").write_text(
        "".join(f"{' '.join(line.split()[:4])} {-float(line.split()[4])} b\n" for line in lines)
    )
    runs = [str(files["run.trec"]), str(tmp_path / "b.trec")]
    name = register(
        docs=TsvDocs(LocalDownload(files["docs.tsv"])),
        queries=TsvQueries(LocalDownload(files["topics.tsv"])),
        qrels=TrecQrels(LocalDownload(files["qrels.txt"]), {}),
    )
    judge = ("--judge", f"precomputed:{probs}", "-m", "UDCG@3,nDCG@3", "--n-resamples", "200")
    sources = {
        "dataset": ("--dataset", name),
        "files": (
            *("--topics", str(files["topics.tsv"]), "--collection", str(files["docs.tsv"])),
            *("--qrels", str(files["qrels.txt"])),
        ),
    }
    for label, given in sources.items():
        cache = ("--cache", str(tmp_path / f"{label}.sqlite"))
        assert report([*runs, *given, *judge, *cache, "-o", str(tmp_path / label)]) == 0
    capsys.readouterr()
    from_dataset, from_files = (_report_json(tmp_path / label) for label in sources)
    assert from_dataset == from_files
    assert from_dataset["relevance_from"] == "qrels"
    assert set(from_dataset["comparison"]["means"]) == {"run", "b"}
    for system in ("run", "b"):
        contexts = [tmp_path / label / "contexts" / f"{system}.jsonl" for label in sources]
        assert contexts[0].read_bytes() == contexts[1].read_bytes()


def test_the_benchmark_script_runs_on_a_small_collection(tmp_path: Path) -> None:
    """``bench/bench_docs_store.py`` (docs/benchmarks.md) on 2,000 passages: both ways give
    the same bytes and the table is printed."""
    import subprocess

    bench = Path(__file__).resolve().parents[2] / "bench" / "bench_docs_store.py"
    done = subprocess.run(
        [sys.executable, str(bench), "--passages", "2000", "--shapes", "20x10", "--rounds", "1",
         "--keep", str(tmp_path / "data")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "20x10: outputs byte-identical: True" in done.stdout
    assert re.search(r"^\| 0 \| 20 x 10 \| [\d.]+ \| \d+ \| [\d.]+ \|", done.stdout, re.M)
