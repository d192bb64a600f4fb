"""label_contexts with a rule-following judge: labels, hand-computed metrics, call counts,
fallbacks, text-mode Yes/No and the cache."""

from __future__ import annotations

import math
import warnings
from dataclasses import replace

import pytest

from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, Passage, read_contexts, write_contexts
from udcg.io.contexts.sources import label_inputs
from udcg.judge.cached import CachedJudge
from udcg.qcare import label_contexts, qcare_scores

QUESTION = "capital #fr and river #rv"
P1 = Passage(doc_id="p1", text="Paris is the capital #fr")
P2 = Passage(doc_id="p2", text="The Seine #rv flows through Paris #fr")
P3 = Passage(doc_id="p3", text="Nothing useful here")


def _contexts() -> list[Context]:
    return [
        Context(
            "q1",
            [P1, P2, P3],
            run="a",
            question=QUESTION,
            outcomes={"gen": {"answer": "Paris #fr; the Seine #rv; Lyon #ly; paris  #FR"}},
        ),
        Context(
            "q1", [P3], run="b", question=QUESTION, outcomes={"gen": {"answer": "NO-RESPONSE"}}
        ),
        Context(
            "q2",
            [P1],
            run="a",
            question="BROKEN query #fr",
            outcomes={"gen": {"answer": "BROKEN answer #fr"}},
        ),
    ]


def test_labels_and_hand_computed_metrics(tag_judge) -> None:
    judge = tag_judge()
    out, report = label_contexts(_contexts(), judge, answers_from="gen")
    first, second, third = out
    assert first.subqueries == ["capital #fr", "river #rv"]
    assert [p.covers for p in first.passages] == [[True, False], [True, True], [False, False]]
    assert first.passages[0].extra["covers_prob"] == [0.9, 0.2]
    gen = first.outcomes["gen"]
    # 'paris  #FR' folds onto 'Paris #fr': exact duplicates are dropped
    assert gen["claims"] == ["Paris #fr", "the Seine #rv", "Lyon #ly"]
    assert gen["claim_relevance"] == [[True, False], [False, True], [False, False]]
    assert gen["subquery_covered"] == [True, True]
    assert gen["claim_support"] == [[True, True, False], [False, True, False], [False] * 3]
    assert gen["answer"].startswith("Paris")  # the outcome keeps its fields
    # abstention: no claims, nothing covered, no call
    assert second.outcomes["gen"]["claims"] == []
    assert second.outcomes["gen"]["subquery_covered"] == [False, False]
    assert second.outcomes["gen"]["subquery_covered_prob"] == [None, None]
    # failed decompositions fall back to the query / the answer itself, counted
    assert third.subqueries == ["BROKEN query #fr"]
    assert third.outcomes["gen"]["claims"] == ["BROKEN answer #fr"]
    assert report.fallbacks["subquery fallback"] == 1
    assert report.fallbacks["claim fallback"] == 1
    assert report.fallbacks["no claims (empty or abstained answer)"] == 1

    scores = qcare_scores(out, "gen")
    # r = [1/2, 1, 0]: C-Prec = 1.5/3; DCG = 1/2 + 1/log2(3); IDCG = 1 + (1/2)/log2(3)
    dcg, idcg = 0.5 + 1 / math.log2(3), 1 + 0.5 / math.log2(3)
    assert scores.values["C-Prec"].tolist() == pytest.approx([0.5, 0.0, 1.0])
    assert scores.values["C-nDCG"].tolist() == pytest.approx([dcg / idcg, 0.0, 1.0])
    assert scores.values["Completeness"].tolist() == pytest.approx([1.0, 0.0, 1.0])
    assert scores.values["Conciseness"].tolist()[0] == pytest.approx(2 / 3)
    assert scores.values["Verifiableness"].tolist()[0] == pytest.approx(2 / 3)
    assert scores.values["Conciseness"].mask.tolist() == [False, True, False]
    assert scores.missing["Verifiableness"] == {"no claims": 1}


def test_each_distinct_prompt_is_sent_once_and_counted(tag_judge) -> None:
    judge = tag_judge()
    _, report = label_contexts(_contexts(), judge, answers_from="gen")
    # sub-queries: q1 twice (runs a, b) -> 1 call, q2 -> 1 call plus 2 JSON retries
    assert judge.calls["query"] == 1 + 1 and judge.calls["query retry"] == 2
    # coverage pairs: q1 {2 sub-queries} x {p1, p2, p3} + q2 {1} x {p1} = 7
    assert judge.calls["coverage"] == report.prompts["coverage"] == 7
    # relevance: 3 claims x 2 sub-queries + 1 x 1; support: 3 claims x 3 chunks + 1 x 1
    assert judge.calls["claim_relevance"] == report.prompts["claim_relevance"] == 7
    assert judge.calls["claim_support"] == report.prompts["claim_support"] == 10
    # claims-cover: only sub-queries with a relevant claim (q1: 2, q2: 1)
    assert judge.calls["claims_cover"] == report.prompts["claims_cover"] == 3
    assert report.fallbacks["generation prompts"] == sum(
        judge.calls[k] for k in ("query", "query retry", "answer", "answer retry")
    )
    assert report.judge_calls == sum(judge.calls.values())
    # reference: per context 1 + k*S (+ answer: extraction + S*F + k + covered)
    ref_a = 1 + 3 * 2 + 1 + 2 * 3 + 3 + 2
    ref_b = 1 + 1 * 2 + 1 + 2 * 1 + 1 + 0  # NO-RESPONSE: one fact, one extraction call
    ref_c = 1 + 1 * 1 + 1 + 1 * 1 + 1 + 1
    assert report.reference_calls == ref_a + ref_b + ref_c


def test_cache_makes_a_rerun_free(tag_judge, tmp_path) -> None:
    first = CachedJudge(tag_judge(), tmp_path / "cache.sqlite")
    out1, _ = label_contexts(_contexts(), first, answers_from="gen")
    inner = tag_judge()
    out2, _ = label_contexts(_contexts(), CachedJudge(inner, tmp_path / "cache.sqlite"), "gen")
    # only the failed JSON decompositions (never cached) are asked again
    assert set(inner.calls) <= {"query", "query retry", "answer", "answer retry"}
    assert out1 == out2


def test_text_mode_parses_strictly_retries_and_counts(tag_judge) -> None:
    contexts = [
        Context(
            "q",
            [P1, Passage(doc_id="u", text="maybe #unsure #fr")],
            question="capital #fr",
            outcomes={"gen": {"answer": "Paris #fr"}},
        )
    ]
    judge = tag_judge(logprobs=False)
    out, report = label_contexts(contexts, judge, answers_from="gen", checks="auto")
    assert report.text_reason and "NotImplementedError" in report.text_reason
    ctx = out[0]
    assert [p.covers for p in ctx.passages] == [[True], [None]]
    assert ctx.passages[0].extra["covers_prob"] == [None]  # text labels have no soft value
    assert ctx.outcomes["gen"]["claim_support"] == [[True, None]]
    assert report.labels["coverage"] == {"yes": 1, "unusable": 1}
    assert report.checks["unusable"] == 2 and report.checks["retried"] == 4  # --retries 2 each
    assert judge.calls["coverage retry"] == 2 and judge.calls["claim_support retry"] == 2
    scores = qcare_scores(out, "gen")
    # an unusable label is never a silent 0: the metric is missing, with its reason
    assert scores.values["C-Prec"].mask.tolist() == [True]
    assert scores.values["Verifiableness"].mask.tolist() == [True]
    assert scores.missing["C-Prec"] == {"a check without a usable answer": 1}
    assert scores.values["Completeness"].tolist() == [1.0]


def test_logprobs_mode_does_not_fall_back(tag_judge) -> None:
    contexts = [Context("q", [P1], question="capital #fr")]
    with pytest.raises(NotImplementedError):
        label_contexts(contexts, tag_judge(logprobs=False), checks="logprobs")


def test_non_finite_soft_label_goes_to_text(tag_judge) -> None:
    contexts = [Context("q", [Passage(text="#unsure #fr"), P1], question="capital #fr")]
    out, report = label_contexts(contexts, tag_judge())
    assert [p.covers for p in out[0].passages] == [[None], [True]]
    assert report.checks == {"logprobs": 1, "retried": 2, "unusable": 1}


def test_written_labels_round_trip_and_keep_user_subqueries(tag_judge, tmp_path) -> None:
    given = Context("q", [P1, P2], question="anything", subqueries=["river #rv"])
    out, report = label_contexts([given], tag_judge())
    assert out[0].subqueries == ["river #rv"] and report.prompts["coverage"] == 2
    assert [p.covers for p in out[0].passages] == [[False], [True]]
    path = tmp_path / "labelled.jsonl"
    write_contexts(path, out)
    again = list(read_contexts(path))
    assert [p.covers for p in again[0].passages] == [[False], [True]]
    assert again[0].passages[1].extra["covers_prob"] == [0.9]


def test_a_streaming_judge_gets_the_text_checks_in_one_call(tag_judge) -> None:
    """Text-route Yes/No checks go to a streaming judge as one call per attempt (no barrier
    every 64 prompts), with the labels of the batched route."""

    class Streaming(tag_judge):
        streams_results = True

        def __init__(self) -> None:
            super().__init__(logprobs=False)
            self.sizes: list[int] = []

        def generate(self, prompts, max_new_tokens=64, *, on_result=None):
            out = super().generate(prompts, max_new_tokens)
            if on_result is not None:  # the checks' calls (decompositions come without)
                self.sizes.append(len(prompts))
                for i, text in enumerate(out):
                    on_result(i, text, False)
            return out

    passages = [Passage(doc_id=f"p{i}", text=f"passage {i} #fr") for i in range(150)]
    contexts = [Context("q", passages, question="capital #fr")]
    streaming = Streaming()
    out, _ = label_contexts(contexts, streaming, checks="text")
    expected, _ = label_contexts(contexts, tag_judge(logprobs=False), checks="text")
    assert out == expected
    assert [p.covers for p in out[0].passages] == [[True]] * 150
    assert streaming.sizes == [150]  # one call, not batches of 64


def _other_judge(tag_judge):
    """A second judge: every Yes/No of the tag judge the other way round, under its own key."""

    class Other(tag_judge):
        name, fingerprint = "other", "other-v1"

        def yes_prob(self, prompts):
            return 1.1 - super().yes_prob(prompts)

    return Other()


def test_given_labels_are_refused_unless_relabel(tag_judge) -> None:
    """Labels the user gave are not replaced silently; --relabel replaces them, counted."""
    given = Context(
        "q", [replace(P1, covers=[False]), P2], question="x", subqueries=["capital #fr"]
    )
    with pytest.raises(UDCGInputError, match=r"passages\[0\]\.covers.*no qcare_labels record"):
        label_contexts([given], tag_judge())
    (out,), report = label_contexts([given], tag_judge(), relabel=True)
    assert [p.covers for p in out.passages] == [[True], [True]] and report.replaced == 1
    record = out.extra["qcare_labels"]
    assert record.pop("inputs").keys() == {"question", "passages", "outcomes"}
    assert record == {
        "judge": "tag",
        "fingerprint": "tag-v1",
        "subqueries": "given",
        "outcomes": [],
        "checks": ["logprobs"],
    }


def test_a_judge_adds_to_its_own_labels_and_refuses_another_judges(tag_judge) -> None:
    first, _ = label_contexts(_contexts()[:1], tag_judge())  # coverage only
    (both,), report = label_contexts(first, tag_judge(), answers_from="gen")  # same judge: fine
    assert both.extra["qcare_labels"]["outcomes"] == ["gen"] and report.replaced == 0
    assert both.extra["qcare_labels"]["subqueries"] == "judge"
    other = _other_judge(tag_judge)
    with pytest.raises(UDCGInputError, match=r"passages\[0\]\.covers.*judge 'tag'"):
        label_contexts([both], other)
    # relabelled: the other judge's coverage, its own decomposition, gen's labels dropped
    (mixed,), report = label_contexts([both], other, relabel=True)
    assert report.dropped == {"gen": 1} and "claims" not in mixed.outcomes["gen"]
    assert mixed.outcomes["gen"]["answer"] == both.outcomes["gen"]["answer"]
    fresh, _ = label_contexts(_contexts()[:1], other)
    assert [p.covers for p in mixed.passages] == [p.covers for p in fresh[0].passages]
    assert mixed.extra["qcare_labels"]["judge"] == "other"


def test_hand_labels_of_an_outcome_this_judge_never_labelled_are_given(tag_judge) -> None:
    """The judge's record lists the outcomes it labelled: another outcome's labels are the
    user's, refused as any given labels are, replaced only with --relabel."""
    ctx = replace(_contexts()[0], subqueries=["capital #fr"])
    hand = {"answer": "x", "claims": ["x"], "subquery_covered": [True]}
    (first,), _ = label_contexts([replace(ctx, outcomes={**ctx.outcomes, "human": hand})],
                                 tag_judge(), answers_from="gen")  # fmt: skip
    assert first.extra["qcare_labels"]["outcomes"] == ["gen"]
    assert first.outcomes["human"]["subquery_covered"] == [True]  # kept
    with pytest.raises(UDCGInputError, match=r"outcomes\.human\.claims.*does not list it"):
        label_contexts([first], tag_judge(), answers_from="human")
    label_contexts([first], tag_judge(), answers_from="gen")  # its own labels: recomputed
    (replaced,), report = label_contexts([first], tag_judge(), answers_from="human", relabel=True)
    assert replaced.extra["qcare_labels"]["outcomes"] == ["gen", "human"]
    assert report.replaced == 1  # said, as any replaced given labels are
    # scoring the given outcome of a judge-labelled file says whose labels they are
    from udcg.errors import UDCGWarning
    from udcg.io.contexts.sources import warn_given_outcome

    with pytest.warns(UDCGWarning, match=r"1 contexts labelled by judge 'tag' hold labels of"):
        warn_given_outcome([first], "human", "l.jsonl")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_given_outcome([first], "gen", "l.jsonl")  # its own: nothing to say


def test_labels_per_sub_query_without_the_sub_queries_are_refused(tag_judge) -> None:
    ctx = _contexts()[0]
    stale = replace(ctx, outcomes={**ctx.outcomes, "human": {"subquery_covered": [True]}})
    with pytest.raises(UDCGInputError, match=r"outcomes\.human\.subquery_covered"):
        label_contexts([stale], tag_judge(), answers_from="gen")


def test_same_key_another_fingerprint_is_refused_naming_both(tag_judge) -> None:
    """adv38 3: one judge key served with two fingerprints: the refusal says which."""
    first, _ = label_contexts(_contexts()[:1], tag_judge())
    moved = tag_judge()
    moved.fingerprint = "tag-v2"
    with pytest.raises(UDCGInputError, match=r"judge 'tag' with fingerprint 'tag-v1'.*'tag-v2'"):
        label_contexts(first, moved)


def test_a_changed_question_is_decomposed_again(tag_judge) -> None:
    """adv38 2: the judge's sub-queries of an edited question are not kept; a file labelled
    before the record held its inputs keeps them, as it did."""
    ctx = replace(_contexts()[0], question="capital #fr")
    (first,), _ = label_contexts([ctx], tag_judge(), answers_from="gen")
    assert first.subqueries == ["capital #fr"]
    edited = replace(first, question=QUESTION)
    (again,), report = label_contexts([edited], tag_judge())
    assert again.subqueries == ["capital #fr", "river #rv"]
    assert [p.covers for p in again.passages] == [[True, False], [True, True], [False, False]]
    # gen's labels were of the old sub-queries: dropped, said, no longer in the record
    assert "claim_relevance" not in again.outcomes["gen"] and report.stale == {"gen": 1}
    assert again.extra["qcare_labels"]["outcomes"] == []
    fresh, _ = label_contexts([replace(ctx, question=QUESTION)], tag_judge())
    assert again.extra["qcare_labels"]["inputs"] == fresh[0].extra["qcare_labels"]["inputs"]
    record = {k: v for k, v in first.extra["qcare_labels"].items() if k != "inputs"}
    (before,), _ = label_contexts([replace(edited, extra={"qcare_labels": record})], tag_judge())
    assert before.subqueries == ["capital #fr"]


def test_reordered_passages_drop_this_judges_kept_outcome_labels(tag_judge) -> None:
    """adv38 5: claim_support of an outcome this run does not label is indexed by chunk: a
    coverage rerun on reordered passages drops it rather than keep the old order."""
    (first,), _ = label_contexts(_contexts()[:1], tag_judge(), answers_from="gen")
    reordered = replace(first, passages=first.passages[::-1])
    (again,), report = label_contexts([reordered], tag_judge())
    assert not set(again.outcomes["gen"]) & {"claims", "claim_support", "claim_support_prob"}
    assert report.stale == {"gen": 1} and again.extra["qcare_labels"]["outcomes"] == []
    assert again.outcomes["gen"]["answer"] == first.outcomes["gen"]["answer"]
    (same,), report = label_contexts([first], tag_judge())  # unchanged inputs: kept
    assert same.outcomes["gen"] == first.outcomes["gen"] and not report.stale


def test_an_edited_answer_drops_this_judges_labels_of_it(tag_judge) -> None:
    """adv40 5: the record digests each labelled outcome's answer; a rerun that labels
    another outcome drops this judge's labels of an answer edited since (they are its old
    claims), and records the digests of the answers it keeps."""
    ctx = _contexts()[0]
    two = replace(ctx, outcomes={**ctx.outcomes, "gen2": {"answer": "Lyon #ly"}})
    (first,), _ = label_contexts([two], tag_judge(), answers_from="gen")
    assert (
        first.extra["qcare_labels"]["inputs"]["outcomes"] == label_inputs(two, ["gen"])["outcomes"]
    )
    edited = replace(first, outcomes={**first.outcomes, "gen": {"answer": "Paris #fr"}})
    (again,), report = label_contexts([edited], tag_judge(), answers_from="gen2")
    assert report.stale == {"gen": 1} and again.outcomes["gen"] == {"answer": "Paris #fr"}
    assert again.extra["qcare_labels"]["outcomes"] == ["gen2"]
    (kept,), report = label_contexts([first], tag_judge(), answers_from="gen2")
    assert not report.stale and kept.outcomes["gen"] == first.outcomes["gen"]
    assert kept.extra["qcare_labels"]["inputs"] == label_inputs(first, ["gen", "gen2"])
