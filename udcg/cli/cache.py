"""``udcg cache merge OUT.sqlite IN.sqlite...`` and ``udcg cache stats FILE...``: the judge
caches of several machines joined into one, and what a cache file holds.

``merge`` adds to OUT (created when missing) every entry of each IN whose key OUT lacks, each IN
in one transaction, in the order given. A key already in OUT keeps OUT's value, so the first file
to hold a key wins; keys holding a different value (a judge that is not deterministic across
machines) are counted as conflicts and printed, never silently replaced. ``stats`` prints the
number of entries and the span of their write times.
"""

from __future__ import annotations

import argparse
import sys
import time

from udcg.cli.common import run_cli
from udcg.judge.cache import JudgeCache


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="udcg cache", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    merge = commands.add_parser("merge", help="add the entries of IN files to OUT")
    merge.add_argument("output", help="cache file to merge into (created when missing)")
    merge.add_argument("inputs", nargs="+", help="cache files to merge from")
    stats = commands.add_parser("stats", help="entries and write times of cache files")
    stats.add_argument("files", nargs="+")
    return parser


def _when(seconds: float | None) -> str:
    return "-" if seconds is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds))


def merge(output: str, inputs: list[str]) -> None:
    """Merge ``inputs`` into ``output``, one summary line per input."""
    for path in inputs:  # every input checked before OUT is created or touched
        JudgeCache.check_file(path)
    with JudgeCache(output) as cache:
        for path in inputs:
            counts = cache.merge_from(path)
            line = f"{path}: {counts.added} added, {counts.same} already there"
            if counts.conflicts:
                line += f", {counts.conflicts} with a different value (kept as in {output})"
            print(line)
        print(f"{output}: {len(cache)} entries")


def stats(files: list[str]) -> None:
    """One line per cache file: entries, oldest and newest write (UTC)."""
    for path in files:
        JudgeCache.check_file(path)
        with JudgeCache(path) as cache:
            info = cache.summary()
        print(
            f"{path}: {info['entries']} entries, written {_when(info['oldest'])} to "
            f"{_when(info['newest'])} UTC"
        )


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for a user mistake)."""
    args = _parser().parse_args(argv)

    def work() -> None:
        if args.command == "merge":
            merge(args.output, args.inputs)
        else:
            stats(args.files)

    return run_cli(f"udcg cache {args.command}", work)


if __name__ == "__main__":
    sys.exit(main())
