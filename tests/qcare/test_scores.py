"""Q-CARE metrics from labels written in the JSONL (judge or human), hand-computed; the
reader's checks of the label fields; agreement against scipy."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from udcg.cli.qcare import main
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import coverage_matrices, read_contexts
from udcg.qcare import agreement, fill_labels, qcare_scores

T, F = True, False


def _line(qid, covers, subqueries, run="r", **answer) -> dict:
    ctx = {
        "qid": qid,
        "run": run,
        "question": "q?",
        "passages": [
            {"doc_id": f"d{i}", "text": f"t{i}", "covers": c} for i, c in enumerate(covers)
        ],
    }
    if subqueries is not None:
        ctx["subqueries"] = subqueries
    if answer:
        ctx["outcomes"] = {"gen": {"answer": "a", **answer}}
    return ctx


def _write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


CASES = [
    # two sub-queries, three chunks, one covering nothing; claims: one off-topic, one unsupported
    _line(
        "full",
        [[T, F], [T, T], [F, F]],
        ["s1", "s2"],
        claims=["c1", "c2", "c3"],
        claim_relevance=[[T, F], [F, T], [F, F]],
        subquery_covered=[T, F],
        claim_support=[[T, F, F], [F, F, F], [F, T, F]],
    ),
    # zero sub-queries: r_j = 0 (denominator 1), completeness undefined, conciseness 0
    _line(
        "nosub",
        [[], []],
        [],
        claims=["c1"],
        claim_relevance=[[]],
        subquery_covered=[],
        claim_support=[[T, F]],
    ),
    # zero claims: nothing covered; conciseness and verifiableness undefined
    _line(
        "noclaim",
        [[F], [F]],
        ["s1"],
        claims=[],
        claim_relevance=[],
        subquery_covered=[F],
        claim_support=[],
    ),
    # duplicate claims count twice (as given); every chunk covers nothing
    _line(
        "dup",
        [[F], [F], [F]],
        ["s1"],
        claims=["c1", "c1", "c2"],
        claim_relevance=[[T], [T], [F]],
        subquery_covered=[T],
        claim_support=[[T, F, F], [T, F, F], [F, F, F]],
    ),
]


def test_hand_computed_cases(tmp_path: Path) -> None:
    contexts = list(read_contexts(_write(tmp_path / "l.jsonl", CASES)))
    scores = qcare_scores(contexts, "gen")
    # full: r = [1/2, 1, 0]
    dcg, idcg = 0.5 + 1 / math.log2(3), 1 + 0.5 / math.log2(3)
    expected = {
        "C-Prec": [1.5 / 3, 0.0, 0.0, 0.0],
        "C-nDCG": [dcg / idcg, 0.0, 0.0, 0.0],
        "Completeness": [1 / 2, None, 0.0, 1.0],
        # full: c1 is relevant to the covered s1; c2 only to the uncovered s2
        "Conciseness": [1 / 3, 0.0, None, 2 / 3],
        "Verifiableness": [2 / 3, 1.0, None, 2 / 3],
    }
    for metric, values in expected.items():
        got = scores.values[metric]
        assert got.mask.tolist() == [v is None for v in values], metric
        for g, v in zip(got.filled(-1), values, strict=True):
            if v is not None:
                assert g == pytest.approx(v), metric
    assert scores.missing["Completeness"] == {"no sub-queries": 1}
    assert scores.missing["Conciseness"] == {"no claims": 1}
    assert scores.means()["Completeness"] == pytest.approx((0.5 + 0 + 1) / 3)
    binary = qcare_scores(contexts, binary=True)
    assert binary.values["C-Prec"].tolist()[0] == pytest.approx(2 / 3)  # r = [1, 1, 0]
    assert set(binary.values) == {"C-Prec", "C-nDCG"}
    at1 = qcare_scores(contexts, k=1)
    assert at1.values["C-Prec"].tolist()[0] == pytest.approx(0.5)


def test_missing_and_null_labels_are_missing_values_not_zeros(tmp_path: Path) -> None:
    lines = [
        _line("nolabels", [None, None], None),
        _line("null", [[T, None], [F, F]], ["s1", "s2"], claims=["c"], subquery_covered=[None, T]),
    ]
    contexts = list(read_contexts(_write(tmp_path / "l.jsonl", lines)))
    scores = qcare_scores(contexts, "gen")
    assert scores.values["C-Prec"].mask.tolist() == [True, True]
    assert scores.missing["C-Prec"] == {"no labels": 1, "a check without a usable answer": 1}
    # a label below rank k is never read: the top k's labels give the values (-k cuts them)
    cut = list(read_contexts(_write(tmp_path / "k.jsonl", [_line("k", [[T], [F], [None]], ["s"])])))
    at2 = qcare_scores(cut, k=2)
    assert (at2.values["C-Prec"].tolist(), at2.values["C-nDCG"].tolist()) == ([0.5], [1.0])
    assert qcare_scores(cut).values["C-Prec"].mask.tolist() == [True]  # all three: a null
    assert scores.missing["Completeness"] == {"no labels": 1, "a check without a usable answer": 1}
    assert scores.missing["Verifiableness"] == {"no labels": 2}
    with pytest.raises(UDCGInputError, match=r"l.jsonl:2: field 'passages\[0\].covers'"):
        coverage_matrices(contexts[1:])


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"claims": "c1"}, "outcomes.gen.claims", "list of strings"),
        ({"subquery_covered": [T]}, "outcomes.gen.subquery_covered", "1 entries, expected 2"),
        ({"claim_relevance": [[T, F]]}, "outcomes.gen.claim_relevance", "expected 3"),
        (
            {"claim_support_prob": [[0.5, 2, 0]] * 3},
            "outcomes.gen.claim_support_prob[0][1]",
            "probability",
        ),
        ({"claim_support": [[T, 1, F]] * 3}, "outcomes.gen.claim_support[0][1]", "true, false"),
    ],
)
def test_reader_checks_label_fields(tmp_path: Path, change, field, message) -> None:
    line = json.loads(json.dumps(CASES[0]))
    line["outcomes"]["gen"].update(change)
    path = _write(tmp_path / "bad.jsonl", [CASES[1], line])
    with pytest.raises(UDCGInputError, match=rf"bad.jsonl:2: field '{re.escape(field)}.*{message}"):
        list(read_contexts(path))


def test_agreement_matches_scipy_per_split(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    judge, human = [], []
    for i in range(12):
        n_sub = 1 + i % 3
        subs = [f"s{j}" for j in range(n_sub)]
        cov_j = rng.random((4, n_sub)) < 0.5
        cov_h = cov_j ^ (rng.random((4, n_sub)) < 0.2)
        run = "a" if i < 6 else "b"
        judge.append(_line(f"q{i}", cov_j.tolist(), subs, run=run))
        human.append(_line(f"q{i}", cov_h.tolist(), subs, run=run))
    jc = list(read_contexts(_write(tmp_path / "j.jsonl", judge)))
    hc = list(read_contexts(_write(tmp_path / "h.jsonl", human)))
    rows, _ = agreement(jc, hc, split_by="run")
    for split, chosen in (("a", slice(0, 6)), ("b", slice(6, 12))):
        a = qcare_scores(jc[chosen]).values["C-Prec"].data
        b = qcare_scores(hc[chosen]).values["C-Prec"].data
        row = next(r for r in rows if r.split == split and r.metric == "C-Prec")
        assert row.n == 6
        assert row.pearson == pytest.approx(stats.pearsonr(a, b)[0])
        assert row.spearman == pytest.approx(stats.spearmanr(a, b)[0])


def test_fill_takes_missing_human_labels_from_the_judge(tmp_path: Path) -> None:
    judge = _line(
        "q",
        [[T], [F]],
        ["s1"],
        claims=["c"],
        claim_relevance=[[T]],
        claim_support=[[T, F]],
        subquery_covered=[T],
    )
    human = _line("q", [[F], [F]], ["s1"], claims=["c"], subquery_covered=[F])
    j, h = (
        next(read_contexts(_write(tmp_path / f"{n}.jsonl", [x])))
        for n, x in (("j", judge), ("h", human))
    )
    merged, filled = fill_labels(h, j, "gen")
    assert filled == {"claim_relevance": 1, "claim_support": 1}
    assert merged.outcomes["gen"]["subquery_covered"] == [False]  # the human's label wins
    assert merged.outcomes["gen"]["claim_support"] == [[True, False]]
    assert [p.covers for p in merged.passages] == [[False], [False]]
    # a human file naming its passages by doc_id only is the same list: labels are filled
    by_id = dict(human, passages=[{"doc_id": p["doc_id"]} for p in human["passages"]])
    h = next(read_contexts(_write(tmp_path / "ids.jsonl", [by_id])))
    merged, filled = fill_labels(h, j, "gen")
    assert filled["claim_relevance"] == 1 and filled["covers"] == 2


def test_cli_score_and_agreement(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path / "l.jsonl", CASES)
    assert (
        main(["score", str(path), "--answers-from", "gen", "--out", str(tmp_path / "s.jsonl")]) == 0
    )
    out = capsys.readouterr().out
    assert "Completeness" in out and "no sub-queries 1" in out
    rows = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert rows[1]["Completeness"] is None and rows[0]["C-Prec"] == pytest.approx(0.5)
    assert {k: rows[0][k] for k in ("answers_from", "k", "binary", "gain", "coverage")} == {
        "answers_from": "gen",
        "k": None,
        "binary": False,
        "gain": "linear",
        "coverage": "boolean",
    }  # each row says what produced it, the manifest which contexts
    from udcg.io.manifests import file_sha256, manifest_path

    made = json.loads(manifest_path(tmp_path / "s.jsonl").read_text())
    assert (made["format"], made["input_sha256"]) == ("udcg-qcare-score/1", file_sha256(path))
    assert main(["agreement", str(path), str(path), "--answers-from", "gen"]) == 0
    assert "+1.000" in capsys.readouterr().out
    other = _write(tmp_path / "o.jsonl", [_line("zzz", [[T]], ["s"])])
    assert main(["agreement", str(path), str(other)]) == 2
    assert "o.jsonl:1: field 'qid': no judge-labelled context" in capsys.readouterr().err
    assert main(["agreement", str(path), str(path), "--split-by", "split"]) == 2
    assert "field 'split': missing" in capsys.readouterr().err
    assert main(["agreement", str(path), str(path), "--split-by", "passages"]) == 2
    assert "field 'passages': holds a list: split by a field" in capsys.readouterr().err


def test_k_truncates_claim_support_and_completeness_needs_no_claims(tmp_path: Path) -> None:
    """Verifiableness@k counts support by the first k chunks only; Completeness is defined by
    ``subquery_covered`` alone (claims not given)."""
    late = _line(
        "late",
        [[T], [F], [F]],
        ["s1"],
        claims=["c1", "c2"],
        claim_relevance=[[T], [T]],
        subquery_covered=[T],
        claim_support=[[F, F, T], [F, T, F]],
    )
    bare = _line("bare", [[T], [F]], ["s1", "s2"][:1], subquery_covered=[T])
    contexts = list(read_contexts(_write(tmp_path / "l.jsonl", [late, bare])))
    verifiable = [
        qcare_scores(contexts, "gen", k).values["Verifiableness"][0] for k in (1, 2, 3, None)
    ]
    assert verifiable == [0.0, 0.5, 1.0, 1.0]  # by hand: c2 at chunk 2, c1 at chunk 3
    scores = qcare_scores(contexts, "gen")
    assert scores.values["Completeness"].tolist() == [1.0, 1.0]
    assert scores.values["Verifiableness"].mask.tolist() == [False, True]


def test_a_model_no_context_has_is_refused(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path / "l.jsonl", CASES)
    with pytest.raises(UDCGInputError, match=r"no context has outcomes\.gpt-5 .*: gen\)"):
        qcare_scores(list(read_contexts(path)), "gpt-5")
    assert main(["score", str(path), "--answers-from", "gpt-5"]) == 2
    err = capsys.readouterr().err
    assert "l.jsonl: field 'answers_from': no context has outcomes.gpt-5" in err


def test_agreement_refuses_duplicates_and_other_lists(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path / "l.jsonl", CASES)
    twice = _write(tmp_path / "twice.jsonl", CASES + CASES[:1])
    for judge, human in ((twice, path), (path, twice)):
        assert main(["agreement", str(judge), str(human)]) == 2
        assert "twice.jsonl:5: field 'qid': a second" in capsys.readouterr().err
    other = dict(CASES[0], passages=[dict(p) for p in CASES[0]["passages"]])
    other["passages"][1]["doc_id"] = "x9"
    moved = _write(tmp_path / "moved.jsonl", [other, *CASES[1:]])
    assert main(["agreement", str(path), str(moved)]) == 2
    err = capsys.readouterr().err
    assert "moved.jsonl:1: field 'passages[1].doc_id': differs from the judge's" in err
    short = _line("full", [[T, F], [T, T]], ["s1", "s2"])
    assert main(["agreement", str(path), str(_write(tmp_path / "s.jsonl", [short]))]) == 2
    assert "field 'passages': 2 passages, the judge's" in capsys.readouterr().err


def test_fill_keeps_claims_out_of_an_outcome_with_claim_labels(tmp_path: Path) -> None:
    judge = _line("q", [[T], [F]], ["s1"], claims=["c"], claim_support=[[T, F]])
    human = _line("q", [[F], [F]], ["s1"], claim_relevance=[[T], [F], [F]])
    j, h = (
        next(read_contexts(_write(tmp_path / f"{n}.jsonl", [x])))
        for n, x in (("j", judge), ("h", human))
    )
    merged, filled = fill_labels(h, j, "gen")
    assert "claims" not in merged.outcomes["gen"] and filled == {}


def test_annotators_read_a_piped_human_file_once(tmp_path: Path) -> None:
    """``--annotators`` reuses the HUMAN contexts the agreement read (a pipe is read once)."""
    import subprocess
    import sys

    path = _write(tmp_path / "l.jsonl", CASES)
    result = subprocess.run(
        [sys.executable, "-m", "udcg", "qcare", "agreement", str(path), "/dev/stdin",
         "--annotators"],
        input=path.read_bytes(), capture_output=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    assert b"C-Prec" in result.stdout and b"empty file" not in result.stderr


def test_agreement_refuses_standard_input_for_both_files(capsys) -> None:
    """adv38 10: `cat l.jsonl | udcg qcare agreement - -` compared the file with itself."""
    for judge, human in (("-", "-"), ("-", "/dev/stdin")):
        assert main(["agreement", judge, human]) == 2
        err = capsys.readouterr().err
        assert "judge_labels and human_labels both read standard input" in err
        assert len(err.strip().splitlines()) == 1


def test_fractional_coverage_reads_a_null_beside_a_yes_no_label_as_that_label() -> None:
    """Text-route labels and values the server only bounded have a ``null`` soft value beside
    their yes/no label: fractional coverage reads it as 0 or 1 (hand-computed C-Prec: r =
    (mean(1, 0.5), mean(0, 0)) = (0.75, 0), C-Prec = 0.375); a null without a label is missing."""
    from udcg.io.contexts.model import Context, Passage

    passages = [
        Passage("d1", covers=[True, True], extra={"covers_prob": [None, 0.5]}),
        Passage("d2", covers=[False, None], extra={"covers_prob": [None, 0.0]}),
    ]
    ctx = Context("q", passages, subqueries=["a", "b"])
    scores = qcare_scores([ctx], coverage="fractional")
    assert scores.values["C-Prec"].tolist() == [pytest.approx(0.375)]
    unknown = Passage("d3", covers=[None, False], extra={"covers_prob": [None, 0.0]})
    missing = qcare_scores([Context("q", [unknown], subqueries=["a", "b"])], coverage="fractional")
    assert missing.values["C-Prec"].mask.tolist() == [True]


def test_score_contexts_says_when_an_outcomes_labels_are_not_the_judges(tmp_path: Path) -> None:
    """The library's Q-CARE columns say what ``qcare score`` says: labels of an outcome the
    labelling judge's record does not list are given, not that judge's."""
    import warnings

    import udcg
    from udcg.errors import UDCGWarning

    pytest.importorskip("pandas", reason="score_contexts needs pandas")
    record = {"judge": "qwen", "fingerprint": "f", "subqueries": "judge", "outcomes": []}
    passages = [
        {"doc_id": "d1", "text": "Paris", "relevant": True, "covers": [True, False],
         "abstain_prob": {"sim": 0.2}},
        {"doc_id": "d2", "text": "Seine", "relevant": False, "covers": [False, True],
         "abstain_prob": {"sim": 0.5}},
    ]  # fmt: skip
    outcome = {"answer": "Paris", "correct": True, "claims": ["Paris"],
               "subquery_covered": [True, False], "claim_relevance": [[True, False]],
               "claim_support": [[True, False]]}  # fmt: skip
    path = tmp_path / "l.jsonl"
    line = {"qid": "q1", "question": "capital and river", "subqueries": ["capital", "river"],
            "passages": passages, "outcomes": {"sim": outcome}, "qcare_labels": record}  # fmt: skip
    path.write_text(json.dumps(line) + "\n")
    with pytest.warns(UDCGWarning, match=r"l\.jsonl: 1 contexts labelled by judge 'qwen' hold"):
        frame = udcg.score_contexts(path, judge_key="sim")
    assert frame["Completeness"].tolist() == [0.5]  # 1 of 2 sub-queries covered
    record["outcomes"] = ["sim"]  # the judge's own labels: nothing to say
    path.write_text(json.dumps(line) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        udcg.score_contexts(path, judge_key="sim")


def test_a_claim_relevance_width_mismatch_names_the_context(tmp_path: Path, capsys) -> None:
    # adv38 1: without `subqueries` the reader cannot check the widths; scoring names the
    # context's line and qid, not its position in the batch
    ok = _line("1", [[T]], None, claims=["x"], subquery_covered=[T], claim_relevance=[[T]])
    bad = _line(
        "2", [[T]], None, claims=["x"], subquery_covered=[T, F, T], claim_relevance=[[T, F]]
    )
    path = _write(tmp_path / "l.jsonl", [ok, bad])
    message = r"l.jsonl:2: field 'outcomes.gen.claim_relevance\[0\]': has 2 .* 3 .*qid '2'"
    with pytest.raises(UDCGInputError, match=message):
        qcare_scores(list(read_contexts(path)), "gen")
    assert main(["score", str(path), "--answers-from", "gen"]) == 2
    assert "l.jsonl:2: field 'outcomes.gen.claim_relevance[0]'" in capsys.readouterr().err


def test_score_contexts_qcare_true_without_outcomes_gives_the_coverage_columns(
    tmp_path: Path,
) -> None:
    """adv38 6: qcare=True on coverage labels without outcomes: C-Prec and C-nDCG as
    qcare=None gives them, the generator's columns NaN (no answers_from error)."""
    import udcg

    pytest.importorskip("pandas", reason="score_contexts needs pandas")
    passages = [
        {"doc_id": "d1", "relevant": True, "abstain_prob": {"m": 0.2}, "covers": [T, F]},
        {"doc_id": "d2", "relevant": False, "abstain_prob": {"m": 0.6}, "covers": [T, T]},
    ]
    path = _write(
        tmp_path / "c.jsonl", [{"qid": "q1", "subqueries": ["a", "b"], "passages": passages}]
    )
    frame = udcg.score_contexts(path, qcare=True)
    assert frame["C-Prec"].tolist() == [0.75]
    assert frame["C-nDCG"].tolist() == udcg.score_contexts(path)["C-nDCG"].tolist()
    assert frame[["Completeness", "Conciseness", "Verifiableness"]].isna().all().all()
