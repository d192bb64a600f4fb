"""Who labelled the Q-CARE coverage of a context: the record ``udcg qcare label`` writes on it
(``qcare_labels``), counted per source so that readers can say when a file's means mix several,
and the digests of the inputs it labelled, so that readers refuse labels of edited inputs."""

from __future__ import annotations

import hashlib
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from udcg.errors import UDCGInputError, UDCGWarning
from udcg.io.contexts.checks import OUTCOME_LABELS
from udcg.io.contexts.model import Context
from udcg.io.contexts.turns import history_of
from udcg.io.files import canonical_json

#: The context key of the labelling record.
RECORD = "qcare_labels"


def label_sources(contexts: Sequence[Context]) -> Counter[str]:
    """How many contexts each source of Q-CARE labels wrote: ``judge KEY (ROUTES)`` from the
    ``qcare_labels`` record (``judge KEY [FINGERPRINT] (ROUTES)`` where records of one key hold
    several fingerprints: one model on two servers), ``no record`` for labels given by hand or
    elsewhere.

    Examples:
        >>> from udcg.io.contexts.model import Context
        >>> record = {"judge": "a", "fingerprint": "fa", "checks": ["text"]}
        >>> dict(label_sources([Context("q1", extra={RECORD: record}), Context("q2")]))
        {'judge a (text)': 1, 'no record': 1}
        >>> other = {**record, "fingerprint": "fb"}
        >>> dict(label_sources([Context("q1", extra={RECORD: r}) for r in (record, other)]))
        {'judge a [fa] (text)': 1, 'judge a [fb] (text)': 1}
    """
    records = [ctx.extra.get(RECORD) for ctx in contexts]
    fingerprints: dict[str, set[str]] = {}
    for record in records:
        if isinstance(record, dict):
            key, fingerprint = str(record.get("judge")), str(record.get("fingerprint"))
            fingerprints.setdefault(key, set()).add(fingerprint)
    out: Counter[str] = Counter()
    for record in records:
        if not isinstance(record, dict):
            out["no record"] += 1
            continue
        key = str(record.get("judge"))
        checks = record.get("checks")
        routes = ", ".join(map(str, checks)) if isinstance(checks, list) and checks else ""
        which = f" [{record.get('fingerprint')}]" if len(fingerprints[key]) > 1 else ""
        out[f"judge {key}{which} ({routes or 'routes not recorded'})"] += 1
    return out


def listed_sources(contexts: Sequence[Context]) -> str:
    """:func:`label_sources` as one line: ``SOURCE: N contexts; ...``.

    Examples:
        >>> listed_sources([Context("q1"), Context("q2")])
        'no record: 2 contexts'
    """
    sources = label_sources(contexts)
    return "; ".join(f"{source}: {n} contexts" for source, n in sorted(sources.items()))


def warn_mixed_sources(contexts: Sequence[Context], path: object) -> None:
    """One :class:`~udcg.errors.UDCGWarning` when the Q-CARE labels of ``contexts`` (read from
    ``path``) come from several judges, several Yes/No routes, or judges and hands
    (:func:`label_sources`): the means over them mix them.

    Examples:
        >>> warn_mixed_sources([Context("q1")], "one.jsonl")  # one source: nothing
    """
    if len(label_sources(contexts)) > 1:
        warnings.warn(
            f"{path}: the labels come from several sources ({listed_sources(contexts)}), so its"
            " means mix them",
            UDCGWarning,
            stacklevel=2,
        )


def warn_given_outcome(contexts: Sequence[Context], model: str, path: object) -> None:
    """One :class:`~udcg.errors.UDCGWarning` when contexts labelled by a judge (their
    ``qcare_labels`` record) hold labels of outcome ``model`` that the record does not list:
    those are given (by hand, imported), so the generator metrics of ``model`` do not come
    from the judge that labelled the coverage.

    Examples:
        >>> record = {"judge": "a", "outcomes": ["gen"]}
        >>> ctx = Context("q1", outcomes={"human": {"claims": ["c"]}}, extra={RECORD: record})
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     warn_given_outcome([ctx], "human", "l.jsonl")
        >>> str(caught[0].message)[:60]
        "l.jsonl: 1 contexts labelled by judge 'a' hold labels of 'hu"
    """
    given: Counter[str] = Counter()
    for ctx in contexts:
        record = ctx.extra.get(RECORD)
        outcome = ctx.outcomes.get(model)
        if isinstance(record, dict) and isinstance(outcome, dict):
            listed = record.get("outcomes")
            labelled = any(name in outcome for name in OUTCOME_LABELS)
            if labelled and (not isinstance(listed, list) or model not in listed):
                given[str(record.get("judge"))] += 1
    for judge, n in sorted(given.items()):
        warnings.warn(
            f"{path}: {n} contexts labelled by judge {judge!r} hold labels of {model!r} that"
            " its record does not list (given by hand or imported): their generator metrics"
            " do not come from that judge",
            UDCGWarning,
            stacklevel=2,
        )


def _digest(value: Any) -> str:
    """A short digest of a JSON value."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()[:16]


def label_inputs(ctx: Context, models: Iterable[str] = ()) -> dict[str, Any]:
    """The ``inputs`` of a ``qcare_labels`` record: short digests of what the labels of ``ctx``
    are computed from, its query (``question``, with the earlier turns of a conversation), its
    ``passages``' texts in order and, under ``outcomes``, the answer of each of ``models``.

    Examples:
        >>> from udcg.io.contexts.model import Passage
        >>> outcomes = {"m": {"answer": "Austen."}}
        >>> ctx = Context("q1", [Passage("d1", text="t")], question="Who?", outcomes=outcomes)
        >>> inputs = label_inputs(ctx, ["m"])
        >>> sorted(inputs), len(inputs["question"]), list(inputs["outcomes"])
        (['outcomes', 'passages', 'question'], 16, ['m'])
    """
    return {
        "question": _digest([ctx.question, history_of(ctx)]),
        "passages": _digest([p.text for p in ctx.passages]),
        "outcomes": {m: _digest(ctx.outcomes.get(m, {}).get("answer")) for m in sorted(models)},
    }


def passages_moved(before: Context, after: Context) -> Context:
    """``after``, made from ``before`` by a step that picked or reordered its passages, each
    with its coverage labels, and dropped its outcomes (``udcg order``, evaluate.py's
    ``order=``): its ``qcare_labels`` record, when ``before``'s passages were those labelled,
    names ``after``'s passages and no outcome; labels of other passages stay refused.

    Examples:
        >>> from dataclasses import replace
        >>> from udcg.io.contexts.model import Passage
        >>> ctx = Context("q1", [Passage("d1", text="a"), Passage("d2", text="b")])
        >>> ctx = replace(ctx, extra={RECORD: {"inputs": label_inputs(ctx)}})
        >>> turned = replace(ctx, passages=ctx.passages[::-1])
        >>> changed_inputs(turned), changed_inputs(passages_moved(ctx, turned))
        (['passages'], [])
    """
    record = before.extra.get(RECORD)
    if not isinstance(record, dict) or "passages" in changed_inputs(before):
        return after
    moved = {**record, "outcomes": []}
    if isinstance(record.get("inputs"), dict):
        moved["inputs"] = {**record["inputs"], "passages": label_inputs(after)["passages"]}
        moved["inputs"]["outcomes"] = {}
    return replace(after, extra={**after.extra, RECORD: moved})


def changed_inputs(ctx: Context, models: Iterable[str] = ()) -> list[str]:
    """What of ``ctx`` differs from the ``inputs`` its ``qcare_labels`` record names:
    ``question``, ``passages``, and ``outcomes.MODEL`` for each of ``models`` whose answer
    the record digests. Empty for a record without ``inputs`` (an older udcg's, an import):
    taken as matching.

    Examples:
        >>> from dataclasses import replace
        >>> from udcg.io.contexts.model import Passage
        >>> outcomes = {"m": {"answer": "Austen."}}
        >>> ctx = Context("q1", [Passage("d1", text="t")], question="Who?", outcomes=outcomes)
        >>> ctx = replace(ctx, extra={RECORD: {"inputs": label_inputs(ctx, ["m"])}})
        >>> changed_inputs(ctx, ["m"]), changed_inputs(replace(ctx, question="When?"), ["m"])
        ([], ['question'])
        >>> changed_inputs(replace(ctx, outcomes={"m": {"answer": "Eliot."}}), ["m"])
        ['outcomes.m']
    """
    record = ctx.extra.get(RECORD)
    recorded = record.get("inputs") if isinstance(record, dict) else None
    if not isinstance(recorded, dict):
        return []
    now = label_inputs(ctx, models)
    changed = [
        name for name in ("question", "passages") if recorded.get(name, now[name]) != now[name]
    ]
    answers = recorded.get("outcomes") if isinstance(recorded.get("outcomes"), dict) else {}
    return changed + [
        f"outcomes.{m}" for m, digest in now["outcomes"].items() if answers.get(m, digest) != digest
    ]


def check_label_inputs(contexts: Iterable[Context], models: Iterable[str] = ()) -> None:
    """Refuse, in one line, a context whose question, passages or answer of one of ``models``
    differ from those its Q-CARE labels were computed on (:func:`changed_inputs`): its labels
    describe other inputs, and ``udcg qcare label`` computes them again.

    Examples:
        >>> from dataclasses import replace
        >>> from udcg.io.contexts.model import Passage
        >>> ctx = Context("q1", [Passage("d1", text="t")], question="Who?")
        >>> ctx = replace(ctx, extra={RECORD: {"inputs": label_inputs(ctx)}})
        >>> check_label_inputs([ctx])  # as labelled
        >>> check_label_inputs([replace(ctx, question="When?")])
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: field 'qcare_labels.inputs.question': the question of qid ...
    """
    models = list(models)
    for ctx in contexts:
        changed = changed_inputs(ctx, models)
        if changed:
            model = changed[0].removeprefix("outcomes.")
            what = changed[0] if model == changed[0] else f"answer of outcomes.{model}"
            again = "" if model == changed[0] else f" --answers-from {model}"
            raise UDCGInputError(
                f"the {what} of qid {ctx.qid!r} changed since its Q-CARE labels were computed "
                f"(they describe the earlier one): run `udcg qcare label{again}` again",
                field=f"{RECORD}.inputs.{changed[0]}",
                **ctx.location(),
            )
