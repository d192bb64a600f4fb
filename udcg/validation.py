"""Validation of the 1-D inputs shared by the statistics and the estimators: per-context
values (scores, correctness) and per-context query ids."""

from __future__ import annotations

from typing import Any

import numpy as np

from udcg.errors import UDCGInputError


def float_vector(
    values: Any, name: str, length: int | None = None, length_of: str = "the other input"
) -> np.ndarray:
    """``values`` as a finite float64 1-D array (of ``length`` values when given)."""
    try:
        out = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise UDCGInputError(f"expected a 1-D sequence of numbers ({exc})", field=name) from None
    if out.ndim != 1:
        raise UDCGInputError(f"expected a 1-D sequence, got {out.ndim}-D", field=name)
    if length is not None and out.shape[0] != length:
        raise UDCGInputError(
            f"length mismatch: {length_of} has {length} values but {name} has {out.shape[0]}",
            field=name,
        )
    finite = np.isfinite(out)
    if not finite.all():
        pos = int(np.argmax(~finite))
        raise UDCGInputError(f"position {pos}: NaN or infinite value", field=name)
    return out


def binary_vector(
    values: Any, name: str, length: int | None = None, length_of: str = "the other input"
) -> np.ndarray:
    """:func:`float_vector` whose values are all 0 or 1 (booleans accepted)."""
    out = float_vector(values, name, length, length_of)
    bad = (out != 0) & (out != 1)
    if bad.any():
        pos = int(np.argmax(bad))
        raise UDCGInputError(f"position {pos}: {out[pos]!r} is not 0/1", field=name)
    return out


def query_codes(groups: Any, n: int, length_of: str = "the contexts") -> np.ndarray:
    """Each context's query id as an integer 0..n_queries-1, numbered in sorted id order (as
    strings when the ids cannot be compared), so codes do not depend on context order.
    ``None`` makes every context its own query."""
    if groups is None:
        return np.arange(n, dtype=np.int64)
    labels = np.asarray(groups)
    if labels.ndim != 1:
        raise UDCGInputError(f"expected a 1-D sequence, got {labels.ndim}-D", field="groups")
    if labels.shape[0] != n:
        raise UDCGInputError(
            f"length mismatch: {length_of} has {n} values but groups has {labels.shape[0]}",
            field="groups",
        )
    if labels.dtype.kind == "f" and not np.isfinite(labels).all():
        pos = int(np.argmax(~np.isfinite(labels)))
        raise UDCGInputError(f"position {pos}: NaN or infinite query id", field="groups")
    try:
        _, codes = np.unique(labels, return_inverse=True)
    except TypeError:  # ids of mixed types
        _, codes = np.unique(labels.astype(str), return_inverse=True)
    return np.asarray(codes, dtype=np.int64).reshape(-1)
