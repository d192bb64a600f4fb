"""Tests for the reference UDCG JSON reader and writer."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, Passage, abstain_probs, read_contexts, relevance_matrix
from udcg.io.formats.reference import read_reference_json, write_reference_json

SAMPLE = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "udcg-official-sample"
LLAMA = "meta-llama/Llama-3.2-3B-Instruct"


def sample(name: str) -> Path:
    if not SAMPLE.is_dir():
        pytest.skip(f"reference sample data not found at {SAMPLE} (../shared/data is absent)")
    return SAMPLE / name


def item(example_id="e1", **fields) -> dict:
    out = {
        "example_id": example_id,
        "question": "q?",
        "passages": [{"doc_id": "d1", "text": "t", "is_relevant": True}],
    }
    out.update(fields)
    return out


def dump(path: Path, obj, indent: int | None = 2) -> Path:
    path.write_text(json.dumps(obj, indent=indent), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------
# The reference implementation's own sample files


@pytest.mark.parametrize(
    "name", ["sample_dataset.json", "dataset_with_scores.json", "dataset_with_udcg.json"]
)
def test_sample_files_read(name):
    contexts = read_reference_json(sample(name))
    assert [c.qid for c in contexts] == ["example_1", "example_2", "example_3"]
    assert [len(c.passages) for c in contexts] == [5, 5, 5]
    assert contexts[0].question == "What is the capital of France?"
    assert [p.doc_id for p in contexts[2].passages] == [f"doc_{i}" for i in range(11, 16)]
    assert [p.relevant for p in contexts[0].passages] == [True, True, False, False, False]
    assert contexts[1].passages[0].text.startswith("Romeo and Juliet is a tragedy")
    has_scores = name != "sample_dataset.json"
    assert all(bool(p.abstain_prob) == has_scores for c in contexts for p in c.passages)
    assert all(p.extra == {} for c in contexts for p in c.passages)
    assert ("udcg" in contexts[0].extra) == (name == "dataset_with_udcg.json")


def test_sample_scores_map_to_abstain_prob_and_reproduce_stored_udcg():
    contexts = read_reference_json(sample("dataset_with_udcg.json"))
    assert contexts[0].passages[0].abstain_prob == {LLAMA: 2.086162567138672e-06}
    assert contexts[0].passages[2].abstain_prob[LLAMA] == 0.1318359375
    # The stored outputs were computed with gamma = 0.333 from exactly these fields.
    rel = relevance_matrix(contexts)
    utility = [1.0 - p for p in abstain_probs(contexts, LLAMA)]
    mean = np.array(
        [np.mean(r * u - 0.333 * (1 - r) * u) for r, u in zip(rel, utility, strict=True)]
    )
    stored = [c.extra["udcg"][LLAMA] for c in contexts]
    np.testing.assert_allclose(1 / (1 + np.exp(-mean)), stored, rtol=1e-12)


def test_sample_item_sources_are_the_lines_where_items_start():
    path = sample("dataset_with_udcg.json")
    starts = [n for n, line in enumerate(path.read_text().splitlines(), start=1) if line == "  {"]
    contexts = read_reference_json(path)
    assert [c.source for c in contexts] == [(str(path), n) for n in starts]


@pytest.mark.parametrize(
    "name", ["sample_dataset.json", "dataset_with_scores.json", "dataset_with_udcg.json"]
)
def test_sample_round_trip_reproduces_the_document(tmp_path, name):
    src = sample(name)
    contexts = read_reference_json(src)
    out = tmp_path / name
    assert write_reference_json(out, contexts) == 3
    assert json.loads(out.read_text()) == json.loads(src.read_text())
    assert read_reference_json(out) == contexts


# ------------------------------------------------------------------------------------------
# Round trips of what the format cannot express natively


def test_round_trip_keeps_contexts_fields_and_models_info_extras(tmp_path):
    line = {
        "qid": "nq-1",
        "run": "bm25",
        "question": "who?",
        "answers": ["Röntgen"],
        "subqueries": ["s1"],
        "passages": [
            {
                "doc_id": "a",
                "score": 2.5,
                "relevant": 1.0,
                "abstain_prob": {"m": 0.25},
                "covers": [True],
                "title": "T",
            }
        ],
        "outcomes": {"m": {"correct": False}},
        "split": "dev",
    }
    ctx = Context.from_json(line)
    for name in ["r.json", "r.json.gz"]:
        out = tmp_path / name
        write_reference_json(out, [ctx])
        assert (out.read_bytes()[:2] == b"\x1f\x8b") == name.endswith(".gz")
        (back,) = read_reference_json(out)
        assert back == ctx
    raw = json.loads(gzip.decompress((tmp_path / "r.json.gz").read_bytes()))
    assert raw[0]["example_id"] == "nq-1"
    assert raw[0]["passages"][0]["is_relevant"] == 1.0
    assert raw[0]["passages"][0]["models_info"] == {"m": {"no_res_prob": 0.25}}
    assert "Röntgen" in (tmp_path / "r.json").read_text(encoding="utf-8")


def test_models_info_keys_besides_no_res_prob_are_kept(tmp_path):
    info = {"m": {"no_res_prob": 0.5, "logprob": -0.69}, "n": {"note": "not scored"}}
    src = dump(tmp_path / "i.json", [item(passages=[{"doc_id": "d", "models_info": info}])])
    (ctx,) = read_reference_json(src)
    assert ctx.passages[0].abstain_prob == {"m": 0.5}
    assert ctx.passages[0].extra == {
        "models_info": {"m": {"logprob": -0.69}, "n": {"note": "not scored"}}
    }
    out = tmp_path / "o.json"
    write_reference_json(out, [ctx])
    assert json.loads(out.read_text())[0]["passages"][0]["models_info"] == info


def test_jsonl_to_reference_to_jsonl(tmp_path):
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text(json.dumps({"qid": 7, "passages": [{"doc_id": 1, "relevant": False}]}) + "\n")
    contexts = list(read_contexts(jsonl))
    write_reference_json(tmp_path / "r.json", contexts)
    assert read_reference_json(tmp_path / "r.json") == contexts


def test_write_clash_raises_and_leaves_file_untouched(tmp_path):
    out = tmp_path / "o.json"
    out.write_text("old")
    bad = Context("q", [Passage(relevant=True, extra={"is_relevant": False})])
    with pytest.raises(ValueError, match="is_relevant"):
        write_reference_json(out, [bad])
    assert out.read_text() == "old"


# ------------------------------------------------------------------------------------------
# Errors


def error(path: Path) -> UDCGInputError:
    with pytest.raises(UDCGInputError) as info:
        read_reference_json(path)
    return info.value


def test_bad_no_res_prob_names_item_passage_and_model(tmp_path):
    passages = [{"doc_id": f"d{i}", "models_info": {LLAMA: {"no_res_prob": 0.5}}} for i in range(3)]
    passages[2]["models_info"][LLAMA]["no_res_prob"] = 1.5
    path = dump(tmp_path / "ref.json", [item("e0"), item("e1", passages=passages)])
    err = error(path)
    field = f"[1].passages[2].models_info.{LLAMA}.no_res_prob"
    assert err.field == field
    # Item 1 starts on the line after item 0's last line.
    start = next(n for n, line in enumerate(path.read_text().splitlines(), 1) if '"e1"' in line) - 1
    assert str(err).startswith(f"{path}:{start}: field '{field}': must be a probability in [0, 1]")


@pytest.mark.parametrize(
    ("items", "field", "fragment"),
    [
        ([item(), 3], "[1]", "must be an object"),
        ([{"passages": []}], "[0].example_id", "missing"),
        ([{"example_id": "e"}], "[0].passages", "missing"),
        ([item(example_id=True)], "[0].example_id", "boolean"),
        ([item(), item(passages="p")], "[1].passages", "must be a list"),
        (
            [item(passages=[{"doc_id": "d", "is_relevant": "yes"}])],
            "[0].passages[0].is_relevant",
            "true, false",
        ),
        (
            [item(passages=[{"doc_id": "d"}, {"doc_id": "d"}])],
            "[0].passages[1].doc_id",
            "duplicate",
        ),
        ([item(passages=[{"models_info": []}])], "[0].passages[0].models_info", "object"),
        ([item(passages=[{"models_info": {"m": 0.2}}])], "[0].passages[0].models_info.m", "object"),
        (
            [item(passages=[{"models_info": {"m": {"no_res_prob": "x"}}}])],
            "[0].passages[0].models_info.m.no_res_prob",
            "string",
        ),
        ([item(question=1)], "[0].question", "must be a string"),
        (
            [item(subqueries=["a"], passages=[{"covers": []}])],
            "[0].passages[0].covers",
            "1 subqueries",
        ),
    ],
)
def test_invalid_items(tmp_path, items, field, fragment):
    path = dump(tmp_path / "bad.json", items, indent=None)
    err = error(path)
    assert str(err).startswith(f"{path}:1: field '{field}': "), str(err)
    assert fragment in str(err)


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ('[\n  {"example_id": "a",\n   "passages": []\n  }\n  {"x": 1}\n]', 5, "Expecting ','"),
        ('[\n  {"example_id": "a", "passages": []},\n]', 3, "Expecting value"),
        ('[{"example_id": "a", "passages": []}]\n]', 2, "Extra data"),
        ('[{"example_id": "a", "passages": [}]', 1, "Expecting value"),
        ("[", 1, "Expecting value"),
    ],
)
def test_malformed_json_reports_json_line(tmp_path, text, line, fragment):
    path = tmp_path / "m.json"
    path.write_text(text)
    err = error(path)
    assert str(err).startswith(f"{path}:{line}: malformed JSON: {fragment}"), str(err)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"[]", "empty file: no contexts"),
        (b"  \n", "empty file: no contexts"),
        (
            b'{"example_id": "a"}',
            "expected a JSON list of items (reference UDCG format), got an object",
        ),
        (b"3", "expected a JSON list of items (reference UDCG format), got the number 3"),
    ],
)
def test_not_a_list_of_items(tmp_path, content, message):
    path = tmp_path / "x.json"
    path.write_bytes(content)
    assert str(error(path)) == f"{path}: {message}"


def test_invalid_utf8_reports_its_line(tmp_path):
    path = tmp_path / "u.json"
    path.write_bytes(b'[\n {"example_id": "R\xf6ntgen",\n  "passages": []}]')
    err = error(path)
    assert str(err) == f"{path}:2: not valid UTF-8"


def test_gzip_input_is_detected_by_content(tmp_path):
    path = tmp_path / "ref.bin"
    path.write_bytes(gzip.compress(json.dumps([item()]).encode()))
    (ctx,) = read_reference_json(path)
    assert ctx.qid == "e1" and ctx.passages[0].relevant is True
