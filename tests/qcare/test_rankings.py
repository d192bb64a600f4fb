"""Retriever-ranking agreement across query types (udcg.qcare.rankings, `udcg qcare rankings`):
the point estimate against scipy's Spearman on means computed here by plain loops, a
generated sweep where coverage metrics agree across types and classic ones do not, the
bootstrap interval, errors and the command."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

from udcg.cli.qcare import main
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, Passage, write_contexts
from udcg.qcare.rankings import (
    MEASURES,
    rank_agreement,
    ranking_agreement,
    read_query_types,
)

RUNS = ("r0", "r1", "r2", "r3", "r4")


# -- independent references: one list at a time, plain Python ----------------------------------


def ref_metric(name: str, passages: list[Passage], n_sub: int) -> float:
    rel = [1.0 if p.relevant else 0.0 for p in passages]
    r = [sum(bool(c) for c in p.covers) / n_sub for p in passages]
    k = len(passages)

    def ndcg(gains: list[float]) -> float:
        dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains))
        ideal = sum(g / math.log2(i + 2) for i, g in enumerate(sorted(gains, reverse=True)))
        return dcg / ideal if ideal else 0.0

    if name == "C-Prec":
        return sum(r) / k
    if name == "C-nDCG":
        return ndcg(r)
    if name == "nDCG":
        return ndcg(rel)
    if name == "P":
        return sum(rel) / k
    hits, total = 0, 0.0  # AP over the relevant passages of the list
    for i, x in enumerate(rel):
        if x:
            hits += 1
            total += hits / (i + 1)
    return total / hits if hits else 0.0


def ref_rho(contexts: list[Context], measure: str, pair: tuple[str, str]) -> float:
    means = {}
    for kind in pair:
        per_run = {}
        for run in RUNS:
            values = [
                ref_metric(measure, c.passages, len(c.subqueries))
                for c in contexts
                if c.run == run and c.extra["query_type"] == kind
            ]
            per_run[run] = sum(values) / len(values)
        means[kind] = [per_run[run] for run in RUNS]
    return float(spearmanr(means[pair[0]], means[pair[1]]).statistic)


# -- a generated sweep -------------------------------------------------------------------------


def sweep(n_queries: int = 30, k: int = 5, seed: int = 7) -> list[Context]:
    """Run r_i has quality i/4: its chunks cover each of 2 sub-queries with probability
    0.15 + 0.7 * quality on every query. On close-ended queries a chunk is relevant when it
    covers a sub-query; on open-ended ones, relevance (topical, not coverage) is drawn with
    probability 0.85 - 0.7 * quality: the classic metrics reverse the ranking there."""
    rng = np.random.default_rng(seed)
    out = []
    for kind in ("close", "open"):
        for q in range(n_queries):
            qid = f"{kind}-{q}"
            for i, run in enumerate(RUNS):
                quality = i / (len(RUNS) - 1)
                passages = []
                for j in range(k):
                    covers = [bool(x) for x in rng.random(2) < 0.15 + 0.7 * quality]
                    if kind == "close":
                        relevant = any(covers)
                    else:
                        relevant = bool(rng.random() < 0.85 - 0.7 * quality)
                    passages.append(Passage(f"d{j}", relevant=relevant, covers=covers))
                out.append(
                    Context(
                        qid,
                        passages,
                        run=run,
                        subqueries=["s1", "s2"],
                        extra={"query_type": kind},
                    )
                )
    return out


def test_point_estimate_is_scipy_spearman_of_the_means() -> None:
    # means over queries: A (0.2, 0.5, 0.9, 0.5), B (0.1, 0.6, 0.4, 0.6): ties get average ranks
    a = [[0.1, 0.3], [0.4, 0.6], [0.8, 1.0], [0.5, 0.5]]
    b = [[0.1], [0.6], [0.4], [0.6]]
    rho, low, high, undefined = rank_agreement(a, b, n_resamples=50)
    expected = spearmanr([0.2, 0.5, 0.9, 0.5], [0.1, 0.6, 0.4, 0.6]).statistic
    # by hand: ranks (1, 2.5, 4, 2.5) and (1, 3.5, 2, 3.5): Pearson of the ranks = 1.5 / 4.5
    assert rho == pytest.approx(expected) == pytest.approx(1 / 3)
    assert low <= rho <= high and undefined == 0  # B has one query: its side never varies


def test_means_equal_but_for_the_order_of_their_sums_tie() -> None:
    """Runs a (0.1, 0.2, 0.3) and b (0.3, 0.2, 0.1) on type A: both means are 0.2 (in floating
    point 0.20000000000000004 and 0.19999999999999998); A ties every run, so no rho."""
    a = [[0.1, 0.2, 0.3], [0.3, 0.2, 0.1]]
    b = [[0.5], [0.7]]
    assert np.mean(a[0]) != np.mean(a[1])  # the floating-point sums differ
    rho, _, _, _ = rank_agreement(a, b, n_resamples=20)
    assert np.isnan(rho)


def test_generated_sweep_equals_a_direct_scipy_computation() -> None:
    contexts = sweep()
    rows, dropped = ranking_agreement(contexts, n_resamples=200, seed=3)
    assert dropped == {} and [r.measure for r in rows] == list(MEASURES)
    for row in rows:
        assert row.rho == pytest.approx(ref_rho(contexts, row.measure, ("close", "open")))
        assert row.queries == {"close": 30, "open": 30}
        for kind in ("close", "open"):
            for run in RUNS:
                values = [
                    ref_metric(row.measure, c.passages, 2)
                    for c in contexts
                    if c.run == run and c.extra["query_type"] == kind
                ]
                assert row.means[kind][run] == pytest.approx(sum(values) / len(values))


def test_coverage_metrics_agree_across_types_and_classic_ones_do_not() -> None:
    rows, _ = ranking_agreement(sweep(), n_resamples=300, seed=0)
    by = {r.measure: r for r in rows}
    for name in ("C-Prec", "C-nDCG"):
        assert by[name].rho >= 0.9, by[name]
        assert by[name].ranking["close"] == by[name].ranking["open"] == list(RUNS)[::-1]
    for name in ("nDCG", "P", "AP"):
        assert by[name].rho <= -0.5, by[name]
        assert by[name].high < by["C-Prec"].low  # the intervals are apart
    assert by["P"].ranking["open"] == list(RUNS)  # reversed on open-ended queries


def test_bootstrap_interval_contains_the_point_and_is_reproducible_by_seed() -> None:
    contexts = sweep(n_queries=12, seed=11)
    first, _ = ranking_agreement(contexts, measures=["C-nDCG", "P"], n_resamples=400, seed=5)
    again, _ = ranking_agreement(contexts, measures=["C-nDCG", "P"], n_resamples=400, seed=5)
    other, _ = ranking_agreement(contexts, measures=["C-nDCG", "P"], n_resamples=400, seed=6)
    assert [r.to_json() for r in first] == [r.to_json() for r in again]
    assert [(r.low, r.high) for r in first] != [(r.low, r.high) for r in other]
    for row in first:
        assert row.low <= row.rho <= row.high
        assert row.low < row.high  # 12 queries per type: the resamples vary


def test_bootstrap_resamples_queries_of_each_type() -> None:
    """With one query of B whose values tie every run, every resample is undefined."""
    rho, low, high, undefined = rank_agreement([[0.1, 0.9], [0.5, 0.4]], [[0.3], [0.3]], 40)
    assert math.isnan(rho) and math.isnan(low) and math.isnan(high) and undefined == 40


def test_missing_values_leave_the_mean_and_queries_outside_every_run_are_dropped() -> None:
    contexts = sweep(n_queries=4)
    # r0 misses close-0: the query is dropped for every run; a null check makes a value missing
    contexts = [c for c in contexts if not (c.run == "r0" and c.qid == "close-0")]
    at = next(i for i, c in enumerate(contexts) if (c.qid, c.run) == ("close-1", "r0"))
    first = contexts[at]
    passages = [Passage(p.doc_id, relevant=p.relevant, covers=[None, True]) for p in first.passages]
    contexts[at] = Context(
        first.qid, passages, run="r0", subqueries=["s1", "s2"], extra=first.extra
    )
    rows, dropped = ranking_agreement(contexts, measures=["C-Prec"], n_resamples=20)
    assert dropped == {"close": 1} and rows[0].queries == {"close": 3, "open": 4}
    # close-1 of r0 has no C-Prec: r0's mean is over close-2 and close-3
    kept = [c for c in contexts if c.qid in ("close-2", "close-3") and c.run == "r0"]
    expected = np.mean([ref_metric("C-Prec", c.passages, 2) for c in kept])
    assert rows[0].means["close"]["r0"] == pytest.approx(expected)


def test_types_from_a_mapping_and_from_a_file(tmp_path: Path) -> None:
    contexts = [Context(c.qid, c.passages, run=c.run, subqueries=c.subqueries) for c in sweep(6)]
    mapping = {f"{kind}-{q}": kind for kind in ("close", "open") for q in range(6)}
    rows, _ = ranking_agreement(contexts, mapping, measures=["P"], n_resamples=10)
    expected, _ = ranking_agreement(sweep(6), measures=["P"], n_resamples=10)
    assert rows[0].to_json() == expected[0].to_json()
    tsv = tmp_path / "types.tsv"
    tsv.write_text("# qid\ttype\n" + "".join(f"{q}\t{t}\n" for q, t in mapping.items()))
    assert read_query_types(tsv) == mapping
    js = tmp_path / "types.json"
    js.write_text(json.dumps(mapping))
    assert read_query_types(js) == mapping
    tsv.write_text("close-0\tclose\nclose-0\topen\n")
    with pytest.raises(UDCGInputError, match=r"types.tsv:2: .*two query types"):
        read_query_types(tsv)
    tsv.write_text("close-0 close\n")
    with pytest.raises(UDCGInputError, match=r"types.tsv:1: expected QID<TAB>TYPE"):
        read_query_types(tsv)


def test_errors_are_located() -> None:
    contexts = sweep(2)
    with pytest.raises(UDCGInputError, match="a second context for qid 'close-0' in run 'r0'"):
        ranking_agreement(contexts + contexts[:1])
    third = Context("x", [], run="r0", extra={"query_type": "other"})
    with pytest.raises(UDCGInputError, match=r"found 3 query types \(close, open, other\)"):
        ranking_agreement([*contexts, third])
    with pytest.raises(UDCGInputError, match="field 'query_type': missing"):
        ranking_agreement([*contexts, Context("y", [], run="r0")])
    with pytest.raises(UDCGInputError, match="unknown measure 'MRR'"):
        ranking_agreement(contexts, measures=["MRR"])
    with pytest.raises(UDCGInputError, match="need two different query types"):
        ranking_agreement(contexts, pair=["close", "nope"])
    no_rel = [Context(c.qid, [Passage("d", covers=[True, False])], run=c.run,
                      subqueries=["s1", "s2"], extra=c.extra) for c in contexts]  # fmt: skip
    with pytest.raises(UDCGInputError, match=r"passages\[0\].relevant"):
        ranking_agreement(no_rel, measures=["nDCG"])
    rows, _ = ranking_agreement(no_rel, measures=["C-Prec"], n_resamples=5)  # no relevance needed
    assert math.isnan(rows[0].rho)  # every run ties


def test_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    contexts = sweep(8)
    paths = []
    for run in RUNS:  # one file per retriever, runs named by file
        path = tmp_path / f"{run}.jsonl"
        write_contexts(
            path,
            [Context(c.qid, c.passages, subqueries=c.subqueries) for c in contexts if c.run == run],
        )
        paths.append(str(path))
    types = tmp_path / "types.tsv"
    types.write_text("".join(f"{c.qid}\t{c.extra['query_type']}\n" for c in contexts[::5]))
    out = tmp_path / "agreement.json"
    argv = [*paths, "--types", str(types), "--type", "open", "--type", "close", "-m", "C-Prec,P"]
    assert main(["rankings", *argv, "--resamples", "100", "--seed", "2", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "5 runs: r0, r1, r2, r3, r4" in printed
    assert "| measure | Spearman rho | 95% CI | queries (open / close) |" in printed
    report = json.loads(out.read_text())
    expected, _ = ranking_agreement(
        contexts, pair=["open", "close"], measures=["C-Prec", "P"], n_resamples=100, seed=2
    )
    assert report["agreement"] == [row.to_json() for row in expected]
    assert report["runs"] == list(RUNS) and report["resamples"] == 100
    assert f"| C-Prec | {expected[0].rho:.3f} |" in printed
    # a mistake is one line, exit 2, naming its option
    assert main(["rankings", paths[0], "--types", str(types)]) == 2
    assert "need at least 2 runs" in capsys.readouterr().err
    assert main(["rankings", *argv, "--confidence", "2"]) == 2
    assert "field 'confidence': must be in (0, 1), got 2.0" in capsys.readouterr().err
    # runs whose labels two judges made: ranked, with the warning qcare score gives
    for i, path in enumerate(paths):
        record = {"judge": "a" if i else "b", "fingerprint": "f", "checks": ["text"]}
        lines = Path(path).read_text().splitlines()
        labelled = [json.dumps({**json.loads(line), "qcare_labels": record}) for line in lines]
        Path(path).write_text("\n".join(labelled) + "\n")
    assert main(["rankings", *argv, "--resamples", "20"]) == 0
    assert "several sources (judge a (text): 64 contexts; judge b (text): 16" in (
        capsys.readouterr().err
    )
