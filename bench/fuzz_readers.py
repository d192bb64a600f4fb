"""Fuzz every udcg reader with damaged versions of valid inputs.

    python bench/fuzz_readers.py --per-reader 10000
    python bench/fuzz_readers.py --per-reader 500 --readers trec_run,contexts --seed 3
    python bench/fuzz_readers.py --per-reader 10000 --readers contexts,contexts_score

For each reader, hypothesis draws a valid input (one file or a set of files), then mostly
damages it: byte flips, truncation, inserted or deleted bytes and tokens, odd tokens (NaN,
infinities, huge numbers, unicode spaces), edited JSON nodes, deep nesting, random unicode,
invalid UTF-8, removed or added columns, other line endings, empty files, gzip-compressed
variants and broken gzip streams; contexts files also get duplicate keys (the later value
wins in JSON), repeated or swapped lines and many-passage lines. The damage comes from a
``random.Random`` seeded by hypothesis: hypothesis draws zero for about a third of its
choices, which would pick the first option of every list (the first field of a file, the
first odd token) most of the time.

The property: the reader returns normally or raises :class:`~udcg.errors.UDCGInputError`
naming one of its input files (and, for line-based formats, a line unless the problem concerns
the whole file); never another exception, never a call longer than ``--time-limit`` seconds;
an undamaged input is read without error. ``contexts_score`` follows a contexts file through
the whole ``udcg score`` path (reader, relevance and utility matrices, UDCG and the classic
metrics, the per-context output), with inputs every passage of which holds the labels it needs.

The table gives per reader the inputs tried and how each call ended; the first tracebacks of
every failure kind follow it. ``tests/io/test_fuzz_readers.py`` imports this file for the
same generators with a small budget.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import io
import json
import math
import random
import re
import shutil
import signal
import struct
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from safetensors import SafetensorError
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import read_contexts
from udcg.io.formats.reference import read_reference_json
from udcg.io.formats.trec import read_trec_qrels, read_trec_run
from udcg.io.joins.trec_contexts import read_outcomes, read_trec_contexts, read_utilities
from udcg.io.weights.files import card_digest
from udcg.theta import UDCGTheta

Files = dict[str, bytes]
Mutation = Callable[[random.Random, bytes], bytes]

# --------------------------------------------------------------------------------------------
# damage to one file's bytes

#: Tokens that replace or join the tokens of a valid file.
TOKENS = [
    *(b"NaN", b"-Infinity", b"Infinity", b"nan", b"inf", b"-inf", b"infinity", b"1e999"),
    *(b"-1e999", b"1e-999", b"9" * 30, b"9" * 400, b"9" * 5000, b"-0", b"0", b"-1", b"2"),
    *(b"1_000", b"+1", b".5", b"0x10", b"1e", b"--1", "٣".encode(), "½".encode()),
    *(b"true", b"false", b"True", b"null", b"None", b'""', b'" "', b"[]", b"{}", b"[[]]"),
    *(b'"\\ud800"', b'"\\u0000"', b"\x00", b"\t", b"\r", b"\x0b", b"\x0c", b"\x1c"),
    *("\u00a0".encode(), "\u2028".encode(), "\u3000".encode(), "\x85".encode()),
    *(b"F16", b"BF16", b"I64", b"BOOL", b"F8_E4M3", b"__metadata__"),
]
#: Values a JSON edit puts in place of a node.
ODD_JSON = [
    *(math.nan, math.inf, -math.inf, 1e308, 10**30, 10**400, -1, 0, 2, 0.5, True, False, None),
    *("", " ", "x", "\u00a0", [], {}, [None], [[True]], {"": 1}),
]
#: Byte sequences that are not UTF-8: stray continuation, truncated lead, surrogate, overlong.
INVALID_UTF8 = [b"\xff", b"\x80", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xc0\x80", b"\xf8"]
_TOKEN = re.compile(rb'[^\s\[\]{}:,"]+')


def _insert(rng: random.Random, data: bytes, piece: bytes) -> bytes:
    i = rng.randint(0, len(data))
    return data[:i] + piece + data[i:]


def _token_span(rng: random.Random, data: bytes) -> tuple[int, int] | None:
    spans = [m.span() for m in _TOKEN.finditer(data)]
    return rng.choice(spans) if spans else None


def flip_byte(rng: random.Random, data: bytes) -> bytes:
    if not data:
        return data
    i = rng.randrange(len(data))
    return data[:i] + bytes([data[i] ^ rng.randint(1, 255)]) + data[i + 1 :]


def truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randint(0, len(data))]


def delete_span(rng: random.Random, data: bytes) -> bytes:
    i = rng.randint(0, len(data))
    return data[:i] + data[i + rng.randint(1, 16) :]


def insert_bytes(rng: random.Random, data: bytes) -> bytes:
    return _insert(rng, data, rng.randbytes(rng.randint(1, 8)))


def insert_text(rng: random.Random, data: bytes) -> bytes:
    """Random code points (lone surrogates included: they encode to invalid UTF-8)."""
    top = rng.choice([0x80, 0x800, 0x110000])
    text = "".join(chr(rng.randrange(top)) for _ in range(rng.randint(1, 8)))
    return _insert(rng, data, text.encode("utf-8", "surrogatepass"))


def insert_invalid_utf8(rng: random.Random, data: bytes) -> bytes:
    return _insert(rng, data, rng.choice(INVALID_UTF8))


def replace_token(rng: random.Random, data: bytes) -> bytes:
    span = _token_span(rng, data)
    return data if span is None else data[: span[0]] + rng.choice(TOKENS) + data[span[1] :]


def insert_token(rng: random.Random, data: bytes) -> bytes:
    return _insert(rng, data, rng.choice([b" ", b""]) + rng.choice(TOKENS))


def delete_token(rng: random.Random, data: bytes) -> bytes:
    span = _token_span(rng, data)
    return data if span is None else data[: span[0]] + data[span[1] :]


def duplicate_token(rng: random.Random, data: bytes) -> bytes:
    span = _token_span(rng, data)
    if span is None:
        return data
    start, end = span
    return data[:end] + b" " + data[start:end] + data[end:]


def _edit_line(
    rng: random.Random, data: bytes, edit: Callable[[list[bytes]], list[bytes]]
) -> bytes:
    lines = data.split(b"\n")
    i = rng.randrange(len(lines))
    lines[i] = b" ".join(edit(lines[i].split()))
    return b"\n".join(lines)


def drop_column(rng: random.Random, data: bytes) -> bytes:
    def edit(fields: list[bytes]) -> list[bytes]:
        if fields:
            del fields[rng.randrange(len(fields))]
        return fields

    return _edit_line(rng, data, edit)


def add_column(rng: random.Random, data: bytes) -> bytes:
    def edit(fields: list[bytes]) -> list[bytes]:
        fields.insert(rng.randint(0, len(fields)), rng.choice([b"x", *TOKENS]))
        return fields

    return _edit_line(rng, data, edit)


def edit_lines(rng: random.Random, data: bytes) -> bytes:
    """Delete, duplicate or swap lines."""
    lines = data.split(b"\n")
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    how = rng.choice(["delete", "duplicate", "swap"])
    if how == "delete":
        del lines[i]
    elif how == "duplicate":
        lines.insert(j, lines[i])
    else:
        lines[i], lines[j] = lines[j], lines[i]
    return b"\n".join(lines)


def line_endings(rng: random.Random, data: bytes) -> bytes:
    return data.replace(b"\n", rng.choice([b"\r\n", b"\r", b"\n\n", b"\x0b"]))


def deep_nesting(rng: random.Random, data: bytes) -> bytes:
    opener = rng.choice([b"[", b'{"a":'])
    return _insert(rng, data, opener * rng.choice([100, 5_000, 200_000]))


def empty(rng: random.Random, data: bytes) -> bytes:
    return rng.choice([b"", b"\n", b" \n\t\n", b"\xef\xbb\xbf", b"\r\n"])


def prepend_bom(rng: random.Random, data: bytes) -> bytes:
    return b"\xef\xbb\xbf" + data


def _json_nodes(value: Any, path: tuple = ()) -> Iterator[tuple]:
    """The path (keys and indices) of every node below ``value``."""
    if isinstance(value, dict):
        items: Iterable[tuple[Any, Any]] = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for key, child in items:
        yield (*path, key)
        yield from _json_nodes(child, (*path, key))


def json_edit(rng: random.Random, data: bytes) -> bytes:
    """Replace or delete one node of the JSON document, or of one line of JSON lines, and
    write it back (NaN and infinities as Python's json writes them); half the time the node
    is a top-level field. Data that is not JSON is left as it is."""
    lines = data.split(b"\n")
    i = None
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        i = rng.randrange(len(lines))
        try:
            doc = json.loads(lines[i])
        except (ValueError, RecursionError):
            return data
    paths = list(_json_nodes(doc))
    if rng.random() < 0.5:
        paths = [path for path in paths if len(path) == 1]
    if not paths:
        return data
    *parents, key = rng.choice(paths)
    parent = doc
    for step in parents:
        parent = parent[step]
    if rng.random() < 0.5:
        del parent[key]
    else:
        parent[key] = rng.choice(ODD_JSON)
    text = json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogatepass")
    if i is None:
        return text
    lines[i] = text
    return b"\n".join(lines)


MUTATIONS: list[Mutation] = [
    json_edit,
    flip_byte,
    truncate,
    delete_span,
    insert_bytes,
    insert_text,
    insert_invalid_utf8,
    replace_token,
    replace_token,  # twice as likely: many checks sit behind one valid token
    insert_token,
    delete_token,
    duplicate_token,
    drop_column,
    add_column,
    edit_lines,
    line_endings,
    deep_nesting,
    empty,
    prepend_bom,
]
_GZIP_DAMAGE: list[Mutation] = [flip_byte, truncate, insert_bytes, delete_span]


def mutate(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """``(bytes, recipe)``: ``data`` after 1-3 mutations, maybe gzipped, maybe a broken gzip.

    For JSON, 40% of the recipes are JSON edits only: the file stays well-formed and its
    values reach the checks behind the parser.
    """
    n = rng.randint(1, 3)
    edited = data
    if rng.random() < 0.4:
        for _ in range(n):
            edited = json_edit(rng, edited)
    if edited != data:
        data, recipe = edited, ["json_edit"] * n
    else:
        steps = rng.choices(MUTATIONS, k=n)
        for step in steps:
            data = step(rng, data)
        recipe = [step.__name__ for step in steps]
    wrap = rng.choice(["plain", "plain", "gzip", "broken gzip"])
    if wrap != "plain":
        data = gzip.compress(data, mtime=0)
        recipe.append("gzip")
    if wrap == "broken gzip":
        damage = rng.choice(_GZIP_DAMAGE)
        data = damage(rng, data)
        recipe.append(damage.__name__)
    return data, "+".join(recipe)


_KEY = re.compile(rb'"([^"\\]{1,20})":')


def duplicate_key(rng: random.Random, data: bytes) -> bytes:
    """One key of the file written again in an object, with an odd value: before the object's
    last ``}`` (the odd value wins) or after its ``{`` (the original wins)."""
    keys = _KEY.findall(data)
    if not keys:
        return data
    value = json.dumps(rng.choice(ODD_JSON)).encode()
    key = b'"' + rng.choice(keys) + b'": ' + value
    if rng.random() < 0.5:
        ends = [i for i in range(1, len(data)) if data[i : i + 1] == b"}" and data[i - 1] != 123]
        if ends:
            i = rng.choice(ends)
            return data[:i] + b", " + key + data[i:]
    starts = [m.end() for m in re.finditer(rb"\{(?=\")", data)]
    if not starts:
        return data
    i = rng.choice(starts)
    return data[:i] + key + b", " + data[i:]


def shuffle_lines(rng: random.Random, data: bytes) -> bytes:
    """Lines repeated (a context twice), swapped or dropped."""
    lines = data.splitlines(keepends=True)
    if not lines:
        return data
    how = rng.choice(["repeat", "swap", "drop"])
    i = rng.randrange(len(lines))
    if how == "repeat":
        lines.insert(rng.randrange(len(lines) + 1), lines[i])
    elif how == "swap":
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    else:
        del lines[i]
    return b"".join(lines)


def many_passages(rng: random.Random, data: bytes) -> bytes:
    """One line's passages repeated to a few thousand: large lists, repeated doc ids."""
    lines = data.split(b"\n")
    i = rng.randrange(len(lines))
    try:
        obj = json.loads(lines[i])
    except (ValueError, RecursionError):
        return data
    if not isinstance(obj, dict) or not isinstance(obj.get("passages"), list):
        return data
    obj["passages"] = obj["passages"] * rng.choice([2, 100, 3000])
    lines[i] = json.dumps(obj).encode()
    return b"\n".join(lines)


CONTEXTS_MUTATIONS: list[Mutation] = [duplicate_key, duplicate_key, shuffle_lines, many_passages]


def mutate_contexts(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """:func:`mutate`, after one of :data:`CONTEXTS_MUTATIONS` one time in three."""
    first = []
    if rng.random() < 1 / 3:
        step = rng.choice(CONTEXTS_MUTATIONS)
        data, first = step(rng, data), [step.__name__]
    data, recipe = mutate(rng, data) if not first or rng.random() < 0.5 else (data, "")
    return data, "+".join([*first, *filter(None, [recipe])])


# --------------------------------------------------------------------------------------------
# valid inputs

_ID_CHARS = st.sampled_from("abcxyz019-_.:/#éß漢")
ids = st.text(_ID_CHARS, min_size=1, max_size=5)
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
unit = st.floats(0.0, 1.0)
seps = st.sampled_from([" ", "\t", "  ", " \t"])


@st.composite
def pairs(draw: st.DrawFn, max_queries: int = 3, max_docs: int = 4) -> list[tuple[str, str]]:
    """Distinct (qid, doc_id) pairs, grouped by query."""
    qids = draw(st.lists(ids, min_size=1, max_size=max_queries, unique=True))
    return [
        (q, d)
        for q in qids
        for d in draw(st.lists(ids, min_size=1, max_size=max_docs, unique=True))
    ]


def _lines(draw: st.DrawFn, rows: list[list[str]]) -> bytes:
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    text = ending.join(draw(seps).join(row) for row in rows)
    return (text + draw(st.sampled_from([ending, ""]))).encode("utf-8")


def _number(draw: st.DrawFn, value: float) -> str:
    return draw(st.sampled_from([repr(value), f"{value:.6g}", f"{value:e}"]))


@st.composite
def run_text(draw: st.DrawFn, rows: list[tuple[str, str]] | None = None) -> bytes:
    """A TREC run: ``qid Q0 doc_id rank score tag``."""
    rows = rows if rows is not None else draw(pairs())
    return _lines(
        draw,
        [
            [q, "Q0", d, str(rank), _number(draw, draw(finite)), "tag"]
            for rank, (q, d) in enumerate(rows, start=1)
        ],
    )


@st.composite
def qrels_text(draw: st.DrawFn, rows: list[tuple[str, str]] | None = None) -> bytes:
    """TREC qrels: ``qid iteration doc_id grade``."""
    rows = rows if rows is not None else draw(pairs())
    return _lines(draw, [[q, "0", d, str(draw(st.integers(-1, 3)))] for q, d in rows])


@st.composite
def utilities_text(draw: st.DrawFn, rows: list[tuple[str, str]] | None = None) -> bytes:
    """``qid doc_id p`` lines."""
    rows = rows if rows is not None else draw(pairs())
    return _lines(draw, [[q, d, _number(draw, draw(unit))] for q, d in rows])


_CORRECT = st.sampled_from(["1", "0", "true", "false", "TRUE", "False"])


@st.composite
def outcomes_text(draw: st.DrawFn, qids: list[str] | None = None) -> bytes:
    """``qid correct`` lines."""
    qids = qids if qids is not None else draw(st.lists(ids, min_size=1, max_size=4, unique=True))
    return _lines(draw, [[q, draw(_CORRECT)] for q in qids])


@st.composite
def trec_context_files(draw: st.DrawFn) -> Files:
    """A run, qrels for some of its queries, utilities of every ranked document, outcomes."""
    rows = draw(pairs())
    qids = list(dict.fromkeys(q for q, _ in rows))
    judged = draw(st.lists(st.sampled_from(qids), min_size=1, unique=True))
    return {
        "run.trec": draw(run_text(rows)),
        "qrels.trec": draw(qrels_text([(q, d) for q, d in rows if q in judged])),
        "utilities.tsv": draw(utilities_text(rows)),
        "outcomes.tsv": draw(outcomes_text(qids)),
    }


MODELS = st.sampled_from(["m1", "smollm2-135m", "meta/llama-3"])
json_scalars = st.none() | st.booleans() | st.integers(-5, 5) | finite | st.text(max_size=5)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)


@st.composite
def context_line(draw: st.DrawFn) -> dict[str, Any]:
    """One valid contexts JSONL object with optional fields and Q-CARE labels."""
    subqueries = draw(st.none() | st.lists(st.text(max_size=8), max_size=3))
    n_sub = None if subqueries is None else len(subqueries)
    doc_ids = draw(st.lists(ids, max_size=4, unique=True))
    covers = st.lists(st.booleans() | st.none(), min_size=n_sub or 0, max_size=n_sub or 0)
    passages = []
    for doc_id in doc_ids:
        passage: dict[str, Any] = {"doc_id": draw(st.sampled_from([doc_id, None]))}
        optional = {
            "text": st.text(max_size=10),
            "score": finite,
            "relevant": st.booleans() | st.floats(0, 3),
            "abstain_prob": st.dictionaries(MODELS, unit, max_size=2),
            "answer_prob": st.dictionaries(MODELS, unit, max_size=2),
            "covers": covers if n_sub is not None else st.none(),
            "title": json_values,
        }
        for key, values in optional.items():
            if draw(st.booleans()):
                passage[key] = draw(values)
        passages.append(passage)
    line: dict[str, Any] = {
        "qid": draw(ids | st.integers(0, 10**6)),
        "passages": passages,
        "subqueries": subqueries,
    }
    for key, values in {
        "run": st.text(max_size=5),
        "question": st.text(max_size=10),
        "answers": st.lists(st.text(max_size=5), max_size=2),
        "split": json_values,
    }.items():
        if draw(st.booleans()):
            line[key] = draw(values)
    if draw(st.booleans()):
        line["outcomes"] = {
            model: _outcome(draw, n_sub, len(passages)) for model in draw(st.sets(MODELS))
        }
    return line


def _outcome(draw: st.DrawFn, n_sub: int | None, k: int) -> dict[str, Any]:
    outcome: dict[str, Any] = {"answer": draw(st.text(max_size=6))}
    if draw(st.booleans()):
        outcome["correct"] = draw(st.booleans())
    if n_sub is not None and draw(st.booleans()):
        claims = draw(st.lists(st.text(max_size=6), max_size=3))
        outcome["claims"] = claims

        def grid(*shape: int, soft: bool = False) -> Any:
            if not shape:
                return draw((unit if soft else st.booleans()) | st.none())
            return [grid(*shape[1:], soft=soft) for _ in range(shape[0])]

        outcome["subquery_covered"] = grid(n_sub)
        outcome["claim_relevance_prob"] = grid(len(claims), n_sub, soft=True)
        outcome["claim_support"] = grid(len(claims), k)
    return outcome


@st.composite
def scoreable_line(draw: st.DrawFn) -> dict[str, Any]:
    """A context line ``udcg score --judge m1`` reads: each passage with a relevance in [0, 1]
    and ``abstain_prob["m1"]``."""
    line = draw(context_line())
    for passage in line["passages"]:
        passage["relevant"] = draw(st.booleans() | unit)
        passage.setdefault("abstain_prob", {})["m1"] = draw(unit)
    return line


@st.composite
def contexts_text(
    draw: st.DrawFn, line: st.SearchStrategy[dict[str, Any]] | None = None, unique: bool = False
) -> bytes:
    """A contexts JSONL file of 1-3 lines drawn from ``line`` (:func:`context_line`); with
    ``unique``, no two lines share a qid (``udcg score`` refuses a context given twice)."""
    line = context_line() if line is None else line
    key = (lambda obj: str(obj["qid"])) if unique else None
    lines = [
        json.dumps(obj, ensure_ascii=draw(st.booleans()))
        for obj in draw(st.lists(line, min_size=1, max_size=3, unique_by=key))
    ]
    return ("\n".join(lines) + draw(st.sampled_from(["\n", "", "\n\n"]))).encode("utf-8")


@st.composite
def reference_item(draw: st.DrawFn) -> dict[str, Any]:
    """One item of the reference UDCG JSON format."""
    passages = []
    for doc_id in draw(st.lists(ids, max_size=4, unique=True)):
        info = {
            model: {"no_res_prob": draw(unit), **draw(st.dictionaries(st.just("n"), json_values))}
            for model in draw(st.sets(MODELS))
        }
        passages.append(
            {
                "doc_id": doc_id,
                "text": draw(st.text(max_size=10)),
                "is_relevant": draw(st.booleans() | st.none()),
                "models_info": info,
            }
        )
    item = {"example_id": draw(ids | st.integers(0, 99)), "passages": passages}
    if draw(st.booleans()):
        item["question"] = draw(st.text(max_size=10))
    if draw(st.booleans()):
        item["udcg"] = draw(st.dictionaries(MODELS, unit))
    return item


@st.composite
def reference_text(draw: st.DrawFn) -> bytes:
    items = draw(st.lists(reference_item(), min_size=1, max_size=3))
    indent = draw(st.sampled_from([None, 2]))
    return json.dumps(items, indent=indent, ensure_ascii=draw(st.booleans())).encode("utf-8")


THETA_K = (1, 3)


@cache
def theta_pair(k: int) -> tuple[bytes, dict[str, Any]]:
    """Weights bytes and card of a UDCG-theta model fitted on random data (fitted once)."""
    rng = np.random.default_rng(k)
    relevant, utility = rng.integers(0, 2, (40, k)), rng.random((40, k))
    correct = np.arange(40) % 2
    model = UDCGTheta(k, bias=k > 1, l2=0.1).fit(relevant, utility, correct)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.safetensors"
        card = model.save(path, card={"judge": "m1", "gamma": 0.333})
        return path.read_bytes(), json.loads(card.read_text(encoding="utf-8"))


@st.composite
def theta_files(draw: st.DrawFn) -> Files:
    """A fitted model's weights and card, the card with extra entries."""
    k = draw(st.sampled_from(THETA_K))
    weights, card = theta_pair(k)
    card = {**card, **draw(st.dictionaries(st.sampled_from(["note", "data", "rho"]), json_values))}
    card["card_sha256"] = card_digest(card)  # extra entries as udcg would have written them
    text = json.dumps(card, indent=draw(st.sampled_from([None, 2])), allow_nan=False)
    return {"model.safetensors": weights, "model.json": text.encode("utf-8"), "k": str(k).encode()}


def _with_header(weights: bytes, edit: Callable[[bytes], bytes]) -> bytes:
    """``weights`` with its safetensors JSON header edited and the length prefix kept right."""
    if len(weights) < 8:
        return weights
    (size,) = struct.unpack("<Q", weights[:8])
    header = edit(weights[8 : 8 + size])
    return struct.pack("<Q", len(header)) + header + weights[8 + size :]


_TENSOR_EDITS = ("drop", "rename", "reshape", "grow", "dtype", "bf16", "nonfinite", "shift")


def _edit_tensors(rng: random.Random, weights: bytes) -> tuple[bytes, str]:
    """Load the tensors, damage one (missing, renamed, other shape, dtype or values) and save
    them again: a well-formed file that does not hold what a card describes."""
    try:
        tensors = st_load(weights)
    except (SafetensorError, ValueError):
        return weights, "tensors unreadable"
    name = rng.choice(sorted(tensors))
    value = tensors.pop(name)
    how = rng.choice(_TENSOR_EDITS)
    if how == "rename":
        tensors[name.upper()] = value
    elif how == "reshape":
        tensors[name] = value.reshape(1, -1) if value.ndim else value.reshape(1)
    elif how == "grow":
        tensors[name] = np.append(value, 0.0)
    elif how in ("dtype", "bf16"):
        dtype = "float16" if how == "bf16" else rng.choice(["float32", "int64", "uint8", "bool"])
        with np.errstate(invalid="ignore", over="ignore"):
            tensors[name] = value.astype(dtype)
    elif how == "nonfinite":
        flat = value.reshape(-1).copy()
        flat[0] = rng.choice([math.nan, math.inf, -math.inf])
        tensors[name] = flat.reshape(value.shape)
    elif how == "shift":
        tensors[name] = np.asarray(value + 0.5)
    blob = st_save(tensors, metadata=rng.choice([None, {"format": "other"}]))
    if how == "bf16":  # numpy has no bfloat16: relabel the float16 bytes
        blob = _with_header(blob, lambda header: header.replace(b'"F16"', b'"BF16"'))
    return blob, f"tensors: {how} {name}"


def damage_weights(rng: random.Random, weights: bytes) -> tuple[bytes, str]:
    """Damage a safetensors file: its bytes (:func:`mutate`), its JSON header (keeping the
    length prefix right) or its tensors (keeping the file well-formed)."""
    how = rng.choice(["bytes", "header", "tensors"])
    if how == "bytes":
        return mutate(rng, weights)
    if how == "header":
        edit = rng.choice([json_edit, replace_token])
        return _with_header(weights, lambda header: edit(rng, header)), f"header {edit.__name__}"
    return _edit_tensors(rng, weights)


def _resign(rng: random.Random, files: Files) -> Files:
    """Mostly give the card the digest of the (damaged) weights, to reach past that check."""
    if rng.random() < 0.75:
        try:
            card = json.loads(files["model.json"])
            card["weights_sha256"] = hashlib.sha256(files["model.safetensors"]).hexdigest()
            files["model.json"] = json.dumps(card).encode("utf-8")
        except (ValueError, TypeError, RecursionError):
            pass
    return files


# --------------------------------------------------------------------------------------------
# readers


def _read_contexts(d: Path) -> None:
    for _ in read_contexts(d / "contexts.jsonl"):
        pass


def _score_contexts(d: Path) -> None:
    """``udcg score contexts.jsonl --judge m1 --out scores.jsonl``, without the exit status."""
    from udcg.cli.score import score

    args = argparse.Namespace(
        contexts=d / "contexts.jsonl",
        judge="m1",
        judge_key=None,
        utility="abstention",
        weights=None,
        mode=None,
        allow_mismatch=[],
        gamma=1 / 3,
        out=d / "scores.jsonl",
    )
    with contextlib.redirect_stdout(io.StringIO()):
        score(args)


def _read_trec_contexts(d: Path) -> None:
    names = ("run.trec", "qrels.trec", "utilities.tsv", "outcomes.tsv")
    read_trec_contexts(*(d / name for name in names), judge="j", k=3)


def _load_theta(d: Path) -> None:
    UDCGTheta.load(d / "model.safetensors", k=int((d / "k").read_text()))


@dataclass(frozen=True)
class Reader:
    """A reader under fuzzing: its valid inputs (file name -> bytes) and how to call it on a
    folder holding them. ``whole_file`` matches the reasons of errors about a whole file
    (for ``line_based`` readers, the only ones that may come without a line); ``fixed`` names
    files that are parameters, never damaged; ``damage`` replaces :func:`mutate` for some
    files; ``fixup`` adjusts the damaged set; ``setup`` prepares what the strategies use,
    before hypothesis draws anything."""

    name: str
    valid: st.SearchStrategy[Files]
    call: Callable[[Path], Any]
    line_based: bool = True
    whole_file: str = r"empty file"
    fixed: tuple[str, ...] = ()
    damage: dict[str, Callable[[random.Random, bytes], tuple[bytes, str]]] = field(
        default_factory=dict
    )
    fixup: Callable[[random.Random, Files], Files] | None = None
    setup: Callable[[], Any] = lambda: None


def _single(name: str, file: str, valid: st.SearchStrategy[bytes], call: Callable) -> Reader:
    """A reader of one file, called with its path."""
    return Reader(name, valid.map(lambda data: {file: data}), lambda d: call(d / file))


READERS = {
    reader.name: reader
    for reader in [
        _single("trec_run", "run.trec", run_text(), read_trec_run),
        _single("trec_qrels", "qrels.trec", qrels_text(), read_trec_qrels),
        _single("utilities", "utilities.tsv", utilities_text(), read_utilities),
        _single("outcomes", "outcomes.tsv", outcomes_text(), read_outcomes),
        Reader(
            "trec_contexts",
            trec_context_files(),
            _read_trec_contexts,
            whole_file=r"empty file|no query of the run",
        ),
        Reader(
            "contexts",
            contexts_text().map(lambda data: {"contexts.jsonl": data}),
            _read_contexts,
            damage={"contexts.jsonl": mutate_contexts},
        ),
        Reader(
            "contexts_score",
            contexts_text(scoreable_line(), unique=True).map(lambda data: {"contexts.jsonl": data}),
            _score_contexts,
            damage={"contexts.jsonl": mutate_contexts},
        ),
        Reader(
            "reference",
            reference_text().map(lambda data: {"ref.json": data}),
            lambda d: read_reference_json(d / "ref.json"),
            whole_file=r"empty file|expected a JSON list",
        ),
        Reader(
            "theta",
            theta_files(),
            _load_theta,
            line_based=False,
            fixed=("k",),
            damage={"model.safetensors": damage_weights},
            fixup=_resign,
            setup=lambda: [theta_pair(k) for k in THETA_K],
        ),
    ]
}


@dataclass(frozen=True)
class Case:
    """One input: the files and what was done to them (empty: undamaged)."""

    files: Files
    recipe: tuple[str, ...]

    def __repr__(self) -> str:
        sizes = {name: len(data) for name, data in self.files.items()}
        return f"Case(recipe={self.recipe!r}, sizes={sizes}, files={self.files!r:.2000})"


def _damaged(reader: Reader, valid: Files, rng: random.Random) -> Case:
    """``valid`` as it is one time in ten, else with 1-2 of its files damaged."""
    files = dict(valid)
    if rng.random() < 0.1:
        return Case(files, ())
    names = sorted(set(files) - set(reader.fixed))
    recipe = []
    for name in sorted(set(rng.choices(names, k=rng.randint(1, 2)))):
        files[name], how = reader.damage.get(name, mutate)(rng, files[name])
        recipe.append(f"{name}: {how}")
    if reader.fixup is not None:
        files = reader.fixup(rng, files)
    return Case(files, tuple(recipe))


@st.composite
def case_batches(draw: st.DrawFn, reader: Reader, variants: int) -> list[Case]:
    """``variants`` inputs from one valid input of ``reader``, each damaged on its own
    (:func:`_damaged`): drawing the valid input costs more than reading it."""
    valid = draw(reader.valid)
    rng = random.Random(repr(draw(st.tuples(*[st.integers(0, 2**64 - 1)] * 4))))
    return [_damaged(reader, valid, rng) for _ in range(variants)]


def cases(reader: Reader) -> st.SearchStrategy[Case]:
    """One valid input of ``reader``, undamaged one time in ten, else with 1-2 files damaged."""
    return case_batches(reader, 1).map(lambda batch: batch[0])


# --------------------------------------------------------------------------------------------
# running one case


class Hang(BaseException):
    """The time limit of one call ran out (a BaseException: readers must not catch it)."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise Hang(f"no result after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Outcome:
    """How one call ended: ``ok``, ``input_error`` (located), or a failure kind:
    ``unlocated`` (a UDCGInputError without the required location), ``valid_rejected`` (an
    undamaged input raised), ``other`` (another exception) or ``hang``."""

    kind: str
    seconds: float
    detail: str = ""


FAILURES = ("valid_rejected", "unlocated", "other", "hang")


def _location_problem(reader: Reader, exc: UDCGInputError, folder: Path) -> str | None:
    paths = {str(path) for path in folder.iterdir() if path.name not in reader.fixed}
    if exc.path not in paths:
        return f"names no input file (path={exc.path!r})"
    if reader.line_based and exc.line is None and not re.match(reader.whole_file, exc.reason):
        return "names no line"
    return None


def run_case(reader: Reader, case: Case, folder: Path, limit: float) -> Outcome:
    """Write ``case`` into the empty folder ``folder``, call the reader and classify the end."""
    for name, data in case.files.items():
        (folder / name).write_bytes(data)
    start = time.perf_counter()
    try:
        with time_limit(limit):
            reader.call(folder)
    except Hang:
        return Outcome("hang", time.perf_counter() - start, f"longer than {limit} s")
    except UDCGInputError as exc:
        seconds = time.perf_counter() - start
        problem = _location_problem(reader, exc, folder)
        if problem is not None:
            return Outcome("unlocated", seconds, f"{problem}: {exc}\n{traceback.format_exc()}")
        if not case.recipe:
            return Outcome("valid_rejected", seconds, f"{exc}\n{traceback.format_exc()}")
        return Outcome("input_error", seconds, str(exc))
    except Exception:
        return Outcome("other", time.perf_counter() - start, traceback.format_exc())
    seconds = time.perf_counter() - start
    if seconds > limit:
        return Outcome("hang", seconds, f"took {seconds:.1f} s")
    return Outcome("ok", seconds)


@contextmanager
def scratch() -> Iterator[Callable[[], Path]]:
    """``fresh()`` gives an empty folder (the same one, cleared) for the next case."""
    root = Path(tempfile.mkdtemp(prefix="udcg-fuzz-"))
    folder = root / "in"

    def fresh() -> Path:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        return folder

    try:
        yield fresh
    finally:
        shutil.rmtree(root, ignore_errors=True)


def fuzz_settings(max_examples: int, **options: Any) -> settings:
    """Settings for fuzzing: no deadline (the time limit is ours), every health check off."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        **options,
    )


# --------------------------------------------------------------------------------------------
# the bench


@dataclass
class Tally:
    """Outcomes of one reader's cases, with the first few details of each failure kind."""

    counts: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0

    def add(self, outcome: Outcome, case: Case, keep: int) -> None:
        self.counts[outcome.kind] += 1
        if outcome.kind in FAILURES:
            shown = self.examples.setdefault(outcome.kind, [])
            if len(shown) < keep:
                shown.append(f"{case!r}\n{outcome.detail}")


def fuzz(
    reader: Reader, n: int, rng_seed: int, limit: float, keep: int, variants: int = 1
) -> Tally:
    """Run ``n`` generated cases of ``reader`` (generation only, no shrinking), ``variants``
    damaged inputs from each valid one."""
    tally = Tally()
    start = time.perf_counter()
    reader.setup()
    with scratch() as fresh:

        @seed(rng_seed)
        @fuzz_settings(-(-n // variants), phases=[Phase.generate])
        @given(case_batches(reader, variants))
        def batch(cases: list[Case]) -> None:
            for case in cases[: n - sum(tally.counts.values())]:
                tally.add(run_case(reader, case, fresh(), limit), case, keep)

        batch()
    tally.seconds = time.perf_counter() - start
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-reader", type=int, default=1000, help="inputs per reader")
    parser.add_argument("--readers", default=",".join(READERS), help="comma-separated names")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=5.0, help="seconds per call")
    parser.add_argument("--show", type=int, default=3, help="tracebacks shown per failure kind")
    parser.add_argument(
        "--variants",
        type=int,
        default=1,
        help="damaged inputs made from each valid input hypothesis draws (drawing costs more "
        "than reading: 10 makes 10,000 contexts inputs take about a minute)",
    )
    args = parser.parse_args(argv)
    names = args.readers.split(",")
    unknown = sorted(set(names) - set(READERS))
    if unknown:
        parser.error(f"unknown reader(s) {', '.join(unknown)}; known: {', '.join(READERS)}")
    columns = ("tried", "ok", "UDCGInputError", *FAILURES, "seconds")
    print("| reader | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    tallies = {}
    for name in names:
        tally = tallies[name] = fuzz(
            READERS[name], args.per_reader, args.seed, args.time_limit, args.show, args.variants
        )
        c = tally.counts
        row = [sum(c.values()), c["ok"], c["input_error"], *(c[k] for k in FAILURES)]
        print(f"| {name} | " + " | ".join(map(str, row)) + f" | {tally.seconds:.0f} |", flush=True)
    return print_failures(tallies)


def print_failures(tallies: dict) -> int:
    """Print each target's failing examples under a heading; 1 when there were any, else 0."""
    failed = False
    for name, tally in tallies.items():
        for kind, shown in tally.examples.items():
            failed = True
            print(f"\n## {name}: {kind} ({tally.counts[kind]})")
            for text in shown:
                print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
