"""Reader and writer for the reference UDCG implementation's JSON format.

The reference code (github GiovanniTRA/UDCG) reads and writes one JSON document, a list of
items::

    [{"example_id": "example_1", "question": "...",
      "passages": [{"doc_id": "doc_1", "text": "...", "is_relevant": true,
                    "models_info": {"meta-llama/Llama-3.2-3B-Instruct": {"no_res_prob": 2e-06}}}],
      "udcg": {"meta-llama/Llama-3.2-3B-Instruct": 0.555}}]

Mapping to :class:`~udcg.io.contexts.model.Context`: ``example_id`` -> ``qid``, ``is_relevant`` ->
``relevant``, ``models_info[model].no_res_prob`` -> ``abstain_prob[model]``. The item-level
``udcg`` scores and any other unknown key stay in ``extra``; other keys under
``models_info[model]`` are kept too (in the passage's ``extra["models_info"]``) and merged back
by the writer.

The format has no place for ``run``, ``answers``, ``subqueries``, ``outcomes`` (item level) or
``score``, ``covers`` (passage level); the writer emits them under those names rather than lose
them, and the reader accepts them with the same checks as the JSONL reader, so a write -> read
round trip returns equal contexts.

Errors name the item by its index in the field path (``[1].passages[2].is_relevant``); the
line given is the line on which that item starts in the file (for a document on one line this
is always 1).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from udcg.errors import UDCGInputError
from udcg.io.contexts import checks as check
from udcg.io.contexts.checks import Where
from udcg.io.contexts.model import Context, Passage
from udcg.io.files import PathType, atomic_write, read_text

__all__ = ["read_reference_json", "write_reference_json"]

_ITEM_KEYS = (
    "example_id",
    "question",
    "run",
    "answers",
    "subqueries",
    "passages",
    "outcomes",
)
_PASSAGE_KEYS = ("doc_id", "text", "score", "is_relevant", "models_info", "covers")
_WS = re.compile(r"[ \t\n\r]*")


def _malformed(path: PathType, exc: ValueError | RecursionError, line: int) -> UDCGInputError:
    """The error for what :mod:`json` raised decoding a value that starts at ``line`` (a
    syntax error gives its own line)."""
    if isinstance(exc, json.JSONDecodeError):
        line = exc.lineno
    return UDCGInputError(check.json_problem(exc), path=path, line=line)


def _items(path: PathType, text: str) -> list[tuple[int, Any]]:
    """``(start_line, item)`` for each element of the top-level list.

    Items are decoded one by one to learn where each starts; anything irregular falls back to
    :func:`json.loads` on the whole text, whose error message is the one to report.
    """
    decoder = json.JSONDecoder()
    pos = _WS.match(text).end()
    items: list[tuple[int, Any]] = []
    if text.startswith("[", pos):
        pos = _WS.match(text, pos + 1).end()
        line, counted = 1, 0
        closed = text.startswith("]", pos)
        try:
            while not closed:
                line += text.count("\n", counted, pos)
                counted = pos
                item, pos = decoder.raw_decode(text, pos)
                items.append((line, item))
                pos = _WS.match(text, pos).end()
                if text.startswith(",", pos):
                    pos = _WS.match(text, pos + 1).end()
                elif text.startswith("]", pos):
                    closed = True
                else:
                    break
        except (ValueError, RecursionError) as exc:
            raise _malformed(path, exc, line) from None
        if closed and _WS.match(text, pos + 1).end() == len(text):
            return items
    try:
        whole = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _malformed(path, exc, text.count("\n", 0, _WS.match(text).end()) + 1) from None
    if isinstance(whole, list):  # pragma: no cover - the scan above accepts every valid list
        return [(1, item) for item in whole]
    raise UDCGInputError(
        f"expected a JSON list of items (reference UDCG format), got {check.kind(whole)}", path=path
    )


def _reference_passage(obj: Any, name: str, where: Where, n_sub: int | None) -> Passage:
    obj = check.json_object(obj, name, where)
    extra = {k: v for k, v in obj.items() if k not in _PASSAGE_KEYS}
    abstain: dict[str, float] = {}
    info_rest: dict[str, dict[str, Any]] = {}
    info = obj.get("models_info")
    if info is not None:
        for model, entry in check.json_object(info, f"{name}.models_info", where).items():
            entry = check.json_object(entry, f"{name}.models_info.{model}", where)
            prob = entry.get("no_res_prob")
            if prob is not None:
                abstain[model] = check.probability(
                    prob, f"{name}.models_info.{model}.no_res_prob", where
                )
            rest = {k: v for k, v in entry.items() if k != "no_res_prob"}
            if rest:
                info_rest[model] = rest
    if info_rest:
        extra["models_info"] = info_rest
    doc_id = obj.get("doc_id")
    score = obj.get("score")
    return Passage(
        doc_id=None if doc_id is None else check.identifier(doc_id, f"{name}.doc_id", where),
        text=check.optional_str(obj.get("text"), f"{name}.text", where),
        score=None if score is None else check.finite(score, f"{name}.score", where),
        relevant=check.relevance(obj.get("is_relevant"), f"{name}.is_relevant", where),
        abstain_prob=abstain,
        covers=check.covers(obj.get("covers"), f"{name}.covers", where, n_sub),
        extra=extra,
    )


def _reference_item(obj: Any, index: int, path: PathType, line: int) -> Context:
    where = Where(path, line, prefix=f"[{index}]")
    if not isinstance(obj, dict):
        raise where.error("", f"must be an object (one item per query), got {check.kind(obj)}")
    for key in ("example_id", "passages"):
        if key not in obj:
            raise where.error(f".{key}", "missing (every item needs 'example_id' and 'passages')")
    subqueries = check.str_list(obj.get("subqueries"), ".subqueries", where)
    n_sub = None if subqueries is None else len(subqueries)
    raw = obj["passages"]
    if not isinstance(raw, list):
        raise where.error(".passages", f"must be a list of passage objects, got {check.kind(raw)}")
    passages = [_reference_passage(p, f".passages[{i}]", where, n_sub) for i, p in enumerate(raw)]
    check.unique_ids([p.doc_id for p in passages], where, ".passages")
    return Context(
        qid=check.identifier(obj["example_id"], ".example_id", where),
        passages=passages,
        run=check.optional_str(obj.get("run"), ".run", where),
        question=check.optional_str(obj.get("question"), ".question", where),
        answers=check.str_list(obj.get("answers"), ".answers", where),
        subqueries=subqueries,
        outcomes=check.outcomes(obj.get("outcomes"), ".outcomes", where),
        extra={k: v for k, v in obj.items() if k not in _ITEM_KEYS},
        source=where.source(),
    )


def read_reference_json(path: PathType) -> list[Context]:
    """Read a reference UDCG JSON file (gzip detected by content) into contexts.

    Raises :class:`~udcg.errors.UDCGInputError` for malformed JSON (with JSON's own line and
    column), a document that is not a list, an empty list, or an invalid item; field paths
    start with the item index, e.g. ``[1].passages[2].models_info.<model>.no_res_prob``.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> item = {"example_id": "q1", "passages": [
        ...     {"doc_id": "d1", "is_relevant": True, "models_info": {"m": {"no_res_prob": 0.25}}}]}
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (Path(folder) / "ref.json").write_text(json.dumps([item]))
        ...     (ctx,) = read_reference_json(Path(folder) / "ref.json")
        >>> ctx.qid, ctx.passages[0].relevant, ctx.passages[0].abstain_prob
        ('q1', True, {'m': 0.25})
    """
    text = read_text(path)
    items = _items(path, text) if text.strip() else []
    if not items:
        raise UDCGInputError("empty file: no contexts", path=path)
    return [_reference_item(obj, i, path, line) for i, (line, obj) in enumerate(items)]


def _clash(out: dict[str, Any], extra: dict[str, Any], what: str) -> None:
    for key, value in extra.items():
        if key in out:
            raise ValueError(f"{what} extra key {key!r} clashes with a reference-format key")
        out[key] = value


def _passage_to_reference(passage: Passage) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if passage.doc_id is not None:
        out["doc_id"] = passage.doc_id
    if passage.text is not None:
        out["text"] = passage.text
    if passage.score is not None:
        out["score"] = passage.score
    if passage.relevant is not None:
        out["is_relevant"] = passage.relevant
    extra = dict(passage.extra)
    rest = extra.pop("models_info", None) or {}
    info: dict[str, dict[str, Any]] = {
        m: {"no_res_prob": p} for m, p in passage.abstain_prob.items()
    }
    for model, fields in rest.items():
        info.setdefault(model, {}).update(fields)
    if info:
        out["models_info"] = info
    if passage.covers is not None:
        out["covers"] = passage.covers
    _clash(out, extra, "passage")
    return out


def _context_to_reference(ctx: Context) -> dict[str, Any]:
    out: dict[str, Any] = {"example_id": ctx.qid}
    for key in ("question", "run", "answers", "subqueries"):
        value = getattr(ctx, key)
        if value is not None:
            out[key] = value
    out["passages"] = [_passage_to_reference(p) for p in ctx.passages]
    if ctx.outcomes:
        out["outcomes"] = ctx.outcomes
    _clash(out, ctx.extra, "context")
    return out


def write_reference_json(path: PathType, contexts: Iterable[Context]) -> int:
    """Write ``contexts`` in the reference UDCG JSON format (indented like the reference files).

    The file is replaced atomically; a ``.gz`` suffix compresses it. Returns the number of items.

    Examples:
        A write -> read round trip returns equal contexts:

        >>> import tempfile
        >>> from pathlib import Path
        >>> ctx = Context("q1", [Passage("d1", relevant=True, abstain_prob={"m": 0.25})])
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     n = write_reference_json(Path(folder) / "ref.json", [ctx])
        ...     item = json.loads((Path(folder) / "ref.json").read_text())[0]
        ...     back = read_reference_json(Path(folder) / "ref.json")
        >>> n, item["passages"][0]["models_info"], back == [ctx]
        (1, {'m': {'no_res_prob': 0.25}}, True)
    """
    items = [_context_to_reference(ctx) for ctx in contexts]
    with atomic_write(path) as handle:
        json.dump(items, handle, ensure_ascii=False, allow_nan=False, indent=2)
        handle.write("\n")
    return len(items)
