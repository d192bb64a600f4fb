"""Tests for the JSONL data model: round trips, streaming, validation and array extraction."""

from __future__ import annotations

import dataclasses
import gzip
import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import (
    Context,
    Passage,
    abstain_probs,
    answer_probs,
    correctness,
    coverage_matrices,
    read_contexts,
    relevance_matrix,
    write_contexts,
)

MODEL = "smollm2-135m"

FULL_LINE = {
    "qid": "nq-17",
    "run": "bm25",
    "question": "who got the first nobel prize in physics",
    "answers": ["Wilhelm Conrad Röntgen"],
    "subqueries": ["Who received the first Nobel Prize in Physics?", "In which year?"],
    "passages": [
        {
            "doc_id": "w-88",
            "text": "Röntgen received the first prize in 1901.",
            "score": 12.1,
            "relevant": True,
            "abstain_prob": {MODEL: 0.031, "other": 0.5},
            "answer_prob": {MODEL: 0.62},
            "covers": [True, True],
            "title": "Nobel Prize",  # unknown passage key: kept in extra
        },
        {
            "doc_id": "w-90",
            "text": "Lyon is a city.",
            "score": 3.5,
            "relevant": False,
            "abstain_prob": {MODEL: 0.9},
            "covers": [False, False],
        },
    ],
    "outcomes": {MODEL: {"answer": "Röntgen", "correct": True}},
    "split": "dev",  # unknown context key: kept in extra
    "meta": {"nested": [1, 2, {"x": None}]},
}


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def good(qid: str = "q1", **fields) -> dict:
    line = {"qid": qid, "passages": [{"doc_id": "a", "relevant": True}]}
    line.update(fields)
    return line


# ------------------------------------------------------------------------------------------
# Round trips


def test_full_line_parses_every_field(tmp_path):
    path = write_lines(tmp_path / "c.jsonl", [json.dumps(FULL_LINE)])
    (ctx,) = read_contexts(path)
    assert ctx.qid == "nq-17"
    assert ctx.run == "bm25"
    assert ctx.answers == ["Wilhelm Conrad Röntgen"]
    assert len(ctx.subqueries) == 2
    assert [p.doc_id for p in ctx.passages] == ["w-88", "w-90"]
    first = ctx.passages[0]
    assert first.score == 12.1
    assert first.relevant is True
    assert first.abstain_prob == {MODEL: 0.031, "other": 0.5}
    assert first.answer_prob == {MODEL: 0.62} and ctx.passages[1].answer_prob == {}
    assert first.covers == [True, True]
    assert first.extra == {"title": "Nobel Prize"}
    assert ctx.passages[1].extra == {}
    assert ctx.outcomes[MODEL]["correct"] is True
    assert ctx.extra == {"split": "dev", "meta": {"nested": [1, 2, {"x": None}]}}
    assert ctx.source == (str(path), 1)


@pytest.mark.parametrize("name", ["c.jsonl", "c.jsonl.gz"])
def test_write_then_read_round_trip(tmp_path, name):
    src = write_lines(tmp_path / "src.jsonl", [json.dumps(FULL_LINE), json.dumps(good("q2"))])
    contexts = list(read_contexts(src))
    out = tmp_path / name
    assert write_contexts(out, contexts) == 2
    assert (out.read_bytes()[:2] == b"\x1f\x8b") == name.endswith(".gz")
    back = list(read_contexts(out))
    assert back == contexts
    assert back[0].extra == {"split": "dev", "meta": FULL_LINE["meta"]}
    assert back[0].passages[0].extra == {"title": "Nobel Prize"}
    # The written line is the original object: same keys, same values.
    with gzip.open(out, "rt") if name.endswith(".gz") else open(out) as handle:
        assert json.loads(handle.readline()) == FULL_LINE


def test_written_file_is_utf8_one_object_per_line_with_stable_key_order(tmp_path):
    ctx = Context(
        "q1",
        [Passage(text="Röntgen", relevant=False, doc_id="d1", extra={"z": 1})],
        extra={"a": 2},
        question="Wer?",
        run="bm25",
    )
    out = tmp_path / "o.jsonl"
    write_contexts(out, [ctx, ctx])
    raw = out.read_bytes()
    assert "Röntgen".encode() in raw  # ensure_ascii=False
    lines = raw.decode("utf-8").splitlines()
    assert len(lines) == 2 and lines[0] == lines[1]
    obj = json.loads(lines[0])
    assert list(obj) == ["qid", "run", "question", "passages", "a"]
    assert list(obj["passages"][0]) == ["doc_id", "text", "relevant", "z"]


def test_to_json_omits_absent_fields_and_from_json_inverts_it():
    ctx = Context("q", [Passage(doc_id="d")])
    assert ctx.to_json() == {"qid": "q", "passages": [{"doc_id": "d"}]}
    full = Context.from_json(FULL_LINE)
    assert full.source is None
    assert full.to_json() == FULL_LINE
    assert Context.from_json(full.to_json()) == full


def test_source_is_not_part_of_equality(tmp_path):
    a = write_lines(tmp_path / "a.jsonl", ["", json.dumps(good())])
    b = write_lines(tmp_path / "b.jsonl", [json.dumps(good())])
    (ca,), (cb,) = list(read_contexts(a)), list(read_contexts(b))
    assert ca.source == (str(a), 2) and cb.source == (str(b), 1)
    assert ca == cb


def test_integers_are_converted_and_numbers_become_floats(tmp_path):
    line = {
        "qid": 17,
        "passages": [
            {"doc_id": 5, "score": 3, "relevant": 2, "abstain_prob": {MODEL: 1}},
            {"doc_id": "6", "relevant": 0.5, "abstain_prob": {MODEL: 0}},
        ],
    }
    (ctx,) = read_contexts(write_lines(tmp_path / "i.jsonl", [json.dumps(line)]))
    assert ctx.qid == "17"
    p0, p1 = ctx.passages
    assert p0.doc_id == "5" and p1.doc_id == "6"
    assert type(p0.score) is float and p0.score == 3.0
    assert type(p0.relevant) is float and p0.relevant == 2.0
    assert type(p0.abstain_prob[MODEL]) is float and p0.abstain_prob[MODEL] == 1.0
    assert p1.abstain_prob[MODEL] == 0.0


def test_nulls_read_as_absent(tmp_path):
    line = {
        "qid": "q",
        "run": None,
        "answers": None,
        "outcomes": None,
        "passages": [{"doc_id": None, "relevant": None, "abstain_prob": None, "covers": None}],
    }
    (ctx,) = read_contexts(write_lines(tmp_path / "n.jsonl", [json.dumps(line)]))
    assert ctx.run is None and ctx.answers is None and ctx.outcomes == {}
    p = ctx.passages[0]
    assert (p.doc_id, p.relevant, p.abstain_prob, p.covers) == (None, None, {}, None)


def test_empty_passage_list_and_missing_doc_ids_are_allowed(tmp_path):
    lines = [json.dumps({"qid": "a", "passages": []}), json.dumps(good(passages=[{}, {}]))]
    a, b = read_contexts(write_lines(tmp_path / "e.jsonl", lines))
    assert a.passages == []
    assert [p.doc_id for p in b.passages] == [None, None]


def test_covers_length_is_free_without_subqueries(tmp_path):
    line = good(passages=[{"covers": [True]}, {"covers": [False, True, True]}])
    (ctx,) = read_contexts(write_lines(tmp_path / "c.jsonl", [json.dumps(line)]))
    assert [p.covers for p in ctx.passages] == [[True], [False, True, True]]


def test_dataclasses_are_frozen():
    ctx = Context("q", [Passage(doc_id="d")])
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.qid = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.passages[0].relevant = True  # type: ignore[misc]


def test_crlf_and_bom_are_accepted(tmp_path):
    path = tmp_path / "w.jsonl"
    text = "\ufeff" + json.dumps(good("a")) + "\r\n\r\n" + json.dumps(good("b")) + "\r\n"
    path.write_bytes(text.encode("utf-8"))
    assert [(c.qid, c.source[1]) for c in read_contexts(path)] == [("a", 1), ("b", 3)]


def test_numpy_scalars_are_written_as_python_values(tmp_path):
    ctx = Context(
        "q",
        [Passage(doc_id="d", relevant=np.int64(3) == 3, score=np.float32(0.5), abstain_prob={})],
        extra={"n": np.int64(7)},
    )
    write_contexts(tmp_path / "o.jsonl", [ctx])
    line = json.loads((tmp_path / "o.jsonl").read_text())
    assert line["passages"][0]["relevant"] is True
    assert line["passages"][0]["score"] == 0.5 and line["n"] == 7
    with pytest.raises(TypeError, match="object is not JSON serializable"):
        write_contexts(tmp_path / "p.jsonl", [Context("q", [], extra={"x": object()})])


# ------------------------------------------------------------------------------------------
# Writing failures leave the target untouched


@pytest.mark.parametrize(
    "bad",
    [
        Context("q", [Passage(score=float("nan"))]),
        Context("q", [], extra={"qid": "clash"}),
        Context("q", [Passage(extra={"relevant": 1})]),
    ],
)
def test_write_errors_leave_existing_file_untouched(tmp_path, bad):
    out = tmp_path / "o.jsonl"
    out.write_text("old\n")
    with pytest.raises(ValueError):
        write_contexts(out, [Context("fine", []), bad])
    assert out.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["o.jsonl"]  # no temporary file left


def _labelled(doc_id: str, relevant: object = True, prob: object = 0.1) -> Passage:
    return Passage(doc_id, relevant=relevant, abstain_prob={"j": prob})


UNREADABLE = {  # contexts built in memory that read_contexts refuses: (context, field, message)
    "duplicate doc_id": (
        Context("q1", [_labelled("a"), _labelled("a")]),
        "passages[1].doc_id",
        "duplicate doc_id 'a' (already at passages[0])",
    ),
    "correct 2": (
        Context("q1", [_labelled("a")], outcomes={"j": {"correct": 2}}),
        "outcomes.j.correct",
        "must be true or false, got the number 2",
    ),
    "abstain_prob 1.5": (
        Context("q1", [_labelled("a", prob=1.5)]),
        "passages[0].abstain_prob.j",
        "must be a probability in [0, 1], got 1.5",
    ),
    "relevant yes": (
        Context("q1", [_labelled("a", relevant="yes")]),
        "passages[0].relevant",
        "must be true, false or a finite number >= 0, got the string 'yes'",
    ),
    "outcome not an object": (
        Context("q1", [_labelled("a")], outcomes={"j": True}),
        "outcomes.j",
        "must be an object, got a boolean",
    ),
}


@pytest.mark.parametrize("case", UNREADABLE, ids=list(UNREADABLE))
def test_write_refuses_what_the_reader_refuses_and_leaves_the_file(tmp_path, case):
    bad, field, message = UNREADABLE[case]
    out = tmp_path / "o.jsonl"
    out.write_text("old\n")
    with pytest.raises(UDCGInputError) as err:
        write_contexts(out, [Context("fine", []), bad])
    assert str(err.value) == f"{out}:2: field '{field}': {message}"
    assert out.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["o.jsonl"]
    write_contexts(out, [bad], check=False)  # udcg's own output skips the check
    with pytest.raises(UDCGInputError, match=f"{out}:1: field '{re.escape(field)}'"):
        list(read_contexts(out))


def test_write_checks_numpy_scalars_and_tuples_as_written(tmp_path):
    ctx = Context(
        "q",
        [Passage("d", relevant=np.bool_(True), abstain_prob={"j": np.float32(0.5)})],
        answers=("x",),
        outcomes={"j": {"correct": np.bool_(False)}},
    )
    assert write_contexts(tmp_path / "o.jsonl", [ctx]) == 1
    back = next(read_contexts(tmp_path / "o.jsonl"))
    assert back.answers == ["x"] and back.outcomes == {"j": {"correct": False}}
    with pytest.raises(UDCGInputError, match=r"passages\[0\]\.abstain_prob\.j': must be a prob"):
        write_contexts(tmp_path / "p.jsonl", [Context("q", [_labelled("d", prob=np.float32(2))])])


def test_write_refuses_one_context_and_what_is_no_context(tmp_path):
    with pytest.raises(UDCGInputError, match=r"^field 'contexts': got one Context, expected an"):
        write_contexts(tmp_path / "o.jsonl", Context("q", []))
    with pytest.raises(UDCGInputError, match=r":1: must be a Context, got dict$"):
        write_contexts(tmp_path / "o.jsonl", [{"qid": "q", "passages": []}])
    with pytest.raises(UDCGInputError, match=r":1: field 'passages\[0\]': must be a Passage, got"):
        write_contexts(tmp_path / "o.jsonl", [Context("q", [{"doc_id": "d"}])])
    assert not (tmp_path / "o.jsonl").exists()


@pytest.mark.parametrize("contexts", [[], iter([])], ids=["list", "iterator"])
def test_writing_no_contexts_is_refused_and_leaves_the_file_untouched(tmp_path, contexts):
    out = tmp_path / "o.jsonl"
    out.write_text("old\n")
    with pytest.raises(UDCGInputError, match="no contexts") as err:
        write_contexts(out, contexts)
    assert err.value.field == "contexts"
    assert ("consumed already" in str(err.value)) == (not isinstance(contexts, list))
    assert out.read_text() == "old\n"


def test_a_reused_reader_is_refused_as_consumed(tmp_path):
    path = tmp_path / "c.jsonl"
    write_contexts(path, [Context("q", [])])
    contexts = read_contexts(path)
    assert len(list(contexts)) == 1
    with pytest.raises(UDCGInputError, match="may have been consumed already"):
        write_contexts(tmp_path / "again.jsonl", contexts)
    assert not (tmp_path / "again.jsonl").exists()


# ------------------------------------------------------------------------------------------
# Streaming


def test_reader_yields_lines_before_a_malformed_one(tmp_path):
    lines = [json.dumps(good(f"q{i}")) for i in range(2000)] + ['{"qid": "bad", "passages": [}']
    path = write_lines(tmp_path / "big.jsonl", lines)
    stream = read_contexts(path)
    assert next(stream).qid == "q0"
    assert [c.qid for c in itertools.islice(stream, 1999)][-1] == "q1999"
    with pytest.raises(UDCGInputError, match=r"big\.jsonl:2001: malformed JSON"):
        next(stream)


def test_reader_does_not_read_ahead_of_the_consumer(tmp_path):
    # A line appended after the first context was yielded is still seen: the reader had not
    # read (let alone parsed) the file to its end when it produced the first context.
    path = write_lines(tmp_path / "grow.jsonl", [json.dumps(good("first"))])
    stream = read_contexts(path)
    assert next(stream).qid == "first"
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(good("second")) + "\n")
    assert [c.qid for c in stream] == ["second"]


def test_missing_file_fails_at_call_time(tmp_path):
    with pytest.raises(UDCGInputError, match="no such file"):
        read_contexts(tmp_path / "absent.jsonl")


# ------------------------------------------------------------------------------------------
# Validation: every error names the file, the line and the field

PASSAGE_CASES = [
    # (passages, subqueries, field, fragment of the message)
    ([{"doc_id": "a"}, "b"], None, "passages[1]", "must be an object"),
    ([{"doc_id": d} for d in "abcb"], None, "passages[3].doc_id", "duplicate doc_id 'b'"),
    ([{"doc_id": 1}, {"doc_id": "1"}], None, "passages[1].doc_id", "duplicate"),
    ([{"doc_id": ["a"]}], None, "passages[0].doc_id", "non-empty string or an integer"),
    ([{"doc_id": ""}], None, "passages[0].doc_id", "non-empty"),
    ([{"text": 3}], None, "passages[0].text", "must be a string"),
    ([{"relevant": "yes"}], None, "passages[0].relevant", "true, false or a finite number"),
    ([{"relevant": -1}], None, "passages[0].relevant", ">= 0"),
    ([{}, {"relevant": float("nan")}], None, "passages[1].relevant", "nan"),
    ([{"relevant": float("inf")}], None, "passages[0].relevant", "inf"),
    ([{"score": "12"}], None, "passages[0].score", "finite number"),
    ([{"score": True}], None, "passages[0].score", "boolean"),
    ([{"score": float("-inf")}], None, "passages[0].score", "finite number"),
    ([{"abstain_prob": 0.3}], None, "passages[0].abstain_prob", "model -> probability"),
    ([{}, {}, {"abstain_prob": {MODEL: 1.5}}], None, f"passages[2].abstain_prob.{MODEL}", "[0, 1]"),
    ([{"abstain_prob": {MODEL: -0.1}}], None, f"passages[0].abstain_prob.{MODEL}", "[0, 1]"),
    ([{"abstain_prob": {MODEL: float("nan")}}], None, f"passages[0].abstain_prob.{MODEL}", "nan"),
    ([{"abstain_prob": {"m": float("inf")}}], None, "passages[0].abstain_prob.m", "inf"),
    ([{"abstain_prob": {"m": "0.5"}}], None, "passages[0].abstain_prob.m", "string"),
    ([{"abstain_prob": {"m": True}}], None, "passages[0].abstain_prob.m", "boolean"),
    ([{"abstain_prob": {"m": None}}], None, "passages[0].abstain_prob.m", "null"),
    ([{"answer_prob": 0.3}], None, "passages[0].answer_prob", "model -> probability"),
    ([{}, {"answer_prob": {MODEL: 1.5}}], None, f"passages[1].answer_prob.{MODEL}", "[0, 1]"),
    ([{"answer_prob": {"m": "0.5"}}], None, "passages[0].answer_prob.m", "string"),
    ([{"covers": True}], None, "passages[0].covers", "list of booleans"),
    ([{"covers": [True, 1]}], None, "passages[0].covers[1]", "true or false"),
    ([{"covers": [True]}], ["s1", "s2"], "passages[0].covers", "has 1 entries but"),
    ([{"covers": [True, False]}, {"covers": []}], ["s1", "s2"], "passages[1].covers", "2 subq"),
]

CONTEXT_CASES = [
    # (line object, field, fragment)
    ({"passages": []}, "qid", "missing"),
    ({"qid": "q"}, "passages", "missing"),
    ({"qid": "", "passages": []}, "qid", "non-empty"),
    ({"qid": "  ", "passages": []}, "qid", "blank"),
    ({"qid": True, "passages": []}, "qid", "got a boolean"),
    ({"qid": 1.5, "passages": []}, "qid", "non-empty string or an integer"),
    ({"qid": None, "passages": []}, "qid", "got null"),
    ({"qid": "q", "passages": {}}, "passages", "must be a list"),
    ({"qid": "q", "passages": [], "run": 3}, "run", "must be a string"),
    ({"qid": "q", "passages": [], "question": []}, "question", "must be a string"),
    ({"qid": "q", "passages": [], "answers": "Paris"}, "answers", "list of strings"),
    ({"qid": "q", "passages": [], "answers": ["a", 1]}, "answers[1]", "must be a string"),
    ({"qid": "q", "passages": [], "subqueries": [None]}, "subqueries[0]", "must be a string"),
    ({"qid": "q", "passages": [], "outcomes": []}, "outcomes", "model -> outcome"),
    ({"qid": "q", "passages": [], "outcomes": {MODEL: True}}, f"outcomes.{MODEL}", "object"),
    (
        {"qid": "q", "passages": [], "outcomes": {MODEL: {"correct": "yes"}}},
        f"outcomes.{MODEL}.correct",
        "true or false",
    ),
    (
        {"qid": "q", "passages": [], "outcomes": {MODEL: {"correct": 1}}},
        f"outcomes.{MODEL}.correct",
        "true or false",
    ),
]


def assert_error_on_line_3(tmp_path: Path, bad_line: str, field: str | None, fragment: str):
    """Line 1 is valid, line 2 blank, line 3 bad: the error must say line 3."""
    path = write_lines(tmp_path / "bad.jsonl", [json.dumps(good()), "", bad_line])
    stream = read_contexts(path)
    assert next(stream).qid == "q1"
    with pytest.raises(UDCGInputError) as info:
        next(stream)
    message = str(info.value)
    where = f"{path}:3: " + (f"field '{field}': " if field else "")
    assert message.startswith(where), message
    assert fragment in message, message
    assert (info.value.path, info.value.line, info.value.field) == (str(path), 3, field)


@pytest.mark.parametrize(("passages", "subqueries", "field", "fragment"), PASSAGE_CASES)
def test_invalid_passage_fields(tmp_path, passages, subqueries, field, fragment):
    line = {"qid": "q", "passages": passages}
    if subqueries is not None:
        line["subqueries"] = subqueries
    assert_error_on_line_3(tmp_path, json.dumps(line), field, fragment)


@pytest.mark.parametrize(("line", "field", "fragment"), CONTEXT_CASES)
def test_invalid_context_fields(tmp_path, line, field, fragment):
    assert_error_on_line_3(tmp_path, json.dumps(line), field, fragment)


@pytest.mark.parametrize(
    ("bad_line", "fragment"),
    [
        ('{"qid": "q", "passages": [}', "malformed JSON: Expecting value"),
        ('{"qid": "q", "passages": []} extra', "malformed JSON: Extra data"),
        ("[1, 2]", "expected a JSON object (one context per line), got a list"),
        ('"just a string"', "got the string 'just a string'"),
    ],
)
def test_lines_that_are_not_context_objects(tmp_path, bad_line, fragment):
    assert_error_on_line_3(tmp_path, bad_line, None, fragment)


def test_invalid_utf8_is_located(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(json.dumps(good()).encode() + b'\n{"qid": "R\xf6ntgen", "passages": []}\n')
    stream = read_contexts(path)
    next(stream)
    with pytest.raises(UDCGInputError, match=r"latin1\.jsonl:2: not valid UTF-8"):
        next(stream)


def test_truncated_gzip_is_an_input_error(tmp_path):
    path = tmp_path / "cut.jsonl.gz"
    lines = "".join(json.dumps(good(f"q{i}")) + "\n" for i in range(500))
    path.write_bytes(gzip.compress(lines.encode())[:-40])
    with pytest.raises(UDCGInputError, match=r"cut\.jsonl\.gz:\d+: cannot read the file"):
        list(read_contexts(path))


@pytest.mark.parametrize(
    ("name", "content"),
    [("empty.jsonl", b""), ("blank.jsonl", b"\n  \n\t\n"), ("empty.jsonl.gz", gzip.compress(b""))],
)
def test_empty_file_is_an_error(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(UDCGInputError) as info:
        list(read_contexts(path))
    assert str(info.value) == f"{path}: empty file: no contexts"


# ------------------------------------------------------------------------------------------
# Arrays for metrics


def contexts_file(tmp_path: Path) -> Path:
    lines = [
        {
            "qid": "a",
            "subqueries": ["s1", "s2"],
            "passages": [
                {
                    "doc_id": "1",
                    "relevant": True,
                    "abstain_prob": {MODEL: 0.1},
                    "covers": [True, False],
                },
                {
                    "doc_id": "2",
                    "relevant": 0.5,
                    "abstain_prob": {MODEL: 0.7},
                    "covers": [False, True],
                },
            ],
            "outcomes": {MODEL: {"correct": True}},
        },
        {
            "qid": "b",
            "subqueries": [],
            "passages": [
                {"doc_id": "3", "relevant": False, "abstain_prob": {MODEL: 1.0}, "covers": []}
            ],
            "outcomes": {MODEL: {"correct": False}, "other": {"answer": "x"}},
        },
        {"qid": "c", "subqueries": ["s"], "passages": [], "outcomes": {MODEL: {"correct": True}}},
    ]
    return write_lines(tmp_path / "ok.jsonl", [json.dumps(x) for x in lines])


def test_extraction_helpers_build_the_expected_arrays(tmp_path):
    contexts = list(read_contexts(contexts_file(tmp_path)))
    rel = relevance_matrix(contexts)
    assert [r.dtype for r in rel] == [np.float64] * 3
    np.testing.assert_array_equal(rel[0], [1.0, 0.5])
    np.testing.assert_array_equal(rel[1], [0.0])
    assert rel[2].shape == (0,)
    probs = abstain_probs(contexts, MODEL)
    np.testing.assert_array_equal(probs[0], [0.1, 0.7])
    np.testing.assert_array_equal(probs[1], [1.0])
    assert probs[2].shape == (0,)
    ok = correctness(contexts, MODEL)
    assert ok.dtype == np.float64
    np.testing.assert_array_equal(ok, [1.0, 0.0, 1.0])
    cov = coverage_matrices(contexts)
    assert [c.dtype for c in cov] == [np.bool_] * 3
    np.testing.assert_array_equal(cov[0], [[True, False], [False, True]])
    assert cov[1].shape == (1, 0) and cov[2].shape == (0, 1)


def test_helpers_accept_generators(tmp_path):
    path = contexts_file(tmp_path)
    assert len(relevance_matrix(read_contexts(path))) == 3
    assert correctness(read_contexts(path), MODEL).shape == (3,)


def missing_error(tmp_path: Path, lines: list[dict], call) -> UDCGInputError:
    path = write_lines(tmp_path / "m.jsonl", [json.dumps(x) for x in lines])
    contexts = list(read_contexts(path))
    with pytest.raises(UDCGInputError) as info:
        call(contexts)
    return info.value


def test_relevance_missing_names_file_line_and_passage(tmp_path):
    lines = [good("a"), good("b", run="dense", passages=[{"relevant": True}, {"doc_id": "x"}])]
    err = missing_error(tmp_path, lines, relevance_matrix)
    assert str(err) == (
        f"{tmp_path / 'm.jsonl'}:2: field 'passages[1].relevant': missing (qid 'b', run 'dense')"
    )


def test_abstain_prob_missing_lists_the_models_present(tmp_path):
    ok = {"relevant": True, "abstain_prob": {MODEL: 0.2}}
    lines = [good("a", passages=[ok]), good("b", passages=[ok, {"abstain_prob": {"llama": 0.1}}])]
    err = missing_error(tmp_path, lines, lambda cs: abstain_probs(cs, MODEL))
    assert str(err).startswith(
        f"{tmp_path / 'm.jsonl'}:2: field 'passages[1].abstain_prob.{MODEL}'"
    )
    assert "models present: llama" in str(err)
    err = missing_error(tmp_path, [good("a", passages=[{}])], lambda cs: abstain_probs(cs, MODEL))
    assert err.line == 1 and "models present" not in str(err)


def test_answer_prob_missing_names_its_own_field(tmp_path):
    both = {"relevant": True, "abstain_prob": {MODEL: 0.2}, "answer_prob": {MODEL: 0.7}}
    only_abstain = {"abstain_prob": {MODEL: 0.4}, "answer_prob": {"llama": 0.1}}
    lines = [good("a", passages=[both]), good("b", passages=[both, only_abstain])]
    err = missing_error(tmp_path, lines, lambda cs: answer_probs(cs, MODEL))
    assert str(err).startswith(f"{tmp_path / 'm.jsonl'}:2: field 'passages[1].answer_prob.{MODEL}'")
    assert "models present: llama" in str(err)
    contexts = list(read_contexts(tmp_path / "m.jsonl"))
    np.testing.assert_array_equal(answer_probs(contexts[:1], MODEL)[0], [0.7])
    np.testing.assert_array_equal(abstain_probs(contexts, MODEL)[1], [0.2, 0.4])
    # an empty map is not written; a non-empty one is, after abstain_prob
    assert "answer_prob" not in Passage(doc_id="x").to_json()
    both_json = Passage(answer_prob={MODEL: 0.5}, abstain_prob={MODEL: 0.1}).to_json()
    assert list(both_json) == ["abstain_prob", "answer_prob"]


@pytest.mark.parametrize(
    "outcomes", [None, {}, {MODEL: {"answer": "x"}}, {"llama": {"correct": True}}]
)
def test_correctness_missing_names_the_outcome_field(tmp_path, outcomes):
    lines = [good("a", outcomes={MODEL: {"correct": False}}), good("b", outcomes=outcomes)]
    err = missing_error(tmp_path, lines, lambda cs: correctness(cs, MODEL))
    assert (err.line, err.field) == (2, f"outcomes.{MODEL}.correct")
    assert str(err).startswith(
        f"{tmp_path / 'm.jsonl'}:2: field 'outcomes.{MODEL}.correct': missing"
    )
    assert ("judged outcome: llama" in str(err)) == (outcomes == {"llama": {"correct": True}})


def test_coverage_needs_subqueries_and_covers(tmp_path):
    err = missing_error(tmp_path, [good("a")], coverage_matrices)
    assert (err.line, err.field) == (1, "subqueries")
    lines = [good("a", subqueries=["s"], passages=[{"covers": [True]}, {"doc_id": "z"}])]
    err = missing_error(tmp_path, lines, coverage_matrices)
    assert (err.line, err.field) == (1, "passages[1].covers")


def test_helper_errors_for_contexts_built_in_memory():
    contexts = [Context("a", [Passage(relevant=True)]), Context("b", [Passage()])]
    with pytest.raises(UDCGInputError) as info:
        relevance_matrix(contexts)
    assert str(info.value) == "field 'passages[0].relevant': missing (context 1, qid 'b')"
