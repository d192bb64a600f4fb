"""C-nDCG's exponential gain and fractional coverage (``covers_prob``), hand-computed, through
the metric functions, ``qcare_scores``, the reader and writer, agreement and the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from udcg.cli.qcare import main
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import read_contexts, write_contexts
from udcg.io.contexts.model import Context, Passage
from udcg.qcare import agreement, fill_labels, qcare_scores
from udcg.qcare.coverage import c_ndcg, c_precision, coverage, coverage_gain

L3 = math.log2(3)


def exp_gain_c_ndcg(r: list[float], k: int | None = None) -> float:
    """Independent reference: per-position loop, gain 2**(10 r) - 1, ideal = sorted list."""
    r = r if k is None else r[:k]
    g = [2 ** (10 * x) - 1 for x in r]
    dcg = sum(x / math.log2(i + 2) for i, x in enumerate(g))
    idcg = sum(x / math.log2(i + 2) for i, x in enumerate(sorted(g, reverse=True)))
    return dcg / idcg if idcg > 0 else 0.0


# --- the gain -------------------------------------------------------------------------------


def test_exponential_gain_hand_computed() -> None:
    # r = (0.1, 0.2): g = (2^1 - 1, 2^2 - 1) = (1, 3)
    assert c_ndcg([[0.1, 0.2]], gain="exponential")[0] == pytest.approx(
        (1 + 3 / L3) / (3 + 1 / L3), abs=1e-12
    )
    # r = (1/2, 1, 0): g = (31, 1023, 0); linear gives (0.5 + 1/L3) / (1 + 0.5/L3)
    r = [[0.5, 1.0, 0.0]]
    assert c_ndcg(r, gain="exponential")[0] == pytest.approx(
        (31 + 1023 / L3) / (1023 + 31 / L3), abs=1e-12
    )
    assert c_ndcg(r)[0] == pytest.approx((0.5 + 1 / L3) / (1 + 0.5 / L3), abs=1e-12)
    # k truncates before the ideal: (31) / (31) = 1 at k=1
    assert c_ndcg(r, k=1, gain="exponential")[0] == 1.0
    assert coverage_gain([0.0, 0.3, 1.0], "exponential").tolist() == pytest.approx(
        [0.0, 7.0, 1023.0]
    )


def test_default_gain_is_linear_and_unchanged() -> None:
    r = [[1 / 3, 1.0, 0.0, 2 / 3]]
    linear = (1 / 3 + 1 / L3 + 0 + (2 / 3) / math.log2(5)) / (1 + (2 / 3) / L3 + (1 / 3) / 2)
    assert c_ndcg(r)[0] == pytest.approx(linear, abs=1e-12)
    np.testing.assert_array_equal(c_ndcg(r), c_ndcg(r, gain="linear"))
    # C-Prec has no gain: it is the same whatever C-nDCG's gain
    assert c_precision(r)[0] == pytest.approx(0.5)


@given(
    st.lists(st.integers(0, 6).map(lambda n: n / 6), max_size=8),
    st.one_of(st.none(), st.integers(1, 10)),
)
def test_exponential_gain_matches_the_loop_reference(r: list[float], k: int | None) -> None:
    assert c_ndcg([r], k, gain="exponential")[0] == pytest.approx(
        exp_gain_c_ndcg(r, k), rel=1e-12, abs=1e-12
    )


@given(st.lists(st.booleans(), max_size=8))
def test_gains_agree_on_binary_coverage(flags: list[bool]) -> None:
    """With one sub-query r is 0 or 1: g is r scaled by 1023, so nDCG is the same."""
    r = [[float(f) for f in flags]]
    assert c_ndcg(r, gain="exponential")[0] == pytest.approx(c_ndcg(r)[0], abs=1e-12)


def test_an_unknown_gain_is_a_named_error() -> None:
    with pytest.raises(UDCGInputError, match="must be one of linear, exponential") as err:
        c_ndcg([[0.5]], gain="log")
    assert err.value.field == "gain"
    with pytest.raises(UDCGInputError) as err:
        qcare_scores([], gain="Exponential")
    assert err.value.field == "gain"


# --- fractional coverage --------------------------------------------------------------------


def test_fractional_coverage_hand_computed() -> None:
    fractions = [[[2 / 3, 1 / 3], [1.0, 0.0], [0.0, 0.0]]]
    np.testing.assert_allclose(coverage(fractions)[0], [0.5, 0.5, 0.0])
    np.testing.assert_allclose(coverage(fractions, binary=True)[0], [2 / 3, 1.0, 0.0])
    # booleans are the fractions 0 and 1: same values as before
    np.testing.assert_array_equal(
        coverage([[[1.0, 0.0], [1.0, 1.0]]])[0], coverage([[[True, False], [True, True]]])[0]
    )


# three chunks, two sub-queries: covers_prob gives r = (0.5, 0.25, 1); covers gives (0.5, 0, 1)
FRACTIONAL = {
    "qid": "q1",
    "run": "r",
    "subqueries": ["who", "when"],
    "passages": [
        {"doc_id": "d1", "covers": [True, False], "covers_prob": [0.75, 0.25]},
        {"doc_id": "d2", "covers": [False, False], "covers_prob": [0, 0.5]},
        {"doc_id": "d3", "covers": [True, True], "covers_prob": [1, 1.0]},
    ],
}
R = [0.5, 0.25, 1.0]
PREC = sum(R) / 3
NDCG_LINEAR = (0.5 + 0.25 / L3 + 1 / 2) / (1 + 0.5 / L3 + 0.25 / 2)
G = [2**5 - 1, 2**2.5 - 1, 1023]
NDCG_EXP = (G[0] + G[1] / L3 + G[2] / 2) / (G[2] + G[0] / L3 + G[1] / 2)


def _write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_qcare_scores_fractional_and_exponential(tmp_path: Path) -> None:
    contexts = list(read_contexts(_write(tmp_path / "c.jsonl", [FRACTIONAL])))
    fractional = qcare_scores(contexts, coverage="fractional")
    assert fractional.values["C-Prec"][0] == pytest.approx(PREC)
    assert fractional.values["C-nDCG"][0] == pytest.approx(NDCG_LINEAR)
    both = qcare_scores(contexts, coverage="fractional", gain="exponential")
    assert both.values["C-nDCG"][0] == pytest.approx(NDCG_EXP)
    assert both.values["C-Prec"][0] == pytest.approx(PREC)
    # the default reads the booleans: r = (0.5, 0, 1)
    default = qcare_scores(contexts)
    assert default.values["C-Prec"][0] == pytest.approx(1.5 / 3)
    assert default.values["C-nDCG"][0] == pytest.approx((0.5 + 0 + 1 / 2) / (1 + 0.5 / L3))


def test_missing_or_null_fractions_are_missing_values(tmp_path: Path) -> None:
    no_prob = json.loads(json.dumps(FRACTIONAL))
    no_prob["qid"] = "q2"
    for p in no_prob["passages"]:
        del p["covers_prob"]
    null = json.loads(json.dumps(FRACTIONAL))
    null["qid"] = "q3"
    null["passages"][1]["covers_prob"] = [None, 0.5]  # a check without a usable answer
    null["passages"][1]["covers"] = [None, False]
    text = json.loads(json.dumps(FRACTIONAL))
    text["qid"] = "q4"
    text["passages"][1]["covers_prob"] = [None, 0.5]  # a text-route label: covers says 0
    rows = [FRACTIONAL, no_prob, null, text]
    contexts = list(read_contexts(_write(tmp_path / "c.jsonl", rows)))
    scores = qcare_scores(contexts, coverage="fractional")
    assert scores.values["C-Prec"].mask.tolist() == [False, True, True, False]
    assert scores.values["C-Prec"][3] == pytest.approx(PREC)  # the null read as False, 0
    assert scores.missing["C-Prec"] == {"no covers_prob": 1, "a check without a usable answer": 1}
    assert qcare_scores(contexts).values["C-Prec"].mask.tolist() == [False, False, True, False]


def test_in_memory_fractions_are_checked() -> None:
    ctx = Context("q", [Passage("d", extra={"covers_prob": [0.5]})], subqueries=["a", "b"])
    with pytest.raises(UDCGInputError, match="one per sub-query") as err:
        qcare_scores([ctx], coverage="fractional")
    assert err.value.field == "passages[0].covers_prob"
    ctx = Context("q", [Passage("d", extra={"covers_prob": ["yes"]})], subqueries=["a"])
    with pytest.raises(UDCGInputError) as err:
        qcare_scores([ctx], coverage="fractional")
    assert err.value.field == "passages[0].covers_prob[0]"
    with pytest.raises(UDCGInputError) as err:
        qcare_scores([ctx], coverage="soft")
    assert err.value.field == "coverage"


@pytest.mark.parametrize(
    ("value", "field", "message"),
    [
        ([0.5, 1.5], "passages[0].covers_prob[1]", "probability in"),
        ([True, 0.5], "passages[0].covers_prob[0]", "got a boolean"),
        ([0.5], "passages[0].covers_prob", "has 1 entries but the context has 2"),
        ("0.5", "passages[0].covers_prob", "list of numbers"),
    ],
)
def test_reader_checks_covers_prob(tmp_path: Path, value, field: str, message: str) -> None:
    line = json.loads(json.dumps(FRACTIONAL))
    line["passages"][0]["covers_prob"] = value
    path = _write(tmp_path / "bad.jsonl", [FRACTIONAL, line])
    with pytest.raises(UDCGInputError, match=message) as err:
        list(read_contexts(path))
    assert (err.value.path, err.value.line, err.value.field) == (str(path), 2, field)


def test_fractions_round_trip_exactly(tmp_path: Path) -> None:
    line = json.loads(json.dumps(FRACTIONAL))
    line["passages"][1]["covers_prob"] = [None, 0.1]
    source = _write(tmp_path / "in.jsonl", [line])
    contexts = list(read_contexts(source))
    write_contexts(tmp_path / "out.jsonl", contexts)
    assert json.loads((tmp_path / "out.jsonl").read_text()) == line
    again = list(read_contexts(tmp_path / "out.jsonl"))
    assert again == contexts
    assert again[0].passages[2].extra["covers_prob"] == [1, 1.0]  # ints stay ints


def test_agreement_and_fill_with_fractions(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    judge, human = [], []
    for i in range(8):
        line = json.loads(json.dumps(FRACTIONAL))
        line["qid"] = f"q{i}"
        for p in line["passages"]:
            p["covers_prob"] = rng.random(2).round(3).tolist()
        judge.append(line)
        other = json.loads(json.dumps(line))
        for p in other["passages"]:
            p["covers_prob"] = rng.integers(0, 4, 2).__truediv__(3).tolist()  # 3 annotators
        human.append(other)
    jc = list(read_contexts(_write(tmp_path / "j.jsonl", judge)))
    hc = list(read_contexts(_write(tmp_path / "h.jsonl", human)))
    rows, filled = agreement(jc, hc, coverage="fractional", gain="exponential")
    assert not filled
    for metric, fn in (
        ("C-Prec", lambda c: np.mean(np.mean(c, axis=1))),
        ("C-nDCG", lambda c: exp_gain_c_ndcg(np.mean(c, axis=1).tolist())),
    ):
        a = [fn([p["covers_prob"] for p in x["passages"]]) for x in judge]
        b = [fn([p["covers_prob"] for p in x["passages"]]) for x in human]
        row = next(r for r in rows if r.metric == metric)
        assert row.n == 8
        assert row.pearson == pytest.approx(stats.pearsonr(a, b)[0])
        assert row.spearman == pytest.approx(stats.spearmanr(a, b)[0])
    # a human passage with neither label takes both from the judge; one with covers keeps it
    bare = Context(
        "q0",
        [Passage("d1", covers=[True, True]), Passage("d2"), Passage("d3")],
        run="r",
        subqueries=["who", "when"],
    )
    merged, counts = fill_labels(bare, jc[0], None)
    assert counts == {"covers": 2, "covers_prob": 2}
    assert (
        merged.passages[0].covers == [True, True] and "covers_prob" not in merged.passages[0].extra
    )
    assert merged.passages[1].extra["covers_prob"] == judge[0]["passages"][1]["covers_prob"]


def test_cli_score_gain_and_coverage(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path / "c.jsonl", [FRACTIONAL])
    out = tmp_path / "s.jsonl"
    argv = ["score", str(path), "--coverage", "fractional", "--gain", "exponential", "-o", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert f"{NDCG_EXP:.3f}" in printed and f"{PREC:.3f}" in printed
    row = json.loads(out.read_text())
    assert row["C-Prec"] == pytest.approx(PREC) and row["C-nDCG"] == pytest.approx(NDCG_EXP)
    assert main(["score", str(path), "-o", str(out)]) == 0  # defaults: boolean, linear
    assert json.loads(out.read_text())["C-Prec"] == pytest.approx(0.5)
    with pytest.raises(SystemExit) as exit_:
        main(["score", str(path), "--gain", "exp"])
    assert exit_.value.code == 2
    assert "invalid choice: 'exp'" in capsys.readouterr().err
    argv = ["agreement", str(path), str(path), "--coverage", "fractional", "--gain", "exponential"]
    assert main(argv) == 0
    assert "C-nDCG" in capsys.readouterr().out


def test_score_contexts_and_evaluate_settings_take_the_options() -> None:
    pytest.importorskip("pandas")  # score_contexts returns a DataFrame
    import udcg
    from udcg.pipeline.settings import EvaluateSettings

    passages = [
        Passage(
            p["doc_id"],
            relevant=i == 2,
            abstain_prob={"j": 0.3},
            covers=p["covers"],
            extra={"covers_prob": p["covers_prob"]},
        )
        for i, p in enumerate(FRACTIONAL["passages"])
    ]
    contexts = [Context("q1", passages, subqueries=["who", "when"])]
    frame = udcg.score_contexts(contexts, qcare_gain="exponential", qcare_coverage="fractional")
    assert frame["C-Prec"].iloc[0] == pytest.approx(PREC)
    assert frame["C-nDCG"].iloc[0] == pytest.approx(NDCG_EXP)
    frame = udcg.score_contexts(contexts)
    assert frame["C-Prec"].iloc[0] == pytest.approx(0.5)
    with pytest.raises(UDCGInputError) as err:
        EvaluateSettings(qcare_gain="log")
    assert err.value.field == "qcare_gain"
