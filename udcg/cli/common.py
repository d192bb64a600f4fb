"""Shared behaviour of command-line entry points: user mistakes become one line, exit 2."""

from __future__ import annotations

import sys
from collections.abc import Callable

from udcg.errors import UDCGInputError


def run_cli(prog: str, main: Callable[[], int | None]) -> int:
    """Run ``main``; report UDCGInputError (and unreadable files) without a traceback."""
    try:
        return main() or 0
    except UDCGInputError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{prog}: error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
