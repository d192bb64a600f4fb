"""``udcg batch export|import``: the judge calls of ``udcg annotate`` as an offline batch job
(OpenAI Batch API, ``vllm run-batch``), with the same labels as the online path.

``udcg batch export IN.jsonl -o requests.jsonl --judge openai:MODEL@URL [--steps ...]`` writes one
request line per distinct judge call that ``udcg annotate`` with the same arguments would make
and that the judge cache does not hold yet (custom_id: the call's cache key), and
``requests.calls.jsonl``, which says which call each request is. ``--max-lines N`` splits the
requests into ``requests-001.jsonl``, ``requests-002.jsonl``... (the OpenAI Batch API takes at
most 50,000 lines per file). With ``--grader llm`` the grading prompts hold the generated
answers: when answers are still missing, the export holds the answers only, and after their
import a second export holds the grading calls.

``udcg batch import results.jsonl [...] --calls requests.calls.jsonl --judge <same>``
reads batch output lines as the online backend reads replies and stores each value in the judge
cache under its custom_id. Every file is read and checked before anything is stored, and then
all the results are stored in one transaction: a calls line of another judge, or whose
custom_id is not the cache key of its arguments, a custom_id answered twice with different
values (in these files, or in a file and the cache), or a value that is not a probability
refuses the whole import (exit status 2, nothing stored). A line that cannot be used (a batch
error, a status other than 200, a reply without log-probs or of another model, a generation
longer than its request allowed, a custom_id in no calls file) is reported with its file and
line and not stored, the other results are (exit status 1); a custom_id answered twice with the
same value is counted. The judge's run-time settings are recorded in the cache, as online.
With ``-o``, its lock is taken before anything is read.
``udcg annotate IN -o OUT --judge <same>`` then answers every call from the cache;
``--contexts IN.jsonl -o OUT.jsonl`` does that here, with a judge that computes
nothing (a missing result is an error naming the context).

The abstention marker's first token must be known: ``--judge-option abstain_token=TEXT``, else
the server's tokenizer is asked (as online); with neither, a file with abstention calls is an
error. The judge options must be the ones ``udcg annotate`` gets (same cache fingerprint).
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from udcg.cli.annotate import add_step_arguments
from udcg.cli.common import (
    CommandParser,
    add_deprecated,
    add_list_option,
    add_out,
    info_stream,
    messages,
    parse,
    refuse_stdin_twice,
    run_cli,
)
from udcg.cli.judge_args import add_judge_arguments, check_judge_arguments, judge_options
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, read_contexts, write_contexts
from udcg.io.files import STDIO, exclusive_writer
from udcg.io.manifests import file_sha256, made_by, recorded_judges
from udcg.judge import load_judge
from udcg.judge.batch_files import (
    OPENAI_MAX_LINES,
    Call,
    ChatSettings,
    RequestWriter,
    calls_path,
    read_batch,
    read_calls,
    refuse_cache_conflicts,
    request_body,
)
from udcg.judge.cache import JudgeCache, cache_files
from udcg.judge.cached import CachedJudge
from udcg.judge.openai_backend import OpenAIJudge
from udcg.judge.prompts import ABSTAIN_MARKER
from udcg.judge.requests import MissingResults, Request, item_key
from udcg.judge.spec import OPENAI
from udcg.labels.annotate import annotate, check_inputs, operations, refuse_stale_llm_labels
from udcg.labels.provenance import JUDGES, InputDigest, annotation_record, write_manifest
from udcg.labels.stream import refuse_outputs

#: Steps whose calls a batch file can hold (answer likelihoods need /v1/completions with echo).
EXPORTABLE_STEPS = ("abstain", "relevance", "outcomes")
#: Line errors printed one by one before the rest are only counted.
SHOWN_ERRORS = 20


def _add_annotation_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``udcg annotate`` that decide which judge calls are made (the judge
    calls themselves run elsewhere: no ``--max-concurrency``, ``--engine`` or Ray option)."""
    add_step_arguments(parser, EXPORTABLE_STEPS)
    add_judge_arguments(parser, calls=False)


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``udcg batch`` and its actions."""
    parser = CommandParser(
        prog="udcg batch",
        description="Run the judge calls of udcg annotate as an offline batch job (OpenAI "
        "Batch API, vllm run-batch): export the requests, import the results.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="export|import")
    export = commands.add_parser(
        "export",
        help="write the judge requests of a contexts file as a batch input file",
        description="Write one request line per judge call udcg annotate would make that the "
        "judge cache does not hold yet, and the calls file beside it.",
    )
    export.add_argument("input", help="contexts JSONL (gzip ok; - reads stdin)")
    add_out(
        export,
        "requests JSONL; the calls file is written beside it",
        required=True,
        old_positional=True,
    )
    export.add_argument(
        "--max-lines",
        type=int,
        metavar="N",
        help=f"split the requests into files of at most N lines (OpenAI: {OPENAI_MAX_LINES})",
    )
    _add_annotation_arguments(export)
    imports = commands.add_parser(
        "import",
        help="store batch results in the judge cache (and label a contexts file)",
        description="Store the values of batch output files in the judge cache, each under "
        "its custom_id, and label a contexts file from the cache.",
    )
    imports.add_argument("results", nargs="+", help="batch output JSONL files")
    add_list_option(
        imports,
        "--calls",
        required=True,
        metavar="FILE",
        whole=True,
        help="the calls files written by the export (repeatable)",
    )
    imports.add_argument("--contexts", help="contexts JSONL to label from the cache")
    out = add_out(imports, "labelled contexts JSONL (with --contexts)")
    add_deprecated(imports, "--output", out)
    _add_annotation_arguments(imports)
    return parser


def _openai_judge(args: argparse.Namespace) -> OpenAIJudge:
    """The judge of ``args`` as ``udcg annotate`` builds it (same fingerprint), not probed."""
    check_judge_arguments(args)
    if not args.judge.startswith(OPENAI):
        raise UDCGInputError(
            "batch files hold requests to an OpenAI-compatible server: expected "
            f"openai:MODEL@BASE_URL, got {args.judge!r}",
            field="judge",
        )
    judge = load_judge(args.judge, args.judge_key, **judge_options(args))
    assert isinstance(judge, OpenAIJudge)
    return judge


def abstain_marker(judge: OpenAIJudge) -> str:
    """The text of the first token of NO-RESPONSE: ``abstain_token``, else the server
    tokenizer's answer; an error when neither is known (a batch cannot guess it)."""
    if judge.abstain_token is not None:
        return judge.abstain_token
    text = judge.server_abstain_token()
    if text is None:
        raise UDCGInputError(
            f"the first token of {ABSTAIN_MARKER} is unknown: no tokenizer endpoint of "
            f"{judge.base_url} answered; pass --judge-option abstain_token=TEXT (and the same "
            "option to udcg annotate)",
            field="abstain_token",
        )
    return text


def key_settings(judge: OpenAIJudge) -> Callable[[str], dict[str, Any]]:
    """``judge.key_settings``, with the abstention token resolved by :func:`abstain_marker`
    first (so that it is refused, never guessed); abstention keys are refused for a judge
    that scores tokens outside the top log-probs by echo, which a batch cannot."""

    def settings(operation: str) -> dict[str, Any]:
        if operation == "abstain_prob":
            abstain_marker(judge)
            if judge.scores_continuations:
                raise UDCGInputError(
                    "a batch cannot score abstention tokens outside the top log-probs by echo:"
                    " pass --judge-option exact_bounds=off (and the same option to udcg"
                    " annotate)",
                    field="exact_bounds",
                )
        return judge.key_settings(operation)

    return settings


def _chat(judge: OpenAIJudge) -> ChatSettings:
    return ChatSettings(judge.model, judge.extra_body, judge.top_logprobs)


# -- export ---------------------------------------------------------------------------------------


def _checked_contexts(path: str, args: argparse.Namespace, judge: OpenAIJudge) -> list[Context]:
    """The contexts of ``path``, checked as ``udcg annotate`` checks them: the fields the steps
    need, and no LLM relevance label of another judge (or of this key from another fingerprint,
    as ``path``'s manifest records it) kept as given."""
    contexts = list(read_contexts(path))
    check_inputs(contexts, args.steps, args.relevance, judge=judge.name)
    if args.relevance == "llm" and "relevance" in args.steps:
        recorded = recorded_judges(path).get(judge.name, {}).get("relevance")
        refuse_stale_llm_labels(contexts, judge.name, judge.fingerprint, recorded)
    return contexts


def _export(args: argparse.Namespace) -> None:
    inputs = {"input": args.input, **cache_files(args.cache)}
    for path in (args.out, calls_path(args.out)):
        refuse_outputs(path, inputs)
    # the lock comes first: a second export to OUT is refused before it loads a judge
    with exclusive_writer(args.out, "batch requests file"):
        _export_locked(args, inputs)


def _export_locked(args: argparse.Namespace, inputs: dict[str, str | None]) -> None:
    judge = _openai_judge(args)
    contexts = _checked_contexts(args.input, args, judge)
    if "abstain" in args.steps:
        abstain_marker(judge)
    settings = key_settings(judge)
    cached = CachedJudge.from_cache(judge.name, judge.fingerprint, args.cache, settings)
    chat = _chat(judge)
    counts: Counter[str] = Counter()
    waiting = 0

    def missing(steps: list[str], grader: str) -> list[Request]:
        try:
            annotate(
                contexts, cached, steps, args.relevance, grader, max_new_tokens=args.max_new_tokens
            )
        except MissingResults as exc:
            return exc.requests
        return []

    with RequestWriter(args.out, args.max_lines, inputs) as writer:
        written: set[str | None] = set()
        for step in args.steps:  # each step alone: the misses of one do not hide the next's
            grading = step == "outcomes" and args.grader == "llm"
            requests = missing([step], "span" if grading else args.grader)
            if grading and requests:  # the grading prompts hold the answers: they wait
                waiting = len(requests)
            elif grading:
                requests = missing([step], "llm")
            for request in requests:
                if request.key not in written:
                    written.add(request.key)
                    call = Call.of(request, judge.fingerprint, settings(request.op))
                    writer.write(call, request_body(call, chat))
                    counts[request.op] += 1
    ops = ", ".join(f"{op} {n}" for op, n in sorted(counts.items())) or "none"
    files = ", ".join(str(p) for p in writer.paths)
    cache = cached.cache
    print(
        f"wrote {writer.count} requests ({ops}) to {files}; calls: {writer.calls}; "
        f"cache hits {cache.hits}, misses {cache.misses}",
        file=info_stream(),
    )
    if waiting:
        print(
            f"the LLM grading of {waiting} answers waits for them: run this batch, "
            "import its results, then export again",
            file=info_stream(),
        )


# -- import ---------------------------------------------------------------------------------------


def _read_calls(paths: list[str], judge: OpenAIJudge) -> dict[str, Call]:
    """custom_id -> call of the calls files. With ``reply_model``, calls exported without it
    (the same requests: it only checks the replies) are taken too, keyed in the cache as this
    judge's (``Call.custom_id``), whose replies they are."""
    calls: dict[str, Call] = {}
    also = judge.unchecked_fingerprint if judge.reply_model != judge.model else None
    for path in paths:
        for call in read_calls(path, judge.fingerprint, key_settings(judge), also):
            exported = call.custom_id
            if call.judge != judge.fingerprint:
                key = item_key(judge.fingerprint, call.operation, call.args, call.settings)
                call = replace(call, custom_id=key, judge=judge.fingerprint)
            calls[exported] = call
    return calls


def _record_settings(judge: OpenAIJudge, cache: JudgeCache, calls: Iterable[Call]) -> None:
    """Record the run-time settings of the calls' operations in ``cache``, as an online run
    does, so that ``udcg annotate`` answered by the cache needs no server to resolve them."""
    recorder = CachedJudge(judge, cache)
    for operation in sorted({call.operation for call in calls}):
        recorder.key_settings(operation)


def _import(args: argparse.Namespace) -> int:
    given = {"RESULTS": args.results, "--calls": args.calls, "--contexts": args.contexts}
    refuse_stdin_twice(given)
    if (args.contexts is None) != (args.out is None):
        raise UDCGInputError("--contexts and -o/--out go together", field="out")
    if args.out is None:
        return _import_locked(args)
    inputs = {"--contexts": args.contexts, **cache_files(args.cache)}
    inputs.update({f"results {p}": p for p in args.results})
    inputs.update({f"--calls {p}": p for p in args.calls})
    refuse_outputs(args.out, inputs)
    # the lock comes first: a second writer of OUT is refused before any result is read
    with exclusive_writer(args.out, "labelled contexts file"):
        return _import_locked(args)


def _import_locked(args: argparse.Namespace) -> int:
    judge = _openai_judge(args)
    contexts = None
    if args.contexts is not None:
        contexts = _checked_contexts(args.contexts, args, judge)
    calls = _read_calls(args.calls, judge)
    batch = read_batch(
        args.results, calls, lambda: abstain_marker(judge), judge.top_logprobs, judge.reply_model
    )
    with JudgeCache(args.cache) as cache:
        keys = {call.custom_id for call in calls.values()}
        held = cache.get_many(keys, count=False)
        counts = cache.add_new(
            {key: r.stored for key, r in batch.results.items()},
            functools.partial(refuse_cache_conflicts, batch.results, cache=cache.path),
        )
        _record_settings(judge, cache, calls.values())
        path = cache.path
    for message in batch.errors[:SHOWN_ERRORS]:
        print(f"udcg batch import: error: {message}", file=messages())
    if len(batch.errors) > SHOWN_ERRORS:
        print(
            f"udcg batch import: error: ... and {len(batch.errors) - SHOWN_ERRORS} more lines",
            file=messages(),
        )
    out = info_stream(args.out)
    results = batch.results.values()
    operations = Counter(r.call.operation for r in results)
    ops = ", ".join(f"{op} {n}" for op, n in sorted(operations.items())) or "none"
    bounds = sum(r.bound for r in results)
    kept = f"{counts.added} new, {counts.same} already there"  # a conflict stored nothing
    print(
        f"imported {len(batch.results)} results ({ops}; {bounds} bounds) into "
        f"{path} ({kept}); {len(batch.errors)} lines with errors; "
        f"{len(keys - set(batch.results) - set(held))} exported calls without a result in"
        f" the cache; {batch.duplicates} duplicate lines with the same value",
        file=out,
    )
    if contexts is not None:
        cached = CachedJudge.from_cache(
            judge.name, judge.fingerprint, args.cache, key_settings(judge)
        )
        try:
            annotated, report = annotate(
                contexts,
                cached,
                args.steps,
                args.relevance,
                args.grader,
                max_new_tokens=args.max_new_tokens,
            )
        except MissingResults as missing:
            ctx = missing.context
            raise UDCGInputError(
                f"context {ctx.qid!r}: no imported batch holds its {missing.requests[0].op} "
                "result; export its requests, run them and import the results",
                **ctx.location(),
            ) from None
        write_contexts(args.out, annotated, check=False)
        if args.out != STDIO:  # what produced it, as udcg annotate records it
            _write_manifest(args, judge, contexts, key_settings(judge))
        print(
            f"annotated {report.contexts} contexts with {judge.name} from the cache "
            f"(hits {cached.cache.hits}) into {args.out}",
            file=out,
        )
    return 1 if batch.errors else 0


def _write_manifest(
    args: argparse.Namespace,
    judge: OpenAIJudge,
    contexts: list[Context],
    settings: Callable[[str], Any],
) -> None:
    """``OUT.manifest.json`` of a ``batch import -o OUT``: the record ``udcg annotate`` would
    write for these steps (first-token abstention, the whole input), the counts and ``judges``."""
    record = annotation_record(
        judge.name, judge.fingerprint, args.steps, args.relevance, False, args.grader,
        "first_token", args.max_new_tokens, None,
        {op: settings(op) for op in operations(args.steps, args.relevance)},
    )  # fmt: skip
    digest = InputDigest()
    for ctx in contexts:
        digest.add(ctx)
    earlier = recorded_judges(args.contexts)
    judges = made_by(earlier, judge.name, judge.fingerprint, args.steps, args.relevance, False)
    counts = {"contexts": digest.count, "input_sha256": digest.hexdigest()}
    counts |= {"output_sha256": file_sha256(args.out), JUDGES: judges}
    write_manifest(args.out, record, counts)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for a user mistake, 1 for unusable results)."""
    args = parse(build_parser(), argv)
    if args.command == "export":
        return run_cli("udcg batch export", lambda: _export(args))
    return run_cli("udcg batch import", lambda: _import(args))


if __name__ == "__main__":
    sys.exit(main())
