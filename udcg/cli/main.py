"""``udcg COMMAND [ARGS]``: one console script for every command of the toolkit."""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Sequence

#: command -> (module with ``main(argv) -> int``, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "trec": ("udcg.cli.trec", "evaluate a TREC run against qrels (trec_eval semantics)"),
    "compare": ("udcg.cli.compare", "compare runs with paired significance tests"),
    "contexts": ("udcg.cli.contexts", "join a TREC run with topics and a collection"),
    "annotate": ("udcg.cli.annotate", "judge labels for a contexts file"),
    "score": ("udcg.cli.score", "UDCG, UDCG-theta and classic metrics per context"),
    "qcare": ("udcg.cli.qcare", "Q-CARE labels, scores and judge-human agreement"),
    "demo": ("udcg.cli.demo", "rebuild the embedded demo set with the judge"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items()]
    return (
        "usage: udcg [--version] COMMAND [ARGS]\n\ncommands:\n"
        + "\n".join(lines)
        + "\n\n'udcg COMMAND --help' describes one command."
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to the command's module; returns the exit status (2 for a usage mistake)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage(), file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    if args[0] == "--version":
        from udcg import __version__

        print(f"udcg {__version__}")
        return 0
    command = COMMANDS.get(args[0])
    if command is None:
        print(
            f"udcg: error: unknown command {args[0]!r} (choose from {', '.join(COMMANDS)})",
            file=sys.stderr,
        )
        return 2
    run = importlib.import_module(command[0]).main
    gc.freeze()  # the modules just imported live as long as the process
    return run(args[1:])


if __name__ == "__main__":
    sys.exit(main())
