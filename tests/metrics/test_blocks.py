"""Dense 2-D inputs are processed in blocks of rows, on one thread per core: with tiny blocks
(many per batch) the results equal those of the general (ragged-list) path row for row, blocks
of different kinds (0/1, graded, fractional) mix, and a bad value in any block still gets the
general path's located error."""

from __future__ import annotations

import numpy as np
import pytest

from udcg._threads import worker_count
from udcg.errors import UDCGInputError
from udcg.metrics import (
    _arrays,
    context_average_precision,
    context_ndcg,
    hits,
    precision,
    reciprocal_rank,
    udcg,
)


@pytest.fixture(autouse=True)
def tiny_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_arrays, "_BLOCK_BYTES", 8 * 6 * 7)  # 7 rows of 6 per block
    monkeypatch.setenv("UDCG_NUM_THREADS", "2")


def _mixed_labels(rng: np.random.Generator) -> np.ndarray:
    """Blocks of 0/1 rows, graded rows, fractional rows and all-zero rows, in that order."""
    binary = (rng.random((21, 6)) < 0.4).astype(np.float64)
    graded = rng.integers(0, 4, (14, 6)).astype(np.float64)
    fractional = rng.choice([0.0, 0.5, 1.0, 2.25], (10, 6))
    return np.vstack([binary, graded, fractional, np.zeros((5, 6))])


def test_blocks_cover_every_row_once() -> None:
    values = np.zeros((50, 6))
    blocks = list(_arrays.row_blocks(values))
    assert [(b.start, b.stop) for b in blocks][:2] == [(0, 7), (7, 14)]
    covered = np.concatenate([np.arange(50)[b] for b in blocks])
    np.testing.assert_array_equal(covered, np.arange(50))


def test_blocked_metrics_equal_the_general_path_on_mixed_blocks() -> None:
    labels = _mixed_labels(np.random.default_rng(3))
    rows = labels.tolist()  # a list of lists takes the general path
    # the general path sorts every row (a fractional gain is in the batch); integer blocks
    # count grades instead: the same IDCG, bit for bit
    np.testing.assert_array_equal(context_ndcg(labels), context_ndcg(rows))
    np.testing.assert_array_equal(context_ndcg(labels, k=4), context_ndcg(rows, k=4))
    for metric in (context_average_precision, reciprocal_rank, hits):
        for level in (1, 2):
            np.testing.assert_array_equal(
                metric(labels, rel_level=level), metric(rows, rel_level=level)
            )
    np.testing.assert_array_equal(precision(labels, k=5), precision(rows, k=5))
    np.testing.assert_array_equal(precision(labels), precision(rows))
    # integers and booleans are read block by block too
    np.testing.assert_array_equal(
        context_ndcg(labels[:35].astype(np.int64)), context_ndcg(labels[:35])
    )
    np.testing.assert_array_equal(hits(labels[:21] > 0), hits(rows[:21]))


@pytest.mark.parametrize("bad", [np.nan, -1.0, np.inf])
def test_a_bad_label_in_a_late_block_is_still_located(bad: float) -> None:
    labels = _mixed_labels(np.random.default_rng(4))
    labels[44, 2] = bad
    for metric in (context_ndcg, context_average_precision, hits):
        with pytest.raises(UDCGInputError, match="row 44"):
            metric(labels)


@pytest.mark.parametrize("threads", ["1", "3"])
def test_results_do_not_depend_on_the_thread_count(
    threads: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    labels = _mixed_labels(np.random.default_rng(6))
    two = context_ndcg(labels)
    monkeypatch.setenv("UDCG_NUM_THREADS", threads)
    assert worker_count() == int(threads)
    np.testing.assert_array_equal(context_ndcg(labels), two)


@pytest.mark.parametrize("bad", ["many", "0", "-2"])
def test_a_bad_thread_count_is_named(bad: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UDCG_NUM_THREADS", bad)
    with pytest.raises(UDCGInputError, match="UDCG_NUM_THREADS must be a positive integer"):
        context_ndcg(np.zeros((50, 6)))


def test_blocked_udcg_equals_the_general_path() -> None:
    rng = np.random.default_rng(5)
    relevant = rng.random((50, 6)) < 0.3
    utility = rng.random((50, 6))
    expected = udcg(relevant.tolist(), utility.tolist())
    np.testing.assert_array_equal(udcg(relevant, utility), expected)
    np.testing.assert_array_equal(udcg(relevant.astype(np.float64), utility), expected)
    utility[47, 1] = 1.5
    with pytest.raises(UDCGInputError, match="row 47, position 1"):
        udcg(relevant, utility)
