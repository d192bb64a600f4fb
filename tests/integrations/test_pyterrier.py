"""udcg.integrations.pyterrier with the real PyTerrier (no Java, nothing downloaded): the
judge's utilities on a result frame, ``retriever >> utilities`` pipelines compared by
``pt.Experiment`` with significance columns, UDCG and C-nDCG values equal to ``udcg.evaluate``
on the same runs."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pt = pytest.importorskip("pyterrier", reason="needs the 'pyterrier' extra")
pd = pytest.importorskip("pandas")
pytest.importorskip("bm25s", reason="the BM25 retriever needs the 'retrieval' extra")
scipy_stats = pytest.importorskip("scipy.stats")

import udcg  # noqa: E402
from udcg.errors import UDCGInputError  # noqa: E402
from udcg.integrations import ir_measures as im  # noqa: E402
from udcg.integrations.pyterrier import UDCG, JudgeUtilities, Retrieve, UDCGtheta  # noqa: E402
from udcg.io.contexts.model import Passage  # noqa: E402
from udcg.judge.base import Judge  # noqa: E402
from udcg.retrieval.base import Query, Ranking, Retriever  # noqa: E402
from udcg.retrieval.bm25 import BM25Retriever  # noqa: E402
from udcg.retrieval.controls import GoldAt, OracleFirst, RandomRetriever, Reversed  # noqa: E402
from udcg.retrieval.distractors import Distractors  # noqa: E402
from udcg.theta import UDCGTheta  # noqa: E402
from udcg.theta.simulate import simulate_arrays  # noqa: E402

TOL = 1e-12
TOPICS = ["river", "mountain", "forest", "desert", "island", "glacier", "canyon", "valley"]
FILLER = "the a of and stone water light wind green old north east small great long".split()


def _collection(seed: int, n_docs: int = 80) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """A generated collection: passages of filler words with 0-3 topic words each, one query
    per topic (two topic words), graded qrels (2: both words, 1: one of them)."""
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n_docs):
        words = list(rng.choice(FILLER, size=int(rng.integers(6, 14))))
        words += list(rng.choice(TOPICS, size=int(rng.integers(0, 4))))
        rng.shuffle(words)
        docs.append({"docno": f"d{i}", "text": " ".join(words) + "."})
    corpus = pd.DataFrame(docs)
    topics = pd.DataFrame(
        {
            "qid": [f"q{j}" for j in range(len(TOPICS))],
            "query": [f"{t} {TOPICS[(j + 3) % len(TOPICS)]}" for j, t in enumerate(TOPICS)],
        }
    )
    qrels = []
    for qid, query in zip(topics["qid"], topics["query"], strict=True):
        for docno, text in zip(corpus["docno"], corpus["text"], strict=True):
            hits = sum(w in text.split() or f"{w}." in text.split() for w in query.split())
            if hits:
                qrels.append({"qid": qid, "docno": docno, "label": hits})
    return corpus, topics, pd.DataFrame(qrels)


def _judge_file(path: Path, corpus: pd.DataFrame, topics: pd.DataFrame, seed: int) -> dict:
    """A precomputed judge: a random P(abstain) for every (query, passage); returns
    ``{qid: {docno: p}}``."""
    rng = np.random.default_rng(seed + 100)
    probs: dict[str, dict[str, float]] = {}
    lines = []
    for qid, query in zip(topics["qid"], topics["query"], strict=True):
        for docno, text in zip(corpus["docno"], corpus["text"], strict=True):
            p = float(rng.random())
            probs.setdefault(qid, {})[docno] = p
            lines.append({"question": query, "passage": text, "abstain_prob": p})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return probs


def _overlap_retriever(corpus: pd.DataFrame, k: int):
    """A second retriever built with pt.apply: score = number of query words in the passage
    plus a small length prior (ties broken by docno)."""

    def retrieve(topics: pd.DataFrame) -> pd.DataFrame:
        rows = []
        for qid, query in zip(topics["qid"], topics["query"], strict=True):
            words = set(query.split())
            scored = [
                (len(words & set(text.rstrip(".").split())) + 1.0 / len(text), docno, text)
                for docno, text in zip(corpus["docno"], corpus["text"], strict=True)
            ]
            scored.sort(key=lambda s: (-s[0], s[1]))
            for rank, (score, docno, text) in enumerate(scored[:k]):
                rows.append(
                    {"qid": qid, "query": query, "docno": docno, "text": text, "score": score}
                    | {"rank": rank}
                )
        return pd.DataFrame(rows, columns=["qid", "query", "docno", "text", "score", "rank"])

    return pt.apply.generic(retrieve)


def _as_dicts(frame: pd.DataFrame, value: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for qid, docno, v in zip(frame["qid"], frame["docno"], frame[value], strict=True):
        out.setdefault(str(qid), {})[str(docno)] = float(v)
    return out


@pytest.fixture
def setup(tmp_path: Path):
    corpus, topics, qrels = _collection(seed=3)
    probs = _judge_file(tmp_path / "judge.jsonl", corpus, topics, seed=3)
    utilities = JudgeUtilities(f"precomputed:{tmp_path}/judge.jsonl", cache=tmp_path / "cache")
    return corpus, topics, qrels, probs, utilities


def test_utilities_on_the_frame_are_the_judges(setup) -> None:
    corpus, topics, _, probs, utilities = setup
    retrieved = Retrieve(BM25Retriever(), corpus, k=7)(topics)
    out = (Retrieve(BM25Retriever(), corpus, k=7) >> utilities)(topics)
    # rows and the retriever's columns kept, in order; the judge's columns added
    assert list(out.columns) == [*retrieved.columns, "abstain_prob", "utility", "upper_bound"]
    pd.testing.assert_frame_equal(out[list(retrieved.columns)], retrieved)
    assert len(out) == 7 * len(topics)
    want = np.array([probs[q][d] for q, d in zip(out["qid"], out["docno"], strict=True)])
    assert np.array_equal(out["abstain_prob"].to_numpy(), want)
    assert np.array_equal(out["utility"].to_numpy(), 1.0 - want)
    assert not out["upper_bound"].any()
    # BM25 ranks by score, rank from 0
    for _, group in out.groupby("qid"):
        assert list(group["rank"]) == list(range(7))
        assert (np.diff(group["score"].to_numpy()) <= 0).all()
    # an empty frame gets the columns (PyTerrier's inspection), the input is not modified
    empty = utilities(retrieved.iloc[:0])
    assert list(empty.columns) == list(out.columns) and empty.empty
    assert "utility" not in retrieved.columns
    assert pt.inspect.transformer_outputs(utilities, list(retrieved.columns)) == list(out.columns)


def test_experiment_udcg_equals_evaluate_with_significance(tmp_path: Path, setup) -> None:
    corpus, topics, qrels, probs, utilities = setup
    k = 10
    bm25 = Retrieve(BM25Retriever(), corpus, k=k)
    overlap = _overlap_retriever(corpus, k)
    model = UDCGTheta(5, val_fraction=0.0).fit(*simulate_arrays(200, 5, seed=4))
    weights = model.save_pretrained(tmp_path / "theta", card={"utility": "abstention"})
    # Q-CARE coverage labels: a row of 1-4 per-sub-query labels per (query, passage)
    rng = np.random.default_rng(17)
    n_sub = {q: int(rng.integers(1, 5)) for q in topics["qid"]}
    covers = {
        q: {d: [bool(rng.random() < 0.3) for _ in range(n_sub[q])] for d in corpus["docno"]}
        for q in topics["qid"]
    }
    measures = [
        UDCG @ 5,
        UDCG(gamma=0.5) @ 3,
        UDCGtheta(weights=weights) @ 5,
        im.CnDCG(coverage=covers) @ 10,
        im.CnDCG(coverage=covers, gain="exponential") @ 10,
        im.parse_measure("nDCG@10"),
    ]
    names = [
        "UDCG@5",
        "UDCG(gamma=0.5)@3",
        "UDCGtheta@5",
        "C-nDCG@10",
        "C-nDCG(gain=exponential)@10",
        "nDCG@10",
    ]
    assert [getattr(m, "udcg_name", str(m)) for m in measures] == names
    shown = dict(zip([str(m) for m in measures], names, strict=True))  # columns: the sources too
    assert list(shown)[:2] == names[:2]  # PyTerrier's own utility column is not named
    assert list(shown)[2] == f"UDCGtheta(weights={weights})@5"
    systems = [bm25 >> utilities, overlap >> utilities]
    table = pt.Experiment(systems, topics, qrels, measures, names=["bm25", "overlap"], baseline=0)
    per_query = pt.Experiment(
        systems, topics, qrels, measures, names=["bm25", "overlap"], perquery=True
    )

    qrels_dict = {
        q: {d: int(v) for d, v in ds.items()} for q, ds in _as_dicts(qrels, "label").items()
    }
    values = {}
    for name, retriever in (("bm25", bm25), ("overlap", overlap)):
        run = _as_dicts(retriever(topics), "score")  # the first stage alone: no judge columns
        values[name] = udcg.evaluate(
            qrels_dict,
            run,
            names,
            utilities=probs,
            utility_field="abstain_prob",
            weights=weights,
            coverage=covers,
        )
        assert set(values[name]) == set(topics["qid"])  # every query judged and retrieved
        got = per_query[per_query["name"] == name]
        for column, measure in shown.items():
            rows = got[got["measure"] == column]
            diff = max(
                abs(v - values[name][q][measure])
                for q, v in zip(rows["qid"], rows["value"], strict=True)
            )
            assert len(rows) == len(topics) and diff <= TOL, (name, measure, diff)
            mean = np.mean([values[name][q][measure] for q in values[name]])
            cell = float(table.loc[table["name"] == name, column].iloc[0])
            assert math.isclose(cell, mean, rel_tol=0, abs_tol=TOL), (name, measure)
    for measure in ("UDCGtheta@5", "C-nDCG@10", "C-nDCG(gain=exponential)@10"):
        assert len({round(v[measure], 6) for v in values["bm25"].values()}) > 3, measure
    # significance against bm25: paired t-test p-values and win/loss counts per measure
    for column, measure in shown.items():
        a = [values["bm25"][q][measure] for q in sorted(values["bm25"])]
        b = [values["overlap"][q][measure] for q in sorted(values["bm25"])]
        row = table[table["name"] == "overlap"].iloc[0]
        assert math.isclose(
            row[f"{column} p-value"], scipy_stats.ttest_rel(b, a).pvalue, abs_tol=1e-9
        )
        assert row[f"{column} +"] == sum(y > x for x, y in zip(a, b, strict=True))
        assert row[f"{column} -"] == sum(y < x for x, y in zip(a, b, strict=True))
    assert math.isnan(table.loc[table["name"] == "bm25", "UDCG@5 p-value"].iloc[0])
    assert table["UDCG@5"].nunique() == 2  # two different systems
    assert not pt.java.started()  # nothing here started Java


def test_a_pipeline_without_utilities_is_refused(setup) -> None:
    corpus, topics, qrels, _, utilities = setup
    bm25 = Retrieve(BM25Retriever(), corpus, k=5)
    with pytest.raises(ValueError, match="utility"):
        pt.Experiment([bm25, bm25 >> utilities], topics, qrels, [UDCG @ 5], validate="error")
    with pytest.raises(
        UDCGInputError, match="utility_column='utility': the run has no such column"
    ):
        pt.Experiment([bm25], topics, qrels, [UDCG @ 5], validate="ignore")


def test_coverage_from_a_frame_column_and_relevance(tmp_path: Path, setup) -> None:
    """C-nDCG@k from a ``coverage`` column equals the one from the same gains as a dict;
    relevance labels from the answers (string) and from the judge's P(Yes) (llm)."""
    corpus, topics, qrels, _, utilities = setup
    rng = np.random.default_rng(9)
    gains = {q: {d: float(rng.choice([0, 0.5, 1])) for d in corpus["docno"]} for q in topics["qid"]}
    covered = pt.apply.coverage(lambda row: gains[row["qid"]][row["docno"]])
    bm25 = Retrieve(BM25Retriever(), corpus, k=10)
    from_column = im.CnDCG(coverage_column="coverage") @ 10
    from_dict = im.CnDCG(coverage=gains) @ 10
    table = pt.Experiment([bm25 >> covered], topics, qrels, [from_column, from_dict], perquery=True)
    by = table.pivot(index="qid", columns="measure", values="value")
    assert by.shape == (len(topics), 2)  # two sources, two names: neither column is lost
    assert by[str(from_column)].tolist() == by[str(from_dict)].tolist()
    run = bm25(topics)
    direct = im.CnDCG(coverage=gains) @ 10
    ref = {
        m.query_id: m.value
        for m in direct.iter_calc(
            {q: {d: int(v) for d, v in ds.items()} for q, ds in _as_dicts(qrels, "label").items()},
            _as_dicts(run, "score"),
        )
    }
    assert max(abs(by.loc[q].iloc[0] - ref[q]) for q in ref) <= TOL

    answers = {
        q: [query.split()[0]] for q, query in zip(topics["qid"], topics["query"], strict=True)
    }
    string = JudgeUtilities(utilities.judge, relevance="string", answers=answers)
    out = (bm25 >> string)(topics)
    want = [
        answers[q][0] in t.rstrip(".").split() for q, t in zip(out["qid"], out["text"], strict=True)
    ]
    assert out["relevant"].tolist() == want and 0 < sum(want) < len(want)

    class Tagged(Judge):
        name, fingerprint = "tagged", "tagged-v1"

        def abstain_prob(self, questions, passages, mode="first_token") -> np.ndarray:
            return np.array([0.2 if "river" in p else 0.7 for p in passages])

        def yes_prob(self, prompts: Sequence) -> np.ndarray:
            doc = [m[-1]["content"].split("Document:")[1] for m in prompts]
            return np.array([0.9 if "river" in d else 0.1 for d in doc])

        def generate(self, prompts: Sequence, max_new_tokens: int = 64) -> list[str]:
            raise AssertionError("not asked for")

    llm = JudgeUtilities(Tagged(), relevance="llm", answers=answers)
    out = (bm25 >> llm)(topics)
    river = out["text"].str.contains("river").to_numpy()
    assert river.any() and not river.all()
    assert np.array_equal(out["relevant"].to_numpy(), river)
    assert np.array_equal(out["relevance_prob"].to_numpy(), np.where(river, 0.9, 0.1))
    assert np.array_equal(out["utility"].to_numpy(), 1.0 - np.where(river, 0.2, 0.7))


def test_answer_likelihood_and_errors(tmp_path: Path) -> None:
    rows = [
        {"question": "who wrote emma", "passage": "Austen wrote Emma.", "answer_prob": 0.625},
        {"question": "who wrote emma", "passage": "Paris is big.", "answer_prob": 0.125},
    ]
    (tmp_path / "j.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    frame = pd.DataFrame(
        {
            "qid": ["q1", "q1"],
            "query": ["who wrote emma"] * 2,
            "docno": ["d1", "d2"],
            "text": [r["passage"] for r in rows],
            "score": [2.0, 1.0],
            "answers": [["Austen"], ["Austen"]],
        }
    )
    judge = JudgeUtilities(
        f"precomputed:{tmp_path}/j.jsonl", utility="answer_likelihood", cache=tmp_path / "c"
    )
    out = judge(frame)
    assert out["answer_prob"].tolist() == [0.625, 0.125] == out["utility"].tolist()
    with pytest.raises(UDCGInputError, match="query 'q1': no acceptable answers"):
        judge(frame.drop(columns="answers"))
    with pytest.raises(UDCGInputError, match="query 'q1', document 'd2': empty or missing text"):
        judge(frame.assign(text=["Austen wrote Emma.", " "]))
    with pytest.raises(UDCGInputError, match="relevance is None, string or llm"):
        JudgeUtilities(judge.judge, relevance="yes")
    with pytest.raises(pt.validate.InputValidationError):
        judge(frame.drop(columns="text"))


class _WithGold:
    """``control`` given each query's gold corpus indices (Retrieve's queries carry none)."""

    def __init__(self, control: Retriever, gold: dict[str, frozenset[int]]) -> None:
        self.control, self.gold = control, gold

    def retrieve(self, queries: Sequence[Query], corpus: Sequence[Passage], k: int) -> list:
        queries = [replace(q, relevant=self.gold[q.qid]) for q in queries]
        return self.control.retrieve(queries, corpus, k)


CONTROLS: dict[str, Callable[[Retriever], Retriever]] = {
    "reversed": Reversed,
    "random": lambda base: RandomRetriever(seed=2),
    "oracle_first": OracleFirst,
    "gold_at_3": lambda base: GoldAt(base, position=3),
    "hard_distractors": lambda base: Distractors(base, "hard"),
    "weak_distractors": lambda base: Distractors(base, "weak", seed=1),
}


def _rankings(retriever: Retriever, corpus: pd.DataFrame, topics: pd.DataFrame, k: int) -> list:
    """``retriever``'s own rankings of the topics, as Retrieve asks for them."""
    passages = [Passage(d, text=t) for d, t in zip(corpus["docno"], corpus["text"], strict=True)]
    queries = [Query(q, t) for q, t in zip(topics["qid"], topics["query"], strict=True)]
    return retriever.retrieve(queries, passages, k)


@pytest.mark.parametrize("name", CONTROLS)
def test_scores_rank_a_control_in_its_order(setup, name: str) -> None:
    """NaN or ascending control scores are replaced: sorting by score gives the control's
    order, as PyTerrier and ir_measures sort."""
    corpus, topics, qrels, *_ = setup
    index = {d: i for i, d in enumerate(corpus["docno"])}
    relevant = qrels[qrels["label"] > 0]
    gold = {
        q: frozenset(index[d] for d in relevant.loc[relevant["qid"] == q, "docno"])
        for q in topics["qid"]
    }
    k = 6
    retriever = _WithGold(CONTROLS[name](BM25Retriever()), gold)
    frame = Retrieve(retriever, corpus, k=k)(topics)
    groups = frame.groupby("qid", sort=False)
    for (qid, rows), ranking in zip(groups, _rankings(retriever, corpus, topics, k), strict=True):
        assert rows["rank"].tolist() == list(range(k))
        assert np.isfinite(rows["score"]).all() and (np.diff(rows["score"]) < 0).all(), qid
        by_score = rows.sort_values("score", ascending=False)["docno"].tolist()
        assert by_score == corpus["docno"].iloc[ranking.indices].tolist(), qid


def test_bm25_keeps_its_own_scores(setup) -> None:
    """A ranking with strictly decreasing scores keeps them; one with tied scores (BM25's
    are here at depth 5) gets ``k - rank``."""
    corpus, topics, *_ = setup
    k = 5
    frame = Retrieve(BM25Retriever(), corpus, k=k)(topics)
    rankings = _rankings(BM25Retriever(), corpus, topics, k)
    decreasing = [bool((np.diff(r.scores) < 0).all()) for r in rankings]
    assert any(decreasing) and not all(decreasing)
    groups = frame.groupby("qid", sort=False)
    for (qid, rows), ranking, kept in zip(groups, rankings, decreasing, strict=True):
        want = ranking.scores if kept else np.arange(k, 0, -1)
        assert rows["score"].tolist() == want.tolist(), qid


class _NearlyTied:
    """The corpus's last passages first, scores one float32 apart by less than its precision."""

    def retrieve(self, queries: Sequence[Query], corpus: Sequence[Passage], k: int) -> list:
        order = np.arange(len(corpus))[::-1][:k]
        return [Ranking(order, 1.0 - 1e-12 * np.arange(k)) for _ in queries]


def test_scores_one_float32_apart_are_replaced(setup) -> None:
    """trec_eval (so ir_measures and udcg) ranks by scores rounded to float32: scores equal
    there would tie and go by docno, so they are replaced and the order is kept."""
    corpus, topics, *_ = setup
    frame = Retrieve(_NearlyTied(), corpus, k=3)(topics)
    rows = frame[frame["qid"] == topics["qid"].iloc[0]]
    assert rows["score"].tolist() == [3.0, 2.0, 1.0]
    assert rows["docno"].tolist() == corpus["docno"].iloc[::-1][:3].tolist()


def test_experiment_with_int_query_ids(setup) -> None:
    """Int qids (PyTerrier topics read from CSV) give the values of text qids, one row per
    query: udcg's measures report under the qrels' own ids."""
    corpus, topics, qrels, _, utilities = setup
    pipeline = Retrieve(BM25Retriever(), corpus, k=5) >> utilities
    measures = [UDCG @ 5, im.CPrec(coverage_column="utility") @ 5]

    def experiment(as_id: Callable[[str], int | str], **options: Any) -> pd.DataFrame:
        ids = {"qid": lambda frame: frame["qid"].map(as_id)}
        return pt.Experiment(
            [pipeline], topics.assign(**ids), qrels.assign(**ids), measures, **options
        )

    number = experiment(lambda q: int(q.lstrip("q")))
    text = experiment(str)
    pd.testing.assert_frame_equal(number, text)
    per_query = experiment(lambda q: int(q.lstrip("q")), perquery=True)
    assert len(per_query) == len(topics) * len(measures)
    assert sorted(set(per_query["qid"].astype(int))) == list(range(len(topics)))


def _run_python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout


def test_import_costs_and_the_missing_extra() -> None:
    code = (
        "import sys, udcg, udcg.integrations, udcg.integrations.ir_measures\n"
        "print('pyterrier' in sys.modules)\n"
        "sys.modules['pyterrier'] = None\n"
        "try:\n"
        "    import udcg.integrations.pyterrier\n"
        "except ModuleNotFoundError as error:\n"
        "    print(error.name, '|', error)\n"
    )
    assert _run_python(code) == (
        "False\npyterrier | udcg.integrations.pyterrier needs the 'pyterrier' extra: "
        "pip install 'udcg[pyterrier]'\n"
    )
