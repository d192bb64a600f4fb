"""The toolkit's data model: one retrieved context for one query, and its JSON form.

A context, as one JSON object (one line of a contexts JSONL file); the same ``qid`` may
appear in several (other runs, other permutations)::

    {"qid": "nq-17", "run": "bm25", "question": "...", "answers": ["..."],
     "subqueries": ["..."],
     "passages": [{"doc_id": "w-88", "text": "...", "score": 12.1, "relevant": true,
                   "abstain_prob": {"smollm2-135m": 0.031}, "covers": [true]}],
     "outcomes": {"smollm2-135m": {"answer": "...", "correct": true}}}

Only ``qid`` and ``passages`` are required by :meth:`Context.from_json`; every other field is
checked for its type when present (:mod:`udcg.io.contexts.checks`), and the extraction helpers
of :mod:`udcg.io.contexts.arrays` fail with ``FILE:LINE: field 'x': ...`` when a field a
computation needs is missing.

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
  :func:`udcg.io.contexts.arrays.correctness` requires it.
* ``null`` is read as "absent" for every optional field; :meth:`Context.to_json` omits absent
  fields, empty ``abstain_prob`` and empty ``outcomes``.
* Keys the model does not know are kept in ``extra`` (per context and per passage) and written
  back after the known keys, so a read -> write round trip keeps them.
* Q-CARE labels: ``passages[].covers`` entries may be ``null`` (a check without a usable
  answer); an outcome may hold the answer's ``claims`` and the checks named in
  :data:`~udcg.io.contexts.checks.ANSWER_LABELS` (and their ``_prob`` soft twins), validated
  against the numbers of claims, sub-queries and passages. ``passages[].covers_prob`` (soft
  or fractional coverage in [0, 1], or ``null``, one per sub-query) is checked the same way
  and kept, as read, in the passage's ``extra``.
* A multi-turn query: ``conversation``, a list of turns ``{"role": "user" | "assistant",
  "content": ...}`` ending with the user turn that ``question`` holds, is checked
  (:func:`~udcg.io.contexts.checks.conversation`) and kept, as read, in the context's
  ``extra`` (:mod:`udcg.qcare.conversation`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from udcg.errors import UDCGInputError
from udcg.io.contexts import checks as check
from udcg.io.contexts.checks import Where
from udcg.io.files import PathType

__all__ = [
    "CONTEXT_KEYS",
    "JUDGE_PROB_KEYS",
    "PASSAGE_KEYS",
    "Context",
    "Passage",
    "by_key",
    "parse_context",
]

#: Known keys of a context line, in the order the writer emits them.
CONTEXT_KEYS = ("qid", "run", "question", "answers", "subqueries", "passages", "outcomes")
#: Known keys of a passage object, in the order the writer emits them.
PASSAGE_KEYS = ("doc_id", "text", "score", "relevant", "abstain_prob", "answer_prob", "covers")
#: Passage keys mapping a judge name to a probability (omitted by the writer when empty).
JUDGE_PROB_KEYS = ("abstain_prob", "answer_prob")


@dataclass(frozen=True, slots=True)
class Passage:
    """One retrieved passage; fields are ``None`` when the input did not give them.

    Examples:
        >>> Passage(doc_id="d1", relevant=True, abstain_prob={"llama3": 0.2}).to_json()
        {'doc_id': 'd1', 'relevant': True, 'abstain_prob': {'llama3': 0.2}}
    """

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

    Examples:
        >>> ctx = Context("q1", [Passage("d1", relevant=True)], run="bm25")
        >>> ctx.to_json()
        {'qid': 'q1', 'run': 'bm25', 'passages': [{'doc_id': 'd1', 'relevant': True}]}
        >>> Context.from_json({"qid": 17, "passages": [{"doc_id": "d1"}]}).qid
        '17'
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

    def location(self) -> dict[str, Any]:
        """``{"path": file, "line": line}`` of the line the context was read from (both None
        for a context built in memory), ready to pass to :class:`UDCGInputError`."""
        path, line = self.source if self.source is not None else (None, None)
        return {"path": path, "line": line}

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
        return parse_context(obj, Where(path, line))


def by_key(
    contexts: Iterable[Context], key: Callable[[Context], Hashable], what: str, why: str = ""
) -> dict[Hashable, Context]:
    """``{key(context): context}``, refusing a second context with a key already seen (``what``
    describes the key and ``why`` the harm in the error, which names the line of the first).

    Examples:
        >>> two = [Context("q1", run="bm25"), Context("q1", run="bm25")]
        >>> by_key(two, lambda c: (c.qid, c.run), "the same qid and run")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'qid': a second context with the same qid and run (...)
    """
    out: dict[Hashable, Context] = {}
    for ctx in contexts:
        name = key(ctx)
        first = out.get(name)
        if first is not None:  # a second context with the key (or the same one again)
            line = first.location()["line"]
            at = f", first at line {line}" if line is not None else ""
            raise UDCGInputError(
                f"a second context with {what} (qid {ctx.qid!r}, run {ctx.run!r}{at})"
                + (f": {why}" if why else ""),
                field="qid",
                **ctx.location(),
            )
        out[name] = ctx
    return out


def distinct_contexts(contexts: Iterable[Context]) -> list[Context]:
    """``contexts`` in order, refusing a second context with the qid, run and passages (doc id
    and text) of one before it (:func:`by_key`): a mean over them would count it twice.

    Examples:
        >>> one = Context("q1", [Passage("d1", text="A")])
        >>> len(distinct_contexts([one, Context("q1", [Passage("d2", text="A")])]))
        2
        >>> distinct_contexts([one, one])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'qid': a second context with the same qid, run and ...
    """
    return list(
        by_key(
            contexts,
            lambda c: (c.qid, c.run, tuple((p.doc_id, p.text) for p in c.passages)),
            "the same qid, run and passages",
            "it would count twice in the means",
        ).values()
    )


def _merge_extra(out: dict[str, Any], extra: Mapping[str, Any], what: str) -> None:
    for key, value in extra.items():
        if key in out or key in (CONTEXT_KEYS if what == "context" else PASSAGE_KEYS):
            raise ValueError(f"{what} extra key {key!r} clashes with a field of the same name")
        out[key] = value


_PASSAGE_KEY_SET = frozenset(PASSAGE_KEYS)


def _parse_passage(obj: Any, name: str, where: Where, n_sub: int | None) -> Passage:
    """One passage object. Common well-typed values take a fast path; anything else goes
    through the checks, which build the field name only when they need it."""
    if type(obj) is not dict:
        check.json_object(obj, name, where)
    extra = (
        {k: v for k, v in obj.items() if k not in _PASSAGE_KEY_SET}
        if obj.keys() - _PASSAGE_KEY_SET
        else {}
    )
    doc_id = obj.get("doc_id")
    if doc_id is not None and (type(doc_id) is not str or not doc_id.strip()):
        doc_id = check.identifier(doc_id, f"{name}.doc_id", where)
    text = obj.get("text")
    if text is not None and type(text) is not str:
        check.optional_str(text, f"{name}.text", where)
    score = obj.get("score")
    if score is not None and not (type(score) is float and math.isfinite(score)):
        score = check.finite(score, f"{name}.score", where)
    relevant = obj.get("relevant")
    if relevant is not None and type(relevant) is not bool:
        relevant = check.relevance(relevant, f"{name}.relevant", where)
    probs, answer_probs = (_judge_probs(obj, key, name, where) for key in JUDGE_PROB_KEYS)
    covers = obj.get("covers")
    if covers is not None and not (
        type(covers) is list
        and (n_sub is None or len(covers) == n_sub)
        and all(type(c) is bool for c in covers)
    ):
        check.covers(covers, f"{name}.covers", where, n_sub)
    if extra and "covers_prob" in extra:
        check.covers_prob(extra["covers_prob"], f"{name}.covers_prob", where, n_sub)
    return Passage(doc_id, text, score, relevant, probs, covers, extra, answer_probs)


def _judge_probs(obj: dict[str, Any], key: str, name: str, where: Where) -> dict[str, float]:
    """The ``judge -> probability`` map under ``key`` (fast path for well-typed values)."""
    probs = obj.get(key)
    if probs is None:
        return {}
    if type(probs) is not dict or not all(
        type(p) is float and 0.0 <= p <= 1.0 for p in probs.values()
    ):
        return check.prob_map(probs, f"{name}.{key}", where)
    return probs


def parse_context(obj: Any, where: Where) -> Context:
    """A :class:`Context` from one parsed JSON line; errors are located by ``where``.

    Examples:
        A graded label becomes a float, an unknown key is kept in ``extra``:

        >>> line = {"qid": "q1", "passages": [{"relevant": 2}], "note": "x"}
        >>> ctx = parse_context(line, Where("c.jsonl", 4))
        >>> ctx.passages[0].relevant, ctx.extra
        (2.0, {'note': 'x'})
        >>> try:
        ...     parse_context({"qid": True, "passages": []}, Where("c.jsonl", 4))
        ... except UDCGInputError as error:
        ...     print(error)
        c.jsonl:4: field 'qid': must be a non-empty string or an integer, got a boolean
    """
    if not isinstance(obj, dict):
        raise UDCGInputError(
            f"expected a JSON object (one context per line), got {check.kind(obj)}",
            path=where.path,
            line=where.line,
        )
    for key in ("qid", "passages"):
        if key not in obj:
            raise where.error(key, "missing (every context needs 'qid' and 'passages')")
    subqueries = check.str_list(obj.get("subqueries"), "subqueries", where)
    n_sub = None if subqueries is None else len(subqueries)
    qid = check.identifier(obj["qid"], "qid", where)
    raw = obj["passages"]
    if not isinstance(raw, list):
        raise where.error("passages", f"must be a list of passage objects, got {check.kind(raw)}")
    passages = [_parse_passage(p, f"passages[{i}]", where, n_sub) for i, p in enumerate(raw)]
    check.unique_ids([p.doc_id for p in passages], where)
    question = check.optional_str(obj.get("question"), "question", where)
    if obj.get("conversation") is not None:
        check.conversation(obj["conversation"], "conversation", where, question)
    return Context(
        qid=qid,
        passages=passages,
        run=check.optional_str(obj.get("run"), "run", where),
        question=question,
        answers=check.str_list(obj.get("answers"), "answers", where),
        subqueries=subqueries,
        outcomes=check.answer_labels(
            check.outcomes(obj.get("outcomes"), "outcomes", where), where, n_sub, raw
        ),
        extra={k: v for k, v in obj.items() if k not in CONTEXT_KEYS},
        source=where.source(),
    )
