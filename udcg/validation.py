"""Checks shared by the whole package: option values (a positive integer k, a fraction, one
of a few choices), the 1-D inputs of the statistics and the estimators (per-context values,
per-context query ids), and how a wrong value is shown in a message."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from udcg.errors import UDCGInputError


def show(value: Any) -> str:
    """``value`` as an error message shows it: numbers plainly (``1.2``, not
    ``np.float64(1.2)``), anything else as its ``repr`` (strings quoted).

    Examples:
        >>> show(np.float64(1.2)), show("1.2"), show(None)
        ('1.2', "'1.2'", 'None')
    """
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool | int | float):
        return str(value)
    return repr(value)


def printable(text: str) -> str:
    """``text`` safe to print on a terminal: every character that is not printable (C0 and
    C1 controls such as ESC and BEL, DEL, line breaks, bidirectional overrides and other
    format characters) written as its Python escape (``\\x1b``, ``\\u202e``), the rest kept.

    Examples:
        >>> print(printable("judge\\x1b[31m: é"))
        judge\\x1b[31m: é
    """
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text
    )


def integer(value: Any, name: str) -> int:
    """``value`` as an int (numpy integers accepted, booleans refused).

    Examples:
        >>> integer(np.int64(3), "k")
        3
        >>> integer(True, "k")
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'k': must be an integer, got True
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise UDCGInputError(f"must be an integer, got {show(value)}", field=name)
    return int(value)


def nonnegative_int(value: Any, name: str) -> int:
    """``value`` as an int >= 0, such as a seed of numpy's generators (numpy integers
    accepted, booleans refused).

    Examples:
        >>> nonnegative_int(0, "seed")
        0
    """
    if integer(value, name) < 0:
        raise UDCGInputError(f"must be a non-negative integer, got {show(value)}", field=name)
    return int(value)


def positive_int(value: Any, name: str) -> int:
    """``value`` as an int >= 1 (numpy integers accepted, booleans refused).

    Examples:
        >>> positive_int(5, "k")
        5
        >>> positive_int(0, "k")
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'k': must be a positive integer, got 0
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise UDCGInputError(f"must be a positive integer, got {show(value)}", field=name)
    return int(value)


def open_fraction(value: Any, name: str) -> float:
    """``value`` as a float strictly between 0 and 1.

    Examples:
        >>> open_fraction(0.95, "confidence")
        0.95
    """
    is_number = isinstance(value, int | float | np.integer | np.floating)
    if isinstance(value, bool) or not is_number or not 0.0 < float(value) < 1.0:
        raise UDCGInputError(
            f"must be a number strictly between 0 and 1, got {show(value)}", field=name
        )
    return float(value)


def nonnegative_float(value: Any, name: str) -> float:
    """``value`` as a finite float >= 0 (numpy numbers accepted, booleans refused).

    Examples:
        >>> nonnegative_float(np.float32(0.5), "l2"), nonnegative_float(0, "l2")
        (0.5, 0.0)
    """
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise UDCGInputError(f"expected a number, got {show(value)}", field=name)
    if not np.isfinite(value) or value < 0:
        raise UDCGInputError(f"must be finite and >= 0, got {show(value)}", field=name)
    return float(value)


def boolean(value: Any, name: str) -> bool:
    """``value`` as a bool (``True``/``False`` only).

    Examples:
        >>> boolean(np.bool_(True), "bias")
        True
    """
    if not isinstance(value, bool | np.bool_):
        raise UDCGInputError(f"must be true or false, got {show(value)}", field=name)
    return bool(value)


def nonempty_str(value: Any, name: str) -> str:
    """``value`` if it is a non-empty string.

    Examples:
        >>> nonempty_str("llama3", "judge")
        'llama3'
    """
    if not isinstance(value, str) or not value:
        raise UDCGInputError(f"must be a non-empty string, got {show(value)}", field=name)
    return value


def one_of(value: Any, name: str, choices: Sequence[str]) -> str:
    """``value`` if it is one of ``choices``.

    Examples:
        >>> one_of("t", "test", ("t", "randomization"))
        't'
        >>> one_of("z", "test", ("t", "randomization"))
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'test': must be one of t, randomization, got 'z'
    """
    if value not in choices:
        raise UDCGInputError(f"must be one of {', '.join(choices)}, got {show(value)}", field=name)
    return value


def float_vector(
    values: Any, name: str, length: int | None = None, length_of: str = "the other input"
) -> np.ndarray:
    """``values`` as a finite float64 1-D array (of ``length`` values when given).

    Examples:
        >>> float_vector([1, 2.5], "metric", length=2).tolist()
        [1.0, 2.5]
        >>> float_vector([1, float("nan")], "metric")
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'metric': position 1: NaN or infinite value
    """
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
    """:func:`float_vector` whose values are all 0 or 1 (booleans accepted).

    Examples:
        >>> binary_vector([True, False, 1], "correct").tolist()
        [1.0, 0.0, 1.0]
    """
    out = float_vector(values, name, length, length_of)
    bad = (out != 0) & (out != 1)
    if bad.any():
        pos = int(np.argmax(bad))
        raise UDCGInputError(f"position {pos}: {show(out[pos])} is not 0/1", field=name)
    return out


def query_codes(groups: Any, n: int, length_of: str = "the contexts") -> np.ndarray:
    """Each context's query id as an integer 0..n_queries-1, numbered in sorted id order (as
    strings when the ids cannot be compared), so codes do not depend on context order.
    ``None`` makes every context its own query.

    Examples:
        >>> query_codes(["q2", "q1", "q2"], 3).tolist(), query_codes(None, 3).tolist()
        ([1, 0, 1], [0, 1, 2])
    """
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


def by_query(**inputs: Any) -> list[Any] | None:
    """Inputs given as mappings ``{qid: value}`` as lists in the order of the first one's keys;
    None when no input is a mapping. Mixing mappings and sequences, or mappings with different
    qids, is an error naming the input that differs.

    Examples:
        >>> by_query(relevant={"q1": [1, 0], "q2": [0]}, utility={"q2": [0.5], "q1": [0.9, 0.1]})
        [[[1, 0], [0]], [[0.9, 0.1], [0.5]]]
        >>> by_query(relevant=[[1, 0]], utility=[[0.9, 0.1]]) is None
        True
    """
    names = list(inputs)
    maps = [isinstance(v, Mapping) for v in inputs.values()]
    if not any(maps):
        return None
    if not all(maps):
        listed = (
            " and ".join([", ".join(names[:-1]), names[-1]])
            if len(names) > 2
            else (" and ".join(names))
        )
        both = "both" if len(names) == 2 else "all"
        raise UDCGInputError(
            f"{listed} must {both} be mappings {{qid: ...}} or {both} be arrays/lists",
            field=names[maps.index(False)] if maps[0] else names[0],
        )
    first = inputs[names[0]]
    keys = list(first)
    for name in names[1:]:
        other = inputs[name]
        missing = [q for q in keys if q not in other]
        extra = [q for q in other if q not in first]
        if missing or extra:
            what = (
                f"no entry for query {show(missing[0])}"
                if missing
                else f"unknown query {show(extra[0])}"
            )
            raise UDCGInputError(f"{what} (every input needs the same qids)", field=name)
    return [[inputs[name][q] for q in keys] for name in names]


def encodable(text: str, field: str) -> str:
    """``text``, refused when it holds a lone surrogate (JSON can escape one, a file name not
    valid in UTF-8 decodes to some, UTF-8 cannot encode them).

    >>> encodable("caf\\ud800", "passages[0]")
    Traceback (most recent call last):
    ...
    udcg.errors.UDCGInputError: field 'passages[0]': holds a lone surrogate (U+D800), which ...
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UDCGInputError(
            f"holds a lone surrogate (U+{ord(text[exc.start]):04X}), which UTF-8 cannot encode",
            field=field,
        ) from None
    return text
