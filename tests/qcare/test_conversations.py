"""Conversational queries through Q-CARE: the `conversation` field (reader checks, exact round
trip), decomposition given the history (the prompt holds it; single-turn prompts unchanged),
labels and hand-computed metrics on a hand-built MTRAG-style set, MTRAG's task format, and
`udcg qcare label` with a real server judge."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest

from tests.qcare.conversations import (
    ANSWERS,
    DOCS,
    RETRIEVED,
    SAME_TURN,
    ConversationJudge,
    contexts,
    mtrag_task,
)
from udcg.cli.qcare import main
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, read_contexts, write_contexts
from udcg.qcare import label_contexts, qcare_scores
from udcg.qcare.conversation import history_of, read_mtrag_tasks, turns_of
from udcg.qcare.labels import prompts as qp


def test_single_turn_prompts_and_their_cache_keys_are_unchanged() -> None:
    """The decomposition prompts of a single-turn query are byte for byte those of before
    conversations (sha256 of the messages, taken from the previous version)."""
    messages = [
        qp.query_decomposition("Who wrote Emma, and when?"),
        qp.answer_decomposition("Who wrote Emma?", "Jane Austen, in 1815."),
    ]
    digest = hashlib.sha256(json.dumps(messages).encode()).hexdigest()
    assert digest == "0bb5610d2e1d5449116a62eaf584f3c41c82443183bfabcb34e5e9eef63a55b9"
    assert qp.query_decomposition("q", ()) == qp.query_decomposition("q")


def test_decomposition_is_asked_with_the_history() -> None:
    judge = ConversationJudge()
    out, report = label_contexts(contexts(), judge, answers_from="gen")
    by = {c.qid: c for c in out}
    # the same latest turn, two histories: two decompositions, different sub-queries
    assert by["paris::2"].subqueries == [
        "How many people live in Paris?",
        "Which river flows through Paris?",
    ]
    assert by["lyon::2"].subqueries == [
        "How many people live in Lyon?",
        "Which rivers flow through Lyon?",
    ]
    # a single sub-query of a conversation is the judge's standalone rewrite
    assert by["emma::2"].subqueries == ["When was Emma published?"]
    assert by["mona::1"].subqueries == ["Who painted the Mona Lisa?"]
    asked = [m[1]["content"] for m in judge.prompts if "Split the QUERY" in m[1]["content"]]
    assert len(asked) == 4 and report.questions == 4
    paris = next(p for p in asked if "capital of France" in p)
    assert paris.endswith(
        "CONVERSATION:\nUSER: Which city is the capital of France?\n"
        "ASSISTANT: Paris is the capital of France.\n\nQUERY: " + SAME_TURN
    )
    assert sum(p.endswith("QUERY: " + SAME_TURN) for p in asked) == 2
    # the single-turn query gets the single-turn prompt, exactly
    single = qp.query_decomposition("Who painted the Mona Lisa?")
    assert single in [m for m in judge.prompts]
    # the answer decomposition sees the history too ("It" resolved)
    claims = [m[1]["content"] for m in judge.prompts if "List the atomic claims" in m[1]["content"]]
    assert any("USER: Who wrote Emma?" in c and c.endswith(ANSWERS["emma::2"]) for c in claims)
    assert by["emma::2"].outcomes["gen"]["claims"] == ["Emma was published in 1815."]
    # coverage checks ask about the standalone sub-queries only: no history in them
    coverage = [
        m[1]["content"] for m in judge.prompts if "Does the DOCUMENT alone" in m[1]["content"]
    ]
    assert coverage and not any("CONVERSATION" in c for c in coverage)
    # the conversation stays as it was
    assert by["lyon::2"].extra["conversation"] == contexts()[1].extra["conversation"]


def _dcg(gains: list[float]) -> float:
    return sum(g / math.log2(i + 2) for i, g in enumerate(gains))


def test_labels_and_hand_computed_metrics() -> None:
    out, _ = label_contexts(contexts(), ConversationJudge(), answers_from="gen")
    by = {c.qid: c for c in out}
    paris = [[True, False], [False, False], [False, True]]
    assert [p.covers for p in by["paris::2"].passages] == paris
    lyon_covers = [[False, False], [False, True], [True, False]]
    assert [p.covers for p in by["lyon::2"].passages] == lyon_covers
    lyon = by["lyon::2"].outcomes["gen"]
    assert lyon["claim_relevance"] == [[True, False], [False, False]]
    assert lyon["subquery_covered"] == [True, False]  # no claim names the Rhône
    assert lyon["claim_support"] == [[False, False, True], [False, False, False]]  # Loire
    scores = qcare_scores(out, "gen")
    order = [c.qid for c in out]
    # r per chunk: paris (1/2, 0, 1/2), lyon (0, 1/2, 1/2), emma (1, 0), mona (1)
    expected = {
        "paris::2": {
            "C-Prec": 1 / 3,
            "C-nDCG": _dcg([0.5, 0, 0.5]) / _dcg([0.5, 0.5, 0]),
            "Completeness": 1.0,
            "Conciseness": 1.0,
            "Verifiableness": 1.0,
        },
        "lyon::2": {
            "C-Prec": 1 / 3,
            "C-nDCG": _dcg([0, 0.5, 0.5]) / _dcg([0.5, 0.5, 0]),
            "Completeness": 0.5,
            "Conciseness": 0.5,
            "Verifiableness": 0.5,
        },
        "emma::2": dict.fromkeys(("C-nDCG", "Completeness", "Conciseness", "Verifiableness"), 1.0)
        | {"C-Prec": 0.5},
        "mona::1": dict.fromkeys(
            ("C-Prec", "C-nDCG", "Completeness", "Conciseness", "Verifiableness"), 1.0
        ),
    }
    for name, values in scores.values.items():
        assert values.tolist() == pytest.approx([expected[q][name] for q in order]), name


def test_without_the_history_the_follow_up_is_not_understood() -> None:
    """The Emma context with its conversation dropped: "When was it published?" is its own
    sub-query, which no chunk covers, and the claim "It was published in 1815." is supported
    by no chunk. The history is what makes the labels right."""
    emma = contexts()[2]
    alone = Context(emma.qid, emma.passages, question=emma.question, outcomes=emma.outcomes)
    out, _ = label_contexts([alone], ConversationJudge(), answers_from="gen")
    scores = qcare_scores(out, "gen")
    assert out[0].subqueries == ["When was it published?"]
    assert out[0].outcomes["gen"]["claims"] == ["It was published in 1815."]
    assert scores.values["C-Prec"].tolist() == [0.0]
    assert scores.values["Verifiableness"].tolist() == [0.0]


def test_round_trip_is_exact(tmp_path: Path) -> None:
    ctx = contexts()[0].to_json()
    ctx["conversation"][0]["metadata"] = {"author": "a1", "created_at": 1}  # kept as read
    line = json.dumps(ctx, ensure_ascii=False)
    path = tmp_path / "conv.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    (back,) = read_contexts(path)
    assert history_of(back)[0] == ("user", "Which city is the capital of France?")
    write_contexts(tmp_path / "again.jsonl", [back])
    assert (tmp_path / "again.jsonl").read_text(encoding="utf-8") == line + "\n"
    labelled, _ = label_contexts([back], ConversationJudge())
    write_contexts(tmp_path / "labelled.jsonl", labelled)
    (again,) = read_contexts(tmp_path / "labelled.jsonl")
    assert again.extra["conversation"] == ctx["conversation"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c["conversation"].pop(), r"field 'conversation\[1\]\.role': the last turn"),
        (
            lambda c: c["conversation"][1].update(role="agent"),
            r"field 'conversation\[1\]\.role': must",
        ),
        (lambda c: c["conversation"][0].update(content=" "), r"field 'conversation\[0\]\.content'"),
        (lambda c: c.update(question="Other?"), r"field 'question': must hold the conversation"),
        (lambda c: c.pop("question"), r"field 'question': must hold .* missing"),
        (lambda c: c.update(conversation=[]), r"field 'conversation': must be a non-empty list"),
        (lambda c: c.update(conversation="hi"), r"field 'conversation': must be a non-empty"),
    ],
)
def test_reader_errors_are_located(tmp_path: Path, change, message: str) -> None:
    obj = contexts()[2].to_json()
    change(obj)
    path = tmp_path / "bad.jsonl"
    path.write_text("\n" + json.dumps(obj) + "\n")
    with pytest.raises(UDCGInputError, match=r"bad.jsonl:2: " + message):
        list(read_contexts(path))


def test_mtrag_tasks_read_into_the_same_contexts(tmp_path: Path) -> None:
    path = tmp_path / "reference.jsonl"
    lines = []
    for ctx in contexts():
        turns = [t["content"] for t in turns_of(ctx) or [{"content": ctx.question}]]
        lines.append(json.dumps(mtrag_task(ctx.qid, turns, RETRIEVED[ctx.qid], ANSWERS[ctx.qid])))
    path.write_text("\n".join(lines) + "\n")  # json.dumps writes NaN as the release does
    assert "NaN" in path.read_text()
    read = read_mtrag_tasks(path, run="bm25", model="gen")
    for got, built in zip(read, contexts(), strict=True):
        assert (got.qid, got.question, got.run) == (built.qid, built.question, built.run)
        single = [{"role": "user", "content": built.question}]
        assert got.extra["conversation"] == (turns_of(built) or single)
        assert [(p.doc_id, p.text, p.relevant) for p in got.passages] == [
            (d, DOCS[d], True) for d in RETRIEVED[built.qid]
        ]
        assert got.outcomes == built.outcomes and got.answers == [ANSWERS[built.qid]]
        assert got.extra["question_type"] == ["Factoid"]
    assert "multi_turn" not in read[3].extra  # NaN cell: absent
    # the metrics are those of the contexts built directly (single-turn mona has a
    # one-turn conversation: its decomposition prompt is the single-turn one)
    judge = ConversationJudge()
    labelled, _ = label_contexts(read, judge, answers_from="gen")
    direct, _ = label_contexts(contexts(), ConversationJudge(), answers_from="gen")
    a, b = qcare_scores(labelled, "gen"), qcare_scores(direct, "gen")
    for name in a.values:
        assert a.values[name].tolist() == b.values[name].tolist()
    # through the command, then the file reads back
    out = tmp_path / "contexts.jsonl"
    assert main(["mtrag", str(path), "-o", str(out), "--run", "bm25", "--model", "gen"]) == 0
    assert list(read_contexts(out)) == read


def test_mtrag_errors_are_located(tmp_path: Path) -> None:
    task = mtrag_task("c::2", ["Who wrote Emma?", "Jane Austen."], ["mona"], "x")
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(task) + "\n")
    with pytest.raises(UDCGInputError, match=r"t.jsonl:1: field 'input\[1\].speaker'"):
        read_mtrag_tasks(path)
    task["input"].append({"speaker": "bot", "text": "hi"})
    path.write_text(json.dumps(task) + "\n")
    with pytest.raises(UDCGInputError, match=r"'input\[2\].speaker': must be user or agent"):
        read_mtrag_tasks(path)
    task["input"][2]["speaker"] = "user"
    del task["contexts"][0]["document_id"]
    path.write_text("\n" + json.dumps(task) + "\n")
    with pytest.raises(UDCGInputError, match=r"t.jsonl:2: field 'contexts\[0\].document_id'"):
        read_mtrag_tasks(path)


def test_label_command_with_a_real_server_judge(
    tmp_path: Path, llama_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`udcg qcare label` on a conversation with history and one without, SmolLM2-135M behind a
    llama.cpp server: every context labelled, the conversation written back as read, scores
    computed (the in-process tests above run every conversation; the model is slow on CPU)."""
    data = tmp_path / "conversations.jsonl"
    chosen = contexts()[2:]  # emma::2 (with history), mona::1 (without)
    assert history_of(chosen[0]) and not history_of(chosen[1])
    write_contexts(data, chosen)
    out = tmp_path / "labelled.jsonl"
    judge = ["--judge", f"openai:smollm2@{llama_server}", "--retries", "0"]
    status = main(["label", str(data), "-o", str(out), "--answers-from", "gen", *judge])
    printed = capsys.readouterr()
    assert status == 0, printed.err
    assert "labelled 2 contexts (2 questions, 2 answers)" in printed.out
    labelled = list(read_contexts(out))
    for before, after in zip(chosen, labelled, strict=True):
        assert after.extra.pop("qcare_labels")["subqueries"] == "judge"
        assert after.extra == before.extra and after.question == before.question
        assert after.subqueries and all(isinstance(s, str) and s for s in after.subqueries)
        for passage in after.passages:
            assert len(passage.covers) == len(after.subqueries)
        assert "claims" in after.outcomes["gen"]
    assert main(["score", str(out), "--answers-from", "gen"]) == 0
    table = capsys.readouterr().out
    assert "C-Prec" in table and "Completeness" in table


def test_a_hugging_face_dataset_keeps_the_conversation(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    from udcg.io.formats.hf_datasets import contexts_to_dataset

    contexts_to_dataset(contexts()).save_to_disk(tmp_path / "ds")
    back = list(read_contexts(f"hf:{tmp_path / 'ds'}"))
    assert back == contexts()
    assert history_of(back[2]) == (
        ("user", "Who wrote Emma?"),
        ("assistant", "Jane Austen wrote Emma."),
    )
