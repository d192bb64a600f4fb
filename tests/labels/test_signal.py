"""udcg.labels.signal_check: when a utility source carries (almost) no information."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from udcg.cli.benchmark import run_evaluate
from udcg.demo_data import demo_contexts
from udcg.errors import UDCGWarning
from udcg.io.contexts.jsonl import Context, Passage, write_contexts
from udcg.labels.signal_check import (
    FLAT_SPREAD,
    SMALL_EFFECT,
    SignalSample,
    check_contexts,
    check_signal,
)


def _separated(n: int = 200, shift: float = 0.3, seed: int = 1) -> tuple[np.ndarray, list]:
    """Utilities spread over [0, 1], relevant passages ``shift`` higher on average."""
    rng = np.random.default_rng(seed)
    relevant = [bool(i % 4 == 0) for i in range(n)]
    u = np.clip(rng.uniform(0.1, 0.7, n) + shift * np.array(relevant), 0, 1)
    return u, relevant


def test_spread_separating_values_do_not_fire() -> None:
    u, relevant = _separated()
    check = check_signal(u, relevant, [f"q{i // 5}" for i in range(len(u))], "answer_likelihood")
    assert not check.flat and not check.inseparable and check.warning() is None
    assert check.auroc > 0.5 + SMALL_EFFECT and check.auroc_low <= check.auroc <= check.auroc_high
    assert (check.values, check.relevant, check.irrelevant) == (200, 50, 150)


def test_nearly_constant_values_fire_whatever_they_separate() -> None:
    u, relevant = _separated()
    flat = 1 - 1e-4 * (1 - u)  # same order, so the same AUROC, squeezed near 1
    check = check_signal(flat, relevant, source="abstention", judge="j")
    assert check.flat and not check.inseparable and check.spread < FLAT_SPREAD
    assert check.auroc == pytest.approx(check_signal(u, relevant).auroc)
    message = check.warning()
    assert message.startswith("abstention utilities of j carry almost no information: 90% of")
    assert "try --utility answer_likelihood or a larger judge" in message
    assert "try utility=answer_likelihood or" in check.warning("utility=answer_likelihood")
    assert "no separation" not in message and "\n" not in message


def test_spread_values_that_do_not_separate_fire() -> None:
    rng = np.random.default_rng(2)
    u = rng.uniform(0, 1, 2000)
    relevant = [bool(i % 3 == 0) for i in range(2000)]
    check = check_signal(u, relevant, [f"q{i // 10}" for i in range(2000)], "answer_likelihood")
    assert not check.flat and check.inseparable and abs(check.auroc - 0.5) < SMALL_EFFECT
    assert check.auroc_low < 0.5 < check.auroc_high
    message = check.warning()
    assert "no separation" in message and "answer_likelihood or" not in message


def test_a_few_outliers_do_not_hide_a_flat_source() -> None:
    u = np.full(1000, 0.99999)
    u[:20] = np.linspace(0, 1, 20)  # 2% anything: the central 90% is still one value
    check = check_signal(u)
    assert check.flat and check.std > FLAT_SPREAD and check.auroc is None


@pytest.mark.parametrize("labels", [None, [None] * 50, [True] * 50, [False] * 50])
def test_without_both_classes_only_the_spread_decides(labels) -> None:
    u = np.linspace(0, 1, 50)
    check = check_signal(u, labels)
    assert check.auroc is None and check.auroc_low is None and not check.fires
    assert check.relevant == (50 if labels == [True] * 50 else 0)
    assert check_signal(np.full(50, 0.3), labels).flat


def test_one_value_fires_and_no_value_is_no_check() -> None:
    check = check_signal([0.42], [True])
    assert check.flat and check.values == 1 and check.std == 0 and check.auroc is None
    assert check_contexts([], "j", "abstention") is None
    # passages without a value for this judge are skipped
    other = Context("q", [Passage(doc_id="d", text="t", abstain_prob={"other": 0.5})])
    assert check_contexts([other], "j", "abstention") is None


def test_ties_count_one_half() -> None:
    check = check_signal([0.5, 0.5, 0.2, 0.9], [True, False, False, True])
    # pairs (relevant, irrelevant): (0.5, 0.5) tie, (0.5, 0.2) win, (0.9, *) two wins
    assert check.auroc == pytest.approx(3.5 / 4)


def test_the_sample_is_bounded_and_the_moments_exact() -> None:
    rng = np.random.default_rng(3)
    u = rng.uniform(0, 1, 5000)
    sample = SignalSample(size=500)
    for i, value in enumerate(u):
        sample.add(float(value), bool(i % 2), f"q{i}")
    check = sample.result("answer_likelihood", "j", n_bootstrap=50)
    assert check.values == 5000 and check.sampled == 500 and len(sample._sample) == 500
    assert check.mean == pytest.approx(u.mean()) and check.std == pytest.approx(u.std())
    assert (check.minimum, check.maximum) == (u.min(), u.max())
    assert check.low == pytest.approx(0.05, abs=0.04) and check.high == pytest.approx(
        0.95, abs=0.04
    )


def test_demo_abstention_fires_and_answer_likelihood_does_not() -> None:
    abstention = check_contexts(demo_contexts(), "smollm2-135m", "abstention")
    assert abstention.values == 3360 and abstention.fires and abstention.flat
    assert abstention.spread < 0.001 and abstention.inseparable
    likelihood = check_contexts(demo_contexts(), "smollm2-135m", "answer_likelihood")
    assert likelihood.values == 3360 and not likelihood.fires
    assert likelihood.spread > 0.3 and likelihood.auroc_low > 0.7
    assert likelihood.as_dict()["fires"] is False and abstention.as_dict()["spread"] < 0.001


def _given(path: Path, spread: float) -> None:
    """30 annotated contexts of 3 passages for judge ``m``: abstention in [0, ``spread``),
    lower for the relevant passages (u separates them perfectly)."""
    rng = np.random.default_rng(0)
    contexts = []
    for i in range(30):
        rel = rng.random(3) < 0.5
        passages = [
            Passage(
                doc_id=f"d{j}",
                text="t",
                relevant=bool(r),
                abstain_prob={"m": spread * (0.2 * p + 0.8 * (not r))},
            )
            for j, (r, p) in enumerate(zip(rel, rng.random(3), strict=True))
        ]
        ok = bool(rng.random() < 0.3 + 0.5 * rel.mean())
        contexts.append(Context(f"q{i}", passages, outcomes={"m": {"correct": ok}}))
    write_contexts(path, contexts)


def test_evaluate_warns_and_records_the_check(tmp_path: Path, evaluate_config) -> None:
    overrides = ("dataset=jsonl", f"dataset.path={tmp_path / 'in.jsonl'}", "retriever=given")
    _given(tmp_path / "in.jsonl", 1e-4)
    with pytest.warns(UDCGWarning, match="abstention utilities of m carry almost no information"):
        report, _ = run_evaluate(evaluate_config(*overrides, "judge=m"), tmp_path / "out")
    stored = json.loads((tmp_path / "out" / "report.json").read_text())["signal"]
    assert stored == report["signal"] and stored["fires"] and stored["flat"]
    assert stored["values"] == 90 and stored["source"] == "abstention" and stored["judge"] == "m"
    assert any("carry almost no information" in n for n in report["notes"])
    assert "carry almost no information" in (tmp_path / "out" / "report.md").read_text()
    _given(tmp_path / "in.jsonl", 1.0)
    report, _ = run_evaluate(evaluate_config(*overrides, "judge=m"), tmp_path / "out2")
    assert not report["signal"]["fires"] and report["signal"]["spread"] > 0.5
    assert report["signal"]["auroc"] == 1.0
    assert not any("carry almost no information" in n for n in report["notes"])
