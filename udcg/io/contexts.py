"""The toolkit's data model (one retrieved context per JSONL line) and its reader and writer.

A line holds one retrieved context for one query; the same ``qid`` may appear on several lines
(other runs, other permutations)::

    {"qid": "nq-17", "run": "bm25", "question": "...", "answers": ["..."],
     "subqueries": ["..."],
     "passages": [{"doc_id": "w-88", "text": "...", "score": 12.1, "relevant": true,
                   "abstain_prob": {"smollm2-135m": 0.031}, "covers": [true]}],
     "outcomes": {"smollm2-135m": {"answer": "...", "correct": true}}}

Only ``qid`` and ``passages`` are required when reading; every other field is checked for its
type when present, and the extraction helpers (:func:`relevance_matrix`, :func:`abstain_probs`,
:func:`correctness`, :func:`coverage_matrices`) fail with ``FILE:LINE: field 'x': ...`` when a
field a computation needs is missing.

Decisions:

* ``qid`` and ``doc_id`` may be JSON strings or integers; integers are converted to strings
  (``17`` and ``"17"`` are the same query). Booleans, floats and empty or blank strings are
  rejected.
* ``relevant`` is ``true``/``false`` (kept as ``bool``) or a finite number >= 0 (graded
  relevance, kept as ``float``). ``score`` and the ``abstain_prob`` values become ``float``.
* ``answer_prob`` maps a judge to the passage's answer likelihood (probability of an acceptable
  answer given question and passage, see :meth:`udcg.judge.base.Judge.answer_prob`), checked
  and written like ``abstain_prob``; the field name says which utility source produced it.
* ``outcomes`` maps a model name to an object; ``correct`` inside it is optional when reading
  (answers can be generated before they are judged) but must be a boolean when present;
  :func:`correctness` requires it.
* ``null`` is read as "absent" for every optional field; the writer omits absent fields, empty
  ``abstain_prob`` and empty ``outcomes``.
* Keys the model does not know are kept in ``extra`` (per context and per passage) and written
  back after the known keys, so a read -> write round trip keeps them.
* Q-CARE labels: ``passages[].covers`` entries may be ``null`` (a check without a usable
  answer); an outcome may hold the answer's ``claims`` and the checks named in
  :data:`ANSWER_LABELS` (and their ``_prob`` soft twins), validated against the numbers of
  claims, sub-queries and passages.
* Duplicate keys inside one JSON object follow :mod:`json` (the last one wins).
* A file without any context is an error; blank lines are skipped but still counted, so line
  numbers in messages match what an editor shows.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import numpy as np

from udcg.errors import UDCGInputError
from udcg.io.files import PathType, atomic_write, open_binary

__all__ = [
    "ANSWER_LABELS",
    "CONTEXT_KEYS",
    "JUDGE_PROB_KEYS",
    "PASSAGE_KEYS",
    "Context",
    "Passage",
    "abstain_probs",
    "answer_probs",
    "correctness",
    "coverage_matrices",
    "judge_probs",
    "read_contexts",
    "relevance_matrix",
    "write_contexts",
]

#: Known keys of a context line, in the order the writer emits them.
CONTEXT_KEYS = ("qid", "run", "question", "answers", "subqueries", "passages", "outcomes")
#: Known keys of a passage object, in the order the writer emits them.
PASSAGE_KEYS = ("doc_id", "text", "score", "relevant", "abstain_prob", "answer_prob", "covers")
#: Passage keys mapping a judge name to a probability (omitted by the writer when empty).
JUDGE_PROB_KEYS = ("abstain_prob", "answer_prob")


@dataclass(frozen=True, slots=True)
class Passage:
    """One retrieved passage; fields are ``None`` when the input did not give them."""

    doc_id: str | None = None
    text: str | None = None
    score: float | None = None
    relevant: bool | float | None = None
    abstain_prob: dict[str, float] = field(default_factory=dict)
    covers: list[bool | None] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    answer_prob: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: known keys in :data:`PASSAGE_KEYS` order, then ``extra``."""
        out: dict[str, Any] = {}
        for key in PASSAGE_KEYS:
            value = getattr(self, key)
            if value is not None and not (key in JUDGE_PROB_KEYS and not value):
                out[key] = value
        _merge_extra(out, self.extra, "passage")
        return out


@dataclass(frozen=True, slots=True)
class Context:
    """One retrieved context (a ranked list of passages) for one query.

    ``source`` is ``(file, line)`` of the line the context was read from, used only to locate
    errors; it does not take part in equality and is ``None`` for contexts built in memory.
    Fields after ``passages`` are keyword-only.
    """

    qid: str
    passages: list[Passage] = field(default_factory=list)
    _: KW_ONLY
    run: str | None = None
    question: str | None = None
    answers: list[str] | None = None
    subqueries: list[str] | None = None
    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    source: tuple[str, int] | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: known keys in :data:`CONTEXT_KEYS` order, then ``extra``."""
        out: dict[str, Any] = {}
        for key in CONTEXT_KEYS:
            if key == "passages":
                out[key] = [p.to_json() for p in self.passages]
                continue
            value = getattr(self, key)
            if value is not None and not (key == "outcomes" and not value):
                out[key] = value
        _merge_extra(out, self.extra, "context")
        return out

    @classmethod
    def from_json(
        cls, obj: Any, *, path: PathType | None = None, line: int | None = None
    ) -> Context:
        """Validate one parsed JSON line; errors name ``path``, ``line`` and the field."""
        return _parse_context(obj, _Where(path, line))


def _merge_extra(out: dict[str, Any], extra: Mapping[str, Any], what: str) -> None:
    for key, value in extra.items():
        if key in out or key in (CONTEXT_KEYS if what == "context" else PASSAGE_KEYS):
            raise ValueError(f"{what} extra key {key!r} clashes with a field of the same name")
        out[key] = value


# --------------------------------------------------------------------------------------------
# Validation (shared with udcg.io.reference)


class _Where:
    """Where a value came from: file, line and a prefix for field paths."""

    __slots__ = ("line", "path", "prefix")

    def __init__(self, path: PathType | None, line: int | None, prefix: str = "") -> None:
        self.path = None if path is None else str(path)
        self.line = line
        self.prefix = prefix

    def error(self, name: str, message: str) -> UDCGInputError:
        return UDCGInputError(message, path=self.path, line=self.line, field=self.prefix + name)

    def source(self) -> tuple[str, int] | None:
        return None if self.path is None or self.line is None else (self.path, self.line)


def _kind(value: Any) -> str:
    """The JSON name of a parsed value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {_short(value)}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _short(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _identifier(value: Any, name: str, where: _Where) -> str:
    """A non-empty string id; JSON integers are accepted and converted to strings."""
    if isinstance(value, str):
        if not value.strip():
            raise where.error(name, "must be a non-empty string, got an empty or blank string")
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise where.error(name, f"must be a non-empty string or an integer, got {_kind(value)}")


def _optional_str(value: Any, name: str, where: _Where) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise where.error(name, f"must be a string, got {_kind(value)}")


def _str_list(value: Any, name: str, where: _Where) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise where.error(name, f"must be a list of strings, got {_kind(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise where.error(f"{name}[{i}]", f"must be a string, got {_kind(item)}")
    return value


def _finite(value: Any, name: str, where: _Where, what: str = "a finite number") -> float:
    """A finite float from a JSON number (not a boolean)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise where.error(name, f"must be {what}, got {_kind(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise where.error(name, f"must be {what}, got {value!r}")
    return number


def _probability(value: Any, name: str, where: _Where) -> float:
    what = "a probability in [0, 1]"
    number = _finite(value, name, where, what)
    if not 0.0 <= number <= 1.0:
        raise where.error(name, f"must be {what}, got {value!r}")
    return number


def _relevance(value: Any, name: str, where: _Where) -> bool | float | None:
    if value is None or isinstance(value, bool):
        return value
    what = "true, false or a finite number >= 0"
    number = _finite(value, name, where, what)
    if number < 0:
        raise where.error(name, f"must be {what}, got {value!r}")
    return number


def _object(value: Any, name: str, where: _Where) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise where.error(name, f"must be an object, got {_kind(value)}")
    return value


def _abstain_prob(value: Any, name: str, where: _Where) -> dict[str, float]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise where.error(
            name, f"must be an object mapping model -> probability, got {_kind(value)}"
        )
    return {model: _probability(p, f"{name}.{model}", where) for model, p in value.items()}


def _covers(value: Any, name: str, where: _Where, n_sub: int | None) -> list[bool | None] | None:
    """Per sub-query coverage labels; ``null`` marks a check that gave no usable answer."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise where.error(name, f"must be a list of booleans, got {_kind(value)}")
    for i, item in enumerate(value):
        if item is not None and not isinstance(item, bool):
            raise where.error(
                f"{name}[{i}]", f"must be true or false (null: no usable answer), got {_kind(item)}"
            )
    if n_sub is not None and len(value) != n_sub:
        raise where.error(name, f"has {len(value)} entries but the context has {n_sub} subqueries")
    return value


def _outcomes(value: Any, name: str, where: _Where) -> dict[str, dict[str, Any]]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise where.error(name, f"must be an object mapping model -> outcome, got {_kind(value)}")
    for model, outcome in value.items():
        _object(outcome, f"{name}.{model}", where)
        correct = outcome.get("correct")
        if correct is not None and not isinstance(correct, bool):
            raise where.error(
                f"{name}.{model}.correct", f"must be true or false, got {_kind(correct)}"
            )
    return value


#: Q-CARE labels of one answer, inside ``outcomes[model]``: the answer's atomic ``claims`` and
#: the judge's (or a human's) hard checks, each with an optional soft twin ``<name>_prob``.
#: Axes: ``subquery_covered[s]``, ``claim_relevance[f][s]``, ``claim_support[f][chunk]``.
ANSWER_LABELS = ("subquery_covered", "claim_relevance", "claim_support")


def _label_grid(
    value: Any, name: str, where: _Where, shape: tuple[int | None, ...], soft: bool
) -> None:
    """A nested list of booleans (or probabilities when ``soft``) or nulls of ``shape``
    (``None`` = size not known here, not checked)."""
    if not shape:
        if value is None:
            return
        if soft:
            _probability(value, name, where)
        elif not isinstance(value, bool):
            raise where.error(name, f"must be true, false or null, got {_kind(value)}")
        return
    if not isinstance(value, list):
        raise where.error(name, f"must be a list, got {_kind(value)}")
    if shape[0] is not None and len(value) != shape[0]:
        raise where.error(name, f"has {len(value)} entries, expected {shape[0]}")
    for i, item in enumerate(value):
        _label_grid(item, f"{name}[{i}]", where, shape[1:], soft)


def _answer_labels(
    outcomes: dict[str, dict[str, Any]], where: _Where, n_sub: int | None, passages: Any
) -> dict[str, dict[str, Any]]:
    """Check the Q-CARE label fields of every outcome against the claims, sub-queries and
    passages of the context (shapes and value types); returns ``outcomes`` unchanged."""
    k = len(passages) if isinstance(passages, list) else None
    for model, outcome in outcomes.items():
        base = f"outcomes.{model}"
        claims = _str_list(outcome.get("claims"), f"{base}.claims", where)
        n_claims = None if claims is None else len(claims)
        shapes = {
            "subquery_covered": (n_sub,),
            "claim_relevance": (n_claims, n_sub),
            "claim_support": (n_claims, k),
        }
        for key, shape in shapes.items():
            for name, soft in ((key, False), (f"{key}_prob", True)):
                if outcome.get(name) is not None:
                    _label_grid(outcome[name], f"{base}.{name}", where, shape, soft)
    return outcomes


_PASSAGE_KEY_SET = frozenset(PASSAGE_KEYS)


def _parse_passage(obj: Any, name: str, where: _Where, n_sub: int | None) -> Passage:
    """One passage object. Common well-typed values take a fast path; anything else goes
    through the checking helpers, which build the field name only when they need it."""
    if type(obj) is not dict:
        _object(obj, name, where)
    extra = (
        {k: v for k, v in obj.items() if k not in _PASSAGE_KEY_SET}
        if obj.keys() - _PASSAGE_KEY_SET
        else {}
    )
    doc_id = obj.get("doc_id")
    if doc_id is not None and (type(doc_id) is not str or not doc_id.strip()):
        doc_id = _identifier(doc_id, f"{name}.doc_id", where)
    text = obj.get("text")
    if text is not None and type(text) is not str:
        _optional_str(text, f"{name}.text", where)
    score = obj.get("score")
    if score is not None and not (type(score) is float and math.isfinite(score)):
        score = _finite(score, f"{name}.score", where)
    relevant = obj.get("relevant")
    if relevant is not None and type(relevant) is not bool:
        relevant = _relevance(relevant, f"{name}.relevant", where)
    probs, answer_probs = (_judge_probs(obj, key, name, where) for key in JUDGE_PROB_KEYS)
    covers = obj.get("covers")
    if covers is not None and not (
        type(covers) is list
        and (n_sub is None or len(covers) == n_sub)
        and all(type(c) is bool for c in covers)
    ):
        _covers(covers, f"{name}.covers", where, n_sub)
    return Passage(doc_id, text, score, relevant, probs, covers, extra, answer_probs)


def _judge_probs(obj: dict[str, Any], key: str, name: str, where: _Where) -> dict[str, float]:
    """The ``judge -> probability`` map under ``key`` (fast path for well-typed values)."""
    probs = obj.get(key)
    if probs is None:
        return {}
    if type(probs) is not dict or not all(
        type(p) is float and 0.0 <= p <= 1.0 for p in probs.values()
    ):
        return _abstain_prob(probs, f"{name}.{key}", where)
    return probs


def _check_unique_ids(passages: Sequence[Passage], where: _Where, name: str = "passages") -> None:
    seen: dict[str, int] = {}
    for i, passage in enumerate(passages):
        if passage.doc_id is None:
            continue
        first = seen.setdefault(passage.doc_id, i)
        if first != i:
            raise where.error(
                f"{name}[{i}].doc_id",
                f"duplicate doc_id {_short(passage.doc_id)} (already at {name}[{first}])",
            )


def _passages(
    value: Any, where: _Where, n_sub: int | None, name: str = "passages"
) -> list[Passage]:
    if not isinstance(value, list):
        raise where.error(name, f"must be a list of passage objects, got {_kind(value)}")
    passages = [_parse_passage(p, f"{name}[{i}]", where, n_sub) for i, p in enumerate(value)]
    _check_unique_ids(passages, where, name)
    return passages


def _parse_context(obj: Any, where: _Where) -> Context:
    if not isinstance(obj, dict):
        raise UDCGInputError(
            f"expected a JSON object (one context per line), got {_kind(obj)}",
            path=where.path,
            line=where.line,
        )
    for key in ("qid", "passages"):
        if key not in obj:
            raise where.error(key, "missing (every context needs 'qid' and 'passages')")
    subqueries = _str_list(obj.get("subqueries"), "subqueries", where)
    return Context(
        qid=_identifier(obj["qid"], "qid", where),
        passages=_passages(obj["passages"], where, None if subqueries is None else len(subqueries)),
        run=_optional_str(obj.get("run"), "run", where),
        question=_optional_str(obj.get("question"), "question", where),
        answers=_str_list(obj.get("answers"), "answers", where),
        subqueries=subqueries,
        outcomes=_answer_labels(
            _outcomes(obj.get("outcomes"), "outcomes", where),
            where,
            None if subqueries is None else len(subqueries),
            obj["passages"],
        ),
        extra={k: v for k, v in obj.items() if k not in CONTEXT_KEYS},
        source=where.source(),
    )


# --------------------------------------------------------------------------------------------
# Reading and writing JSONL


def _lines(path: PathType) -> Iterator[tuple[int, str]]:
    """``(line_number, text)`` for every line, decoding UTF-8 per line so errors are located."""
    line_no = 0
    try:
        with open_binary(path) as handle:
            for line_no, raw in enumerate(handle, start=1):
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise UDCGInputError(
                        f"not valid UTF-8 (byte {exc.start + 1} of the line)",
                        path=path,
                        line=line_no,
                    ) from None
                if line_no == 1 and text.startswith("\ufeff"):
                    text = text[1:]
                yield line_no, text
    except (OSError, EOFError, zlib.error) as exc:
        raise UDCGInputError(f"cannot read the file: {exc}", path=path, line=line_no + 1) from None


def read_contexts(path: PathType) -> Iterator[Context]:
    """Stream the contexts of a JSONL file (gzip detected by content), one line at a time.

    A missing path fails at once; everything else (malformed JSON, invalid fields, an empty
    file) fails while iterating, with ``FILE:LINE: field 'x': ...``, once the reader reaches
    the offending line. Lines before it have been yielded already.
    """
    open_binary(path).close()  # missing file or directory: fail now, not at the first next()
    return _read_contexts(path)


def _read_contexts(path: PathType) -> Iterator[Context]:
    count = 0
    for line_no, text in _lines(path):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UDCGInputError(
                f"malformed JSON: {exc.msg} (column {exc.colno})", path=path, line=line_no
            ) from None
        yield _parse_context(obj, _Where(path, line_no))
        count += 1
    if count == 0:
        raise UDCGInputError("empty file: no contexts", path=path)


def _numpy_scalar(value: Any) -> Any:
    """JSON for numpy scalars (``np.bool_``, ``np.int64``, ``np.float32``...) built into
    contexts by user code; anything else is not JSON data."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def write_contexts(path: PathType, contexts: Iterable[Context]) -> int:
    """Write ``contexts`` as JSONL (one object per line, UTF-8, keys in a fixed order).

    The file is replaced atomically; a ``.gz`` suffix compresses it. numpy scalars are written
    as the Python values they hold. NaN or infinite numbers raise ``ValueError`` and leave any
    existing file untouched. Returns the number written.
    """
    count = 0
    with atomic_write(path) as handle:
        for ctx in contexts:
            line = json.dumps(
                ctx.to_json(), ensure_ascii=False, allow_nan=False, default=_numpy_scalar
            )
            handle.write(line)
            handle.write("\n")
            count += 1
    return count


# --------------------------------------------------------------------------------------------
# Arrays for metrics


def _missing(ctx: Context, index: int, name: str, hint: str = "") -> UDCGInputError:
    path, line = ctx.source if ctx.source is not None else (None, None)
    where = (
        f"qid {_short(ctx.qid)}"
        if ctx.source is not None
        else f"context {index}, qid {_short(ctx.qid)}"
    )
    if ctx.run is not None:
        where += f", run {_short(ctx.run)}"
    return UDCGInputError(f"missing ({where}){hint}", path=path, line=line, field=name)


def relevance_matrix(contexts: Iterable[Context]) -> list[np.ndarray]:
    """Per context, a float64 array of passage relevance (``true`` -> 1.0, graded as given).

    Every passage needs ``relevant``; the first one without it raises
    :class:`~udcg.errors.UDCGInputError` naming ``passages[i].relevant``.
    """
    out = []
    for n, ctx in enumerate(contexts):
        values = [p.relevant for p in ctx.passages]
        if None in values:
            raise _missing(ctx, n, f"passages[{values.index(None)}].relevant")
        out.append(np.array(values, dtype=np.float64))
    return out


def abstain_probs(contexts: Iterable[Context], model: str) -> list[np.ndarray]:
    """Per context, a float64 array of P(abstain) of ``model`` for each passage.

    Every passage needs ``abstain_prob[model]``; the first one without it raises
    :class:`~udcg.errors.UDCGInputError` naming ``passages[i].abstain_prob.<model>``.
    """
    return judge_probs(contexts, model, "abstain_prob")


def answer_probs(contexts: Iterable[Context], model: str) -> list[np.ndarray]:
    """Per context, a float64 array of ``model``'s answer likelihood for each passage.

    Every passage needs ``answer_prob[model]``; the first one without it raises
    :class:`~udcg.errors.UDCGInputError` naming ``passages[i].answer_prob.<model>``.
    """
    return judge_probs(contexts, model, "answer_prob")


def judge_probs(contexts: Iterable[Context], model: str, key: str) -> list[np.ndarray]:
    """Per context, a float64 array of ``passage.<key>[model]`` (``key`` in
    :data:`JUDGE_PROB_KEYS`); a missing value names ``passages[i].<key>.<model>``."""
    out = []
    for n, ctx in enumerate(contexts):
        try:
            out.append(np.array([getattr(p, key)[model] for p in ctx.passages], dtype=np.float64))
        except KeyError:
            i = next(i for i, p in enumerate(ctx.passages) if model not in getattr(p, key))
            models = sorted(getattr(ctx.passages[i], key))
            hint = f"; models present: {', '.join(models)}" if models else ""
            raise _missing(ctx, n, f"passages[{i}].{key}.{model}", hint) from None
    return out


def correctness(contexts: Iterable[Context], model: str) -> np.ndarray:
    """A float64 vector (1.0 correct, 0.0 wrong) of ``outcomes[model].correct``, one per context.

    A context without it raises :class:`~udcg.errors.UDCGInputError` naming
    ``outcomes.<model>.correct``.
    """
    out = []
    for n, ctx in enumerate(contexts):
        value = ctx.outcomes.get(model, {}).get("correct")
        if value is None:
            models = sorted(m for m, o in ctx.outcomes.items() if o.get("correct") is not None)
            hint = f"; models with a judged outcome: {', '.join(models)}" if models else ""
            raise _missing(ctx, n, f"outcomes.{model}.correct", hint)
        out.append(value)
    return np.array(out, dtype=np.float64)


def coverage_matrices(contexts: Iterable[Context]) -> list[np.ndarray]:
    """Per context, a boolean ``[k, n_subqueries]`` array: passage i covers sub-query s.

    Needs ``subqueries`` on the context and ``covers`` on every passage, without ``null``
    entries (checks that gave no usable answer).
    """
    out = []
    for n, ctx in enumerate(contexts):
        if ctx.subqueries is None:
            raise _missing(ctx, n, "subqueries")
        rows = [p.covers for p in ctx.passages]
        if None in rows:
            raise _missing(ctx, n, f"passages[{rows.index(None)}].covers")
        unanswered = [i for i, row in enumerate(rows) if None in row]
        if unanswered:
            raise _missing(
                ctx, n, f"passages[{unanswered[0]}].covers", ": a check without a usable answer"
            )
        matrix = np.zeros((len(rows), len(ctx.subqueries)), dtype=bool)
        if rows:
            matrix[:] = rows
        out.append(matrix)
    return out
