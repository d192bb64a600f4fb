"""Contexts from a run + topics + collection (udcg.io.joins.run_contexts): exact contexts in every
accepted file format, located errors, and a streamed collection read that keeps only what the
run needs."""

from __future__ import annotations

import gzip
import json
import re
import tracemalloc
import warnings
from pathlib import Path

import pytest

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, Passage, read_contexts, write_contexts
from udcg.io.formats.collection import Document, read_collection
from udcg.io.formats.topics import Topic, read_answers, read_topics
from udcg.io.formats.trec import qrels_from_dict, run_from_dict
from udcg.io.joins.run_contexts import build_run_contexts

DOCS = {f"d{i}": (f"Title {i}", f"text of d{i}") for i in range(1, 8)}
#: (qid, doc_id, score): q1 has a tie (d2, d3) and more than k=3 documents; q10 fewer.
RUN = [
    ("q1", "d1", 5.0),
    ("q1", "d2", 7.0),
    ("q1", "d3", 7.0),
    ("q1", "d4", 1.0),
    ("q1", "d5", 3.0),
    ("q2", "d6", 2.0),
    ("q2", "d1", 2.0),
    ("q10", "d4", 0.5),
]
QRELS = {"q1": {"d3": 2, "d1": 0, "d9": 1}, "q2": {"d1": 1}}  # q10 has no judgements
TOPICS = {"q1": "who is one", "q2": "what is two", "q10": "where is ten", "q99": "unused"}
#: trec_eval order, k = 3: (doc_id, score, relevant); queries by id as strings (q10 < q2)
EXPECTED = {
    "q1": [("d3", 7.0, True), ("d2", 7.0, False), ("d1", 5.0, False)],
    "q10": [("d4", 0.5, None)],
    "q2": [("d6", 2.0, False), ("d1", 2.0, True)],
}


def write(path: Path, lines: list[str]) -> Path:
    """``lines`` as a file, gzip-compressed when ``path`` ends in ``.gz``."""
    data = "".join(line + "\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def run_lines(rows: list[tuple[str, str, float]] = RUN, tag: str = "bm25") -> list[str]:
    return [f"{q} Q0 {d} {rank} {s} {tag}" for rank, (q, d, s) in enumerate(rows, start=1)]


COLLECTIONS = {  # name: (file name, lines, titles kept)
    "tsv": ("c.tsv", [f"{d}\t{text}" for d, (_, text) in DOCS.items()], False),
    "tsv_title": ("c.tsv", [f"{d}\t{t}\t{text}" for d, (t, text) in DOCS.items()], True),
    "tsv_dpr_header": (
        "c.tsv",
        ["id\ttext\ttitle", *(f"{d}\t{text}\t{t}" for d, (t, text) in DOCS.items())],
        True,
    ),
    "tsv_gz": ("c.tsv.gz", [f"{d}\t{text}" for d, (_, text) in DOCS.items()], False),
    "jsonl_beir": (
        "c.jsonl",
        [
            json.dumps({"_id": d, "title": t, "text": text, "metadata": {}})
            for d, (t, text) in DOCS.items()
        ],
        True,
    ),
    "jsonl_pyserini_gz": (
        "c.jsonl.gz",
        [json.dumps({"id": d, "contents": text}) for d, (_, text) in DOCS.items()],
        False,
    ),
    "jsonl_doc_id": (
        "c.jsonl",
        [json.dumps({"doc_id": d, "text": text}) for d, (_, text) in DOCS.items()],
        False,
    ),
}
TOPIC_FILES = {  # name: (file name, lines, answers of q1 from the topics)
    "tsv": ("t.tsv", [f"{q}\t{text}" for q, text in TOPICS.items()], None),
    "tsv_header_gz": ("t.tsv.gz", ["qid\ttext", *(f"{q}\t{t}" for q, t in TOPICS.items())], None),
    "jsonl_answers": (
        "t.jsonl",
        [
            json.dumps({"qid": q, "text": t, **({"answers": ["A1"]} if q == "q1" else {})})
            for q, t in TOPICS.items()
        ],
        ["A1"],
    ),
    "jsonl_beir": ("t.jsonl", [json.dumps({"_id": q, "text": t}) for q, t in TOPICS.items()], None),
    "jsonl_query_id_gz": (
        "t.jsonl.gz",
        [json.dumps({"query_id": q, "query": t}) for q, t in TOPICS.items()],
        None,
    ),
    "jsonl_question": (
        "t.jsonl",
        [json.dumps({"id": q, "question": t}) for q, t in TOPICS.items()],
        None,
    ),
}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """The default world: TSV collection and topics, a run, qrels and answers (TSV)."""
    name, lines, _ = COLLECTIONS["tsv"]
    return {
        "run": write(tmp_path / "run.trec", run_lines()),
        "topics": write(tmp_path / "topics.tsv", TOPIC_FILES["tsv"][1]),
        "collection": write(tmp_path / name, lines),
        "qrels": write(
            tmp_path / "qrels.trec",
            [f"{q} 0 {d} {g}" for q, docs in QRELS.items() for d, g in docs.items()],
        ),
        "answers": write(tmp_path / "answers.tsv", ["q2\tB\tb2", "q99\tnone"]),
    }


def build(files: dict[str, Path], k: int = 3, **options) -> list[Context]:
    args = {"qrels": files["qrels"], "answers": files["answers"], **options}
    return list(build_run_contexts(files["run"], files["topics"], files["collection"], k, **args))


def expected(titles: bool = False, q1_answers: list[str] | None = None) -> list[Context]:
    answers = {"q1": q1_answers, "q2": ["B", "b2"], "q10": None}
    return [
        Context(
            qid,
            [
                Passage(
                    doc_id=d,
                    text=DOCS[d][1],
                    score=score,
                    relevant=relevant,
                    extra={"title": DOCS[d][0]} if titles else {},
                )
                for d, score, relevant in ranked
            ],
            run="bm25",
            question=TOPICS[qid],
            answers=answers[qid],
        )
        for qid, ranked in EXPECTED.items()
    ]


def test_exact_contexts_order_ties_cut_relevance_answers(files):
    assert build(files) == expected()


@pytest.mark.parametrize("fmt", COLLECTIONS)
def test_every_collection_format(files, tmp_path, fmt):
    name, lines, titles = COLLECTIONS[fmt]
    files["collection"] = write(tmp_path / name, lines)
    assert build(files) == expected(titles=titles)


@pytest.mark.parametrize("fmt", TOPIC_FILES)
def test_every_topics_format(files, tmp_path, fmt):
    name, lines, q1_answers = TOPIC_FILES[fmt]
    files["topics"] = write(tmp_path / name, lines)
    assert build(files) == expected(q1_answers=q1_answers)


def test_answers_file_overrides_topics_answers_and_reads_jsonl(files, tmp_path):
    files["topics"] = write(tmp_path / "t.jsonl", TOPIC_FILES["jsonl_answers"][1])
    files["answers"] = write(
        tmp_path / "a.jsonl.gz", [json.dumps({"qid": "q1", "answers": ["X", "Y"]})]
    )
    answers = {ctx.qid: ctx.answers for ctx in build(files)}
    assert answers == {"q1": ["X", "Y"], "q10": None, "q2": None}
    assert read_answers(files["answers"]) == {"q1": ["X", "Y"]}


def test_without_qrels_and_answers_k_cut_and_run_name(files):
    contexts = list(
        build_run_contexts(files["run"], files["topics"], files["collection"], 1, run_name="mine")
    )
    assert [(c.qid, [p.doc_id for p in c.passages], c.run) for c in contexts] == [
        ("q1", ["d3"], "mine"),
        ("q10", ["d4"], "mine"),
        ("q2", ["d6"], "mine"),
    ]
    assert all(p.relevant is None for c in contexts for p in c.passages)
    assert all(c.answers is None for c in contexts)


def test_in_memory_run_and_qrels(files):
    scores: dict[str, dict[str, float]] = {}
    for qid, doc_id, score in RUN:
        scores.setdefault(qid, {})[doc_id] = score
    run = run_from_dict(scores)
    contexts = list(
        build_run_contexts(
            run, files["topics"], files["collection"], 3, qrels=qrels_from_dict(QRELS)
        )
    )
    want = [Context(c.qid, c.passages, question=c.question) for c in expected()]
    assert contexts == want  # no file: no tag, so no run name


def test_integer_ids_in_jsonl_match_the_run(tmp_path):
    run = write(tmp_path / "run", ["7 Q0 123 1 1.0 t", "7 Q0 45 2 0.5 t"])
    topics = write(tmp_path / "t.jsonl", [json.dumps({"qid": 7, "text": "q"})])
    collection = write(
        tmp_path / "c.jsonl",
        [json.dumps({"id": i, "contents": f"p{i}"}) for i in (45, 99, 123)],
    )
    (ctx,) = build_run_contexts(run, topics, collection, 5)
    assert (ctx.qid, [(p.doc_id, p.text) for p in ctx.passages]) == (
        "7",
        [("123", "p123"), ("45", "p45")],
    )


def test_output_is_readable_by_read_contexts(files, tmp_path):
    files["collection"] = write(tmp_path / "c.jsonl", COLLECTIONS["jsonl_beir"][1])
    contexts = build(files)
    assert write_contexts(tmp_path / "out.jsonl.gz", contexts) == 3
    assert list(read_contexts(tmp_path / "out.jsonl.gz")) == contexts


def test_collection_is_streamed_keeping_only_what_the_run_needs(tmp_path):
    """10,000 passages of 1 kB, a run over 50 of them: the reader keeps 50 passages and its
    peak Python memory stays far below the collection's 10 MB."""
    filler = "word " * 200
    collection = write(tmp_path / "big.tsv", [f"p{i}\t{filler}{i}" for i in range(10_000)])
    wanted = {f"p{i}" for i in range(0, 10_000, 200)}
    tracemalloc.start()
    try:
        kept = read_collection(collection, wanted)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert kept.keys() == wanted
    assert kept["p200"] == Document("p200", f"{filler}200")
    assert peak < 500_000, peak

    run = write(
        tmp_path / "run", [f"q{i % 5} Q0 {d} 1 {i} t" for i, d in enumerate(sorted(wanted))]
    )
    topics = write(tmp_path / "t.tsv", [f"q{i}\tquestion {i}" for i in range(5)])
    contexts = list(build_run_contexts(run, topics, collection, 10))
    assert sum(len(c.passages) for c in contexts) == 50


def test_topics_and_answers_readers_keep_only_the_asked_queries(files):
    assert read_topics(files["topics"], {"q2"}) == {"q2": Topic("q2", "what is two")}
    assert read_answers(files["answers"]) == {"q2": ["B", "b2"], "q99": ["none"]}


ERRORS = [
    # (file to replace, its lines, message pattern; FILE is that file's path)
    (
        "collection",
        [f"d{i}\ttext" for i in (1, 2, 4, 5, 6)],
        "{run}:3: field 'doc_id': 'd3' is not in the collection {collection}$",
    ),
    (
        "collection",
        [f"d{i}\ttext" for i in (2, 4, 5)],
        r"{run}:3: field 'doc_id': 'd3' is not in the collection {collection} "
        r"\(2 more documents missing too\)",
    ),
    (
        "topics",
        ["q1\tone", "q2\ttwo"],
        "{run}:8: field 'qid': 'q10' is not in the topics {topics}$",
    ),
    (
        "collection",
        ["d1\ta", "d3\tb", "d1\tc", *(f"d{i}\tx" for i in (2, 4, 5, 6))],
        r"{collection}:3: field 'doc_id': duplicate passage 'd1' \(first at line 1\)",
    ),
    (
        "topics",
        ["q1\ta", "", "q2\tb", "q10\tc", "q2\td"],
        r"{topics}:5: field 'qid': duplicate topic 'q2' \(first at line 3\)",
    ),
    (
        "collection",
        ["d1\ta", "d2\tb\tc"],
        r"{collection}:2: expected 2 columns \(doc_id, text\) separated by tabs, found 3",
    ),
    (
        "collection",
        ["d1 a"],
        r"{collection}:1: expected doc_id<TAB>text or doc_id<TAB>title<TAB>text, found 1 col",
    ),
    (
        "collection",
        ['{"id": "d1", "text": "a"}', '{"id": "d2", "text": '],
        "{collection}:2: malformed JSON",
    ),
    (
        "collection",
        ['{"id": "d1", "_id": "x", "text": "a"}'],
        "{collection}:1: field '_id': id and _id are both given; keep one",
    ),
    (
        "collection",
        ['{"id": "d1", "body": "a"}'],
        "{collection}:1: field 'text': missing: a passage needs one of the keys text, contents",
    ),
    (
        "collection",
        ['{"id": "d1", "text": 3}'],
        "{collection}:1: field 'text': must be a string, got the number 3",
    ),
    (
        "collection",
        ['{"id": "d1", "text": "a"}', '["d2", "b"]'],
        "{collection}:2: expected a JSON object, got a list",
    ),
    ("collection", ["\td"], "{collection}:1: field 'doc_id': must be a non-empty string"),
    (  # JSON escapes a lone surrogate; UTF-8 cannot write it into the contexts
        "collection",
        ['{"id": "d1", "text": "a\\ud800"}'],
        "{collection}:1: field 'text': holds a lone surrogate",
    ),
    ("topics", ['{"qid": "q1", "text": "\\udfff?"}'], "{topics}:1: field 'text': holds a lone"),
    (
        "answers",
        ['{"qid": "q1", "answers": ["x\\ud800"]}'],
        r"{answers}:1: field 'answers\[0\]': holds a lone",
    ),
    ("collection", ["", "  "], "{collection}: empty file: no passage lines"),
    ("collection", ["id\ttext\ttitle"], "{collection}: empty file: no passage lines"),
    ("topics", [], "{topics}: empty file: no topic lines"),
    (
        "topics",
        ['{"qid": "q1", "text": "a", "answers": "A"}'],
        "{topics}:1: field 'answers': must be a list of strings, got the string 'A'",
    ),
    (
        "answers",
        ['{"qid": "q1"}'],
        "{answers}:1: field 'answers': missing: expected a list of answer strings",
    ),
    ("run", ["q1 Q0 d1 1 1.0 t", "q1 Q0 d1 2 0.5 t"], "{run}:2: field 'doc_id': duplicate"),
    ("run", [], "{run}: empty file"),
    (  # two systems' runs in one file (cat a.run b.run): ranked as one, under the first tag
        "run",
        ["q1 Q0 d1 1 1.0 bm25", "q1 Q0 d2 2 0.5 bm25", "q1 Q0 d3 1 9.0 dense"],
        r"{run}:3: field 'tag': 'dense' after 'bm25' \(line 1\): a run file holds one system's",
    ),
]


@pytest.mark.parametrize(("name", "lines", "pattern"), ERRORS)
def test_errors_are_located(files, name, lines, pattern):
    write(files[name], lines)
    where = {key: re.escape(str(path)) for key, path in files.items()}
    with pytest.raises(UDCGInputError, match="^" + pattern.format(**where)):
        build(files)


@pytest.mark.parametrize("k", [0, -1, True, 2.0])
def test_k_must_be_a_positive_integer(files, k):
    with pytest.raises(UDCGInputError, match="field 'k': must be a positive integer"):
        build(files, k=k)


def test_qrels_of_another_doc_id_scheme_are_warned_of(files, tmp_path):
    """qrels that judge the run's queries but none of their top-k documents under any query
    (``1`` for ``d1``) label every passage not relevant: said in one warning."""
    from udcg.errors import UDCGWarning

    write(files["qrels"], ["q1 0 1 1", "q2 0 6 1"])
    with pytest.warns(UDCGWarning, match=r"the qrels judge 2 of the run's queries but none of"):
        contexts = build(files)
    assert not any(p.relevant for c in contexts for p in c.passages)
    write(files["qrels"], ["q1 0 d7 1", "q2 0 d1 0"])  # d1 is judged (for q2): no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", UDCGWarning)
        build(files)


@pytest.mark.parametrize(
    ("data", "tag"),
    [
        (b"q1 Q0 d1 1 2 bm25\nq1 Q0 d2 2 1 bm25\n", "bm25"),
        (b"q1\tQ0\td1\t1\t2\tbm25\r\nq1 Q0 d2 2 1 bm25\r\n", "bm25"),
        (b"\xef\xbb\xbfq1 Q0 d1 1 2 bm25\n\nq1 Q0 d2 2 1 bm25", "bm25"),  # BOM, blank, no end
        (b"q1 Q0 d1 1 2 bm25\rq1 Q0 d2 2 1 bm25\r", "bm25"),  # CR ends lines, as for Arrow
        (b"q1 Q0 d1 1 2 bm25\nq1 Q0 bm25 2 1 dense\n", None),  # the doc id is no tag
        (b"q1 Q0 d1 1 2 bm25\rq1 Q0 d2 2 1 dense\r", None),
        (b"q1 Q0 d1 1 2 bm25\nq1 Q0 d2 2 1 dense\tbm25\n", None),  # Arrow: one tag column
    ],
)
def test_one_tag_per_run_file_whatever_its_line_ends(tmp_path, data, tag):
    import gzip

    from udcg.io.formats.trec import read_trec_run
    from udcg.io.joins.run_contexts import run_tag

    for path, raw in ((tmp_path / "r.run", data), (tmp_path / "r.run.gz", gzip.compress(data))):
        path.write_bytes(raw)
        if tag is None:
            with pytest.raises(UDCGInputError, match=r":2: field 'tag': 'dense' after 'bm25'"):
                run_tag(read_trec_run(path))
        else:
            assert run_tag(read_trec_run(path)) == tag


def test_tags_are_compared_as_written_and_name_a_run_in_utf8(tmp_path):
    from udcg.io.formats.trec import read_trec_run
    from udcg.io.joins.run_contexts import run_tag

    path = tmp_path / "latin.run"
    path.write_bytes(b"q1 Q0 d1 1 2 syst\xe8me\nq1 Q0 d2 2 1 syst\xe9me\n")
    with pytest.raises(UDCGInputError, match=r":2: field 'tag': 'syst\\\\xe9me' after"):
        run_tag(read_trec_run(path))
    path.write_bytes(b"q1 Q0 d1 1 2 syst\xe8me\nq1 Q0 d2 2 1 syst\xe8me\n")
    with pytest.raises(UDCGInputError, match=r":1: field 'tag': .* is not valid UTF-8"):
        run_tag(read_trec_run(path))
    assert run_tag(read_trec_run(path), named=True) is None  # --name: the tag names nothing


def test_a_lone_surrogate_in_a_record_the_run_never_reads_is_no_error(files):
    """Only what the contexts hold must be written as UTF-8: a collection's unused record is
    not read."""
    write(files["collection"], [*(json.dumps({"id": d, "text": t}) for d, (_, t) in DOCS.items()),
                                '{"id": "d99", "text": "unused \\ud800"}'])  # fmt: skip
    assert build(files) == build(files)  # read, the bad record left alone
    # nor a field no reader uses (a url) of a record it reads
    lines = [json.dumps({"id": d, "text": t}) for d, (_, t) in DOCS.items()]
    lines[0] = lines[0][:-1] + ', "url": "http://x/\\udc80", "answers": "\\ud800"}'
    write(files["collection"], lines)
    topics = [json.dumps({"qid": q, "text": t}) for q, t in TOPICS.items()]
    topics[0] = topics[0][:-1] + ', "title": "\\ud800"}'  # a topic's title: no reader uses it
    write(files["topics"], topics)
    assert build(files)
