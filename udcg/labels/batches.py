"""Judge work with progress on stderr (:mod:`udcg.progress`): the loops of annotation steps."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from udcg.judge.base import upper_bounds
from udcg.progress import progress

T = TypeVar("T")


def in_batches(
    items: Sequence[Any], batch: int, work: Callable[[Sequence[Any]], Sequence[T]], label: str
) -> list[T]:
    """``work`` over ``items`` in batches, with a progress bar on stderr.

    Examples:
        >>> in_batches([1, 2, 3, 4, 5], 2, lambda chunk: [10 * x for x in chunk], "items")
        [10, 20, 30, 40, 50]
    """
    return judge_batches(items, batch, work, label)[0]


def judge_batches(
    items: Sequence[Any],
    batch: int,
    work: Callable[[Sequence[Any]], Sequence[T]],
    label: str,
    leave: bool = True,
) -> tuple[list[T], np.ndarray]:
    """``work`` over ``items`` in batches (progress bar on stderr, kept when done if
    ``leave``); the results and their upper-bound mask (:func:`udcg.judge.base.upper_bounds`
    of each batch's result).

    Examples:
        Item 3's value is only an upper bound:

        >>> from udcg.judge.base import judge_values
        >>> def work(chunk):
        ...     return judge_values([0.5] * len(chunk), [x == 3 for x in chunk])
        >>> values, bounds = judge_batches([1, 2, 3], 2, work, "calls")
        >>> [float(v) for v in values], bounds.tolist()
        ([0.5, 0.5, 0.5], [False, False, True])
    """
    out: list[T] = []
    masks = [np.zeros(0, dtype=bool)]
    with progress(len(items), label, unit="call", leave=leave) as bar:
        for start in range(0, len(items), batch):
            chunk = items[start : start + batch]
            values = work(chunk)
            out.extend(values)
            masks.append(upper_bounds(values))
            bar.update(len(chunk))
    return out, np.concatenate(masks)


def judge_call(
    judge: Any,
    items: Sequence[Any],
    work: Callable[..., Sequence[T]],
    label: str,
    batch: int = 64,
) -> tuple[list[T], np.ndarray]:
    """``work(items)`` through ``judge``: the results and their upper-bound mask.

    A judge with ``streams_results = True`` gets all ``items`` in one call (it keeps many
    requests in flight) and moves the progress bar from ``on_result``, once per finished item;
    any other judge gets batches of ``batch`` items, the bar moving per batch. The bar is
    cleared when done (a run annotates many chunks).

    Examples:
        A judge that does not stream gets batches; plain arrays carry no bounds:

        >>> class Plain:
        ...     streams_results = False
        >>> def work(chunk):
        ...     return [0.1] * len(chunk)
        >>> values, bounds = judge_call(Plain(), ["a", "b"], work, "calls")
        >>> values, bounds.tolist()
        ([0.1, 0.1], [False, False])
    """
    if not getattr(judge, "streams_results", False):
        return judge_batches(items, batch, work, label, leave=False)
    if not items:
        return [], np.zeros(0, dtype=bool)
    with progress(len(items), label, unit="call", leave=False) as bar:
        values = work(items, on_result=lambda i, value, bound: bar.update(1))
    return list(values), upper_bounds(values)
