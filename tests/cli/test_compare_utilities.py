"""``udcg compare`` with UDCG measures: utilities per run (each run's annotated contexts) or
shared, the judge key and the utility source as ``udcg trec``/``udcg score`` take them; the
p-values equal the Python API's and the Markdown table shows each difference to the baseline
with its confidence interval and p-value."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from udcg.cli.compare import main
from udcg.trec import compare
from udcg.trec.engine import evaluate_table

MEASURES = ["UDCG@5", "nDCG@10", "AP"]
N_QUERIES, N_DOCS = 25, 12


def _write_case(root: Path, seed: int = 0) -> dict[str, Path]:
    """qrels, two runs (``bm25``, ``dense``: better at ranking relevant documents first) and
    each run's annotated contexts: every ranked passage with ``abstain_prob`` of two judges
    (``small`` and ``big``, lower for relevant passages) and ``answer_prob`` of ``small``; the
    two runs' contexts give a passage different values (judged in another prompt order)."""
    rng = np.random.default_rng(seed)
    grades = {
        f"q{q}": {f"d{d}": int(g) for d, g in enumerate(rng.integers(0, 3, N_DOCS))}
        for q in range(N_QUERIES)
    }
    root.mkdir(parents=True, exist_ok=True)
    paths = {"qrels": root / "qrels.txt"}
    paths["qrels"].write_text(
        "".join(f"{q} 0 {d} {g}\n" for q, docs in grades.items() for d, g in docs.items())
    )
    for name, skill in (("bm25", 0.3), ("dense", 1.2)):
        run_lines, context_lines = [], []
        for q, docs in grades.items():
            scores = {d: float(rng.normal() + skill * g) for d, g in docs.items()}
            ranked = sorted(scores, key=lambda d: (-scores[d], d))
            run_lines += [
                f"{q} Q0 {d} {r + 1} {scores[d]!r} {name}\n" for r, d in enumerate(ranked)
            ]
            passages = []
            for d in ranked:
                relevant = docs[d] > 0
                abstain = float(np.clip(rng.normal(0.3 if relevant else 0.8, 0.15), 0.0, 1.0))
                passages.append(
                    {
                        "doc_id": d,
                        "text": f"passage {d}",
                        "abstain_prob": {"small": abstain, "big": float(rng.uniform())},
                        "answer_prob": {"small": float(rng.uniform())},
                    }
                )
            context_lines.append(
                json.dumps({"qid": q, "question": f"Q {q}?", "passages": passages})
            )
        paths[name] = root / f"{name}.trec"
        paths[name].write_text("".join(run_lines))
        paths[f"{name}_contexts"] = root / f"{name}.annotated.jsonl"
        paths[f"{name}_contexts"].write_text("\n".join(context_lines) + "\n")
    return paths


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _write_case(tmp_path_factory.mktemp("compare_utilities"))


def _cli(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    status = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def _per_run_args(case: dict[str, Path]) -> list[object]:
    return [
        case["qrels"],
        case["bm25"],
        case["dense"],
        "-m",
        ",".join(MEASURES),
        "--utilities",
        case["bm25_contexts"],
        "--utilities",
        case["dense_contexts"],
        "--judge-key",
        "small",
        "--utility",
        "abstention",
    ]


def test_per_run_utilities_p_values_equal_the_api(capsys, case: dict[str, Path]) -> None:
    """The acceptance check: JSON p-values, intervals and means equal udcg.trec.compare's."""
    status, out, err = _cli(capsys, *_per_run_args(case), "--format", "json")
    assert (status, err) == (0, "")
    got = json.loads(out)
    from udcg.io.joins.utilities import read_utility_file

    api = compare(
        case["qrels"],
        {"bm25": case["bm25"], "dense": case["dense"]},
        MEASURES,
        utilities=[
            read_utility_file(case["bm25_contexts"], "abstain_prob", "small"),
            read_utility_file(case["dense_contexts"], "abstain_prob", "small"),
        ],
    )
    assert got["measures"] == MEASURES and len(got["comparisons"]) == len(MEASURES)
    for mine, theirs in zip(got["comparisons"], api.comparisons, strict=True):
        assert mine["measure"] == theirs.measure
        assert abs(mine["p_value"] - theirs.p_value) <= 1e-12
        assert abs(mine["p_corrected"] - theirs.p_corrected) <= 1e-12
        assert abs(mine["ci_low"] - theirs.ci_low) <= 1e-12
        assert abs(mine["ci_high"] - theirs.ci_high) <= 1e-12
    assert got == api.to_dict()
    # each run was scored with its own contexts' utilities, not the other run's
    for name in ("bm25", "dense"):
        own = evaluate_table(
            case["qrels"],
            case[name],
            "UDCG@5",
            utilities=read_utility_file(case[f"{name}_contexts"], "abstain_prob", "small"),
        ).mean()["UDCG@5"]
        assert abs(got["means"][name]["UDCG@5"] - own) <= 1e-12
    swapped = evaluate_table(
        case["qrels"],
        case["dense"],
        "UDCG@5",
        utilities=read_utility_file(case["bm25_contexts"], "abstain_prob", "small"),
    ).mean()["UDCG@5"]
    assert abs(got["means"]["dense"]["UDCG@5"] - swapped) > 1e-6


def test_markdown_shows_differences_intervals_and_p_values(capsys, case: dict[str, Path]) -> None:
    status, out, err = _cli(capsys, *_per_run_args(case))
    assert (status, err) == (0, "")
    from udcg.io.joins.utilities import read_utility_file

    report = compare(
        case["qrels"],
        {"bm25": case["bm25"], "dense": case["dense"]},
        MEASURES,
        utilities=[
            read_utility_file(case["bm25_contexts"], "abstain_prob", "small"),
            read_utility_file(case["dense_contexts"], "abstain_prob", "small"),
        ],
    )
    assert out == report.to_markdown()
    lines = out.splitlines()
    assert lines[0] == "| | system | UDCG@5 | nDCG@10 | AP |"
    means = " | ".join(f"{report.means['bm25'][m]:.4f}" for m in MEASURES)
    assert lines[2] == f"| a | bm25 | {means} |"
    cells = lines[3].split(" | ")[2:]
    for m, cell in zip(MEASURES, cells, strict=True):
        c = report.comparison("dense", "bm25", m)
        assert c.ci_low <= c.difference <= c.ci_high
        p = "<0.0001" if c.p_value < 1e-4 else f"={c.p_value:.4f}"
        shown = f"({c.difference:+.4f} [{c.ci_low:+.4f}, {c.ci_high:+.4f}], p{p})"
        assert cell.rstrip(" |").startswith(f"{report.means['dense'][m]:.4f}")
        assert shown in cell, (m, cell)
        assert cell.rstrip(" |").endswith("†") == c.significant
    # dense ranks relevant documents first: better on every measure, significantly
    assert all(report.comparison("dense", "bm25", m).significant for m in MEASURES)
    assert "95% paired bootstrap confidence interval (10000 resamples" in out


def test_one_shared_file_the_other_judge_and_answer_likelihood(
    capsys, case: dict[str, Path], tmp_path: Path
) -> None:
    """A TSV for both runs; --judge-key picks the other judge (--judge-name, its old spelling,
    with one note); --utility answer_likelihood reads answer_prob."""
    tsv = tmp_path / "u.tsv"
    lines = []
    for q in range(N_QUERIES):
        lines += [f"q{q} d{d} {(q * 7 + d) % 10 / 10}\n" for d in range(N_DOCS)]
    tsv.write_text("".join(lines))
    runs = {"bm25": case["bm25"], "dense": case["dense"]}
    args = [case["qrels"], case["bm25"], case["dense"], "-m", "UDCG@5", "--format", "json"]
    status, out, _ = _cli(capsys, *args, "--utilities", tsv)
    assert status == 0
    assert json.loads(out) == compare(case["qrels"], runs, ["UDCG@5"], utilities=tsv).to_dict()

    old = "udcg compare: note: --judge-name is deprecated: use --judge-key\n"
    for extra, field, key, note in [
        (["--judge-key", "big"], "abstain_prob", "big", ""),
        (["--judge-name", "big"], "abstain_prob", "big", old),
        (["--utility", "answer_likelihood"], "answer_prob", "small", ""),
    ]:
        contexts = [case["bm25_contexts"], case["dense_contexts"]]
        files = [arg for c in contexts for arg in ("--utilities", str(c))]
        status, out, err = _cli(capsys, *args, *files, *extra)
        assert (status, err) == (0, note)
        from udcg.io.joins.utilities import read_utility_file

        want = compare(
            case["qrels"],
            runs,
            ["UDCG@5"],
            utilities=[read_utility_file(c, field, key) for c in contexts],
        )
        assert json.loads(out) == want.to_dict()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "field 'utilities': UDCG@5 needs utilities: pass utilities= (--utilities FILE on"),
        (
            ["--utilities", "A", "--utilities", "B", "--utilities", "C"],
            "3 utilities files for 2 runs",
        ),
        (["--judge-key", "small"], "--judge-key reads the --utilities files; none given"),
        (["--utilities", "CTX"], "holds judges abstain_prob[big], abstain_prob[small]"),
    ],
)
def test_user_mistakes_exit_2_with_one_line(
    capsys, case: dict[str, Path], extra: list[str], message: str
) -> None:
    extra = [str(case["bm25_contexts"]) if a == "CTX" else a for a in extra]
    status, out, err = _cli(
        capsys, case["qrels"], case["bm25"], case["dense"], "-m", "UDCG@5", *extra
    )
    assert (status, out) == (2, "")
    assert err.startswith("udcg compare: error: ") and message in err, err
    assert err.count("\n") == 1


def test_theta_weights_and_utilities_from_stdin(case: dict[str, Path], tmp_path: Path) -> None:
    """A whole process: UDCGtheta@5 with --weights, one utilities file for both runs read from
    standard input (read once, though two runs use it); JSON equal to the API's."""
    from udcg.io.weights.files import ThetaWeights, write_weights

    rng = np.random.default_rng(3)
    weights = tmp_path / "theta_k5.safetensors"
    write_weights(weights, ThetaWeights(rng.normal(size=5), rng.normal(size=5)))
    tsv = tmp_path / "u.tsv"
    tsv.write_text(
        "".join(f"q{q}\td{d}\t{rng.uniform()!r}\n" for q in range(N_QUERIES) for d in range(N_DOCS))
    )
    measures = ["UDCGtheta@5", "UDCG@5", "AP"]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "udcg.cli.compare",
            *(case["qrels"], case["bm25"], case["dense"], "-m", ",".join(measures)),
            *("--utilities", "-", "--weights", weights, "--format", "json"),
            *("--test", "bootstrap", "--n-resamples", "3000", "--seed", "9"),
        ],
        input=tsv.read_text(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stderr) == (0, "")
    runs = {"bm25": case["bm25"], "dense": case["dense"]}
    want = compare(
        case["qrels"],
        runs,
        measures,
        utilities=tsv,
        weights=weights,
        test="bootstrap",
        n_resamples=3000,
        seed=9,
    )
    got = json.loads(done.stdout)
    for mine, theirs in zip(got["comparisons"], want.comparisons, strict=True):
        assert abs(mine["p_value"] - theirs.p_value) <= 1e-12
    assert got == want.to_dict()


def test_per_run_files_of_two_judges_or_two_kinds_are_refused(
    capsys, case: dict[str, Path], tmp_path: Path
) -> None:
    """Each system's utilities must come from one judge and be of one kind: two files whose
    only judges differ, or ready utilities beside abstention values, are refused."""

    def one_judge(name: str, judge: str) -> Path:
        lines = case[f"{name}_contexts"].read_text().splitlines()
        path = tmp_path / f"{name}.{judge}.jsonl"
        with path.open("w") as out:
            for c in map(json.loads, lines):
                for p in c["passages"]:
                    p["abstain_prob"], p["answer_prob"] = {judge: p["abstain_prob"][judge]}, {}
                out.write(json.dumps(c) + "\n")
        return path

    base = [case["qrels"], case["bm25"], case["dense"], "-m", "UDCG@5"]
    small, big = one_judge("bm25", "small"), one_judge("dense", "big")
    status, _, err = _cli(capsys, *base, "--utilities", small, "--utilities", big)
    assert status == 2 and "differ in judge: 'small' (" in err, err
    given = tmp_path / "dense.utility.jsonl"
    given.write_text(
        "".join(
            json.dumps({"qid": c["qid"], "doc_id": p["doc_id"], "utility": 0.5}) + "\n"
            for c in map(json.loads, case["dense_contexts"].read_text().splitlines())
            for p in c["passages"]
        )
    )
    status, _, err = _cli(capsys, *base, "--utilities", small, "--utilities", given)
    assert status == 2 and "differ in kind" in err, err


def test_files_whose_manifests_record_two_judges_under_one_key_are_not_compared(
    capsys, tmp_path: Path
) -> None:
    """``small`` on two servers (two fingerprints, one key): the manifests beside the files
    say so and the comparison is refused; one fingerprint, or a manifest of another content
    (the file edited since), is no obstacle."""
    from udcg.io.manifests import file_sha256
    from udcg.labels.provenance import annotation_record, write_manifest

    case = _write_case(tmp_path)

    def manifest(name: str, fingerprint: str, output_sha256: str | None = None) -> None:
        path = case[f"{name}_contexts"]
        record = annotation_record(
            "small", fingerprint, ["abstain"], "string", False, "span", "first_token", 32, None, {}
        )
        counts = {"contexts": N_QUERIES, "input_sha256": "ab" * 32}
        write_manifest(
            path, record, {**counts, "output_sha256": output_sha256 or file_sha256(path)}
        )

    manifest("bm25", "openai:small@one")
    manifest("dense", "openai:small@two")
    status, _, err = _cli(capsys, *_per_run_args(case))
    assert status == 2 and "differ in judge fingerprint" in err and "openai:small@two" in err
    manifest("dense", "openai:small@one")
    assert _cli(capsys, *_per_run_args(case))[0] == 0
    manifest("dense", "openai:small@two", output_sha256="cd" * 32)  # not this content
    status, _, err = _cli(capsys, *_per_run_args(case))
    assert status == 0 and "dense.annotated.jsonl is unknown (no manifest records it)" in err
