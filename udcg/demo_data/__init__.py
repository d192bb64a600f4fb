"""Data shipped with the package: the embedded demo set (see ``README.md`` beside this file)."""

from __future__ import annotations

from collections.abc import Iterator

from udcg.demo_data.demo import OUTPUT as DEMO_PATH
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, read_contexts


def demo_contexts() -> Iterator[Context]:
    """The demo contexts, annotated by the embedded judge ``smollm2-135m``.

    Examples:
        60 questions, each in 17 contexts (runs), every passage labelled by the judge:

        >>> contexts = list(demo_contexts())
        >>> len(contexts), len({c.qid for c in contexts})
        (1020, 60)
        >>> first = contexts[0]
        >>> first.question, first.answers, list(first.passages[0].abstain_prob)
        ('What is the capital city of Australia?', ['Canberra'], ['smollm2-135m'])
    """
    if not DEMO_PATH.is_file():
        raise UDCGInputError(
            "the demo set is missing from this installation; rebuild it with "
            "`udcg demo` or pass data=jsonl data.path=...",
            path=DEMO_PATH,
        )
    return read_contexts(DEMO_PATH)
