"""Passage utilities per (query, document), for the UDCG measures of a run.

What a value is (``utility_field``), following ``dataset=trec`` and the utility sources
(:mod:`udcg.io.joins.utility_sources`):

* ``abstain_prob``: the judge's P(abstain), source ``abstention``, u = 1 - p (a TSV file's
  default);
* ``answer_prob``: the judge's answer likelihood, source ``answer_likelihood``, u = p;
* ``utility``: the utility u itself.

Every value is in [0, 1]. Inputs:

* a dict ``{qid: {doc_id: value}}``, with ``utility_field`` saying what its values are (a
  number alone does not say it, and a wrong guess turns u into 1 - u: without it the dict is
  refused, naming the three choices);
* a TSV file, ``qid doc_id value`` per line, columns separated by spaces or tabs as in TREC
  files (``abstain_prob`` unless ``utility_field`` says otherwise);
* a JSONL file (its first non-blank character is ``{``), one ``{"qid": ..., "doc_id": ...,
  FIELD: value}`` per line, FIELD one of the three above: the line says what its value is. With
  ``utility_field`` every line must hold that key; without, each line holds exactly one of the
  three and all lines the same one.
* an annotated contexts JSONL (its first line has a ``passages`` key: what ``udcg contexts``
  then ``udcg annotate`` write), read with a ``judge_key``: each passage's
  ``abstain_prob[judge_key]`` (or ``answer_prob[judge_key]`` with ``utility_field``) is the
  value of (``qid``, ``doc_id``). Without ``judge_key`` the file must hold one judge's values;
  without ``utility_field`` one of the two fields (both: an error naming them). A passage
  without the judge's value is left out (a top-k document without one is the evaluation's
  located error); a (query, document) repeated with another value is an error, with the same
  value (contexts of two runs in one file) it counts once.

Files may be gzip-compressed (detected by content), ``-`` reads standard input, blank lines are
skipped. A malformed line or a repeated (query, document) is ``FILE:LINE: field 'x': ...``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from os import PathLike
from typing import Any

import numpy as np
import pyarrow as pa

from udcg.errors import UDCGInputError
from udcg.io.arrow import to_numpy
from udcg.io.contexts.checks import Where, identifier, json_problem, kind, probability
from udcg.io.contexts.model import JUDGE_PROB_KEYS
from udcg.io.files import PathType, numbered_lines, read_once
from udcg.io.formats.trec import columns_from_dict, read_columns
from udcg.io.joins.trec_contexts import read_utilities
from udcg.io.joins.utility_sources import SOURCES, UtilitySource
from udcg.io.manifests import values_made_by

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
    ``source`` the file it was read from (``None`` for a dict), ``judge`` the judge key of an
    annotated contexts file (``None`` where the file names none) and ``fingerprint`` that
    judge's fingerprint where the file's manifest records it
    (:func:`udcg.io.manifests.recorded_judges`).

    Examples:
        >>> u = utilities_from_dict({"q1": {"d1": 0.25, "d2": 1.0}}, "abstain_prob")
        >>> len(u), u.values.tolist(), u.field, u.source
        (2, [0.75, 0.0], 'abstain_prob', None)
    """

    qids: pa.Array  # strings, plain or dictionary-encoded
    doc_ids: pa.Array
    values: np.ndarray  # float64 u
    field: str
    source: str | None = None
    judge: str | None = None  # the judge key, when the file names it (annotated contexts)
    fingerprint: str | None = None  # that judge's fingerprint, when a manifest records it

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
    """The utility source whose judge probability ``utility_field`` is (None for ``utility``).

    Examples:
        >>> source_of("answer_prob").name, source_of("utility")
        ('answer_likelihood', None)
    """
    return next((s for s in SOURCES.values() if s.field == utility_field), None)


def _formula(utility_field: str) -> str:
    """How u follows from a value of ``utility_field``, in words."""
    source = source_of(utility_field)
    return "the utility u itself" if source is None else source.formula


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


def _json_objects(path: PathType) -> Iterator[tuple[dict[str, Any], Where]]:
    """Each non-blank line of a JSONL file as a JSON object with its location; anything else
    is an error at its line."""
    for number, text in numbered_lines(path):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise UDCGInputError(json_problem(exc), path=path, line=number) from None
        if not isinstance(obj, dict):
            raise UDCGInputError(f"expected a JSON object, got {kind(obj)}", path=path, line=number)
        yield obj, Where(path, number)


def _read_jsonl(path: PathType, utility_field: str | None) -> Utilities:
    qids: list[str] = []
    doc_ids: list[str] = []
    values: list[float] = []
    seen: set[tuple[str, str]] = set()
    file_field: str | None = None
    for obj, where in _json_objects(path):
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


def _file_kind(path: PathType) -> str:
    """``tsv``, ``jsonl`` or ``contexts``: the first non-blank line starts with ``{`` for JSONL;
    a JSONL first line with a ``passages`` key makes a contexts file."""
    for _, text in numbered_lines(path):
        if not text.strip():
            continue
        if not text.lstrip().startswith("{"):
            return "tsv"
        try:
            first = json.loads(text)
        except (ValueError, RecursionError):
            return "jsonl"  # the JSONL reader words the error at its line
        return "contexts" if isinstance(first, dict) and "passages" in first else "jsonl"
    return "tsv"


def _context_values(
    path: PathType,
) -> tuple[list[tuple[str, str, str, str, float, Where]], dict[str, set[str]]]:
    """Every judge value of every passage: ``(qid, doc_id, field, key, value, where)``, and
    which judge keys each field holds."""
    found: list[tuple[str, str, str, str, float, Where]] = []
    keys: dict[str, set[str]] = {field: set() for field in JUDGE_PROB_KEYS}
    for obj, where in _json_objects(path):
        qid = identifier(obj.get("qid"), "qid", where)
        passages = obj.get("passages")
        if not isinstance(passages, list):
            raise where.error("passages", f"expected a list, got {kind(passages)}")
        for i, passage in enumerate(passages):
            at = Where(path, where.line, f"passages[{i}].")
            if not isinstance(passage, dict):
                raise where.error(f"passages[{i}]", f"expected a JSON object, got {kind(passage)}")
            doc_id = identifier(passage.get("doc_id"), "doc_id", at)
            for field in JUDGE_PROB_KEYS:
                values = passage.get(field)
                if values is None:
                    continue
                if not isinstance(values, dict):
                    raise at.error(field, f"expected a JSON object, got {kind(values)}")
                for key, value in values.items():
                    p = probability(value, f"{field}.{key}", at)
                    found.append((qid, doc_id, field, key, p, at))
                    keys[field].add(key)
    return found, keys


def _pick(
    keys: dict[str, set[str]], utility_field: str | None, judge_key: str | None, path: PathType
) -> tuple[str, str]:
    """The (field, judge key) to read from a contexts file, or the error saying what it holds."""
    if utility_field == "utility":
        raise UDCGInputError(
            "a contexts file holds judge probabilities: utility_field abstain_prob or answer_prob",
            path=path,
            field="utility_field",
        )
    held = ", ".join(f"{field}[{key}]" for field in JUDGE_PROB_KEYS for key in sorted(keys[field]))
    fields = [utility_field] if utility_field else list(JUDGE_PROB_KEYS)
    if judge_key is None:
        candidates = {key for field in fields for key in keys[field]}
        if len(candidates) != 1:
            what = f"judges {held}" if candidates else "no judge values"
            raise UDCGInputError(
                f"holds {what}; a judge key (--judge-key, judge_key=) picks one",
                path=path,
                field="judge_key",
            )
        judge_key = candidates.pop()
    fields_asked, fields = fields, [field for field in fields if judge_key in keys[field]]
    if not fields:
        wanted = " or ".join(f"{field}[{judge_key}]" for field in fields_asked)
        raise UDCGInputError(
            f"no passage holds {wanted} (it holds {held or 'no judge values'})",
            path=path,
            field="judge_key",
        )
    if len(fields) > 1:
        raise UDCGInputError(
            f"holds both abstain_prob[{judge_key}] and answer_prob[{judge_key}]; "
            "utility_field (--utility) picks one",
            path=path,
            field="utility_field",
        )
    return fields[0], judge_key


def _step(field: str) -> str:
    """The annotate step that writes the passage field ``field``."""
    return next(source.step for source in SOURCES.values() if source.field == field)


def _read_contexts(path: PathType, utility_field: str | None, judge_key: str | None) -> Utilities:
    found, keys = _context_values(path)
    field, judge_key = _pick(keys, utility_field, judge_key, path)
    values: dict[tuple[str, str], float] = {}
    for qid, doc_id, f, key, p, at in found:
        if f != field or key != judge_key:
            continue
        earlier = values.setdefault((qid, doc_id), p)
        if earlier != p:
            raise at.error(
                f"{field}.{key}",
                f"{p!r} for document {doc_id!r} of query {qid!r}, which an earlier line "
                f"gives {earlier!r}",
            )
    pairs = list(values)
    u = _to_utility(np.fromiter(values.values(), np.float64, len(values)), field)
    return Utilities(
        pa.array([q for q, _ in pairs], pa.string()),
        pa.array([d for _, d in pairs], pa.string()),
        u,
        field,
        str(path),
        judge_key,
        values_made_by(path, judge_key, _step(field)),
    )


def read_utility_file(
    path: PathType, utility_field: str | None = None, judge_key: str | None = None
) -> Utilities:
    """Utilities from a TSV, JSONL or annotated contexts file (see the module docstring);
    ``judge_key`` picks a judge's values in a contexts file (only there). The kind is told by
    the first line, so a pipe is read once, whole, before it is parsed.

    Examples:
        A TSV file holds P(abstain) by default: u = 1 - p:

        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (Path(folder) / "u.tsv").write_text("q1 d1 0.25\\nq1 d2 0.5\\n")
        ...     u = read_utility_file(Path(folder) / "u.tsv")
        >>> u.doc_ids.to_pylist(), u.values.tolist(), u.field
        (['d1', 'd2'], [0.75, 0.5], 'abstain_prob')
    """
    check_field(utility_field)
    path = read_once(path)
    file_kind = _file_kind(path)
    if judge_key is not None and file_kind != "contexts":
        raise UDCGInputError(
            "a judge key reads an annotated contexts file (lines with 'passages'); "
            f"this is a {file_kind.upper()} utilities file",
            path=path,
            field="judge_key",
        )
    if file_kind == "contexts":
        return _read_contexts(path, utility_field, judge_key)
    if file_kind == "jsonl":
        return _read_jsonl(path, utility_field)
    return _read_tsv(path, utility_field or DEFAULT_FIELD)


def utilities_from_dict(
    data: Mapping[str, Mapping[str, float]], utility_field: str | None = None
) -> Utilities:
    """Utilities from ``{qid: {doc_id: value}}``, values of ``utility_field``, which must be
    given: a plain number could be any of :data:`UTILITY_FIELDS`.

    Examples:
        >>> utilities_from_dict({"q1": {"d1": 0.4}}, "answer_prob").values.tolist()
        [0.4]
        >>> try:  # a number alone: is u = p or u = 1 - p?
        ...     utilities_from_dict({"q1": {"d1": 0.4}})
        ... except UDCGInputError as error:
        ...     print(error.field, "-", error.reason.split(": pass")[0])
        utility_field - a dict {qid: {doc_id: value}} does not say what its values are
    """
    field = check_field(utility_field)
    if field is None:
        choices = ", ".join(f"{f!r} ({_formula(f)})" for f in UTILITY_FIELDS)
        raise UDCGInputError(
            f"a dict {{qid: {{doc_id: value}}}} does not say what its values are: pass "
            f"utility_field= one of {choices}",
            field="utility_field",
        )
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
    (then ``utility_field``, if given, must be what it holds).

    Examples:
        >>> u = as_utilities({"q1": {"d1": 0.25}}, "utility")
        >>> as_utilities(u) is u, u.values.tolist()
        (True, [0.25])
    """
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
