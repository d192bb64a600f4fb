"""The command-line grammar (docs/cli.md), checked on every command's parser: a description
that is a complete sentence, help on every option, list options that take one value per flag
and repeat, one spelling per idea (old spellings only as registered deprecated aliases, each
printing one note); and, end to end, ``udcg trec`` in trec_eval's order and in ours."""

from __future__ import annotations

import argparse
import importlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import udcg
from udcg.cli import annotate, compare, merge_shards, report
from udcg.cli.common import DeprecatedAlias, ListAction, parse, split_items
from udcg.cli.main import COMMANDS
from udcg.io.contexts.jsonl import Context, Passage, write_contexts

#: idea -> (its destination, its one spelling)
IDEAS = {
    "output": ("out", ["-o", "--out"]),
    "judge key": ("judge_key", ["--judge-key"]),
    "list size": ("k", ["-k", "--k"]),
    "utility source": ("utility", ["--utility"]),
    "measures": ("measures", ["-m", "--measure"]),
}
#: old spelling -> the spelling its note names
OLD = {
    "--output": "-o/--out",
    "--judge-name": "--judge-key",
    "--utility-field": "--utility",
    "--measures": "-m/--measure",
}
#: options repeated without splitting their values (a KEY=VALUE's value may hold commas)
APPENDED = {"--judge-option"}


def argparse_commands() -> list[str]:
    """The commands whose door is an argparse parser (not Hydra's ``module:function``)."""
    return [name for name, (target, _, _) in COMMANDS.items() if ":" not in target]


def parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and each subcommand's parser, depth first."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from parsers(sub)


def every_parser() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for name in argparse_commands():
        door = importlib.import_module(COMMANDS[name][0])
        for parser in parsers(door.build_parser()):
            yield parser.prog, parser


PARSERS = dict(every_parser())


def test_every_command_is_walked() -> None:
    """Each argparse command and each action of batch, cache, qcare and weights."""
    assert set(argparse_commands()) == set(COMMANDS) - {"train", "benchmark"}
    for prog in ("batch export", "batch import", "cache merge", "qcare label", "weights show"):
        assert f"udcg {prog}" in PARSERS


@pytest.mark.parametrize("prog", list(PARSERS))
def test_a_usage_mistake_with_standard_error_closed_prints_nothing(
    prog: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """argparse prints the usage on standard output when ``sys.stderr`` is None (``2>&-``):
    every command's parser drops it instead, and exits 2."""
    monkeypatch.setattr(sys, "stderr", None)
    with pytest.raises(SystemExit) as info:
        PARSERS[prog].parse_args(["--no-such-option"])
    assert info.value.code == 2
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("prog", list(PARSERS))
def test_the_description_is_a_complete_sentence(prog: str) -> None:
    text = PARSERS[prog].description
    assert text, f"{prog}: no description"
    assert text[0].isupper() and text.endswith("."), f"{prog}: {text!r}"
    assert text.count("``") % 2 == 0 and "`" not in text.replace("``", ""), f"{prog}: {text!r}"
    assert "\n" not in text and "  " not in text, f"{prog}: {text!r}"


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a
        for a in parser._actions
        if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)
    ]


@pytest.mark.parametrize("prog", list(PARSERS))
def test_every_option_has_help(prog: str) -> None:
    for action in options(PARSERS[prog]):
        if isinstance(action, DeprecatedAlias) or action.dest.startswith("_udcg_old"):
            assert action.help == argparse.SUPPRESS  # old spellings stay out of --help
            continue
        assert action.help and action.help != argparse.SUPPRESS, f"{prog}: {action.dest}"


@pytest.mark.parametrize("prog", list(PARSERS))
def test_list_options_take_one_value_per_flag_and_repeat(prog: str) -> None:
    for action in options(PARSERS[prog]):
        if not action.option_strings or isinstance(action, DeprecatedAlias):
            continue
        flag = action.option_strings[-1]
        assert action.nargs in (None, 0), f"{prog} {flag}: nargs={action.nargs!r}"
        if isinstance(action, argparse._AppendAction):
            assert flag in APPENDED, f"{prog} {flag}: a list option is a ListAction"


@pytest.mark.parametrize("prog", list(PARSERS))
def test_one_spelling_per_idea(prog: str) -> None:
    for action in options(PARSERS[prog]):
        if isinstance(action, DeprecatedAlias):
            (old,) = action.option_strings
            assert OLD[old] == "/".join(action.target.option_strings), f"{prog} {old}"
            continue
        assert not set(action.option_strings) & set(OLD), f"{prog}: {action.option_strings}"
        for idea, (dest, spelling) in IDEAS.items():
            if action.dest == dest and action.option_strings:
                assert action.option_strings == spelling, f"{prog}: {idea}"
        if action.dest == "measures":
            assert isinstance(action, ListAction), prog
        assert action.dest not in ("output", "judge_name", "utility_field"), prog


@pytest.mark.parametrize("prog", list(PARSERS))
def test_each_old_spelling_acts_as_the_new_one_with_one_note(prog: str) -> None:
    parser = PARSERS[prog]
    for alias in options(parser):
        if not isinstance(alias, DeprecatedAlias):
            continue
        values = list(alias.mapping or {"A,B": "A,B"})
        for value in values:
            old, new, twice = argparse.Namespace(), argparse.Namespace(), argparse.Namespace()
            alias(parser, old, value, alias.option_strings[0])
            new_value = alias.mapping[value] if alias.mapping else value
            alias.target(parser, new, new_value, alias.target.option_strings[-1])
            assert getattr(old, alias.dest) == getattr(new, alias.dest)
            for _ in range(2):  # used twice: still one note
                alias(parser, twice, value, alias.option_strings[0])
            notes = twice._udcg_notes
            assert len(notes) == 1 and OLD[alias.option_strings[0]] in notes[0]


def test_values_split_on_commas_and_spaces_outside_parentheses() -> None:
    assert split_items("nDCG@10,AP") == ["nDCG@10", "AP"]
    assert split_items(" nDCG@10  AP, ") == ["nDCG@10", "AP"]
    assert split_items("P(rel=2)@5,UDCG(gamma=0.5, x=1)@5") == [
        "P(rel=2)@5",
        "UDCG(gamma=0.5, x=1)@5",
    ]


def test_paths_and_urls_are_one_item_per_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """A path may hold commas and spaces: path-valued list options never split a value."""
    argv = ["qrels", "r1", "r2", "--utilities", "my runs/u,1.tsv", "--utilities", "u 2.tsv"]
    argv += ["--weights", "w, k=5", "-m", "AP,RR"]
    args = parse(compare.build_parser(), argv)
    assert args.utilities == ["my runs/u,1.tsv", "u 2.tsv"]
    assert args.weights == ["w, k=5"]
    assert args.measures == ["AP", "RR"]
    old = parse(compare.build_parser(), ["qrels", "r1", "r2", "--utilities", "a b", "c,d"])
    assert old.utilities == ["a b", "c,d"]
    assert capsys.readouterr().err.count("note:") == 1


def test_old_positional_out_is_taken_with_one_note(capsys: pytest.CaptureFixture[str]) -> None:
    new = parse(annotate.build_parser(), ["in.jsonl", "-o", "out.jsonl", "--steps", "abstain"])
    assert capsys.readouterr().err == ""
    old = parse(annotate.build_parser(), ["in.jsonl", "out.jsonl", "--steps", "abstain"])
    assert vars(old) == vars(new)
    assert capsys.readouterr().err == (
        "udcg annotate: note: OUT as a positional argument is deprecated: use -o/--out OUT\n"
    )
    with pytest.raises(SystemExit):
        parse(annotate.build_parser(), ["in.jsonl", "out.jsonl", "-o", "other.jsonl"])
    assert capsys.readouterr().err.endswith("the output is given twice: as OUT and as -o/--out\n")


def test_merge_shards_old_form(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse(merge_shards.build_parser(), ["in", "out", "s1", "s2"])
    merge_shards._old_out(args)
    assert (args.out, args.shards) == ("out", ["s1", "s2"])
    assert capsys.readouterr().err.count("note:") == 1


def test_old_list_form_steps(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse(annotate.build_parser(), ["in", "-o", "out", "--steps", "abstain", "relevance"])
    assert args.steps == ["abstain", "relevance"]
    assert "several values after one flag are deprecated" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # an unknown step is a usage error
        parse(annotate.build_parser(), ["in", "-o", "out", "--steps", "abstain,nope"])
    assert "invalid choice: 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "AP", "-m", "RR", "qrels", "r1", "r2"],
        ["qrels", "r1", "r2", "-m", "AP", "-m", "RR"],
        ["qrels", "r1", "r2", "-m", "AP,RR"],
        ["qrels", "r1", "r2", "-m", "AP", "RR"],  # the old form, with a note
    ],
)
def test_compare_takes_options_before_or_after_the_runs(argv: list[str], capsys) -> None:
    args = parse(compare.build_parser(), argv)
    assert (args.qrels, args.runs, args.measures) == ("qrels", ["r1", "r2"], ["AP", "RR"])
    assert capsys.readouterr().err.count("note:") == (argv[-2:] == ["AP", "RR"])


@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "AP", "-m", "RR", "r1", "r2"],
        ["r1", "r2", "-m", "AP", "-m", "RR"],
        ["r1", "r2", "-m", "AP", "RR"],
    ],
)
def test_report_takes_options_before_or_after_the_runs(argv: list[str]) -> None:
    files = ["--topics", "t", "--collection", "c", "-o", "d"]
    args = parse(report.build_parser(), [*files, *argv])
    assert (args.runs, args.measures) == (["r1", "r2"], ["AP", "RR"])


def test_anything_else_left_over_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse(compare.build_parser(), ["qrels", "r1", "r2", "--seed", "1", "stray"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith("unrecognized arguments: stray")


# --- end to end: udcg trec in a subprocess ------------------------------------------------------


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Small qrels, run, utilities TSV and annotated contexts (judge key ``j``)."""
    tmp = tmp_path_factory.mktemp("grammar")
    qrels, run, tsv, contexts = [], [], [], []
    for q in range(3):
        passages = []
        for d in range(6):
            qrels.append(f"q{q} 0 d{d} {(q + d) % 3}\n")
            run.append(f"q{q} Q0 d{d} {d + 1} {10 - d - 0.5 * q} tag\n")
            p = round(0.1 + 0.13 * ((q * 5 + d) % 7), 4)
            tsv.append(f"q{q}\td{d}\t{p}\n")
            passages.append(Passage(doc_id=f"d{d}", text="t", abstain_prob={"j": p, "o": 0.5}))
        contexts.append(Context(f"q{q}", passages, question="Q?"))
    paths = {name: tmp / name for name in ("qrels", "run", "u.tsv", "ctx.jsonl")}
    paths["qrels"].write_text("".join(qrels))
    paths["run"].write_text("".join(run))
    paths["u.tsv"].write_text("".join(tsv))
    write_contexts(paths["ctx.jsonl"], contexts)
    return paths


def udcg_trec(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "udcg", "trec", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def means(stdout: str) -> dict[str, float]:
    rows = [line.split("\t") for line in stdout.splitlines()]
    return {m.strip(): float(v) for m, q, v in rows if q == "all" and m.strip() != "num_q"}


def api_means(files: dict[str, Path], measures: list[str], **kwargs: object) -> dict:
    per_query = udcg.evaluate(files["qrels"], files["run"], measures, **kwargs)
    names = next(iter(per_query.values()))
    return {m: round(sum(v[m] for v in per_query.values()) / len(per_query), 4) for m in names}


def test_trec_eval_order_prints_both_measures(files: dict[str, Path]) -> None:
    done = udcg_trec("-m", "map", "-m", "P.10", files["qrels"], files["run"])
    assert (done.returncode, done.stderr) == (0, "")
    assert means(done.stdout) == api_means(files, ["map", "P.10"]) != {}
    assert set(means(done.stdout)) == {"AP", "P@10"}


def test_repeated_measures_after_the_files_print_both(files: dict[str, Path]) -> None:
    done = udcg_trec(files["qrels"], files["run"], "-m", "nDCG@10", "-m", "AP")
    assert (done.returncode, done.stderr) == (0, "")
    assert means(done.stdout) == api_means(files, ["nDCG@10", "AP"])
    assert set(means(done.stdout)) == {"nDCG@10", "AP"}
    joined = udcg_trec(files["qrels"], files["run"], "-m", "nDCG@10,AP")
    assert joined.stdout == done.stdout


def test_the_old_list_form_works_with_one_note(files: dict[str, Path]) -> None:
    new = udcg_trec(files["qrels"], files["run"], "-m", "nDCG@10", "-m", "AP", "-m", "RR")
    old = udcg_trec(files["qrels"], files["run"], "-m", "nDCG@10", "AP", "RR")
    assert old.returncode == 0 and old.stdout == new.stdout
    assert old.stderr.splitlines() == [
        "udcg trec: note: several values after one flag are deprecated: repeat the flag "
        "(-m A -m B) or join the values with commas (-m A,B)"
    ]


@pytest.mark.parametrize(
    ("old", "new", "measures"),
    [
        (["--measures", "AP", "--measures", "RR"], ["-m", "AP", "-m", "RR"], []),
        (
            ["--utilities", "U", "--utility-field", "abstain_prob"],
            ["--utilities", "U", "--utility", "abstention"],
            ["-m", "UDCG@5"],
        ),
        (
            ["--utilities", "U", "--utility-field", "utility"],
            ["--utilities", "U", "--utility", "given"],
            ["-m", "UDCG@5"],
        ),
        (
            ["--utilities", "CTX", "--judge-name", "j"],
            ["--utilities", "CTX", "--judge-key", "j"],
            ["-m", "UDCG@5"],
        ),
    ],
)
def test_each_old_spelling_prints_one_note_and_the_same_output(
    files: dict[str, Path], old: list[str], new: list[str], measures: list[str]
) -> None:
    def argv(extra: list[str]) -> list[object]:
        named = {"U": files["u.tsv"], "CTX": files["ctx.jsonl"]}
        return [files["qrels"], files["run"], *measures, *(named.get(a, a) for a in extra)]

    was, now = udcg_trec(*argv(old)), udcg_trec(*argv(new))
    assert (now.returncode, now.stderr) == (0, "")
    assert was.returncode == 0 and was.stdout == now.stdout
    (line,) = was.stderr.splitlines()
    assert re.fullmatch(rf"udcg trec: note: {old[-2]} .*deprecated: use {OLD[old[-2]]}.*", line)


def test_given_utilities_are_u_itself(files: dict[str, Path]) -> None:
    """``--utility given`` reads the values as u, ``abstention`` as P(abstain) (u = 1 - p)."""
    given = udcg_trec(files["qrels"], files["run"], "-m", "UDCG@5", "--utilities", files["u.tsv"],
                      "--utility", "given", "--format", "json")  # fmt: skip
    want = udcg.evaluate(
        files["qrels"], files["run"], ["UDCG@5"], utilities=files["u.tsv"], utility_field="utility"
    )
    mean = sum(v["UDCG@5"] for v in want.values()) / len(want)
    assert json.loads(given.stdout)["mean"]["UDCG@5"] == pytest.approx(mean)
