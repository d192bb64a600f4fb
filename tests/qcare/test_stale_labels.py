"""adv40 4: every reader of Q-CARE labels refuses a context whose question, passages or
scored answer differ from those its `qcare_labels` record says were labelled."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import udcg
from udcg.cli.qcare import main
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, Passage, write_contexts
from udcg.qcare import label_contexts

PASSAGES = [
    Passage(doc_id, text=text, relevant=True, abstain_prob={"gen": 0.5})
    for doc_id, text in [
        ("p1", "Paris is the capital #fr"),
        ("p2", "The Seine #rv flows #fr"),
        ("p3", "Nothing useful here"),
    ]
]


def _labelled(tag_judge) -> list[Context]:
    contexts = [
        Context(
            f"q{i}",
            PASSAGES,
            run="a",
            question="capital #fr and river #rv",
            outcomes={"gen": {"answer": "Paris #fr", "correct": True}},
        )
        for i in (1, 2)
    ]
    out, _ = label_contexts(contexts, tag_judge(), answers_from="gen")
    return out


def _edits(ctx: Context) -> dict[str, Context]:
    """The labelled context with each input edited, by the field the refusal names."""
    return {
        "question": replace(ctx, question="mayor #mx"),
        "passages": replace(ctx, passages=ctx.passages[::-1]),
        "outcomes.gen": replace(ctx, outcomes={"gen": {**ctx.outcomes["gen"], "answer": "Lyon"}}),
    }


@pytest.mark.parametrize("edited", ["question", "passages", "outcomes.gen"])
def test_qcare_score_refuses_labels_of_edited_inputs(
    tmp_path: Path, tag_judge, capsys, edited: str
) -> None:
    first, second = _labelled(tag_judge)
    path = tmp_path / "edited.jsonl"
    write_contexts(path, [first, _edits(second)[edited]])
    assert main(["score", str(path), "--answers-from", "gen"]) == 2
    err = capsys.readouterr().err
    assert f"edited.jsonl:2: field 'qcare_labels.inputs.{edited}'" in err
    assert "qid 'q2'" in err and "udcg qcare label" in err and len(err.strip().splitlines()) == 1
    if edited == "outcomes.gen":  # coverage alone does not read the answer
        assert main(["score", str(path)]) == 0


def test_readers_refuse_and_older_records_pass(tmp_path: Path, tag_judge, capsys) -> None:
    """score_contexts, udcg trec --coverage and qcare agreement refuse as qcare score does; a
    record without `inputs` (an earlier udcg's) is not checked."""
    pytest.importorskip("pandas")  # score_contexts' frame
    first, second = _labelled(tag_judge)
    path = tmp_path / "edited.jsonl"
    write_contexts(path, [first, _edits(second)["question"]])
    field = r"edited\.jsonl:2: field 'qcare_labels\.inputs\.question'"
    with pytest.raises(UDCGInputError, match=field):
        udcg.score_contexts(path, qcare=True)
    qrels = {"q1": {"p1": 1}, "q2": {"p1": 1}}
    run = {"q1": {"p1": 3.0, "p2": 2.0}, "q2": {"p1": 3.0, "p2": 2.0}}
    with pytest.raises(UDCGInputError, match=field):
        udcg.evaluate(qrels, run, ["C-Prec@2"], coverage=path)
    assert main(["agreement", str(path), str(path)]) == 2
    assert "field 'qcare_labels.inputs.question'" in capsys.readouterr().err
    older = replace(
        _edits(second)["question"],
        extra={
            "qcare_labels": {k: v for k, v in second.extra["qcare_labels"].items() if k != "inputs"}
        },
    )
    write_contexts(path, [first, older])
    assert main(["score", str(path)]) == 0
    assert udcg.evaluate(qrels, run, ["C-Prec@2"], coverage=path)


def test_passages_reordered_with_their_labels_are_not_stale(tmp_path: Path, tag_judge) -> None:
    """`udcg order` (and evaluate.py's `order=`) move each passage with its coverage labels and
    drop the outcomes: the record names the new order, and the readers score it; a context
    whose passages were edited before stays refused."""
    pytest.importorskip("pandas")  # score_contexts' frame
    import numpy as np

    from udcg.cli.main import main as udcg_main
    from udcg.pipeline.order_study import pick
    from udcg.theta import UDCGTheta

    first, second = _labelled(tag_judge)
    model = UDCGTheta(3)
    model.alpha_, model.beta_, model.intercept_ = np.ones(3), -np.ones(3), 0.0
    weights = model.save_pretrained(tmp_path / "w", card={"judge_model": "gen"})
    labelled, ordered = tmp_path / "labelled.jsonl", tmp_path / "ordered.jsonl"
    write_contexts(labelled, [first, second])
    argv = ["order", str(labelled), "-o", str(ordered), "--weights", str(weights)]
    assert udcg_main([*argv, "--ordering", "reversed", "--allow-unverified"]) == 0
    turned = list(udcg.read_contexts(ordered))
    assert [p.doc_id for p in turned[0].passages] == ["p3", "p2", "p1"]
    assert main(["score", str(ordered)]) == 0
    assert list(udcg.score_contexts(ordered, qcare=True)["C-Prec"].notna()) == [True, True]
    assert pick(first, np.array([2, 0]), "theta").extra["qcare_labels"]["outcomes"] == []
    stale = pick(_edits(first)["passages"], np.array([0, 1]), "theta")
    with pytest.raises(UDCGInputError, match=r"inputs\.passages"):
        udcg.score_contexts([stale], qcare=True)
