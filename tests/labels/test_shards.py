"""Shards: the split by query id, sharded runs merged back byte for byte, and merge errors."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from udcg.cli.annotate import main as annotate_main
from udcg.cli.main import main as udcg_main
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, Passage, write_contexts
from udcg.labels.provenance import manifest_path
from udcg.labels.shards import in_shard, merge_shards, order_shards, parse_shard, shard_of


def _contexts() -> list[Context]:
    out = []
    for i in range(30):
        q = f"q{i % 11}"
        passages = [Passage(doc_id=f"d{j}", text=f"text {i % 5} {j}") for j in range(2)]
        out.append(Context(q, passages, run=f"run{i // 11}", question=f"what {q}", answers=["x"]))
    return out


def test_shard_of_is_blake2b_modulo() -> None:
    for qid in ["q1", "é", "", "a" * 300]:
        digest = hashlib.blake2b(qid.encode(), digest_size=8).hexdigest()
        assert shard_of(qid, 7) == int(digest, 16) % 7 + 1
    contexts = _contexts()
    split = [list(in_shard(contexts, (i, 3))) for i in (1, 2, 3)]
    flat = [c for part in split for c in part]
    assert sorted(map(id, flat)) == sorted(map(id, contexts))  # each exactly once
    for part in split:  # a query never spans two shards; input order is kept
        assert not {c.qid for c in part} & {c.qid for p in split if p is not part for c in p}
        assert [contexts.index(c) for c in part] == sorted(contexts.index(c) for c in part)


@pytest.mark.parametrize("text", ["0/3", "4/3", "2", "a/b", "1/0"])
def test_parse_shard_rejects(text: str) -> None:
    with pytest.raises(UDCGInputError, match="expected I/N"):
        parse_shard(text)
    assert parse_shard(" 2 / 4 ") == (2, 4)


def _probs(path: Path, contexts: list[Context]) -> Path:
    pairs = sorted({(c.question, p.text) for c in contexts for p in c.passages})
    with path.open("w") as handle:
        for n, (q, t) in enumerate(pairs):
            row = {"question": q, "passage": t, "abstain_prob": n / len(pairs)}
            handle.write(json.dumps(row) + "\n")
    return path


def test_sharded_runs_merge_to_the_unsharded_bytes(tmp_path: Path, capsys) -> None:
    contexts = _contexts()
    src = tmp_path / "in.jsonl"
    write_contexts(src, contexts)
    judge = ["--judge", f"precomputed:{_probs(tmp_path / 'p.jsonl', contexts)}"]
    base = [*judge, "--steps", "abstain,relevance", "--chunk", "4"]
    whole = tmp_path / "whole.jsonl"
    assert (
        annotate_main([str(src), "-o", str(whole), *base, "--cache", str(tmp_path / "c.sqlite")])
        == 0
    )
    parts = [tmp_path / "out" / f"part-{i}-of-3.jsonl" for i in (1, 2, 3)]
    for i, part in enumerate(parts, start=1):
        cache = ["--cache", str(tmp_path / f"c{i}.sqlite")]
        assert annotate_main([str(src), "-o", str(part), *base, "--shard", f"{i}/3", *cache]) == 0
    capsys.readouterr()
    merged = tmp_path / "merged.jsonl"
    shuffled = [parts[2], parts[0], parts[1]]  # part-I-of-N names are put in order
    assert udcg_main(["merge-shards", str(src), *map(str, shuffled), "-o", str(merged)]) == 0
    assert capsys.readouterr().out == "merged 30 contexts from 3 shards\n"
    assert merged.read_bytes() == whole.read_bytes()
    assert manifest_path(merged).read_bytes() == manifest_path(whole).read_bytes()
    assert sum(len(p.read_bytes().splitlines()) for p in parts) == 30

    # errors: one line, exit 2, output untouched
    merged.unlink()
    renamed = [tmp_path / f"s{i}.jsonl" for i in (1, 2, 3)]
    for part, new in zip(parts, renamed, strict=True):
        new.write_bytes(part.read_bytes())
        manifest_path(new).write_bytes(manifest_path(part).read_bytes())
    cases = [
        ([parts[0], parts[2]], "missing shard 2 of 3"),
        ([parts[0], parts[1], parts[1], parts[2]], "given twice"),
        ([renamed[1], renamed[0], renamed[2]], "give all 3 shard files of this input, in order"),
        (renamed[:2], "give all 2 shard files"),
    ]
    for shards, message in cases:
        assert udcg_main(["merge-shards", str(src), *map(str, shards), "-o", str(merged)]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.splitlines()) == 1 and not merged.exists()
    lines = parts[1].read_bytes().splitlines(keepends=True)
    renamed[1].write_bytes(b"".join(lines[:-1]))  # an incomplete shard
    with pytest.raises(UDCGInputError, match="ends before the context of query"):
        merge_shards(src, renamed, merged)
    renamed[1].write_bytes(b"".join(lines) + lines[0])  # one context too many
    with pytest.raises(UDCGInputError, match="more contexts than its shard") as err:
        merge_shards(src, renamed, merged)
    assert err.value.line == len(lines) + 1 and not merged.exists()
    # the input's manifest changed between the shard runs: shards record other makers
    renamed[1].write_bytes(b"".join(lines))
    other = json.loads(manifest_path(renamed[1]).read_text())
    other["judges"] = {**other["judges"], "earlier": {"abstain": "fp-x"}}
    manifest_path(renamed[1]).write_text(json.dumps(other))
    with pytest.raises(UDCGInputError, match="records other makers of the input's values") as err:
        merge_shards(src, renamed, merged)
    assert err.value.path == str(renamed[1]) and not merged.exists()


def test_order_shards_keeps_other_names_as_given() -> None:
    assert order_shards(["b.jsonl", "a.jsonl"]) == ["b.jsonl", "a.jsonl"]
    assert order_shards(["x/part-2-of-2.jsonl", "x/part-1-of-2.jsonl"]) == [
        "x/part-1-of-2.jsonl",
        "x/part-2-of-2.jsonl",
    ]
    with pytest.raises(UDCGInputError, match="different splits"):
        order_shards(["part-1-of-2.jsonl", "part-2-of-3.jsonl"])


def test_shards_made_without_the_inputs_manifest_are_refused(tmp_path: Path, capsys) -> None:
    """The input's manifest records who made its values; shards annotated from a copy without
    it record none of them, so their merge would lose that record: refused (the unsharded
    run records them)."""
    contexts = _contexts()
    src, labelled = tmp_path / "in.jsonl", tmp_path / "labelled.jsonl"
    write_contexts(src, contexts)
    probs = _probs(tmp_path / "p.jsonl", contexts)
    common = ["--steps", "abstain", "--cache", str(tmp_path / "c.sqlite")]
    earlier = [str(src), "-o", str(labelled), "--judge", f"precomputed:{probs}", *common]
    assert annotate_main([*earlier, "--judge-key", "first"]) == 0  # values made by 'first'
    kept = manifest_path(labelled).read_bytes()
    manifest_path(labelled).unlink()  # the copy given to the shard machines lacks it
    parts = [tmp_path / f"part-{i}-of-2.jsonl" for i in (1, 2)]
    for i, part in enumerate(parts, start=1):
        argv = [str(labelled), "-o", str(part), "--judge", f"precomputed:{probs}", *common]
        assert annotate_main([*argv, "--judge-key", "second", "--shard", f"{i}/2"]) == 0
    manifest_path(labelled).write_bytes(kept)
    capsys.readouterr()
    merged = tmp_path / "merged.jsonl"
    assert udcg_main(["merge-shards", str(labelled), *map(str, parts), "-o", str(merged)]) == 2
    err = capsys.readouterr().err
    assert "records other makers of the input's values" in err and '"first"' in err
    assert not merged.exists()
    # given the manifest, the shards merge to what an unsharded run records
    for i, part in enumerate(parts, start=1):
        argv = [str(labelled), "-o", str(part), "--judge", f"precomputed:{probs}", *common]
        assert annotate_main([*argv, "--judge-key", "second", "--shard", f"{i}/2"]) == 0
    assert udcg_main(["merge-shards", str(labelled), *map(str, parts), "-o", str(merged)]) == 0
    assert set(json.loads(manifest_path(merged).read_text())["judges"]) == {"first", "second"}
    # the input through a pipe carries no manifest to check against: merged as the shards say
    piped = tmp_path / "piped.jsonl"
    argv = [sys.executable, "-m", "udcg", "merge-shards", "-", *map(str, parts), "-o", str(piped)]
    with labelled.open("rb") as stdin:
        done = subprocess.run(argv, stdin=stdin, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert piped.read_bytes() == merged.read_bytes()
