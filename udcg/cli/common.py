"""Shared behaviour of command-line entry points: a user mistake is one line and exit status 2,
a library warning is one line, a closed output pipe ends the command quietly.

A reader of standard output that stops early (``udcg trec QRELS RUN -q | head -1``) ends the
command as it ends Unix tools: nothing on stderr, exit status 141 (128 + SIGPIPE, what a shell
reports for a tool killed by a broken pipe).
"""

from __future__ import annotations

import os
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from udcg.errors import UDCGInputError, UDCGServiceError, UDCGWarning
from udcg.io.files import STDIO
from udcg.validation import printable

if TYPE_CHECKING:
    import argparse

#: Exit status after a broken pipe on standard output (128 + SIGPIPE).
BROKEN_PIPE = 141


@dataclass(frozen=True)
class Outcome:
    """How a command ended: its exit status and, for a failure, the line printed on stderr."""

    status: int
    error: str | None = None


def one_line(text: str) -> str:
    """``text`` with its lines joined by spaces (a backend's message may span several), safe
    for a terminal: control and format characters escaped (:func:`udcg.validation.printable`;
    a value read from a file or a weights card may hold escape sequences)."""
    return " ".join(printable(part.strip()) for part in text.splitlines() if part.strip())


@contextmanager
def one_line_warnings(prog: str) -> Iterator[None]:
    """Show every :class:`UDCGWarning` (each time) as ``PROG: warning: ...`` on stderr."""
    original = warnings.showwarning

    def show(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        if issubclass(category, UDCGWarning):
            print(f"{prog}: warning: {one_line(str(message))}", file=sys.stderr)
        else:
            original(message, category, *args, **kwargs)

    with warnings.catch_warnings():
        warnings.simplefilter("always", UDCGWarning)
        warnings.showwarning = show
        yield


def _quiet_stdout() -> None:
    """Point standard output at /dev/null, so the interpreter's last flush does not fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor (a test's captured stream)
        pass


def _attempt(main: Callable[[], int | None], catch_all: bool) -> Outcome:
    try:
        status = main() or 0
        sys.stdout.flush()  # a closed pipe is reported here, not at interpreter exit
        return Outcome(status)
    except UDCGInputError as exc:
        return Outcome(2, f"error: {one_line(str(exc))}")
    except NotImplementedError as exc:  # an operation the chosen backend does not offer
        return Outcome(2, f"error: {one_line(str(exc))}")
    except UDCGServiceError as exc:
        return Outcome(1, f"failed: {one_line(str(exc))}")
    except BrokenPipeError:
        _quiet_stdout()
        return Outcome(BROKEN_PIPE)
    except OSError as exc:
        return Outcome(2, f"error: {exc.filename or ''}: {exc.strerror or exc}")
    except KeyboardInterrupt:
        return Outcome(130, "interrupted")
    except Exception as exc:
        if not catch_all:
            raise
        traceback.print_exc()
        return Outcome(1, f"failed: {type(exc).__name__}: {one_line(str(exc))}")


def run_command(prog: str, main: Callable[[], int | None], catch_all: bool = False) -> Outcome:
    """Run ``main`` with one-line warnings; report a user mistake (UDCGInputError, an
    unreadable file) as one line on stderr without a traceback. ``catch_all`` also turns any
    other exception into a failed outcome (status 1), its traceback printed."""
    with one_line_warnings(prog):
        outcome = _attempt(main, catch_all)
    if outcome.error is not None:
        print(f"{prog}: {outcome.error}", file=sys.stderr)
    return outcome


def run_cli(prog: str, main: Callable[[], int | None]) -> int:
    """:func:`run_command` for an argparse command; returns the exit status."""
    return run_command(prog, main).status


def info_stream(*outputs: str | None) -> TextIO:
    """Where a command prints its summary: stderr when one of ``outputs`` is ``-`` (the data
    goes to stdout), else stdout."""
    return sys.stderr if STDIO in outputs else sys.stdout


def weights_inputs(weights: str | None) -> dict[str, str | None]:
    """What ``--weights`` reads (the folder or file as given, its tensors and its card), named
    for :func:`udcg.io.files.refuse_same_file`; nothing without weights."""
    if weights is None:
        return {}
    from udcg.io.weights import weights_files

    tensors, card = weights_files(weights)
    return {"--weights": weights, "--weights tensors": str(tensors), "--weights card": str(card)}


def judge_inputs(args: argparse.Namespace) -> dict[str, str | None]:
    """The files of the judge options (``--cache``, a ``precomputed:FILE`` spec), named for
    :func:`udcg.io.files.refuse_same_file`."""
    from udcg.judge.spec import PRECOMPUTED

    spec = args.judge if args.judge.startswith(PRECOMPUTED) else None
    return {"--cache": args.cache, "--judge": spec and spec.removeprefix(PRECOMPUTED)}


def add_theta_weights(parser: argparse.ArgumentParser) -> None:
    """``--weights FILE...``: UDCG-theta weights for ``UDCGtheta@k`` measures, one per k."""
    parser.add_argument(
        "--weights",
        nargs="+",
        metavar="FILE",
        help="UDCG-theta weights for UDCGtheta@k, one per k: folders of save_pretrained/train.py "
        "or .safetensors files with their .json card",
    )


def add_allow_mismatch(
    parser: argparse.ArgumentParser, fields: Sequence[str], help: str | None = None
) -> None:
    """``--allow-mismatch FIELD`` (repeatable, one of ``fields``): weights fitted with another
    value of FIELD are used on purpose."""
    parser.add_argument(
        "--allow-mismatch",
        action="append",
        default=[],
        choices=list(fields),
        metavar="FIELD",
        help=help
        or f"use weights fitted with another FIELD on purpose (repeatable; {', '.join(fields)})",
    )
