"""What the record of an annotation covers beyond the judge's fingerprint, and what reuses it:
the judge's run-time key settings (a resumed run or a shard whose server resolved another
abstention token is refused), manifests of an older udcg or of damaged fields (one line),
outputs that name the judge's files or a directory, and merged shards on standard output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import udcg.cli.annotate as annotate_cli
from tests.faults.test_annotate_faults import _contexts
from udcg.cli.annotate import main as annotate_main
from udcg.cli.main import main as udcg_main
from udcg.io.contexts.jsonl import write_contexts
from udcg.judge.precomputed import PrecomputedJudge
from udcg.labels.provenance import manifest_path
from udcg.labels.stream import partial_manifest_path, partial_path


def _setup(tmp_path: Path, n: int = 12) -> tuple[Path, list[str]]:
    """An input of ``n`` contexts and the options of a precomputed judge that knows them all."""
    src = tmp_path / "in.jsonl"
    contexts = _contexts(n)
    write_contexts(src, contexts)
    pairs = sorted({(c.question, p.text) for c in contexts for p in c.passages})
    judge = tmp_path / "pre.jsonl"
    judge.write_text(
        "".join(
            json.dumps({"question": q, "passage": t, "abstain_prob": (k + 1) / 100}) + "\n"
            for k, (q, t) in enumerate(pairs)
        )
    )
    options = ["--judge", f"precomputed:{judge}", "--steps", "abstain", "--chunk", "4"]
    return src, [*options, "--cache", str(tmp_path / "c.sqlite")]


def _token(monkeypatch: pytest.MonkeyPatch, token: str) -> None:
    """The judge resolves ``token`` as its abstention token (as a server's tokenizer would)."""
    monkeypatch.setattr(
        PrecomputedJudge,
        "key_settings",
        lambda self, op: {"abstain_token": token} if op == "abstain_prob" else {},
    )


class Killed(Exception):
    """Stands for a kill after the first chunk."""


def _killed_after_one_chunk(monkeypatch: pytest.MonkeyPatch, src: Path, out: Path, options):
    step, calls = annotate_cli.annotate, []

    def once(*args, **kwargs):
        calls.append(1)
        if len(calls) > 1:
            raise Killed
        return step(*args, **kwargs)

    monkeypatch.setattr(annotate_cli, "annotate", once)
    with pytest.raises(Killed):
        annotate_main([str(src), "-o", str(out), *options])
    monkeypatch.setattr(annotate_cli, "annotate", step)


def test_resume_refuses_a_run_whose_judge_resolves_other_key_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    src, options = _setup(tmp_path)
    out = tmp_path / "out.jsonl"
    _token(monkeypatch, "\u0120NO")
    _killed_after_one_chunk(monkeypatch, src, out, options)
    partial = partial_path(out).read_bytes()
    assert partial.count(b"\n") == 4
    _token(monkeypatch, "NO")
    capsys.readouterr()
    assert annotate_main([str(src), "-o", str(out), *options]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and (
            f"{partial_path(out)}: was written with key_settings.abstain_prob.abstain_token "
            '"\\u0120NO", this run has key_settings.abstain_prob.abstain_token "NO"'
        )
        in err
    ), err
    assert partial_path(out).read_bytes() == partial and not out.exists()
    _token(monkeypatch, "\u0120NO")
    assert annotate_main([str(src), "-o", str(out), *options]) == 0
    recorded = json.loads(manifest_path(out).read_text())["key_settings"]
    assert recorded == {"abstain_prob": {"abstain_token": "\u0120NO"}}


def test_resume_refuses_a_partial_record_of_an_older_udcg(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    src, options = _setup(tmp_path)
    out = tmp_path / "out.jsonl"
    _killed_after_one_chunk(monkeypatch, src, out, options)
    manifest = partial_manifest_path(partial_path(out))
    header, *hashes = manifest.read_text().splitlines(keepends=True)
    old = {k: v for k, v in json.loads(header).items() if k != "key_settings"}
    manifest.write_text(json.dumps({**old, "format": "udcg-annotate/1"}) + "\n" + "".join(hashes))
    capsys.readouterr()
    assert annotate_main([str(src), "-o", str(out), *options]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and (
            f"{partial_path(out)}: field 'format': \"udcg-annotate/1\" is not the record format of "
            'this udcg ("udcg-annotate/2"): written by another udcg version'
        )
        in err
    ), err


def _shards(tmp_path: Path, src: Path, options: list[str], tokens: list[str], monkeypatch):
    parts = []
    for i, token in enumerate(tokens, start=1):
        _token(monkeypatch, token)
        part = tmp_path / f"part-{i}-of-{len(tokens)}.jsonl"
        assert annotate_main([str(src), "-o", str(part), "--shard", f"{i}/{len(tokens)}",
                              *options]) == 0  # fmt: skip
        parts.append(part)
    return parts


def test_merge_refuses_shards_whose_judge_resolved_other_key_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    src, options = _setup(tmp_path)
    parts = _shards(tmp_path, src, options, ["\u0120NO", "NO"], monkeypatch)
    merged = tmp_path / "merged.jsonl"
    capsys.readouterr()
    assert udcg_main(["merge-shards", str(src), *map(str, parts), "-o", str(merged)]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and (
            f'{parts[1]}: was annotated with key_settings.abstain_prob.abstain_token "NO", '
            f'{parts[0]} with key_settings.abstain_prob.abstain_token "\\u0120NO"'
        )
        in err
    ), err
    assert not merged.exists()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("input_sha256", 12345, "field 'input_sha256': not a manifest udcg wrote: expected a "
         "SHA-256 (64 hex digits), got 12345"),
        ("output_sha256", None, "field 'output_sha256': not a manifest udcg wrote: expected a "
         "SHA-256 (64 hex digits), got null"),
        ("contexts", "6", "field 'contexts': not a manifest udcg wrote: expected a non-negative "
         'integer, got "6"'),
        ("format", "udcg-annotate/1", "field 'format': \"udcg-annotate/1\" is not the record "
         'format of this udcg ("udcg-annotate/2")'),
    ],
)  # fmt: skip
def test_merge_refuses_a_shard_manifest_of_damaged_fields_or_an_older_udcg_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, field: str, value, message: str
) -> None:
    src, options = _setup(tmp_path)
    parts = _shards(tmp_path, src, options, ["NO", "NO"], monkeypatch)
    path = manifest_path(parts[1])
    path.write_text(json.dumps({**json.loads(path.read_text()), field: value}))
    capsys.readouterr()
    code = udcg_main(["merge-shards", str(src), *map(str, parts), "-o", str(tmp_path / "m.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"{path}: {message}" in err, err


def test_merge_to_stdout_writes_nothing_before_every_shard_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    src, options = _setup(tmp_path)
    parts = _shards(tmp_path, src, options, ["NO", "NO"], monkeypatch)
    good = parts[0].read_bytes()
    parts[0].write_bytes(good.replace(b'"d0"', b'"d9"', 1))  # edited after it was written
    capsys.readouterr()
    assert udcg_main(["merge-shards", str(src), *map(str, parts), "-o", "-"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "is not the file udcg annotate wrote" in captured.err
    parts[0].write_bytes(good)
    assert udcg_main(["merge-shards", str(src), *map(str, parts), "-o", "-"]) == 0
    assert capsys.readouterr().out.count("\n") == 12


@pytest.mark.parametrize("target", ["cache", "judge"])
def test_annotate_output_may_not_name_its_cache_or_its_precomputed_judge(
    tmp_path: Path, capsys, target: str
) -> None:
    src, options = _setup(tmp_path)
    assert annotate_main([str(src), "-o", str(tmp_path / "first.jsonl"), *options]) == 0
    named = {"cache": tmp_path / "c.sqlite", "judge": tmp_path / "pre.jsonl"}[target]
    before = named.read_bytes()
    capsys.readouterr()
    assert annotate_main([str(src), "-o", str(named), *options]) == 2
    option = {"cache": "--cache", "judge": "--judge"}[target]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{named}: the output names the input {option} " in err, err
    assert named.read_bytes() == before


def test_annotate_refuses_an_output_directory_before_loading_the_judge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    src, options = _setup(tmp_path)
    results = tmp_path / "results"
    results.mkdir()

    def no_judge(args):
        raise AssertionError("the judge was loaded")

    monkeypatch.setattr(annotate_cli, "open_cli_judge", no_judge)
    assert annotate_main([str(src), "-o", str(results), *options]) == 2
    err = capsys.readouterr().err
    assert err == f"udcg annotate: error: {results}: is a directory, expected an output file path\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "pre.jsonl", "results"]
