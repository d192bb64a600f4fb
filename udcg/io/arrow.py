"""Zero-copy moves between Arrow and numpy for primitive columns without nulls, and the few
Arrow compute kernels the TREC readers and engine call.

``pa.array(ndarray)`` and ``Array.to_numpy()`` probe for pandas, which imports it when it is
installed (a large import); going through the buffers avoids that and copies nothing.

The kernels are called through ``call_function`` of Arrow's compiled compute module
(``pyarrow._compute``). Importing the public ``pyarrow.compute`` also builds a documented
Python wrapper for each of Arrow's several hundred functions, which a command-line run would
pay at every start for the four it uses; where a pyarrow release lays the compiled module out
differently, the public module is used instead. Array methods such as ``take`` or
``dictionary_encode`` import the public module themselves, so the code that runs per
evaluation calls the helpers below instead.

Every Arrow call here allocates from :func:`memory_pool`, passed to the call; Arrow's default
pool, a process-wide setting, is left as it is.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

_ARROW_TYPES = {
    np.dtype(np.float64): pa.float64(),
    np.dtype(np.float32): pa.float32(),
    np.dtype(np.int64): pa.int64(),
    np.dtype(np.int32): pa.int32(),
    np.dtype(np.uint64): pa.uint64(),
}


@functools.cache
def memory_pool() -> pa.MemoryPool:
    """The Arrow pool udcg's readers and kernels allocate from: jemalloc, or the system
    allocator where this Arrow lacks it.

    Arrow's default pool (mimalloc) backs its whole arena with transparent huge pages. Where
    they are in ``madvise`` mode (the common default), each 2 MiB page is allocated and zeroed
    whole on first touch, and a TREC evaluation's first call in a process touches a few
    hundred MiB of short-lived columns: jemalloc's 4 KiB pages touch only what it hands out,
    and it keeps freed memory for the next call (``bench/first_call_faults.py``).

    Examples:
        >>> memory_pool().backend_name in ("jemalloc", "system")
        True
    """
    try:
        return pa.jemalloc_memory_pool()
    except NotImplementedError:
        return pa.system_memory_pool()


def to_numpy(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A read-only numpy view of a null-free integer or float column.

    Examples:
        >>> to_numpy(pa.chunked_array([[1.5, 2.0], [3.0]])).tolist()
        [1.5, 2.0, 3.0]
    """
    if isinstance(array, pa.ChunkedArray):
        array = one_chunk(array)
    if array.null_count:
        raise ValueError("column has nulls")
    dtype = _numpy_dtype(array.type)
    return np.frombuffer(
        array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize
    )


def _numpy_dtype(arrow_type: pa.DataType) -> np.dtype:
    """The numpy dtype of an Arrow integer or float type (``DataType.to_pandas_dtype`` imports
    pandas)."""
    if pa.types.is_floating(arrow_type):
        kind = "f"
    elif pa.types.is_integer(arrow_type):
        kind = "u" if pa.types.is_unsigned_integer(arrow_type) else "i"
    else:
        raise TypeError(f"not an integer or float column: {arrow_type}")
    return np.dtype(f"{kind}{arrow_type.bit_width // 8}")


def from_numpy(values: np.ndarray) -> pa.Array:
    """An Arrow array sharing the memory of a 1-D integer or float numpy array.

    Examples:
        >>> from_numpy(np.array([1.0, 2.5])).to_pylist()
        [1.0, 2.5]
    """
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(
        _ARROW_TYPES[values.dtype], len(values), [None, pa.py_buffer(values)]
    )


@functools.cache
def _compute() -> Any:
    """``pyarrow._compute`` when it has what the helpers call, else ``pyarrow.compute``."""
    try:
        from pyarrow import _compute as kernels

        for name in ("call_function", "SortOptions", "ArraySortOptions"):
            getattr(kernels, name)
    except (ImportError, AttributeError):
        import pyarrow.compute as kernels
    return kernels


def dictionary_encode(values: pa.Array | pa.ChunkedArray) -> pa.DictionaryArray:
    """``values`` as a dictionary array (codes in order of first appearance); a dictionary
    array (as the readers make) as it is.

    Examples:
        >>> codes = dictionary_encode(pa.array(["q2", "q1", "q2"]))
        >>> codes.indices.to_pylist(), codes.dictionary.to_pylist()
        ([0, 1, 0], ['q2', 'q1'])
        >>> dictionary_encode(codes) is codes
        True
    """
    if pa.types.is_dictionary(values.type):  # no kernel call for what is already encoded
        return values
    return _compute().call_function("dictionary_encode", [values], memory_pool=memory_pool())


def encoded(strings: pa.ChunkedArray) -> pa.DictionaryArray:
    """A string column as one dictionary array, encoded in one pass over its chunks (one hash
    table for the whole column; codes in order of first appearance).

    Examples:
        >>> codes = encoded(pa.chunked_array([["q2", "q1"], ["q2", "q3"]]))
        >>> codes.indices.to_pylist(), codes.dictionary.to_pylist()
        ([0, 1, 0, 2], ['q2', 'q1', 'q3'])
    """
    chunks = dictionary_encode(strings).chunks
    if not chunks:
        return pa.DictionaryArray.from_arrays(pa.array([], pa.int32()), pa.array([], strings.type))
    if len(chunks) == 1:
        return chunks[0]
    # the chunks share one growing hash table, so the last chunk's dictionary holds every
    # value with the code it has in every chunk: copy the codes into one array (Arrow's own
    # concatenation compares or merges the chunks' dictionaries first)
    codes = np.empty(len(strings), dtype=np.int32)
    start = 0
    for chunk in chunks:
        codes[start : start + len(chunk)] = to_numpy(chunk.indices)
        start += len(chunk)
    return pa.DictionaryArray.from_arrays(from_numpy(codes), chunks[-1].dictionary)


def one_chunk(column: pa.ChunkedArray) -> pa.Array:
    """The column as one array: its only chunk as it is, or its chunks concatenated
    (``ChunkedArray.combine_chunks`` allocates from Arrow's default pool whatever it is
    given).

    Examples:
        >>> one_chunk(pa.chunked_array([[1], [2, 3]])).to_pylist()
        [1, 2, 3]
    """
    if column.num_chunks == 1:
        return column.chunk(0)
    if column.num_chunks == 0:
        return pa.array([], column.type)
    return pa.concat_arrays(column.chunks, memory_pool())


def take(values: pa.Array, indices: np.ndarray | pa.Array) -> pa.Array:
    """``values[indices]``.

    Examples:
        >>> take(pa.array(["a", "b", "c"]), np.array([2, 0])).to_pylist()
        ['c', 'a']
    """
    if isinstance(indices, np.ndarray):
        indices = from_numpy(indices.astype(np.int64, copy=False))
    return _compute().call_function("take", [values, indices], memory_pool=memory_pool())


def decoded(strings: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Plain values of a possibly chunked, possibly dictionary-encoded array.

    Examples:
        >>> decoded(dictionary_encode(pa.array(["q2", "q1", "q2"]))).to_pylist()
        ['q2', 'q1', 'q2']
    """
    if isinstance(strings, pa.ChunkedArray):
        strings = one_chunk(strings)
    if pa.types.is_dictionary(strings.type):
        return take(strings.dictionary, strings.indices)
    return strings


def sort_indices(table: pa.Table, keys: Sequence[tuple[str, str]]) -> np.ndarray:
    """Row indices that sort ``table`` by ``keys`` (``(column, "ascending"|"descending")``),
    stable.

    Examples:
        >>> table = pa.table({"qid": ["q1", "q1", "q2"], "score": [1.0, 3.0, 2.0]})
        >>> sort_indices(table, [("qid", "ascending"), ("score", "descending")]).tolist()
        [1, 0, 2]
    """
    kernels = _compute()
    options = kernels.SortOptions(keys)
    return to_numpy(kernels.call_function("sort_indices", [table], options, memory_pool()))


def string_ranks(strings: pa.Array) -> np.ndarray:
    """The position of each of ``strings`` in their byte-wise ascending order (ties in order
    of appearance).

    Examples:
        Byte-wise: upper case sorts before lower case:

        >>> string_ranks(pa.array(["b", "a", "B", "b"])).tolist()
        [2, 1, 0, 3]
    """
    kernels = _compute()
    order = to_numpy(
        kernels.call_function(
            "array_sort_indices", [strings], kernels.ArraySortOptions(), memory_pool()
        )
    )
    ranks = np.empty(len(order), dtype=np.int64)
    ranks[order] = np.arange(len(order))
    return ranks


def has_any_byte(strings: pa.Array, values: bytes) -> bool:
    """Whether any of ``strings`` (plain strings) contains one of the bytes ``values``;
    read from the array's data buffer, so any ASCII byte is found wherever it is.

    Examples:
        >>> has_any_byte(pa.array(["q1", "q 2"]), b" \\t"), has_any_byte(pa.array(["q1"]), b" \\t")
        (True, False)
    """
    if not len(strings):
        return False
    offset_type = np.int64 if pa.types.is_large_string(strings.type) else np.int32
    _, offsets, data = strings.buffers()
    if data is None:
        return False
    bounds = np.frombuffer(offsets, dtype=offset_type)[
        strings.offset : strings.offset + len(strings) + 1
    ]
    wanted = np.zeros(256, dtype=bool)
    wanted[list(values)] = True
    return bool(wanted[np.frombuffer(data, dtype=np.uint8)[bounds[0] : bounds[-1]]].any())
