"""``udcg merge-shards IN.jsonl SHARD.jsonl... -o OUT.jsonl``: join the outputs of
``udcg annotate --shard I/N`` back into the order of IN, the unsharded input (streamed; see
:mod:`udcg.labels.shards`). The result is byte for byte what one unsharded run writes, with the
manifest one unsharded run writes (``OUT.manifest.json``). A missing, incomplete or foreign
shard, a shard without its manifest, shards of different judges, steps or options, a shard cut
from an edited input or edited after it was written, and an OUT that names IN or a shard are
one-line errors, and OUT is left untouched."""

from __future__ import annotations

import argparse
import sys

from udcg.cli.common import (
    OLD_OUT_NOTE,
    CommandParser,
    info_stream,
    messages,
    output_path,
    parse,
    run_cli,
)
from udcg.labels.shards import merge_shards


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``udcg merge-shards``."""
    parser = CommandParser(
        prog="udcg merge-shards",
        description="Join the outputs of udcg annotate --shard I/N back into the order of the "
        "unsharded input, byte for byte what one unsharded run writes.",
    )
    parser.add_argument("input", help="the contexts file the shards were cut from (gzip ok)")
    parser.add_argument(
        "shards",
        nargs="+",
        help="the N shard outputs: part-I-of-N names are put in order, others taken as given",
    )
    parser.add_argument(
        "-o",
        "--out",
        type=output_path,
        help="merged contexts JSONL (.gz compresses; - is stdout); without it, the first "
        "file after IN (the old positional OUT, deprecated)",
    )
    return parser


def _old_out(args: argparse.Namespace) -> None:
    """The old form ``IN OUT SHARD...``: OUT is the first file after IN (one note says so)."""
    if args.out is not None:
        return
    if len(args.shards) < 2:
        build_parser().error("the following arguments are required: -o/--out")
    try:
        args.out, args.shards = output_path(args.shards[0]), args.shards[1:]
    except argparse.ArgumentTypeError as exc:
        build_parser().error(str(exc))
    print(f"udcg merge-shards: note: {OLD_OUT_NOTE}", file=messages())


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for a user mistake)."""
    args = parse(build_parser(), argv)
    _old_out(args)

    def work() -> None:
        count = merge_shards(args.input, args.shards, args.out)
        print(
            f"merged {count} contexts from {len(args.shards)} shards",
            file=info_stream(args.out),
        )

    return run_cli("udcg merge-shards", work)


if __name__ == "__main__":
    sys.exit(main())
