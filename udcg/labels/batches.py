"""Judge work in batches with a progress bar: the one loop every annotation step uses."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def in_batches(
    items: Sequence[Any], batch: int, work: Callable[[Sequence[Any]], Sequence[T]], label: str
) -> list[T]:
    """``work`` over ``items`` in batches, with a progress bar on stderr."""
    from tqdm.auto import tqdm

    out: list[T] = []
    with tqdm(total=len(items), desc=label, unit="call", disable=None, file=sys.stderr) as bar:
        for start in range(0, len(items), batch):
            chunk = items[start : start + batch]
            out.extend(work(chunk))
            bar.update(len(chunk))
    return out
