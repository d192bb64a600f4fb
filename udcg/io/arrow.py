"""Zero-copy moves between Arrow and numpy for primitive columns without nulls.

``pa.array(ndarray)`` and ``Array.to_numpy()`` probe for pandas, which imports it when it is
installed (about 0.6 s per process); going through the buffers avoids that and copies nothing.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_ARROW_TYPES = {
    np.dtype(np.float64): pa.float64(),
    np.dtype(np.int64): pa.int64(),
    np.dtype(np.int32): pa.int32(),
    np.dtype(np.uint64): pa.uint64(),
}


def to_numpy(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A read-only numpy view of a null-free integer or float column."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array.null_count:
        raise ValueError("column has nulls")
    dtype = np.dtype(array.type.to_pandas_dtype())
    return np.frombuffer(
        array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize
    )


def from_numpy(values: np.ndarray) -> pa.Array:
    """An Arrow array sharing the memory of a 1-D integer or float numpy array."""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(
        _ARROW_TYPES[values.dtype], len(values), [None, pa.py_buffer(values)]
    )
