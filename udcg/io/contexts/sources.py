"""Who labelled the Q-CARE coverage of a context: the record ``udcg qcare label`` writes on it
(``qcare_labels``), counted per source so that readers can say when a file's means mix several."""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Sequence

from udcg.errors import UDCGWarning
from udcg.io.contexts.checks import OUTCOME_LABELS
from udcg.io.contexts.model import Context

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
