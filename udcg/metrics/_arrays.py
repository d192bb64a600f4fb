"""Array conventions shared by every metric.

A batch of retrieved lists is either a 2-D array ``[n_queries, k]`` (every list has k passages)
or a ragged sequence of per-query 1-D sequences. Internally both become a zero-padded 2-D
float array plus a vector of list lengths, so kernels stay vectorised over queries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from udcg.errors import UDCGInputError

ArrayLike2D = np.ndarray | Sequence[Sequence[float]]


def _check_finite(values: np.ndarray, name: str) -> None:
    if values.dtype.kind == "f" and not np.isfinite(values).all():
        row = int(np.argwhere(~np.isfinite(values))[0][0])
        raise UDCGInputError(f"row {row}: NaN or infinite value", field=name)


def as_padded(values: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(padded, lengths)``: a float64 ``[n, max_len]`` array padded with 0 and list lengths."""
    if isinstance(values, np.ndarray):
        if values.ndim != 2:
            raise UDCGInputError(
                f"expected a 2-D array [n_queries, k] or a list of lists, got {values.ndim}-D",
                field=name,
            )
        out = np.asarray(values, dtype=np.float64)
        _check_finite(out, name)
        return out, np.full(out.shape[0], out.shape[1], dtype=np.int64)
    try:
        rows = [np.asarray(row, dtype=np.float64) for row in values]
    except (TypeError, ValueError) as exc:
        raise UDCGInputError(f"expected numbers in a list of lists ({exc})", field=name) from None
    for i, row in enumerate(rows):
        if row.ndim != 1:
            raise UDCGInputError(f"row {i}: expected a 1-D sequence, got {row.ndim}-D", field=name)
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    width = int(lengths.max()) if len(rows) else 0
    out = np.zeros((len(rows), width), dtype=np.float64)
    if len(rows):
        mask = np.arange(width) < lengths[:, None]
        out[mask] = np.concatenate(rows) if width else []
    _check_finite(out, name)
    return out, lengths


def as_fixed(values: Any, name: str) -> np.ndarray:
    """A float64 ``[n, k]`` array; ragged input is an error because a fixed k is required."""
    out, lengths = as_padded(values, name)
    if len(lengths) and (lengths != lengths[0]).any():
        row = int(np.argmax(lengths != lengths[0]))
        raise UDCGInputError(
            f"row {row} has {lengths[row]} items but row 0 has {lengths[0]}: "
            "ragged rows where a fixed k is required",
            field=name,
        )
    return out


def check_same_shape(
    a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], names: tuple[str, str]
) -> None:
    """Paired per-passage inputs must describe the same lists."""
    (va, la), (vb, lb) = a, b
    if la.shape != lb.shape:
        raise UDCGInputError(
            f"{names[0]} has {la.shape[0]} queries but {names[1]} has {lb.shape[0]}",
            field=names[1],
        )
    if (la != lb).any():
        row = int(np.argmax(la != lb))
        raise UDCGInputError(
            f"row {row}: {names[0]} has {la[row]} passages but {names[1]} has {lb[row]}",
            field=names[1],
        )


def check_range(values: np.ndarray, name: str, low: float, high: float) -> None:
    """Every value must lie in ``[low, high]``."""
    bad = (values < low) | (values > high)
    if bad.any():
        row, col = (int(i) for i in np.argwhere(bad)[0])
        raise UDCGInputError(
            f"row {row}, position {col}: {values[row, col]!r} is outside [{low}, {high}]",
            field=name,
        )
