"""Passage utilities per (query, document), for the UDCG measures of a run.

What a value is (``utility_field``), following ``dataset=trec`` and the utility sources
(:mod:`udcg.io.utility_sources`):

* ``abstain_prob`` (the default): the judge's P(abstain), source ``abstention``, u = 1 - p;
* ``answer_prob``: the judge's answer likelihood, source ``answer_likelihood``, u = p;
* ``utility``: the utility u itself.

Every value is in [0, 1]. Inputs:

* a dict ``{qid: {doc_id: value}}`` (``abstain_prob`` unless ``utility_field`` says otherwise);
* a TSV file, ``qid doc_id value`` per line, columns separated by spaces or tabs as in TREC
  files (``abstain_prob`` unless ``utility_field`` says otherwise);
* a JSONL file (its first non-blank character is ``{``), one ``{"qid": ..., "doc_id": ...,
  FIELD: value}`` per line, FIELD one of the three above: the line says what its value is. With
  ``utility_field`` every line must hold that key; without, each line holds exactly one of the
  three and all lines the same one.

Files may be gzip-compressed (detected by content), ``-`` reads standard input, blank lines are
skipped. A malformed line or a repeated (query, document) is ``FILE:LINE: field 'x': ...``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from os import PathLike

import numpy as np
import pyarrow as pa

from udcg.errors import UDCGInputError
from udcg.io.arrow import to_numpy
from udcg.io.context_checks import Where, identifier, json_problem, kind, probability
from udcg.io.context_model import JUDGE_PROB_KEYS
from udcg.io.files import PathType, numbered_lines
from udcg.io.trec_contexts import read_utilities
from udcg.io.trec_files import columns_from_dict, read_columns
from udcg.io.utility_sources import SOURCES, UtilitySource

__all__ = [
    "DEFAULT_FIELD",
    "UTILITY_FIELDS",
    "Utilities",
    "as_utilities",
    "read_utility_file",
    "source_of",
    "utilities_from_dict",
]

#: What a value can be: a judge probability of a utility source, or the utility itself.
UTILITY_FIELDS = (*JUDGE_PROB_KEYS, "utility")
DEFAULT_FIELD = "abstain_prob"

UtilitiesLike = Mapping[str, Mapping[str, float]] | str | PathLike[str]


@dataclass(frozen=True, eq=False)
class Utilities:
    """One utility ``u`` in [0, 1] per (query, document); ``field`` is what the input held,
    ``source`` the file it was read from (``None`` for a dict)."""

    qids: pa.Array  # strings, plain or dictionary-encoded
    doc_ids: pa.Array
    values: np.ndarray  # float64 u
    field: str
    source: str | None = None

    def __len__(self) -> int:
        return len(self.values)


def check_field(utility_field: str | None) -> str | None:
    """``utility_field`` if it is None or one of :data:`UTILITY_FIELDS`."""
    if utility_field is not None and utility_field not in UTILITY_FIELDS:
        raise UDCGInputError(
            f"expected one of {', '.join(UTILITY_FIELDS)}, got {utility_field!r}",
            field="utility_field",
        )
    return utility_field


def source_of(utility_field: str) -> UtilitySource | None:
    """The utility source whose judge probability ``utility_field`` is (None for ``utility``)."""
    return next((s for s in SOURCES.values() if s.field == utility_field), None)


def _to_utility(values: np.ndarray, utility_field: str) -> np.ndarray:
    source = source_of(utility_field)
    return values if source is None else source.from_probs(values)


def _in_unit_interval(values: np.ndarray) -> bool:
    return bool(((values >= 0.0) & (values <= 1.0)).all())  # NaN fails both


def _has_repeated_pair(qids: pa.DictionaryArray, doc_ids: pa.DictionaryArray) -> bool:
    keys = to_numpy(qids.indices).astype(np.int64) * len(doc_ids.dictionary)
    keys += to_numpy(doc_ids.indices)
    keys.sort()
    return bool((keys[1:] == keys[:-1]).any())


def _read_tsv(path: PathType, utility_field: str) -> Utilities:
    """``qid doc_id value`` lines, parsed by Arrow; when a value is out of range or a pair
    repeats, the line reader of ``dataset=trec`` words the error at its line."""
    qids, doc_ids, values = read_columns(path, ("qid", "doc_id", "p"), "p", pa.float64())
    values = values.astype(np.float64, copy=False)
    if not _in_unit_interval(values) or _has_repeated_pair(qids, doc_ids):
        read_utilities(path)  # raises the located error
        raise UDCGInputError("a value outside [0, 1] or a repeated pair", path=path)
    return Utilities(qids, doc_ids, _to_utility(values, utility_field), utility_field, str(path))


def _line_field(obj: dict, utility_field: str | None, where: Where) -> str:
    """The key holding ``obj``'s value: ``utility_field``, or the one of UTILITY_FIELDS it has."""
    if utility_field is not None:
        if utility_field not in obj:
            raise where.error(utility_field, f"missing (utility_field={utility_field})")
        return utility_field
    held = [key for key in UTILITY_FIELDS if key in obj]
    if len(held) != 1:
        found = ", ".join(held) if held else "none"
        raise UDCGInputError(
            f"expected exactly one of {', '.join(UTILITY_FIELDS)}, found {found} "
            "(utility_field= picks one)",
            path=where.path,
            line=where.line,
        )
    return held[0]


def _read_jsonl(path: PathType, utility_field: str | None) -> Utilities:
    qids: list[str] = []
    doc_ids: list[str] = []
    values: list[float] = []
    seen: set[tuple[str, str]] = set()
    file_field: str | None = None
    for number, text in numbered_lines(path):
        if not text.strip():
            continue
        where = Where(path, number)
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise UDCGInputError(json_problem(exc), path=path, line=number) from None
        if not isinstance(obj, dict):
            raise UDCGInputError(f"expected a JSON object, got {kind(obj)}", path=path, line=number)
        field = _line_field(obj, utility_field, where)
        if file_field is not None and field != file_field:
            raise where.error(field, f"earlier lines hold {file_field}; a file holds one kind")
        file_field = field
        pair = (
            identifier(obj.get("qid"), "qid", where),
            identifier(obj.get("doc_id"), "doc_id", where),
        )
        value = probability(obj[field], field, where)
        if pair in seen:
            raise where.error("doc_id", f"duplicate document {pair[1]!r} for query {pair[0]!r}")
        seen.add(pair)
        qids.append(pair[0])
        doc_ids.append(pair[1])
        values.append(value)
    if file_field is None:
        raise UDCGInputError("empty file: no utilities", path=path)
    u = _to_utility(np.asarray(values, dtype=np.float64), file_field)
    return Utilities(
        pa.array(qids, pa.string()), pa.array(doc_ids, pa.string()), u, file_field, str(path)
    )


def _is_jsonl(path: PathType) -> bool:
    """Whether the first non-blank line of ``path`` starts with ``{``."""
    for _, text in numbered_lines(path):
        if text.strip():
            return text.lstrip().startswith("{")
    return False


def read_utility_file(path: PathType, utility_field: str | None = None) -> Utilities:
    """Utilities from a TSV or JSONL file (see the module docstring)."""
    check_field(utility_field)
    if _is_jsonl(path):
        return _read_jsonl(path, utility_field)
    return _read_tsv(path, utility_field or DEFAULT_FIELD)


def utilities_from_dict(
    data: Mapping[str, Mapping[str, float]], utility_field: str | None = None
) -> Utilities:
    """Utilities from ``{qid: {doc_id: value}}``, values of ``utility_field`` (default
    ``abstain_prob``)."""
    field = check_field(utility_field) or DEFAULT_FIELD
    qids, doc_ids, values = columns_from_dict(data, field, "utilities")
    probs = np.asarray(values, dtype=np.float64)
    if not _in_unit_interval(probs):
        i = int(np.argmin((probs >= 0.0) & (probs <= 1.0)))
        raise UDCGInputError(
            f"query {qids[i].as_py()!r}, document {doc_ids[i].as_py()!r}: "
            f"{field} {values[i]!r} is not in [0, 1]",
            field="utilities",
        )
    return Utilities(qids, doc_ids, _to_utility(probs, field), field)


def as_utilities(
    utilities: Utilities | UtilitiesLike, utility_field: str | None = None
) -> Utilities:
    """``utilities`` as :class:`Utilities`: read from a file, converted from a dict, or as given
    (then ``utility_field``, if given, must be what it holds)."""
    if isinstance(utilities, Utilities):
        if check_field(utility_field) not in (None, utilities.field):
            raise UDCGInputError(
                f"the utilities hold {utilities.field}, not {utility_field}",
                field="utility_field",
            )
        return utilities
    if isinstance(utilities, Mapping):
        return utilities_from_dict(utilities, utility_field)
    return read_utility_file(utilities, utility_field)
