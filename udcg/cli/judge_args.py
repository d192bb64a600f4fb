"""The judge arguments of ``udcg annotate``, ``udcg qcare label``, ``udcg demo`` and the other
commands that ask a judge: the spec, the key its labels are stored under (``--judge-key``),
every backend option, and the cache.

``--judge-option KEY=VALUE`` (repeatable) sets any option of the backend; a value that reads as
JSON (``8``, ``2.5``, ``true``, ``null``, ``{"a": 1}``) is taken as such, ``True``/``False``
as booleans, anything else as a string. ``--max-concurrency``, ``--timeout``, ``--max-retries``,
``--deadline`` and ``--template-tokenizer`` are the same options spelt as flags (a flag wins
over ``--judge-option``). An option the backend does not take is one line listing those it
takes; an openai judge is built (without contacting its server) to check the values too (a
timeout that is not a finite positive number, an ``extra_body`` that is not a JSON object, a
base URL that does not parse), and ``--max-new-tokens`` must be a positive integer.

``--engine ray`` runs the judge calls on Ray actors (:mod:`udcg.judge.ray_engine`, the ``ray``
extra): ``--ray-address``, ``--ray-workers``, ``--ray-gpus-per-worker`` and ``--ray-servers``
set :class:`~udcg.judge.ray_engine.RayOptions`; they need ``--engine ray``. A command whose
judge calls do not run here (``udcg batch``) takes neither.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING, Any

from udcg.cli.common import add_judge_key, add_list_option, close_at_end
from udcg.cli.extras import missing_extras, needs
from udcg.errors import UDCGInputError
from udcg.io.files import STDIO, is_regular_file
from udcg.judge import EMBEDDED, judge_key, load_judge, open_judge
from udcg.judge.options import check_options
from udcg.judge.ray_engine import ENGINES, RayOptions, ray_options
from udcg.judge.spec import OPENAI, PRECOMPUTED
from udcg.validation import positive_int

if TYPE_CHECKING:
    from udcg.judge.cached import CachedJudge

#: Backend options with a flag of their own: (flag, type, metavar, help).
FLAGS: tuple[tuple[str, type, str, str], ...] = (
    ("--max-concurrency", int, "N", "server requests in flight at once (openai judge)"),
    ("--timeout", float, "SECONDS", "per attempt of a server request (openai judge; default 60)"),
    ("--max-retries", int, "N", "retries of a failed server request (openai judge; default 5)"),
    (
        "--deadline",
        float,
        "SECONDS",
        "most time one server request may take, its retries and waits included (openai judge;"
        " default 300)",
    ),
    (
        "--template-tokenizer",
        str,
        "ID",
        "tokenizer whose chat template builds answer-likelihood prompts (openai judge)",
    ),
)
#: Backend options only a command that makes the judge calls itself takes.
CALL_FLAGS = ("--max-concurrency",)
#: Ray options with a flag: (flag, RayOptions field, type, metavar, help).
RAY_FLAGS: tuple[tuple[str, str, type, str, str], ...] = (
    ("--ray-address", "address", str, "ADDR", "Ray cluster to join (auto: this machine's)"),
    (
        "--ray-workers",
        "workers",
        int,
        "N",
        "Ray actors (default: cluster GPUs / GPUs per worker, else CPUs)",
    ),
    ("--ray-gpus-per-worker", "gpus_per_worker", float, "G", "GPUs per actor (default: 0)"),
)
_WORDS = {"true": True, "false": False}


def option_value(text: str) -> Any:
    """A ``--judge-option`` value: JSON when it reads as JSON, True/False, else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return _WORDS.get(text.lower(), text)


def judge_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` as ``(KEY, value)`` (argparse type of ``--judge-option``)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), option_value(value)


def add_judge_arguments(parser: argparse.ArgumentParser, calls: bool = True) -> None:
    """``--judge``, ``--judge-key``, ``--judge-option``, the option flags and ``--cache``;
    ``calls``: a command that makes the judge calls itself, which also takes
    ``--max-concurrency``, ``--engine`` and the Ray flags."""
    group = parser.add_argument_group("judge")
    group.add_argument(
        "--judge",
        default=EMBEDDED,
        help="judge spec: smollm2-135m, a transformers id or path, openai:MODEL@BASE_URL or "
        "precomputed:FILE.jsonl (default: %(default)s)",
    )
    add_judge_key(
        group,
        "key the labels are stored under (default: the spec without connection details: "
        "MODEL for openai:MODEL@BASE_URL, the file name for precomputed:FILE)",
    )
    group.add_argument(
        "--judge-option",
        dest="judge_options",
        metavar="KEY=VALUE",
        type=judge_option,
        action="append",
        default=[],
        help="backend option, repeatable (e.g. batch_size=8, extra_body='{\"a\": 1}')",
    )
    for flag, kind, metavar, helptext in FLAGS:
        if calls or flag not in CALL_FLAGS:
            group.add_argument(flag, type=kind, metavar=metavar, help=helptext)
    if calls:
        group.add_argument(
            "--engine",
            choices=ENGINES,
            default="local",
            help="where judge calls run: this process, or Ray actors (default: %(default)s)",
        )
        for flag, _, kind, metavar, helptext in RAY_FLAGS:
            group.add_argument(flag, type=kind, metavar=metavar, help=helptext)
        add_list_option(
            group,
            "--ray-servers",
            metavar="URL",
            whole=True,
            help="base URLs of a pool of servers of the openai judge's deployment, one per "
            "actor in turn (repeatable)",
        )
    group.add_argument(
        "--cache",
        help="judge cache (SQLite); default $UDCG_CACHE_DIR/judge.sqlite, else "
        "~/.cache/udcg/judge.sqlite, shared by every command",
    )


def judge_options(args: argparse.Namespace) -> dict[str, Any]:
    """The backend options of ``args``: ``--judge-option`` pairs, then the flags that are set."""
    options = dict(args.judge_options)
    for flag, *_ in FLAGS:  # those of the command (batch takes no --max-concurrency)
        name = flag.removeprefix("--").replace("-", "_")
        if getattr(args, name, None) is not None:
            options[name] = getattr(args, name)
    return options


def engine(args: argparse.Namespace) -> RayOptions | None:
    """The Ray options of ``args`` (None for ``--engine local``, which takes no Ray flag, and
    for a command without ``--engine``)."""
    if not hasattr(args, "engine"):
        return None
    values = {field: getattr(args, flag[2:].replace("-", "_")) for flag, field, *_ in RAY_FLAGS}
    values["servers"] = args.ray_servers
    given = {key: value for key, value in values.items() if value is not None}
    if args.engine == "local":
        if given:
            flags = [flag for flag, field, *_ in RAY_FLAGS if field in given]
            flags += ["--ray-servers"] * ("servers" in given)
            raise UDCGInputError(f"{', '.join(flags)} needs --engine ray")
        return None
    return ray_options(given, "--ray-")


def check_judge_arguments(args: argparse.Namespace) -> None:
    """Check the spec, the name, the options, ``--max-new-tokens`` (when the command has it)
    and the engine, before any work (``--engine ray`` without the ``ray`` extra is one line
    naming it). An openai judge is built to check its values; its server is not asked."""
    options = judge_options(args)
    check_options(args.judge, options)
    judge_key(args.judge, args.judge_key)
    if getattr(args, "max_new_tokens", None) is not None:
        positive_int(args.max_new_tokens, "--max-new-tokens")
    if args.judge.startswith(OPENAI):
        load_judge(args.judge, args.judge_key, **options).close()
    if engine(args) is not None and missing_extras(["ray"]):
        raise UDCGInputError(needs(["ray"]))
    _check_piped_judge(args)


def _check_piped_judge(args: argparse.Namespace) -> None:
    """A ``precomputed:`` file that is a pipe (``<(...)``, a FIFO, ``-``) needs ``--judge-key``
    (its name, ``63`` for ``/dev/fd/63``, would store every pipe's labels under one key); Ray
    refuses it (:func:`udcg.judge.ray_engine.worker_specs`)."""
    if not args.judge.startswith(PRECOMPUTED):
        return
    path = args.judge.removeprefix(PRECOMPUTED)
    if path != STDIO and (not os.path.exists(path) or is_regular_file(path)):
        return
    if args.judge_key is None:
        raise UDCGInputError(
            f"{path} is not a regular file: name the labels of a piped precomputed judge with "
            f"--judge-key (its name {judge_key(args.judge)!r} would be every pipe's)",
            field="judge",
        )


def open_cli_judge(args: argparse.Namespace) -> CachedJudge:
    """The judge of ``args`` as :func:`udcg.judge.open_judge` opens it (probed, cached; on
    Ray actors with ``--engine ray``)."""
    opened = open_judge(args.judge, args.judge_key, judge_options(args), args.cache, engine(args))
    return close_at_end(opened)
