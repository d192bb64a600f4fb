"""Shared behaviour of command-line entry points: a user mistake is one line and exit status 2,
a library warning is one line, a closed output pipe ends the command quietly.

A reader of standard output that stops early (``udcg trec QRELS RUN -q | head -1``) ends the
command as it ends Unix tools: nothing on stderr, exit status 141 (128 + SIGPIPE, what a shell
reports for a tool killed by a broken pipe).
"""

from __future__ import annotations

import argparse
import functools
import io
import os
import select
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, NoReturn, TextIO, TypeVar

from udcg.errors import UDCGInputError, UDCGServiceError, UDCGWarning
from udcg.io.files import (
    FOLDER_NAME,
    STDIO,
    PathType,
    descriptor_of,
    inputs_read_once,
    live,
    names_folder,
    read_only,
    refuse_read_only,
    stream_name,
)
from udcg.validation import printable

T = TypeVar("T")

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


#: The command a thread runs, whose name its warnings carry (:func:`one_line_warnings`).
_WARNING_PROG: ContextVar[str | None] = ContextVar("udcg_warning_prog", default=None)
_WARNINGS_LOCK = threading.Lock()
#: The warnings state saved by the first running command, put back by the last.
_WARNINGS_SAVED: list[Any] = []


@contextmanager
def one_line_warnings(prog: str) -> Iterator[None]:
    """Show every :class:`UDCGWarning` (each time) as ``PROG: warning: ...`` on stderr. The
    warnings module's state is the process's: the first of the commands running at once in
    one process (threads) sets it, the last puts it back, and each thread's warnings carry its
    own command's name."""
    token = _WARNING_PROG.set(prog)
    with _WARNINGS_LOCK:
        if not _WARNINGS_SAVED:
            saved = warnings.catch_warnings()
            saved.__enter__()
            original = warnings.showwarning
            _WARNINGS_SAVED[:] = [saved, original, 0]
            warnings.simplefilter("always", UDCGWarning)
            warnings.showwarning = functools.partial(_show, original)
        _WARNINGS_SAVED[2] += 1
    try:
        yield
    finally:
        with _WARNINGS_LOCK:
            _WARNINGS_SAVED[2] -= 1
            if not _WARNINGS_SAVED[2]:
                _WARNINGS_SAVED[0].__exit__(None, None, None)
                _WARNINGS_SAVED.clear()
        _WARNING_PROG.reset(token)


def _show(original: Any, message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
    """A :class:`UDCGWarning` of a thread running a command on one line; anything else as
    ``original`` shows it."""
    prog = _WARNING_PROG.get()
    if prog is not None and issubclass(category, UDCGWarning):
        print(f"{prog}: warning: {one_line(str(message))}", file=messages())
    else:
        original(message, category, *args, **kwargs)


class _Dropped(io.StringIO):
    """Where messages go when standard error is closed: written, then forgotten."""

    def write(self, text: str) -> int:
        return len(text)


def messages() -> TextIO:
    """Standard error, where a command's notes and errors go; when it is closed (``2>&-``),
    a sink that drops them (``print(file=None)`` would send them to standard output, among
    the data).

    Examples:
        >>> messages() is sys.stderr
        True
    """
    return _Dropped() if live(sys.stderr) is None else sys.stderr


class CommandParser(argparse.ArgumentParser):
    """The parser of every command: argparse's, with a usage mistake's usage and message on
    :func:`messages`. With standard error closed, argparse prints the usage on standard
    output, among the data; here it is dropped. Subcommands' parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        """Print the usage and ``PROG: error: MESSAGE`` on standard error; exit status 2."""
        self.print_usage(messages())
        self.exit(2, f"{self.prog}: error: {message}\n")

    def print_help(self, file: TextIO | None = None) -> None:
        """``--help``: the help on standard output (closed: on :func:`messages`, as argparse
        does); one that cannot be written there (open for reading only) is one line and exit
        status 2, where argparse would end silently with status 0."""
        out = file or sys.stdout or messages()
        try:
            out.write(self.format_help())
            out.flush()
        except OSError as exc:
            self.exit(2, f"{self.prog}: error: standard output: {exc.strerror or exc}\n")


def _quiet_stdout() -> None:
    """Point standard output at /dev/null when it is the pipe that broke (its reader gone:
    ``poll`` says so), so the interpreter's last flush does not fail; another output's broken
    pipe (a FIFO given as ``-o``) leaves it alone."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        if not any(events & select.POLLERR for _, events in poller.poll(0)):
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except (AttributeError, OSError, ValueError):  # no file descriptor (a captured stream)
        pass


def _attempt(main: Callable[[], int | None], catch_all: bool) -> Outcome:
    try:
        status = main() or 0
        if live(sys.stdout) is not None:  # closed (>&-): nothing was written there to flush
            _named(sys.stdout.flush)  # a closed pipe is reported here, not at interpreter exit
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
        where = f"{exc.filename}: " if exc.filename else ""
        return Outcome(2, f"error: {where}{one_line(exc.strerror or str(exc))}")
    except KeyboardInterrupt:
        return Outcome(130, "interrupted")
    except Exception as exc:
        if not catch_all:
            raise
        traceback.print_exc()
        return Outcome(1, f"failed: {type(exc).__name__}: {one_line(str(exc))}")


#: What the running command opened and closes when it ends (:func:`close_at_end`).
_OPENED: ContextVar[list[Any]] = ContextVar("udcg_opened")


def close_at_end(thing: T) -> T:
    """``thing`` (a judge: its cache, its files), closed when the running command ends (run
    in-process, a command leaves nothing open); outside a command, as given."""
    opened = _OPENED.get(None)
    if opened is not None:
        opened.append(thing)
    return thing


def run_command(prog: str, main: Callable[[], int | None], catch_all: bool = False) -> Outcome:
    """Run ``main`` with one-line warnings, its inputs read once
    (:func:`udcg.io.files.inputs_read_once`) and what it opened closed at its end; report a
    user mistake (UDCGInputError, an unreadable file) as one line on stderr without a
    traceback. ``catch_all`` also turns any other exception into a failed outcome (status 1),
    its traceback printed."""
    opened = _OPENED.set([])
    try:
        with one_line_warnings(prog), inputs_read_once():
            outcome = _attempt(main, catch_all)
    finally:
        for thing in reversed(_OPENED.get()):
            thing.close()
        _OPENED.reset(opened)
    if outcome.error is not None:
        print(f"{prog}: {outcome.error}", file=messages())
    return outcome


def run_cli(prog: str, main: Callable[[], int | None]) -> int:
    """:func:`run_command` for an argparse command; returns the exit status."""
    return run_command(prog, main).status


def info_stream(*outputs: str | None) -> TextIO:
    """Where a command prints its summary: stderr when one of ``outputs`` is ``-`` (the data
    goes to stdout), else stdout; a closed one, or stdout open for reading only, drops what is
    printed (:func:`messages`)."""
    if STDIO in outputs:
        return messages()
    if live(sys.stdout) is None or read_only(descriptor_of(sys.stdout)):
        return _Dropped()
    return _Summary()


class _Summary(io.TextIOBase):
    """Standard output for a summary: a write that fails (a full disk, ``> /dev/full``) names
    the stream, so the error does not read as one of the command's output files."""

    def write(self, text: str) -> int:
        return _named(lambda: sys.stdout.write(text))

    def flush(self) -> None:
        _named(sys.stdout.flush)


def _named(call: Callable[[], T]) -> T:
    """``call()``, an OSError of standard output (not a closed pipe) named as its."""
    try:
        return call()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, "standard output") from None


def reads_stdin(path: PathType) -> bool:
    """Whether ``path`` reads standard input: ``-``, or a name of file descriptor 0
    (``/dev/stdin``, ``/dev/fd/0``, ``/proc/self/fd/0``, however spelled, or a link to one:
    :func:`udcg.io.files.stream_name`).

    Examples:
        >>> reads_stdin("-"), reads_stdin("//dev//stdin"), reads_stdin("stdin.tsv")
        (True, True, False)
        >>> reads_stdin("./-")  # a file named -
        False
    """
    return os.fspath(path) == STDIO or stream_name(path) == 0


def output_path(text: str) -> str:
    """``-o/--out`` as given, with a name of standard output (``/dev/stdout``, ``/dev/fd/1``,
    a link to one) read as ``-``: the output goes where ``-`` sends it, and the messages to
    standard error.

    A name ending in ``/``, ``/.`` or ``/..`` names a folder, never a file: the kernel
    refuses to open one that is not a folder, and :class:`pathlib.Path` would drop the slash;
    it is refused here, before any work.

    Examples:
        >>> output_path("/dev/stdout"), output_path("out.jsonl")
        ('-', 'out.jsonl')
        >>> output_path("out/")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: out/ names a folder (its last part is /, . or ..), not an ...
    """
    refuse_folder_name(text)
    return output_folder(text)


def refuse_folder_name(text: str) -> None:
    """Refuse an output file named as a folder (:func:`udcg.io.files.names_folder`), whose
    slash :class:`pathlib.Path` would silently drop.

    Examples:
        >>> refuse_folder_name("out.jsonl")
        >>> refuse_folder_name("/dev/stdin/.")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: /dev/stdin/. names a folder (its last part is /, . or ..), ...
    """
    if names_folder(text):
        raise argparse.ArgumentTypeError(f"{text} {FOLDER_NAME}, not an output file")


def output_folder(text: str) -> str:
    """An output folder (``-o DIR``) as given, a name of standard output read as ``-`` and one
    of standard input, or of a descriptor open for reading only, refused, as
    :func:`output_path` does for a file; a trailing slash is allowed.

    Examples:
        >>> output_folder("report/")
        'report/'
    """
    stream = stream_name(text)
    if stream == 0:
        raise argparse.ArgumentTypeError(f"{text} is standard input, not an output")
    try:
        refuse_read_only(text, stream)
    except UDCGInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return STDIO if stream == 1 else text


def refuse_stdin_twice(inputs: Mapping[str, PathType | Sequence[PathType] | None]) -> None:
    """Refuse standard input (:func:`reads_stdin`) named for two of ``inputs`` (option or
    argument name -> its path, a list of paths, or None): it can be read once, so the second
    reader would get nothing. Called before any input is read.

    Examples:
        >>> refuse_stdin_twice({"--topics": "-", "--collection": "c.tsv", "RUN": ["a", "b"]})
        >>> refuse_stdin_twice({"--topics": "-", "--collection": "/dev/stdin"})
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: --topics and --collection both read standard input; ...
        >>> refuse_stdin_twice({"RUN": ["-", "b", "/dev/fd/0"]})
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: RUN is given standard input twice (- and /dev/fd/0); ...
    """
    found: list[tuple[str, str]] = []
    for name, given in inputs.items():
        paths = [given] if isinstance(given, str | os.PathLike) else given or []
        found += [(name, os.fspath(path)) for path in paths if reads_stdin(path)]
    if len(found) < 2:
        return
    (first, a), (second, b) = found[:2]
    if first == second:
        raise UDCGInputError(
            f"{first} is given standard input twice ({a} and {b}); only one input can read it"
        )
    raise UDCGInputError(f"{first} and {second} both read standard input; only one input can")


def refuse_stdout_twice(outputs: Mapping[str, PathType | None]) -> None:
    """Refuse standard output (``-``, or a name of file descriptor 1) named for two of
    ``outputs`` (option name -> path or None): the two would be mixed in one stream. Called
    before any work.

    Examples:
        >>> refuse_stdout_twice({"--out": "-", "--table": "table.csv"})
        >>> refuse_stdout_twice({"--out": "-", "--table": "/dev/stdout"})
        Traceback (most recent call last):
        ...
        udcg.errors.UDCGInputError: --out and --table both write standard output; ...
    """
    found = [
        name
        for name, path in outputs.items()
        if path is not None and (os.fspath(path) == STDIO or stream_name(path) == 1)
    ]
    if len(found) >= 2:
        raise UDCGInputError(
            f"{found[0]} and {found[1]} both write standard output; their contents would be "
            "mixed in one stream: give one of them a file"
        )


def weights_inputs(weights: str | None) -> dict[str, str | None]:
    """What ``--weights`` reads (the folder or file as given, its tensors and its card), named
    for :func:`udcg.io.files.refuse_same_file`; nothing without weights."""
    if weights is None:
        return {}
    from udcg.io.weights.files import weights_files

    tensors, card = weights_files(weights)
    return {"--weights": weights, "--weights tensors": str(tensors), "--weights card": str(card)}


def judge_inputs(args: argparse.Namespace) -> dict[str, str | None]:
    """The files of the judge options (``--cache`` and SQLite's files beside it, a
    ``precomputed:FILE`` spec), named for :func:`udcg.io.files.refuse_same_file`."""
    from udcg.judge.cache import cache_files
    from udcg.judge.spec import PRECOMPUTED

    spec = args.judge if args.judge.startswith(PRECOMPUTED) else None
    return {**cache_files(args.cache), "--judge": spec and spec.removeprefix(PRECOMPUTED)}


def add_theta_weights(parser: argparse.ArgumentParser) -> None:
    """``--weights FILE``: UDCG-theta weights for ``UDCGtheta@k`` measures, one per k (a list
    option)."""
    add_list_option(
        parser,
        "--weights",
        metavar="FILE",
        whole=True,
        help="UDCG-theta weights for UDCGtheta@k, one per k (repeatable): folders of "
        "save_pretrained/train.py or .safetensors files with their .json card",
    )


def add_allow_mismatch(
    parser: argparse.ArgumentParser, fields: Sequence[str], help: str | None = None
) -> None:
    """``--allow-mismatch FIELD`` (a list option, each item one of ``fields``): weights fitted
    with another value of FIELD are used on purpose."""
    add_list_option(
        parser,
        "--allow-mismatch",
        default=[],
        items=list(fields),
        metavar="FIELD",
        help=help
        or f"use weights fitted with another FIELD on purpose (repeatable; {', '.join(fields)})",
    )


# -- the command-line grammar (docs/cli.md) -------------------------------------------------------

#: Namespace attribute collecting the deprecation notes of one parse (each printed once).
_NOTES = "_udcg_notes"
#: Namespace attributes of :func:`add_out`: the old positional OUT, and whether OUT is required.
_OLD_OUT, _OUT_REQUIRED = "_udcg_old_out", "_udcg_out_required"
#: the note of an output given as the old positional OUT
OLD_OUT_NOTE = "OUT as a positional argument is deprecated: use -o/--out OUT"


def split_items(text: str) -> list[str]:
    """The items of one value of a list option: ``"nDCG@10, AP"`` -> ``["nDCG@10", "AP"]``;
    commas and whitespace inside parentheses do not split (``UDCG(gamma=0.5, x=1)@5``)."""
    items, current, depth = [], [], 0
    for char in text:
        depth += (char == "(") - (char == ")")
        if depth <= 0 and (char == "," or char.isspace()):
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    items.append("".join(current))
    return [item for item in items if item]


def note(namespace: argparse.Namespace, text: str) -> None:
    """Queue a deprecation note of this parse; :func:`parse` prints each once."""
    notes = getattr(namespace, _NOTES, None) or []
    if text not in notes:
        setattr(namespace, _NOTES, [*notes, text])


class ListAction(argparse.Action):
    """A list option: one value per flag, the flag repeatable, the items of each value
    (:func:`split_items`) added in order to the list (which replaces the default), an empty
    value an error; ``items``, when given, are the names an item may take; ``whole``: each
    value is one item (a path or URL, which may hold commas and spaces)."""

    def __init__(
        self, *args: Any, items: Sequence[str] | None = None, whole: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.items = None if items is None else list(items)
        self.whole = whole

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        current = getattr(namespace, self.dest, None)
        added = [] if current is None or current is self.default else list(current)
        items = [values] if self.whole else split_items(values)
        if not items or not all(str(item).strip() for item in items):
            raise argparse.ArgumentError(self, f"expected an item, got {values!r}")
        for item in items:
            if self.items is not None and item not in self.items:
                raise argparse.ArgumentError(
                    self, f"invalid choice: {item!r} (choose from {', '.join(self.items)})"
                )
            added.append(item)
        setattr(namespace, self.dest, added)


class OnceAction(argparse.Action):
    """A single-valued option that may be given once: a second one in the same command line is
    an error rather than silently replacing the first (``--weights A --weights B``).

    Examples:
        >>> parser = CommandParser(prog="udcg x", description="An example.")
        >>> _ = parser.add_argument("--weights", action=OnceAction)
        >>> parser.parse_args(["--weights", "w3"]).weights
        'w3'
    """

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        first = getattr(namespace, self.dest, None)
        if first not in (None, self.default):
            raise argparse.ArgumentError(
                self, f"given twice ({first!r}, then {values!r}): this command takes one"
            )
        setattr(namespace, self.dest, values)


class DeprecatedAlias(argparse.Action):
    """An old spelling of ``target``'s option (hidden from ``--help``): queues one note naming
    the new spelling, then acts as ``target`` does on the value, mapped by ``mapping`` when
    the old spelling took other values."""

    def __init__(
        self,
        *args: Any,
        target: argparse.Action,
        mapping: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.target = target
        self.mapping = mapping

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        new = "/".join(self.target.option_strings)
        if self.mapping is None:
            note(namespace, f"{option_string} is deprecated: use {new}")
        else:
            old, values = values, self.mapping[values]
            note(namespace, f"{option_string} {old} is deprecated: use {new} {values}")
        self.target(parser, namespace, values, self.target.option_strings[-1])


def add_list_option(
    parser: Any,
    *flags: str,
    items: Sequence[str] | None = None,
    whole: bool = False,
    **kwargs: Any,
) -> argparse.Action:
    """A list option (:class:`ListAction`) on ``parser`` (a parser or an argument group);
    ``items``: the names an item may take; ``whole``: one item per flag (paths, URLs)."""
    if items is not None:
        kwargs.setdefault("metavar", "{" + ",".join(items) + "}")
    return parser.add_argument(*flags, action=ListAction, items=items, whole=whole, **kwargs)


def add_deprecated(
    parser: Any, old: str, target: argparse.Action, mapping: dict[str, str] | None = None
) -> argparse.Action:
    """``old``: a hidden, deprecated spelling of ``target`` (one note names the new one);
    ``mapping``: its values -> ``target``'s."""
    return parser.add_argument(
        old,
        action=DeprecatedAlias,
        target=target,
        mapping=mapping,
        dest=target.dest,
        default=argparse.SUPPRESS,
        choices=None if mapping is None else list(mapping),
        metavar=None if mapping is not None else target.metavar,
        help=argparse.SUPPRESS,
    )


def add_out(
    parser: Any,
    help: str,
    required: bool = False,
    old_positional: bool = False,
    folder: bool = False,
    **kwargs: Any,
) -> argparse.Action:
    """``-o/--out PATH``, the output; ``old_positional``: the output was a positional OUT
    (after the other positionals), still taken with a note; ``folder``: the output is a
    folder (:func:`output_folder`), else a file (:func:`output_path`)."""
    kwargs.setdefault("type", output_folder if folder else output_path)
    if not old_positional:
        return parser.add_argument("-o", "--out", required=required, help=help, **kwargs)
    action = parser.add_argument(
        "-o", "--out", help=help + (" (required)" if required else ""), **kwargs
    )
    parser.add_argument(_OLD_OUT, nargs="?", metavar="OUT", help=argparse.SUPPRESS)
    parser.set_defaults(**{_OUT_REQUIRED: required})
    return action


def _list_flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Each flag of a list option (old spellings included) of ``parser`` and its subcommands."""
    flags: dict[str, argparse.Action] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                flags.update(_list_flags(sub))
        target = action.target if isinstance(action, DeprecatedAlias) else action
        if isinstance(target, ListAction):
            flags.update(dict.fromkeys(action.option_strings, action))
    return flags


def _old_list_form(parser: argparse.ArgumentParser, argv: list[str], extras: list[str]) -> list:
    """``argv`` with the flag repeated before each value of the old form ``-m A B C``: the
    ``extras`` argparse left over that directly follow a list option's value; [] when none."""
    flags = _list_flags(parser)
    followers: list[tuple[int, str]] = []  # (index in argv, flag)
    i = 0
    while i < len(argv) and argv[i] != "--":
        flag, eq, _ = argv[i].partition("=")
        if flag not in flags:
            i += 1
            continue
        i += 1 if eq else 2
        while i < len(argv) and (argv[i] == "-" or not argv[i].startswith("-")):
            followers.append((i, flag))
            i += 1
    inserts: dict[int, str] = {}
    start = 0
    for extra in extras:
        match = next(
            (j for j in range(start, len(followers)) if argv[followers[j][0]] == extra), None
        )
        if match is not None:
            inserts.setdefault(*followers[match])
            start = match + 1
    if not inserts:
        return []
    out: list[str] = []
    for index, token in enumerate(argv):
        if index in inserts:
            out.append(inserts[index])
        out.append(token)
    return out


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse ``argv`` as every command does (docs/cli.md): options before or after the files;
    the old form of a list option (``-m A B C``) and old spellings taken with one note each on
    stderr; anything else left over is a usage error (exit status 2)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args, extras = parser.parse_known_args(argv)
    if extras:
        rewritten = _old_list_form(parser, argv, extras)
        if rewritten:
            args, extras = parser.parse_known_args(rewritten)
            note(args, "several values after one flag are deprecated: repeat the flag "
                 "(-m A -m B) or join the values with commas (-m A,B)")  # fmt: skip
        if extras:
            parser.error(f"unrecognized arguments: {' '.join(extras)}")
    notes = vars(args).pop(_NOTES, None) or []
    old_out = vars(args).pop(_OLD_OUT, None)
    required = vars(args).pop(_OUT_REQUIRED, False)
    if old_out is not None:
        if args.out is not None:
            parser.error("the output is given twice: as OUT and as -o/--out")
        try:
            args.out = output_path(old_out)
        except argparse.ArgumentTypeError as exc:
            parser.error(str(exc))
        notes.append(OLD_OUT_NOTE)
    if required and args.out is None:
        parser.error("the following arguments are required: -o/--out")
    for text in notes:
        print(f"{parser.prog}: note: {text}", file=messages())
    return args


def add_measures(parser: Any, default: Sequence[str], help: str) -> argparse.Action:
    """``-m/--measure MEASURE`` (a list option; ``--measures``: old)."""
    action = add_list_option(
        parser, "-m", "--measure", dest="measures", default=list(default), metavar="MEASURE",
        help=f"{help} (repeatable, or comma-separated; default: {','.join(default)})",
    )  # fmt: skip
    add_deprecated(parser, "--measures", action)
    return action


def add_judge_key(parser: Any, help: str, metavar: str = "KEY") -> argparse.Action:
    """``--judge-key KEY``: the key a judge's labels are stored and read under
    (``--judge-name``: old)."""
    action = parser.add_argument("--judge-key", metavar=metavar, help=help)
    add_deprecated(parser, "--judge-name", action)
    return action


#: ``--utility`` of a file of values that are the utilities themselves.
GIVEN = "given"


def add_utility(
    parser: Any, help: str, given: bool = False, default: str | None = None
) -> argparse.Action:
    """``--utility SOURCE``: a utility source of :mod:`udcg.io.joins.utility_sources`, or
    (``given``) ``given``, values that are u itself; with ``given``, the old ``--utility-field
    FIELD``
    too (its values mapped to sources)."""
    from udcg.io.joins.utility_sources import SOURCES

    choices = [*SOURCES, *([GIVEN] if given else [])]
    action = parser.add_argument("--utility", choices=choices, default=default, help=help)
    if given:
        fields = {source.field: name for name, source in SOURCES.items()}
        add_deprecated(parser, "--utility-field", action, {**fields, "utility": GIVEN})
    return action


def utility_field(utility: str | None) -> str | None:
    """The field of values ``--utility`` names (None: the file says; ``given``: ``utility``)."""
    from udcg.io.joins.utility_sources import get_source

    if utility is None:
        return None
    return "utility" if utility == GIVEN else get_source(utility).field
