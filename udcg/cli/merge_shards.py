"""``udcg merge-shards IN.jsonl OUT.jsonl SHARD.jsonl...``: join the outputs of
``udcg annotate --shard I/N`` back into the order of IN, the unsharded input (streamed; see
:mod:`udcg.labels.shards`). The result is byte for byte what one unsharded run writes, with the
manifest one unsharded run writes (``OUT.manifest.json``). A missing, incomplete or foreign
shard, a shard without its manifest, shards of different judges, steps or options, a shard cut
from an edited input or edited after it was written, and an OUT that names IN or a shard are
one-line errors, and OUT is left untouched."""

from __future__ import annotations

import argparse
import sys

from udcg.cli.common import info_stream, run_cli
from udcg.labels.shards import merge_shards


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="udcg merge-shards", description=__doc__.splitlines()[0])
    parser.add_argument("input", help="the contexts file the shards were cut from (gzip ok)")
    parser.add_argument("output", help="merged contexts JSONL (.gz compresses; - is stdout)")
    parser.add_argument(
        "shards",
        nargs="+",
        help="the N shard outputs: part-I-of-N names are put in order, others taken as given",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for a user mistake)."""
    args = _parser().parse_args(argv)

    def work() -> None:
        count = merge_shards(args.input, args.shards, args.output)
        print(
            f"merged {count} contexts from {len(args.shards)} shards",
            file=info_stream(args.output),
        )

    return run_cli("udcg merge-shards", work)


if __name__ == "__main__":
    sys.exit(main())
