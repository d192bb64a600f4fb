"""``udcg cache merge|stats|checkpoint|drop``: the judge caches of several machines joined into
one, what a cache file holds, and its upkeep.

``merge OUT IN...`` adds to OUT (created when missing) every entry of each IN whose key OUT
lacks, each IN in one transaction, in the order given. A key already in OUT keeps OUT's value,
so the first file to hold a key wins; keys holding a different value (a judge that is not
deterministic across machines) are counted as conflicts and printed, never silently replaced.
An IN entry whose value is of no cached form (not JSON; a probability outside [0, 1]; a write
time that is not a number) is skipped and counted, and the command exits with status 1. Each IN
is opened through SQLite, so the entries of its ``IN-wal`` file count when that file sits
beside it.

``stats FILE...`` prints the number of entries and the span of their write times.

``checkpoint FILE...`` moves every committed entry from ``FILE-wal`` into ``FILE``: after a
process writing the cache was killed, its last entries live in ``FILE-wal``, and a copy of
``FILE`` alone lacks them. Run it (with no process writing the cache) before copying a cache
to another machine, or copy ``FILE-wal`` with it.

``drop FILE KEY...`` deletes the named entries (a run refuses an entry it cannot use, naming
the file and the key; the next run computes a dropped entry again); ``drop FILE --bounds``
deletes every value stored as an upper bound (e.g. kept while a server could not echo), so
the next run asks for them again.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from udcg.cli.common import CommandParser, info_stream, parse, run_cli
from udcg.errors import UDCGInputError
from udcg.io.files import refuse_same_file, standard_output
from udcg.judge.cache import JudgeCache, cache_files


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``udcg cache`` and its actions."""
    parser = CommandParser(
        prog="udcg cache",
        description="Keep judge caches: merge the caches of several machines into one, count "
        "what a cache holds, checkpoint it, drop entries.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    merge = commands.add_parser(
        "merge",
        help="add the entries of IN files to OUT",
        description="Add to OUT every entry of each IN whose key OUT lacks; a key already in "
        "OUT keeps OUT's value, and a different value is counted as a conflict.",
    )
    merge.add_argument(
        "into", metavar="OUT", help="cache file to merge into (created when missing)"
    )
    merge.add_argument("inputs", metavar="IN", nargs="+", help="cache files to merge from")
    stats = commands.add_parser(
        "stats",
        help="entries and write times of cache files",
        description="Print the number of entries of each cache file and the span of their "
        "write times.",
    )
    stats.add_argument("files", metavar="FILE", nargs="+", help="judge cache files (SQLite)")
    checkpoint = commands.add_parser(
        "checkpoint",
        help="move the entries of FILE-wal into FILE (before copying FILE)",
        description="Move every committed entry of FILE-wal into FILE, so that a copy of FILE "
        "alone holds them.",
    )
    checkpoint.add_argument("files", metavar="FILE", nargs="+", help="judge cache files (SQLite)")
    drop = commands.add_parser(
        "drop",
        help="delete entries by key, or those stored as upper bounds",
        description="Delete the named entries of a cache file, and with --bounds every value "
        "stored as an upper bound; the next run computes them again.",
    )
    drop.add_argument("file", metavar="FILE", help="judge cache file (SQLite)")
    drop.add_argument("keys", metavar="KEY", nargs="*", help="cache keys to delete")
    drop.add_argument(
        "--bounds",
        action="store_true",
        help="also delete every value stored as an upper bound (asked again by the next run)",
    )
    return parser


def _when(seconds: float | None) -> str:
    return "-" if seconds is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds))


def merge(output: str, inputs: list[str]) -> int:
    """Merge ``inputs`` into ``output``, one summary line per input; 1 when invalid entries
    were skipped, else 0."""
    for path in inputs:  # every input checked before OUT is created or touched
        JudgeCache.check_file(path)
    for path in inputs:  # nor one SQLite deletes when it closes an input
        refuse_same_file(output, cache_files(path, f"IN {path}"))
    if output.endswith(("/", os.sep)) or Path(output).is_dir():
        raise UDCGInputError("is a folder: OUT is the cache file to write", path=output)
    skipped = 0
    with JudgeCache(output) as cache:
        for path in inputs:
            counts = cache.merge_from(path)
            line = f"{path}: {counts.added} added, {counts.same} already there"
            if counts.conflicts:
                line += f", {counts.conflicts} with a different value (kept as in {output})"
            if counts.invalid:
                line += (
                    f", {counts.invalid} invalid entries skipped (not a cached value; first: "
                    f"{counts.first_invalid})"
                )
            skipped += counts.invalid
            print(line, file=info_stream())
        print(f"{output}: {len(cache)} entries", file=info_stream())
    return 1 if skipped else 0


def stats(files: list[str]) -> None:
    """One line per cache file: entries, oldest and newest write (UTC), on standard output
    (closed or open for reading only: refused before the files are read)."""
    out = standard_output()
    for path in files:
        JudgeCache.check_file(path)
        with JudgeCache(path) as cache:
            info = cache.summary()
        print(
            f"{path}: {info['entries']} entries, written {_when(info['oldest'])} to "
            f"{_when(info['newest'])} UTC",
            file=out,
        )


def checkpoint(files: list[str]) -> int:
    """Checkpoint each cache file; 1 when another process kept part of a WAL, else 0."""
    status = 0
    for path in files:
        JudgeCache.check_file(path)
        with JudgeCache(path) as cache:
            complete = cache.checkpoint()
            entries = len(cache)
        if complete:
            print(f"{path}: {entries} entries, all in {path}", file=info_stream())
        else:
            status = 1
            print(
                f"{path}: {entries} entries; another process holds a transaction open, so "
                f"part of them stay in {path}-wal: run this again when it has stopped",
                file=info_stream(),
            )
    return status


def drop(path: str, keys: list[str], bounds: bool) -> None:
    """Delete ``keys``, and with ``bounds`` the upper bounds, from the cache file ``path``."""
    if not keys and not bounds:
        raise UDCGInputError("name the keys to drop, or give --bounds")
    JudgeCache.check_file(path)
    with JudgeCache(path) as cache:
        dropped = cache.drop(keys, bounds)
    named = f"{len(set(keys))} keys named" + (" and every upper bound" if bounds else "")
    what = f"{dropped} entries ({named})" if bounds else f"{dropped} of {len(set(keys))} keys"
    print(f"{path}: dropped {what}", file=info_stream())


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for a user mistake, 1 for skipped entries or an
    incomplete checkpoint)."""
    args = parse(build_parser(), argv)

    def work() -> int | None:
        if args.command == "merge":
            return merge(args.into, args.inputs)
        if args.command == "checkpoint":
            return checkpoint(args.files)
        if args.command == "drop":
            drop(args.file, args.keys, args.bounds)
            return None
        stats(args.files)
        return None

    return run_cli(f"udcg cache {args.command}", work)


if __name__ == "__main__":
    sys.exit(main())
