"""Array conventions shared by every metric.

A batch of retrieved lists is either a 2-D array ``[n_queries, k]`` (every list has k passages)
or a ragged sequence of per-query 1-D sequences. Internally both become a zero-padded 2-D
float array plus a vector of list lengths, so kernels stay vectorised over queries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from udcg._threads import map_concurrently
from udcg.errors import UDCGInputError
from udcg.validation import show

ArrayLike2D = np.ndarray | Sequence[Sequence[float]]


def check_finite(values: np.ndarray, name: str) -> None:
    """Refuse a NaN or an infinity in a float array, naming its row.

    Examples:
        >>> check_finite(np.array([[0.5, np.nan]]), "utility")
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'utility': row 0: NaN or infinite value
    """
    if values.dtype.kind == "f" and not np.isfinite(values).all():
        row = int(np.argwhere(~np.isfinite(values))[0][0])
        raise UDCGInputError(f"row {row}: NaN or infinite value", field=name)


def full_lengths(values: np.ndarray) -> np.ndarray:
    """List lengths of a 2-D array ``[n, k]``: k for every row."""
    return np.full(values.shape[0], values.shape[1], dtype=np.int64)


def table_rows(values: Any) -> Any:
    """A 2-D table with ``to_numpy`` (a pandas or polars DataFrame, one column per position)
    as the numpy array of its rows, since iterating it would give its column labels; anything
    else unchanged."""
    table = not isinstance(values, np.ndarray) and hasattr(values, "to_numpy")
    return values.to_numpy() if table and len(getattr(values, "shape", ())) == 2 else values


def unmasked(values: Any, name: str) -> Any:
    """``values``; a numpy masked array with entries masked is refused (a mask hides values
    the metrics would otherwise read as they are).

    Examples:
        >>> unmasked(np.ma.array([[1.0, 0.5]], mask=[[False, True]]), "utility")
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'utility': a masked array with 1 masked entries: ...
    """
    if np.ma.isMaskedArray(values) and (hidden := int(np.ma.getmaskarray(values).sum())):
        raise UDCGInputError(
            f"a masked array with {hidden} masked entries: give the values to score (fill "
            "or drop them; ragged lists may differ in length)",
            field=name,
        )
    return values


def as_padded(values: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(padded, lengths)``: a float64 ``[n, max_len]`` array padded with 0 and list lengths;
    a DataFrame counts as its rows (``table_rows``); entries masked are refused."""
    values = unmasked(table_rows(values), name)
    if isinstance(values, np.ndarray):
        if values.ndim != 2:
            raise UDCGInputError(
                f"expected a 2-D array [n_queries, k] or a list of lists, got {values.ndim}-D",
                field=name,
            )
        try:
            out = np.asarray(values, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise UDCGInputError(f"expected numbers ({exc})", field=name) from None
        check_finite(out, name)
        return out, full_lengths(out)
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
    check_finite(out, name)
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
    (_, la), (_, lb) = a, b
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
    """Every value must lie in ``[low, high]`` (two reductions; the scan runs only on failure)."""
    if values.size == 0 or (values.min() >= low and values.max() <= high):
        return
    row, col = (int(i) for i in np.argwhere((values < low) | (values > high))[0])
    raise UDCGInputError(
        f"row {row}, position {col}: {show(values[row, col])} is outside [{low}, {high}]",
        field=name,
    )


_INF_BITS = int(np.float64(np.inf).view(np.uint64))


def _max_bits(values: np.ndarray) -> int | None:
    """The largest float64 bit pattern of ``values`` read as unsigned integers, in one pass;
    None for other dtypes. Patterns of +0.0 <= x <= +inf grow with x, while negative numbers,
    -0.0 and NaN all read larger than +inf's, so one ``max`` bounds the whole array."""
    if values.dtype != np.float64:
        return None
    return int(values.view(np.uint64).max()) if values.size else 0


def non_negative_max(values: np.ndarray) -> float | None:
    """The largest value of a float64 array whose values are all finite and >= 0, from one
    pass over the bit patterns (see ``_max_bits``); None for anything else (including -0.0
    and other dtypes), so callers fall back to their full check, which also words the error.
    """
    bits = _max_bits(values)
    if bits is None or bits >= _INF_BITS:
        return None
    return float(np.uint64(bits).view(np.float64))


def in_unit_interval(values: np.ndarray) -> bool:
    """True when a float64 array holds only finite values in [0, 1] (one pass)."""
    top = non_negative_max(values)
    return top is not None and top <= 1.0


def finite_non_negative(values: np.ndarray) -> bool:
    """True when a float64 array holds only finite values >= 0 (one pass)."""
    return non_negative_max(values) is not None


_BLOCK_BYTES = 1 << 21


def row_blocks(values: np.ndarray) -> Iterator[slice]:
    """Slices of consecutive rows holding about 2 MiB of float64 each. A chain of passes over
    one block runs in the CPU cache, so a large batch is read from memory once, not once per
    pass."""
    step = max(1, _BLOCK_BYTES // (8 * max(1, values.shape[1])))
    for start in range(0, values.shape[0], step):
        yield slice(start, start + step)


def all_blocks(values: np.ndarray, work: Callable[[slice], bool]) -> bool:
    """``work(rows)`` for every block of ``row_blocks(values)``, on several threads when there
    are several blocks (see ``udcg._threads``); True when every call returned True. Blocks
    must not depend on each other."""
    return all(map_concurrently(work, row_blocks(values)))


def unpad(padded: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    """Per-query 1-D arrays: the first ``lengths[i]`` values of each row."""
    kept = padded[np.arange(padded.shape[1]) < lengths[:, None]]
    return np.split(kept, np.cumsum(lengths)[:-1]) if len(lengths) else []


def as_padded_matrices(
    values: Any, name: str, axes: tuple[str, str], fractions: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(cube, rows, cols)`` from a 3-D array ``[n, rows, cols]`` or a ragged list of per-query
    2-D lists of booleans: a zero-padded bool ``[n, max_rows, max_cols]`` array and each
    query's row and column counts. A query given as ``[]`` has 0 rows and 0 columns; values
    must be booleans or 0/1 (with ``fractions``, any number in [0, 1], and the cube is
    float64). ``axes`` names rows and columns in error messages."""
    shape = f"[{axes[0]}, {axes[1]}]"
    values = unmasked(values, name)
    if isinstance(values, np.ndarray):
        if values.ndim != 3:
            raise UDCGInputError(
                f"expected a 3-D array [n_queries, {axes[0]}, {axes[1]}] or a list of "
                f"per-query {shape} lists, got a {values.ndim}-D array",
                field=name,
            )
        try:
            cube = np.asarray(values, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise UDCGInputError(f"expected booleans ({exc})", field=name) from None
        n, n_rows, n_cols = cube.shape
        rows = np.full(n, n_rows, dtype=np.int64)
        cols = np.full(n, n_cols, dtype=np.int64)
    else:
        try:
            queries = list(values)
        except TypeError:
            raise UDCGInputError(
                f"expected a list of per-query {shape} lists, got {type(values).__name__}",
                field=name,
            ) from None
        mats = []
        for i, query in enumerate(queries):
            try:
                mat = np.asarray(query, dtype=np.float64)
            except (TypeError, ValueError) as exc:
                raise UDCGInputError(
                    f"query {i}: expected a {shape} list of lists of booleans ({exc})",
                    field=name,
                ) from None
            if mat.ndim == 1 and mat.size == 0:
                mat = mat.reshape(0, 0)
            if mat.ndim != 2:
                raise UDCGInputError(
                    f"query {i}: expected a {shape} list of lists, got {mat.ndim}-D",
                    field=name,
                )
            mats.append(mat)
        rows = np.fromiter((m.shape[0] for m in mats), dtype=np.int64, count=len(mats))
        cols = np.fromiter((m.shape[1] for m in mats), dtype=np.int64, count=len(mats))
        width_r = int(rows.max()) if len(mats) else 0
        width_c = int(cols.max()) if len(mats) else 0
        cube = np.zeros((len(mats), width_r, width_c), dtype=np.float64)
        for i, mat in enumerate(mats):
            cube[i, : mat.shape[0], : mat.shape[1]] = mat
    bad = ~((cube >= 0) & (cube <= 1)) if fractions else (cube != 0) & (cube != 1)
    if bad.any():
        q, r, c = (int(x) for x in np.argwhere(bad)[0])
        expected = "a boolean or a number in [0, 1]"
        if not fractions:
            expected = "a boolean (expected True/False or 0/1)"
        raise UDCGInputError(
            f"query {q}, {axes[0]} row {r}, {axes[1]} column {c}: {show(cube[q, r, c])} is not "
            + expected,
            field=name,
        )
    return (cube if fractions else cube.astype(bool)), rows, cols
