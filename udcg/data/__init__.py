"""Data shipped with the package: the embedded demo set (see ``data/demo/README.md``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from udcg.errors import UDCGInputError
from udcg.io.contexts import Context, read_contexts

DEMO_PATH = Path(__file__).with_name("demo.jsonl.gz")


def demo_contexts() -> Iterator[Context]:
    """The demo contexts, annotated by the embedded judge ``smollm2-135m``."""
    if not DEMO_PATH.is_file():
        raise UDCGInputError(
            "the demo set is missing from this installation; rebuild it with "
            "`python -m udcg.demo` or pass data=jsonl data.path=...",
            path=DEMO_PATH,
        )
    return read_contexts(DEMO_PATH)
