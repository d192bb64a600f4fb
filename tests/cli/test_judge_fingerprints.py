"""Two judges under one key (two ``precomputed:`` files of one name, ``llama3`` on two servers)
are told apart by their fingerprint wherever values are read: ``udcg score --judge SPEC`` and
UDCG-theta weights, whose card records the fingerprint of the judge they were fitted on
(``train``), in ``score``, ``order``, ``weights calibrate``, ``trec`` and the evaluation
pipeline."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from udcg.cli.annotate import main as annotate_main
from udcg.cli.order import main as order_main
from udcg.cli.score import main as score_main
from udcg.cli.trec import main as trec_main
from udcg.cli.weights import main as weights_main
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, Passage, write_contexts
from udcg.io.manifests import file_sha256, manifest_path, values_made_by
from udcg.pipeline.benchmark import run_benchmark
from udcg.pipeline.datasets import Dataset
from udcg.pipeline.settings import EvaluateSettings
from udcg.theta import UDCGTheta
from udcg.theta.simulate import simulate_contexts

QUESTIONS = [(f"What is item {i}?", f"answer {i}", f"Item {i} is answer {i}.") for i in range(6)]
DISTRACTOR = "The weather was mild that year."


def _probabilities(path: Path, gold: float) -> Path:
    """A precomputed file of judge ``llama3`` (its name) giving ``gold`` to gold passages."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [
        {"question": q, "passage": text, "abstain_prob": gold if text == passage else 0.7}
        for q, _, passage in QUESTIONS
        for text in (passage, DISTRACTOR)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _contexts() -> list[Context]:
    return [
        Context(
            f"q{i}",
            [
                Passage(doc_id=f"d{i}-{j}", text=text, relevant=j == i % 2)
                for j, text in enumerate([gold, DISTRACTOR] if i % 2 == 0 else [DISTRACTOR, gold])
            ],
            question=question,
            answers=[answer],
            outcomes={"llama3": {"answer": answer, "correct": i % 3 != 0}},
        )
        for i, (question, answer, gold) in enumerate(QUESTIONS)
    ]


def _weights(folder: Path, k: int, judge: str, fingerprint: str | None) -> Path:
    model = UDCGTheta(k=k)
    model.alpha_, model.beta_, model.intercept_ = np.linspace(1, 0.5, k), -np.ones(k), 0.0
    card = {"judge_model": judge, "judge_fingerprint": fingerprint, "utility": "abstention"}
    return model.save_pretrained(folder, card=card)


def _stamp(path: Path, judges: dict[str, dict[str, str]]) -> None:
    """The manifest an annotate run writes, as far as the checks read it."""
    record = {"judges": judges, "output_sha256": file_sha256(path)}
    manifest_path(path).write_text(json.dumps(record))


def _trec_files(folder: Path, contexts: list[Context]) -> tuple[Path, Path]:
    """Qrels and a run of ``contexts`` (their passages ranked in order): (qrels, run)."""
    qrels, run = folder / "q.trec", folder / "r.trec"
    qrels.write_text(
        "".join(f"{c.qid} 0 {p.doc_id} {int(p.relevant)}\n" for c in contexts for p in c.passages)
    )
    run.write_text(
        "".join(
            f"{c.qid} Q0 {p.doc_id} {i + 1} {3 - i} r\n"
            for c in contexts
            for i, p in enumerate(c.passages)
        )
    )
    return qrels, run


@pytest.fixture
def annotated(tmp_path: Path) -> tuple[Path, str, str]:
    """Contexts annotated by ``precomputed:a/llama3.jsonl``; the spec of another file of the
    same name (key) beside it."""
    first = _probabilities(tmp_path / "a" / "llama3.jsonl", 0.2)
    other = _probabilities(tmp_path / "b" / "llama3.jsonl", 0.4)
    write_contexts(tmp_path / "in.jsonl", _contexts())
    out = tmp_path / "out.jsonl"
    args = [str(tmp_path / "in.jsonl"), "-o", str(out), "--judge", f"precomputed:{first}"]
    assert annotate_main([*args, "--steps", "abstain"]) == 0
    return out, f"precomputed:{first}", f"precomputed:{other}"


def test_score_refuses_another_precomputed_file_of_the_same_key(
    annotated: tuple[Path, str, str], capsys
) -> None:
    out, spec, other = annotated
    made = values_made_by(out, "llama3", "abstain")
    assert made is not None and made.startswith("precomputed:")
    assert score_main([str(out), "--judge", spec]) == 0
    assert f"6 contexts, judge llama3 (values made by {made})" in capsys.readouterr().out
    assert score_main([str(out), "--judge", "llama3"]) == 0  # the key alone names no file
    capsys.readouterr()
    assert score_main([str(out), "--judge", other]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"udcg score: error: {out}: ")
    assert f"the values of judge 'llama3' were made by the judge with fingerprint {made}" in err
    assert f"not by {other} (precomputed:" in err


def test_score_refuses_weights_fitted_on_another_judge_of_the_key(
    annotated: tuple[Path, str, str], tmp_path: Path, capsys
) -> None:
    out, spec, _ = annotated
    made = values_made_by(out, "llama3", "abstain")
    theirs = _weights(tmp_path / "theirs", 2, "llama3", "precomputed:" + "0" * 64)
    assert score_main([str(out), "--judge", spec, "--weights", str(theirs)]) == 2
    err = capsys.readouterr().err
    assert (
        f"field 'fingerprint': the weights were fitted with judge fingerprint "
        f"'precomputed:{'0' * 64}', not '{made}' (--allow-mismatch fingerprint" in err
    )
    args = [str(out), "--judge", spec, "--weights", str(theirs)]
    assert score_main([*args, "--allow-mismatch", "fingerprint"]) == 0
    assert "(allowed on purpose)" in capsys.readouterr().err
    ours = _weights(tmp_path / "ours", 2, "llama3", made)
    assert score_main([str(out), "--judge", spec, "--weights", str(ours)]) == 0


def test_order_calibrate_and_trec_check_the_fingerprint(tmp_path: Path, capsys) -> None:
    data = tmp_path / "c.jsonl"
    write_contexts(data, simulate_contexts(12, 3, per_query=1, seed=4))
    _stamp(data, {"sim": {"abstain": "fp-b", "relevance": "fp-b"}})
    weights = _weights(tmp_path / "w", 3, "sim", "fp-a")
    runs = {
        "order": (order_main, [str(data), "-o", str(tmp_path / "o.jsonl")]),
        "calibrate": (
            weights_main,
            ["calibrate", str(weights), str(data), "-o", str(tmp_path / "cal")],
        ),
    }
    for name, (main, args) in runs.items():
        weights_args = [] if name == "calibrate" else ["--weights", str(weights)]
        assert main([*args, *weights_args]) == 2, name
        err = capsys.readouterr().err
        assert "judge fingerprint 'fp-a', not 'fp-b'" in err, name
        allowed = [*args, *weights_args, "--allow-mismatch", "fingerprint"]
        assert main(allowed) == 0, name
        assert "(allowed on purpose)" in capsys.readouterr().err, name
    qrels, run = _trec_files(tmp_path, simulate_contexts(12, 3, per_query=1, seed=4))
    trec = ["-m", "UDCGtheta@3", str(qrels), str(run), "--utilities", str(data)]
    assert trec_main([*trec, "--weights", str(weights)]) == 2
    assert "judge fingerprint 'fp-a', not 'fp-b'" in capsys.readouterr().err
    trec_args = [*trec, "--weights", str(weights), "--allow-mismatch", "fingerprint"]
    assert trec_main(trec_args) == 0
    assert "judge fingerprint 'fp-a', not 'fp-b' (allowed on purpose)" in capsys.readouterr().err
    ours = _weights(tmp_path / "ours", 3, "sim", "fp-b")
    assert trec_main([*trec, "--weights", str(ours)]) == 0
    reorder = ["--run", str(run), "--qrels", str(qrels), "--utilities", str(data)]
    reorder += ["-o", str(tmp_path / "o.run")]
    assert order_main([*reorder, "--weights", str(weights)]) == 2
    assert "judge fingerprint 'fp-a', not 'fp-b'" in capsys.readouterr().err
    assert order_main([*reorder, "--weights", str(ours)]) == 0


def test_an_unknown_fingerprint_on_either_side_is_not_checked(tmp_path: Path) -> None:
    data = tmp_path / "c.jsonl"
    write_contexts(data, simulate_contexts(12, 3, per_query=1, seed=4))
    weights = _weights(tmp_path / "w", 3, "sim", "fp-a")
    args = [str(data), "--judge", "sim", "--weights", str(weights)]
    assert score_main(args) == 0  # no manifest: the values' judge is not known
    _stamp(data, {"sim": {"abstain": "fp-b"}})
    assert score_main(args) == 2
    old = _weights(tmp_path / "old", 3, "sim", None)  # a card from before, or by hand
    assert score_main([*args[:-1], str(old)]) == 0


def test_evaluate_refuses_weights_of_another_fingerprint_of_its_judge(tmp_path: Path) -> None:
    spec = f"precomputed:{_probabilities(tmp_path / 'a' / 'llama3.jsonl', 0.2)}"
    weights = _weights(tmp_path / "w", 2, "llama3", "precomputed:" + "0" * 64)
    settings = EvaluateSettings(
        k=2,
        n_bootstrap=20,
        cache_dir=tmp_path / "stages",
        judge=spec,
        theta_weights=str(weights),
    )
    dataset = Dataset("given", [], [], contexts=_contexts())
    with pytest.raises(UDCGInputError, match="field 'fingerprint': the weights were fitted"):
        run_benchmark(dataset, None, settings, tmp_path / "report")
    allowed = EvaluateSettings(**{**vars(settings), "allow_mismatch": ["fingerprint"]})
    report, _ = run_benchmark(dataset, None, allowed, tmp_path / "report2")
    assert any("judge fingerprint" in note for note in report["setup"]["theta_weights_overrides"])


def test_the_library_records_and_checks_the_fingerprint(tmp_path: Path) -> None:
    import udcg

    train, other = tmp_path / "train.jsonl", tmp_path / "other.jsonl"
    write_contexts(train, simulate_contexts(40, 3, per_query=1, seed=1))
    write_contexts(other, simulate_contexts(12, 3, per_query=1, seed=2))
    _stamp(train, {"sim": {"abstain": "fp-a"}})
    _stamp(other, {"sim": {"abstain": "fp-b"}})
    model = udcg.fit_theta(train, 3, val_fraction=0.0)
    assert model.card_["judge_fingerprint"] == "fp-a"
    with pytest.raises(UDCGInputError, match="judge fingerprint 'fp-a', not 'fp-b'"):
        udcg.score_contexts(other, weights=model)
    frame = udcg.score_contexts(other, weights=model, allow_mismatch=["fingerprint"])
    assert frame["UDCG-theta"].notna().all()


def test_evaluate_checks_the_manifest_of_annotated_given_contexts(
    annotated: tuple[Path, str, str], tmp_path: Path
) -> None:
    """Given contexts that hold every value open no judge: their file's manifest says who
    made the values."""
    from udcg.pipeline.datasets import contexts_jsonl

    out, spec, _ = annotated
    made = values_made_by(out, "llama3", "abstain")
    theirs = _weights(tmp_path / "theirs", 2, "llama3", "precomputed:" + "0" * 64)
    ours = _weights(tmp_path / "ours", 2, "llama3", made)
    dataset = contexts_jsonl(out)
    assert dataset.judges == {"llama3": {"abstain": made}}
    for weights, refused in ((theirs, True), (ours, False)):
        settings = EvaluateSettings(
            k=2, n_bootstrap=20, cache_dir=tmp_path / "stages", judge=spec,
            theta_weights=str(weights),
        )  # fmt: skip
        if refused:
            with pytest.raises(UDCGInputError, match="judge fingerprint 'precomputed:000"):
                run_benchmark(dataset, None, settings, tmp_path / "r1")
        else:
            run_benchmark(dataset, None, settings, tmp_path / "r2")


def test_order_carries_who_made_the_values_to_its_output(
    annotated: tuple[Path, str, str], tmp_path: Path, capsys
) -> None:
    out, _, _ = annotated
    made = values_made_by(out, "llama3", "abstain")
    ours = _weights(tmp_path / "ours", 2, "llama3", made)
    theirs = _weights(tmp_path / "theirs", 2, "llama3", "precomputed:" + "0" * 64)
    ordered = tmp_path / "ordered.jsonl"
    assert order_main([str(out), "-o", str(ordered), "--weights", str(ours)]) == 0
    assert values_made_by(ordered, "llama3", "abstain") == made
    manifest = json.loads(manifest_path(ordered).read_text())
    assert manifest["input_sha256"] == file_sha256(out)
    assert (
        manifest["ordered_by"]["weights_sha256"]
        == UDCGTheta.from_pretrained(ours).card_["weights_sha256"]
    )
    capsys.readouterr()
    assert score_main([str(ordered), "--judge", "llama3", "--weights", str(theirs)]) == 2
    assert "judge fingerprint 'precomputed:000" in capsys.readouterr().err


def test_weights_of_another_key_allowed_on_purpose_are_not_refused_for_the_fingerprint(
    annotated: tuple[Path, str, str], tmp_path: Path, capsys
) -> None:
    out, spec, _ = annotated
    other = _weights(tmp_path / "gpt", 2, "gpt", "openai:{}")
    args = [str(out), "--judge", spec, "--weights", str(other)]
    assert score_main(args) == 2
    assert "field 'judge'" in capsys.readouterr().err
    assert score_main([*args, "--allow-mismatch", "judge"]) == 0
    err = capsys.readouterr().err
    assert "field 'judge'" in err and "fingerprint" not in err


def test_the_recorded_fingerprint_is_printed_escaped(tmp_path: Path, capsys) -> None:
    data = tmp_path / "c.jsonl"
    write_contexts(data, simulate_contexts(4, 3, per_query=1))
    _stamp(data, {"sim": {"abstain": "fp\nall\t9.9\x1b[2J"}})
    assert score_main([str(data), "--judge", "sim"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("4 contexts, judge sim (values made by fp\\nall\\t9.9\\x1b[2J)")


def test_compare_names_its_own_option(tmp_path: Path, capsys) -> None:
    from udcg.cli.compare import main as compare_main

    data = tmp_path / "c.jsonl"
    contexts = simulate_contexts(12, 3, per_query=1, seed=4)
    write_contexts(data, contexts)
    _stamp(data, {"sim": {"abstain": "fp-b"}})
    weights = _weights(tmp_path / "w", 3, "sim", "fp-a")
    qrels = tmp_path / "q.trec"
    qrels.write_text(
        "".join(f"{c.qid} 0 {p.doc_id} {int(p.relevant)}\n" for c in contexts for p in c.passages)
    )
    runs = []
    for name, order in (("s1", 1), ("s2", -1)):
        runs.append(tmp_path / f"{name}.trec")
        runs[-1].write_text(
            "".join(
                f"{c.qid} Q0 {p.doc_id} {i + 1} {10 - i} {name}\n"
                for c in contexts
                for i, p in enumerate(c.passages[::order])
            )
        )
    args = ["-m", "UDCGtheta@3", str(qrels), *map(str, runs), "--utilities", str(data)]
    args += ["--weights", str(weights)]
    assert compare_main(args) == 2
    err = capsys.readouterr().err
    assert "(--allow-mismatch fingerprint to use them anyway)" in err and "udcg trec" not in err
    assert compare_main([*args, "--allow-mismatch", "fingerprint"]) == 0
    assert "judge fingerprint 'fp-a', not 'fp-b' (allowed on purpose)" in capsys.readouterr().err


def test_qcare_label_carries_who_made_the_values_to_its_output(tmp_path: Path, monkeypatch) -> None:
    from udcg.cli import qcare
    from udcg.judge import Judge

    class Covers(Judge):
        name, fingerprint = "covers", "covers-v1"

        def yes_prob(self, prompts):
            return [0.9] * len(prompts)

    monkeypatch.setattr("udcg.judge.load_judge", lambda spec, **options: Covers())
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    ctx = Context("q", [Passage("d", text="Paris.")], question="Capital?", subqueries=["Capital?"])
    write_contexts(inp, [ctx])
    _stamp(inp, {"llama3": {"abstain": "fp-a"}})
    assert qcare.main(["label", str(inp), "-o", str(out), "--judge", "x"]) == 0
    assert values_made_by(out, "llama3", "abstain") == "fp-a"
    manifest = json.loads(manifest_path(out).read_text())
    assert (manifest["judge"], manifest["judge_fingerprint"]) == ("covers", "covers-v1")


def test_abstention_values_of_two_modes_are_two_makers(tmp_path: Path, monkeypatch, capsys) -> None:
    """One local judge, two abstention modes: the values differ, and so does who made them
    (the mode joins the fingerprint unless it is the default first_token)."""
    from udcg.judge import Judge

    class Modal(Judge):
        name, fingerprint = "modal", "modal-v1"

        def abstain_prob(self, questions, passages, mode="first_token", *, on_result=None):
            return np.full(len(questions), 0.2 if mode == "first_token" else 0.6)

    monkeypatch.setattr("udcg.judge.load_judge", lambda spec, **options: Modal())
    write_contexts(tmp_path / "in.jsonl", _contexts())
    made = {}
    for mode in ("first_token", "sequence"):
        out = tmp_path / f"{mode}.jsonl"
        args = [str(tmp_path / "in.jsonl"), "-o", str(out), "--judge", "x", "--mode", mode]
        assert annotate_main([*args, "--steps", "abstain", "--judge-key", "modal"]) == 0
        made[mode] = values_made_by(out, "modal", "abstain")
    assert made == {"first_token": "modal-v1", "sequence": "modal-v1|mode=sequence"}
    weights = _weights(tmp_path / "w", 2, "modal", made["sequence"])
    capsys.readouterr()
    first = tmp_path / "first_token.jsonl"
    assert score_main([str(first), "--judge", "modal", "--weights", str(weights)]) == 2
    assert "judge fingerprint 'modal-v1|mode=sequence', not 'modal-v1'" in capsys.readouterr().err
    second = tmp_path / "sequence.jsonl"
    assert score_main([str(second), "--judge", "modal", "--weights", str(weights)]) == 0


def test_evaluate_refuses_another_precomputed_file_for_annotated_given_contexts(
    annotated: tuple[Path, str, str], tmp_path: Path
) -> None:
    from udcg.pipeline.datasets import contexts_jsonl

    out, spec, other = annotated
    dataset = contexts_jsonl(out)
    settings = EvaluateSettings(k=2, n_bootstrap=20, cache_dir=tmp_path / "s", judge=other)
    with pytest.raises(UDCGInputError, match="field 'judge': the values of judge 'llama3' were"):
        run_benchmark(dataset, None, settings, tmp_path / "r1")
    same = EvaluateSettings(k=2, n_bootstrap=20, cache_dir=tmp_path / "s", judge=spec)
    run_benchmark(dataset, None, same, tmp_path / "r2")


def test_special_outputs_are_written_in_place_or_refused(
    annotated: tuple[Path, str, str], tmp_path: Path, capsys
) -> None:
    """``-o /dev/null`` is written in place, never renamed over (and gets no manifest); a
    command that writes beside its output refuses it."""
    import os
    import stat

    out, _, _ = annotated
    ours = _weights(tmp_path / "ours", 2, "llama3", values_made_by(out, "llama3", "abstain"))
    assert order_main([str(out), "-o", os.devnull, "--weights", str(ours)]) == 0
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    assert not Path(os.devnull + ".manifest.json").exists()
    assert (
        annotate_main([str(out), "-o", os.devnull, "--judge", "llama3", "--steps", "abstain"]) == 2
    )
    assert "/dev/null: is not a regular file" in capsys.readouterr().err


def test_a_precomputed_file_takes_no_abstention_mode(tmp_path: Path) -> None:
    """Its values are what the file holds: both modes give one maker."""
    probs = _probabilities(tmp_path / "a" / "llama3.jsonl", 0.2)
    write_contexts(tmp_path / "in.jsonl", _contexts())
    made = set()
    for mode in ("first_token", "sequence"):
        out = tmp_path / f"{mode}.jsonl"
        args = [str(tmp_path / "in.jsonl"), "-o", str(out), "--judge", f"precomputed:{probs}"]
        assert annotate_main([*args, "--steps", "abstain", "--mode", mode]) == 0
        made.add(values_made_by(out, "llama3", "abstain"))
    assert len(made) == 1 and "|mode=" not in made.pop()


def test_a_manifest_of_a_sequence_run_without_the_mode_in_judges_is_read_with_it(
    tmp_path: Path,
) -> None:
    """Development versions of 0.3 recorded the run's own abstention without its mode."""
    data = tmp_path / "c.jsonl"
    write_contexts(data, simulate_contexts(4, 3, per_query=1))
    record = {
        "judge": "sim", "judge_fingerprint": "fp", "steps": ["abstain"], "mode": "sequence",
        "judges": {"sim": {"abstain": "fp"}, "other": {"abstain": "fp-o"}},
        "output_sha256": file_sha256(data),
    }  # fmt: skip
    manifest_path(data).write_text(json.dumps(record))
    assert values_made_by(data, "sim", "abstain") == "fp|mode=sequence"
    assert values_made_by(data, "other", "abstain") == "fp-o"


def test_stream_outputs_are_written_in_place_and_directories_refused_first(
    annotated: tuple[Path, str, str], tmp_path: Path, capsys
) -> None:
    import os
    import subprocess
    import sys

    from udcg.judge.cache import JudgeCache

    out, _, _ = annotated
    redirected = tmp_path / "redirected.jsonl"
    with redirected.open("w") as stdout:
        done = subprocess.run(
            [sys.executable, "-m", "udcg", "score", str(out), "--judge", "llama3", "--out",
             "/dev/fd/1"],
            stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=120,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in redirected.read_text().splitlines() if line[:1] == "{"]
    assert len(rows) == 6
    folder = tmp_path / "folder"
    folder.mkdir()
    assert score_main([str(out), "--judge", "llama3", "--out", str(folder)]) == 2
    assert f"{folder}: is a directory" in capsys.readouterr().err
    ours = _weights(tmp_path / "ours", 2, "llama3", values_made_by(out, "llama3", "abstain"))
    assert order_main([str(out), "-o", str(folder), "--weights", str(ours)]) == 2
    assert f"{folder}: is a directory" in capsys.readouterr().err
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(UDCGInputError, match="not a usable judge cache: it is a device or a pipe"):
        JudgeCache(tmp_path / "fifo")


def test_names_of_standard_output_are_standard_output(
    annotated: tuple[Path, str, str], tmp_path: Path
) -> None:
    """``-o /dev/stdout`` (or a link to it) is ``-o -``: the rows go to standard output, in
    order, the messages to standard error; a regular file under /dev is any regular file."""
    import os
    import subprocess
    import sys

    from udcg.io.files import is_special, stream_name

    out, _, _ = annotated
    ours = _weights(tmp_path / "ours", 2, "llama3", values_made_by(out, "llama3", "abstain"))
    (tmp_path / "link.jsonl").symlink_to("/dev/stdout")
    for target in ("/dev/stdout", "//dev/stdout", str(tmp_path / "link.jsonl")):
        redirected = tmp_path / "redirected.jsonl"
        with redirected.open("w") as stdout:
            done = subprocess.run(
                [sys.executable, "-m", "udcg", "order", str(out), "-o", target, "--weights",
                 str(ours)],
                stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=120,
                env={**os.environ, "HF_HUB_OFFLINE": "1"},
            )  # fmt: skip
        assert done.returncode == 0, done.stderr
        rows = [json.loads(line) for line in redirected.read_text().splitlines()]
        assert len(rows) == 6 and "reordered by theta" in done.stderr
        assert (tmp_path / "link.jsonl").is_symlink()
    assert stream_name(tmp_path / "link.jsonl") == 1
    assert not is_special("/dev/shm/udcg-not-there.jsonl")


def test_stream_names_are_found_as_the_kernel_resolves_them(tmp_path: Path, monkeypatch) -> None:
    """Through folder links and ``..`` (``shm/../stdout`` with ``shm -> /dev/shm``), a link to
    the folder of descriptors, ``/proc/PID/fd``; link loops end."""
    import os

    from udcg.io.files import stream_name

    monkeypatch.chdir(tmp_path)
    os.symlink("/dev/shm", "shm")
    os.symlink("/proc/self/fd", "fds")
    os.symlink("loop-b", "loop-a")
    os.symlink("loop-a", "loop-b")
    assert stream_name("shm/../stdout") == 1
    assert stream_name("fds/0") == 0
    assert stream_name(f"/proc/{os.getpid()}/fd/2") == 2
    assert stream_name("loop-a") is None and stream_name("shm/out.jsonl") is None


def test_outputs_naming_standard_input_or_a_closed_stdout_are_one_line(
    annotated: tuple[Path, str, str], tmp_path: Path
) -> None:
    import os
    import subprocess
    import sys

    out, _, _ = annotated
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cli = [sys.executable, "-m", "udcg"]
    score = [*cli, "score", str(out), "--judge", "llama3", "--out"]
    with out.open() as stdin:
        done = subprocess.run(
            [*score, "/dev/stdin"], stdin=stdin, capture_output=True, text=True, env=env
        )
    assert done.returncode == 2 and "/dev/stdin is standard input, not an output" in done.stderr
    closed = subprocess.run(
        [*score, "/dev/fd/1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=env, preexec_fn=lambda: os.close(1),
    )  # fmt: skip
    assert closed.returncode == 2, closed.stderr
    assert "standard output is closed" in closed.stderr and "Traceback" not in closed.stderr
    os.symlink("loop-b", tmp_path / "loop-a")
    os.symlink("loop-a", tmp_path / "loop-b")
    looped = subprocess.run(
        [*score, str(tmp_path / "loop-a")], capture_output=True, text=True, env=env
    )
    assert looped.returncode == 2 and "loop-a: too many levels of symbolic links" in looped.stderr
    assert "Traceback" not in looped.stderr


def test_evaluate_takes_weights_of_another_key_allowed_without_a_fingerprint_refusal(
    tmp_path: Path,
) -> None:
    spec = f"precomputed:{_probabilities(tmp_path / 'a' / 'llama3.jsonl', 0.2)}"
    weights = _weights(tmp_path / "w", 2, "gpt", "openai:{}")
    dataset = Dataset("given", [], [], contexts=_contexts())
    options = {"k": 2, "n_bootstrap": 20, "judge": spec, "theta_weights": str(weights)}
    refused = EvaluateSettings(cache_dir=tmp_path / "s1", **options)
    with pytest.raises(UDCGInputError, match="field 'judge'"):
        run_benchmark(dataset, None, refused, tmp_path / "r1")
    allowed = EvaluateSettings(cache_dir=tmp_path / "s2", allow_mismatch=["judge"], **options)
    report, _ = run_benchmark(dataset, None, allowed, tmp_path / "r2")
    (note,) = report["setup"]["theta_weights_overrides"]
    assert note.startswith("field 'judge'")


def test_evaluate_refuses_to_mix_kept_values_with_those_of_another_judge(tmp_path: Path) -> None:
    """Given contexts whose manifest says judge A labelled relevance under the key, labelled
    with judge B for the utility they lack: the report would read A's labels beside B's values."""
    rows = [
        {"question": q, "passage": t, "abstain_prob": 0.3, "answer_prob": 0.6}
        for q, _, passage in QUESTIONS
        for t in (passage, DISTRACTOR)
    ]
    other = tmp_path / "b" / "llama3.jsonl"
    other.parent.mkdir()
    other.write_text("".join(json.dumps(row) + "\n" for row in rows))
    given = tmp_path / "given.jsonl"
    write_contexts(given, _contexts())
    from udcg.pipeline.datasets import contexts_jsonl

    def run(judges: dict[str, dict[str, str]], allow: list[str], out: str) -> dict:
        _stamp(given, judges)
        settings = EvaluateSettings(
            k=2, n_bootstrap=20, cache_dir=tmp_path / "s", judge=f"precomputed:{other}",
            utility="answer_likelihood", allow_mismatch=allow,
        )  # fmt: skip
        return run_benchmark(contexts_jsonl(given), None, settings, tmp_path / out)[0]

    with pytest.raises(UDCGInputError, match="given contexts' relevance under judge 'llama3'"):
        run({"llama3": {"relevance": "fp-a"}}, [], "r1")
    report = run({"llama3": {"relevance": "fp-a"}}, ["fingerprint"], "r2")
    assert any("fp-a" in note and "allowed on purpose" in note for note in report["notes"])
    run({"llama3": {"abstain": "fp-a"}}, [], "r3")  # abstention values are not read here


def test_weights_record_and_check_who_labelled_the_relevance(tmp_path: Path, capsys) -> None:
    """UDCG-theta splits the utilities by relevance: weights fitted where one judge's LLM
    labelled it are refused where another's did, in the library, ``score``, ``order`` and
    ``weights calibrate``; relevance no LLM labelled is not checked."""
    import udcg

    train, other, given = (tmp_path / f"{n}.jsonl" for n in ("train", "other", "given"))
    write_contexts(train, simulate_contexts(40, 3, per_query=1, seed=1))
    for path in (other, given):
        write_contexts(path, simulate_contexts(12, 3, per_query=1, seed=2))
    _stamp(train, {"sim": {"abstain": "fp-a", "relevance": "fp-r1"}})
    _stamp(other, {"sim": {"abstain": "fp-a", "relevance": "fp-r2"}})
    _stamp(given, {"sim": {"abstain": "fp-a"}})
    model = udcg.fit_theta(train, 3, val_fraction=0.0)
    assert model.card_["relevance_fingerprint"] == "fp-r1"
    message = "field 'relevance': the weights were fitted with LLM relevance labels' judge"
    with pytest.raises(UDCGInputError, match=message + " fingerprint 'fp-r1', not 'fp-r2'"):
        udcg.score_contexts(other, weights=model)
    frame = udcg.score_contexts(other, weights=model, allow_mismatch=["relevance"])
    assert frame["UDCG-theta"].notna().all()
    assert udcg.score_contexts(given, weights=model)["UDCG-theta"].notna().all()
    folder = model.save_pretrained(tmp_path / "w")
    assert weights_main(["show", str(folder)]) == 0
    assert "relevance by:    fp-r1" in capsys.readouterr().out
    commands = [
        (score_main, [str(other), "--judge", "sim", "--weights", str(folder)]),
        (order_main, [str(other), "--weights", str(folder), "-o", str(tmp_path / "o.jsonl")]),
        (weights_main, ["calibrate", str(folder), str(other), "-o", str(tmp_path / "cal")]),
    ]
    for main, args in commands:
        assert main(args) == 2
        assert message in capsys.readouterr().err
        assert main([*args, "--allow-mismatch", "relevance"]) == 0
        written = tmp_path / "o.jsonl"
        told = capsys.readouterr().err + (written.read_text() if written.exists() else "")
        assert "LLM relevance labels' judge fingerprint 'fp-r1'" in told


def test_evaluate_checks_who_labelled_the_relevance_of_given_contexts(
    annotated: tuple[Path, str, str], tmp_path: Path
) -> None:
    from udcg.pipeline.datasets import contexts_jsonl

    out, spec, _ = annotated
    made = values_made_by(out, "llama3", "abstain")
    _stamp(out, {"llama3": {"abstain": made, "relevance": "fp-r2"}})
    model = UDCGTheta(k=2)
    model.alpha_, model.beta_, model.intercept_ = np.ones(2), -np.ones(2), 0.0
    card = {"judge_model": "llama3", "judge_fingerprint": made, "relevance_fingerprint": "fp-r1"}
    weights = model.save_pretrained(tmp_path / "w", card=card)
    settings = EvaluateSettings(
        k=2, n_bootstrap=20, cache_dir=tmp_path / "s", judge=spec, theta_weights=str(weights)
    )
    with pytest.raises(UDCGInputError, match=r"field 'relevance': .* 'fp-r1', not 'fp-r2'"):
        run_benchmark(contexts_jsonl(out), None, settings, tmp_path / "r1")
    allowed = EvaluateSettings(**{**vars(settings), "allow_mismatch": ["relevance"]})
    report, _ = run_benchmark(contexts_jsonl(out), None, allowed, tmp_path / "r2")
    assert any("fp-r1" in note for note in report["setup"]["theta_weights_overrides"])


def test_train_py_refuses_another_precomputed_file_of_the_key(
    annotated: tuple[Path, str, str], tmp_path: Path
) -> None:
    import subprocess
    import sys

    out, _, other = annotated
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "train.py", "data=jsonl", f"data.path={out}", f"judge={other}", "k=2",
         f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=repo, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip()
    assert "\n" not in err and f"{out}: " in err and "the values of judge 'llama3' were made" in err


def _covered(path: Path, judges: list[str]) -> Path:
    """Contexts whose Q-CARE coverage labels judge ``judges[i % len]`` made."""
    rows = []
    for i, ctx in enumerate(_contexts()):
        record = {"judge": judges[i % len(judges)], "fingerprint": "f", "checks": ["logprobs"]}
        row = ctx.to_json() | {"subqueries": ["s1"], "qcare_labels": record}
        for j, passage in enumerate(row["passages"]):
            passage["covers"] = [j == i % 2]
        rows.append(row)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_coverage_of_several_labellers_is_named_wherever_it_is_read(
    annotated: tuple[Path, str, str], tmp_path: Path
) -> None:
    """``trec --coverage`` and ``udcg.evaluate(coverage=)`` warn as ``qcare score`` does when
    the labels come from several judges; ``evaluate.py qcare=true`` names who made them."""
    import udcg
    from udcg.errors import UDCGWarning
    from udcg.pipeline.datasets import contexts_jsonl

    mixed = _covered(tmp_path / "mixed.jsonl", ["J1", "J2"])
    run = {f"q{i}": {f"d{i}-0": 2.0, f"d{i}-1": 1.0} for i in range(6)}
    qrels = {f"q{i}": {f"d{i}-{i % 2}": 1} for i in range(6)}
    with pytest.warns(UDCGWarning, match=r"several sources \(judge J1 \(logprobs\): 3 contexts"):
        udcg.evaluate(qrels, run, ["C-Prec@2"], coverage=str(mixed))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        one = _covered(tmp_path / "one.jsonl", ["J1"])
        udcg.evaluate(qrels, run, ["C-Prec@2"], coverage=str(one))
    _, spec, _ = annotated
    given = _covered(tmp_path / "given.jsonl", ["J1"])
    settings = EvaluateSettings(
        k=2, n_bootstrap=20, cache_dir=tmp_path / "s", judge=spec, qcare=True
    )
    report, _ = run_benchmark(contexts_jsonl(given), None, settings, tmp_path / "r")
    assert "Q-CARE coverage labels: judge J1 (logprobs): 6 contexts" in report["notes"]


def test_string_relevance_filling_one_label_keeps_the_others_so_is_refused(
    tmp_path: Path,
) -> None:
    """relevance=string labels only the passages without a label: the kept labels of another
    judge of the key stay in the report, so one missing label is no way past the refusal."""
    from udcg.pipeline.datasets import contexts_jsonl

    spec = f"precomputed:{_probabilities(tmp_path / 'b' / 'llama3.jsonl', 0.3)}"
    contexts = _contexts()
    contexts[0].passages[1] = replace(contexts[0].passages[1], relevant=None)
    given = tmp_path / "given.jsonl"
    write_contexts(given, contexts)
    _stamp(given, {"llama3": {"relevance": "fp-a"}})
    settings = EvaluateSettings(k=2, n_bootstrap=20, cache_dir=tmp_path / "s", judge=spec)
    with pytest.raises(UDCGInputError, match="given contexts' relevance under judge 'llama3'"):
        run_benchmark(contexts_jsonl(given), None, settings, tmp_path / "r")


def test_the_relevance_labeller_is_read_under_any_key_and_a_relabel_replaces_it(
    tmp_path: Path,
) -> None:
    """A passage has one ``relevant`` label whichever key's LLM made it; a relabel by another
    key replaces every label, so the record of the earlier labeller goes."""
    from udcg.io.manifests import made_by
    from udcg.pipeline.context_scores import file_labels_made_by

    path = tmp_path / "c.jsonl"
    write_contexts(path, _contexts())
    _stamp(path, {"sim": {"abstain": "fp-a"}, "big": {"relevance": "fp-r"}})
    assert file_labels_made_by(path) == "fp-r"
    earlier = {"small": {"relevance": "fp-1", "abstain": "fp-1"}}
    relabelled = made_by(earlier, "big", "fp-2", ["relevance"], "llm", True)
    assert relabelled == {"small": {"abstain": "fp-1"}, "big": {"relevance": "fp-2"}}
    kept = made_by(earlier, "big", "fp-2", ["relevance"], "llm", False)  # fills missing ones
    assert kept == {"small": {"relevance": "fp-1", "abstain": "fp-1"}, "big": {"relevance": "fp-2"}}
    _stamp(path, kept)
    assert file_labels_made_by(path) == "fp-1 + fp-2"


def test_weights_of_another_key_still_check_who_labels_the_relevance(
    annotated: tuple[Path, str, str], tmp_path: Path
) -> None:
    """Weights fitted under another judge key (allowed with ``judge``) split the utilities by
    relevance one LLM labelled: ``evaluate.py relevance=llm`` relabelling with another LLM is
    refused until ``relevance`` is allowed too."""
    from udcg.pipeline.datasets import contexts_jsonl

    out, _, _ = annotated
    model = UDCGTheta(k=2)
    model.alpha_, model.beta_, model.intercept_ = np.ones(2), -np.ones(2), 0.0
    card = {"judge_model": "llama3", "judge_fingerprint": "fp-o", "relevance_fingerprint": "fp-r1"}
    weights = model.save_pretrained(tmp_path / "w", card=card)
    settings = EvaluateSettings(
        k=2, n_bootstrap=20, cache_dir=tmp_path / "s", judge="smollm2-135m",
        theta_weights=str(weights), relevance="llm", allow_mismatch=["judge"],
    )  # fmt: skip
    with pytest.raises(UDCGInputError, match=r"field 'relevance': .* 'fp-r1', not '"):
        run_benchmark(contexts_jsonl(out), None, settings, tmp_path / "r1")
    allowed = replace(settings, allow_mismatch=["judge", "relevance"])
    report, _ = run_benchmark(contexts_jsonl(out), None, allowed, tmp_path / "r2")
    assert any("fp-r1" in note for note in report["setup"]["theta_weights_overrides"])


def test_weights_record_the_abstention_mode_of_their_training_values(
    tmp_path: Path, capsys
) -> None:
    """The card's ``abstention_mode`` comes from the training file's manifest (the mode travels
    in the maker's record), so ``score --mode`` of another mode is refused."""
    import udcg

    train, other = tmp_path / "train.jsonl", tmp_path / "other.jsonl"
    write_contexts(train, simulate_contexts(40, 3, per_query=1, seed=1))
    write_contexts(other, simulate_contexts(12, 3, per_query=1, seed=2))
    _stamp(train, {"sim": {"abstain": "fp-a|mode=sequence"}})
    model = udcg.fit_theta(train, 3, val_fraction=0.0)
    assert model.card_["abstention_mode"] == "sequence"
    folder = model.save_pretrained(tmp_path / "w")
    assert weights_main(["show", str(folder)]) == 0
    assert "abstention mode: sequence" in capsys.readouterr().out
    args = [str(other), "--judge", "sim", "--weights", str(folder), "--mode", "first_token"]
    assert score_main(args) == 2
    assert "field 'mode': the weights were fitted with abstention mode 'sequence'" in (
        capsys.readouterr().err
    )
    # the mode of the values is their manifest's: a --mode saying otherwise is refused, and
    # calibrate checks it against the card as score does
    _stamp(other, {"sim": {"abstain": "fp-a"}})
    for mode in (["--mode", "sequence"], []):  # (the fingerprint, which says it too, allowed)
        assert score_main([*args[:-2], *mode, "--allow-mismatch", "fingerprint"]) == 2
        err = capsys.readouterr().err
        assert "field 'mode'" in err and "'first_token'" in err, err
    # order and udcg.score_contexts check it too
    ordered = [str(other), "-o", str(tmp_path / "o.jsonl"), "--weights", str(folder)]
    assert order_main([*ordered, "--allow-mismatch", "fingerprint"]) == 2
    assert "field 'mode'" in capsys.readouterr().err
    with pytest.raises(UDCGInputError, match=r"^field 'mode': .* abstention mode 'sequence'"):
        udcg.score_contexts(other, weights=folder, allow_mismatch=["fingerprint"])
    calibrate = ["calibrate", str(folder), str(other), "-o", str(tmp_path / "c")]
    assert weights_main([*calibrate, "--allow-mismatch", "fingerprint"]) == 2
    assert "field 'mode': the weights were fitted with abstention mode 'sequence'" in (
        capsys.readouterr().err
    )
    # udcg trec checks the mode of annotated contexts against a card without a fingerprint
    qrels, run = _trec_files(tmp_path, simulate_contexts(12, 3, per_query=1, seed=2))
    unprinted = UDCGTheta(k=3)
    unprinted.alpha_, unprinted.beta_, unprinted.intercept_ = np.ones(3), -np.ones(3), 0.0
    card = {"judge_model": "sim", "utility": "abstention", "abstention_mode": "sequence"}
    bare = unprinted.save_pretrained(tmp_path / "bare", card=card)
    trec = ["-m", "UDCGtheta@3", str(qrels), str(run), "--utilities", str(other)]
    assert trec_main([*trec, "--weights", str(bare)]) == 2
    assert "field 'mode': the weights were fitted with abstention mode 'sequence', not" in (
        capsys.readouterr().err
    )
    assert trec_main([*trec, "--weights", str(bare), "--allow-mismatch", "mode"]) == 0
    assert "(allowed on purpose)" in capsys.readouterr().err
    from udcg.pipeline.context_scores import abstention_mode  # train.py's card too

    assert abstention_mode("fp-a|mode=sequence", "abstention") == "sequence"
    assert abstention_mode("fp-a", "answer_likelihood") is None


def test_evaluate_scores_given_values_in_the_mode_their_manifest_records(
    tmp_path: Path,
) -> None:
    """Weights fitted on ``annotate --mode sequence`` values (the card records the mode) score
    given contexts of those values in ``evaluate.py``: the given values' mode is the one their
    manifest records, not the first-token mode the run would label with."""
    import udcg
    from udcg.pipeline.datasets import contexts_jsonl

    key, made = "smollm2-135m", "fp-s|mode=sequence"
    path = tmp_path / "seq.jsonl"
    write_contexts(path, simulate_contexts(30, 2, per_query=2, seed=3, judge=key))
    _stamp(path, {key: {"abstain": made}})
    model = udcg.fit_theta(path, 2, judge_key=key, val_fraction=0.0)
    assert model.card_["abstention_mode"] == "sequence"
    weights = model.save_pretrained(tmp_path / "w")
    settings = EvaluateSettings(
        k=2, n_bootstrap=20, cache_dir=tmp_path / "s", judge=key, theta_weights=str(weights)
    )
    report, _ = run_benchmark(contexts_jsonl(path), None, settings, tmp_path / "r")
    assert not report["setup"]["theta_weights_overrides"]
