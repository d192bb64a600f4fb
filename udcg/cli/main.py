"""``udcg COMMAND [ARGS]``: one console script for every command of the toolkit."""

from __future__ import annotations

import gc
import importlib
import io
import sys
from collections.abc import Sequence
from typing import TextIO

from udcg._threads import one_blas_thread
from udcg.cli.extras import missing_extras, missing_module_error, needs

#: command -> (``module`` with ``main(argv) -> int``, or ``module:function``; one-line help;
#: the extras it needs, checked before the command's module is imported)
COMMANDS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "trec": ("udcg.cli.trec", "evaluate a TREC run against qrels (trec_eval semantics)", ()),
    "compare": ("udcg.cli.compare", "compare runs with paired significance tests", ()),
    "report": ("udcg.cli.report", "runs of N systems + a judge -> one comparison report", ()),
    "contexts": ("udcg.cli.contexts", "join a TREC run with topics and a collection", ()),
    "annotate": ("udcg.cli.annotate", "judge labels for a contexts file", ()),
    "merge-shards": ("udcg.cli.merge_shards", "join annotate --shard outputs in input order", ()),
    "cache": ("udcg.cli.cache", "judge caches: merge several, show counts", ()),
    "batch": ("udcg.cli.batch", "judge calls as an offline batch file: export, import", ()),
    "score": ("udcg.cli.score", "UDCG, UDCG-theta and classic metrics per context", ()),
    "weights": ("udcg.cli.weights", "UDCG-theta weights: show the card, calibrate", ()),
    "probe": ("udcg.cli.probe", "ask a judge server what each annotate step gets from it", ()),
    "order": ("udcg.cli.order", "choose and order context passages (UDCG-theta, heuristics)", ()),
    "qcare": ("udcg.cli.qcare", "Q-CARE labels, scores and judge-human agreement", ()),
    "tables": (
        "udcg.cli.tables",
        "UDCG's Table 1 (distractors) and Table 2 (selection) on NQ-open",
        ("judge", "retrieval"),
    ),
    "demo": ("udcg.cli.demo", "rebuild the embedded demo set with the judge", ("judge",)),
    "train": (
        "udcg.cli.train:command",
        "fit UDCG-theta, tune gamma, compare metrics (Hydra: udcg train k=5)",
        ("train",),
    ),
    "benchmark": (
        "udcg.cli.benchmark:command",
        "which metric predicts answers, which retriever to ship (Hydra)",
        ("train", "judge", "retrieval"),
    ),
}
#: commands whose numpy work makes no large matrix products: started as a process, numpy's
#: OpenBLAS runs without its thread pool (docs/cli.md, "Process settings")
_ONE_BLAS_THREAD = frozenset({"trec"})

#: old command name -> its new name (still run, with a note on stderr)
RENAMED: dict[str, str] = {"evaluate": "benchmark"}

#: extras to name first for a missing module that several extras provide (torch)
_JUDGE_FIRST = ("judge",)


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {text}" for name, (_, text, _) in COMMANDS.items()]
    return (
        "usage: udcg [--version] COMMAND [ARGS]\n\ncommands:\n"
        + "\n".join(lines)
        + "\n\n'udcg COMMAND --help' describes one command."
    )


def _messages() -> TextIO:
    """Standard error, or a sink when it is closed (udcg.cli.common.messages, without its
    imports: numpy must not be loaded before the thread setting)."""
    closed = sys.stderr is None or sys.stderr.closed
    return io.StringIO() if closed else sys.stderr


def _answer(text: str) -> int:
    """Print ``text`` (the usage, the version) on standard output: 0, or 2 with one line on
    standard error when it cannot be written (open for reading only)."""
    try:
        if sys.stdout is not None and not sys.stdout.closed:
            print(text, file=sys.stdout, flush=True)
    except OSError as exc:
        print(f"udcg: error: standard output: {exc.strerror or exc}", file=_messages())
        return 2
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to the command's module; returns the exit status (2 for a usage mistake or a
    missing extra). Run as the console script (``argv`` None), it makes the process settings
    of docs/cli.md ("Process settings"); called with ``argv``, none."""
    process = argv is None
    args = list(sys.argv[1:] if process else argv)
    if not args:
        print(_usage(), file=_messages())
        return 2
    if args[0] in ("-h", "--help"):
        return _answer(_usage())
    if args[0] == "--version":
        from udcg import __version__

        return _answer(f"udcg {__version__}")
    if args[0] in RENAMED:
        old, args[0] = args[0], RENAMED[args[0]]
        print(f"udcg: note: udcg {old} is deprecated: use udcg {args[0]}", file=_messages())
    command = COMMANDS.get(args[0])
    if command is None:
        print(
            f"udcg: error: unknown command {args[0]!r} (choose from {', '.join(COMMANDS)})",
            file=_messages(),
        )
        return 2
    target, _, extras = command
    prog = f"udcg {args[0]}"
    missing = missing_extras(extras)
    if missing:
        print(f"{prog}: error: {needs(missing)}", file=_messages())
        return 2
    module, _, function = target.partition(":")
    if process and args[0] in _ONE_BLAS_THREAD:
        one_blas_thread()  # before numpy is imported
    try:
        run = getattr(importlib.import_module(module), function or "main")
        if process:
            gc.freeze()  # the modules just imported live as long as the process
        return run(args[1:])
    except ModuleNotFoundError as exc:  # an optional dependency imported on the way
        message = missing_module_error(exc, prefer=extras or _JUDGE_FIRST)
        if message is None:
            raise
        print(f"{prog}: error: {message}", file=_messages())
        return 2


if __name__ == "__main__":
    sys.exit(main())
