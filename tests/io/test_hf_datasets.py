"""Contexts <-> ``datasets.Dataset``: exact round trips (objects and JSONL bytes), local copies of
a Hub dataset (``save_to_disk``, parquet and JSON files), ``train.py data=hf``, and the one-line
errors."""

from __future__ import annotations

import importlib
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import udcg
from udcg.errors import UDCGInputError
from udcg.io.contexts.jsonl import Context, Passage, read_contexts, write_contexts
from udcg.theta.simulate import simulate_contexts as simulate

datasets = pytest.importorskip("datasets")
hf = pytest.importorskip("udcg.io.formats.hf_datasets")


def _generated() -> list[Context]:
    """Q-CARE labels, several judges, graded and missing labels, extra keys, odd outcome keys."""
    full = Context(
        "q1",
        [
            Passage(
                "d1",
                "text one",
                12.5,
                True,
                {"judge-a": 0.25, "judge-b": 0.5},
                [True, None],
                {"title": "T", "meta": {"n": [1, 2]}},
                {"judge-b": 0.75},
            ),
            Passage("d2", score=-1.0, relevant=2.0, covers=[False, False]),
            Passage(None, text="no id", relevant=False, abstain_prob={"judge-c": 1.0}),
        ],
        run="bm25",
        question="who?",
        answers=["a", "b"],
        subqueries=["s1", "s2"],
        outcomes={
            "judge-a": {
                "answer": "x",
                "correct": True,
                "claims": ["c1"],
                "subquery_covered": [True, None],
                "subquery_covered_prob": [0.5, None],
                "claim_relevance": [[True, False]],
                "claim_relevance_prob": [[0.25, 1]],  # an integer: kept through 'extra'
                "claim_support": [[True, None, False]],
                "claim_support_prob": [[0.5, 0.0, 1.0]],
            },
            "judge-b": {"note": "first", "correct": None, "answer": ["not", "a string"]},
            "judge-c": {},
        },
        extra={"split": "dev", "n": 3},
    )
    bare = Context("17", [])
    no_labels = Context("q2", [Passage("d9")], run="dense", answers=[])
    return [full, bare, no_labels]


def _jsonl(tmp_path: Path, name: str, contexts: list[Context]) -> bytes:
    write_contexts(tmp_path / name, contexts)
    return (tmp_path / name).read_bytes()


@pytest.mark.parametrize("which", ["demo", "generated"])
def test_round_trip_is_exact_and_the_jsonl_bytes_are_identical(tmp_path: Path, which: str) -> None:
    contexts = list(udcg.demo_contexts()) if which == "demo" else _generated()
    back = hf.contexts_from_dataset(hf.contexts_to_dataset(contexts))
    assert back == contexts
    assert _jsonl(tmp_path, "a.jsonl", back) == _jsonl(tmp_path, "b.jsonl", contexts)
    # and the written file reads back into the same contexts
    assert list(read_contexts(tmp_path / "a.jsonl")) == contexts


def test_the_columns_follow_the_schema() -> None:
    ds = hf.contexts_to_dataset(_generated())
    assert ds.data.schema == hf.SCHEMA
    row = ds[0]
    first = row["passages"][0]
    assert first["abstain_prob"] == [
        {"judge": "judge-a", "prob": 0.25},
        {"judge": "judge-b", "prob": 0.5},
    ]
    assert (first["relevant"], first["grade"]) == (True, None)
    assert (row["passages"][1]["relevant"], row["passages"][1]["grade"]) == (None, 2.0)
    assert [o["model"] for o in row["outcomes"]] == ["judge-a", "judge-b", "judge-c"]
    assert row["outcomes"][0]["claim_support"] == [[True, None, False]]
    assert row["outcomes"][0]["claim_relevance_prob"] is None  # held in extra instead
    assert row["extra"] == '{"split": "dev", "n": 3}'


def test_local_copies_of_a_hub_dataset_load(tmp_path: Path) -> None:
    contexts = _generated()
    ds = hf.contexts_to_dataset(contexts)
    ds.save_to_disk(tmp_path / "one")
    assert hf.load_contexts_dataset(tmp_path / "one") == contexts
    # one dataset is the split "train", as load_dataset names unsplit data; no other split
    assert hf.read_hf_contexts(f"hf:{tmp_path / 'one'}#train") == contexts
    with pytest.raises(UDCGInputError, match=r"one: no split 'test': the folder holds one dataset"):
        hf.read_hf_contexts(f"hf:{tmp_path / 'one'}#test")
    datasets.DatasetDict({"test": ds}).save_to_disk(tmp_path / "dict")
    assert hf.load_contexts_dataset(tmp_path / "dict", split="test") == contexts
    with pytest.raises(UDCGInputError, match=r"no split 'train' \(splits: test\)"):
        hf.load_contexts_dataset(tmp_path / "dict")
    ds.to_parquet(tmp_path / "c.parquet")
    parquet = hf.load_contexts_dataset("parquet", data_files=str(tmp_path / "c.parquet"))
    assert parquet == contexts
    (tmp_path / "files").mkdir()
    ds.to_parquet(tmp_path / "files" / "train.parquet")
    assert hf.load_contexts_dataset(tmp_path / "files") == contexts
    with pytest.raises(UDCGInputError, match=r"files: cannot load the dataset: .*split") as info:
        hf.load_contexts_dataset(tmp_path / "files", split="test")
    assert "\n" not in str(info.value)


def test_a_closed_standard_error_saves_and_loads_without_progress_bars(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``sys.stderr`` None (``2>&-``) datasets' bars (tqdm) would fail writing there: the
    calls run without them, and the bars' setting is as it was after each."""
    contexts = _generated()
    (tmp_path / "files").mkdir()
    hf.contexts_to_dataset(contexts).to_parquet(tmp_path / "files" / "train.parquet")
    before = datasets.utils.are_progress_bars_disabled()
    monkeypatch.setattr(sys, "stderr", None)
    assert hf.save_contexts_dataset(contexts, tmp_path / "saved") == len(contexts)
    assert datasets.utils.are_progress_bars_disabled() == before
    assert hf.load_contexts_dataset(tmp_path / "saved") == contexts
    fresh = str(tmp_path / "cache")  # no cached copy: the split is generated, with its bar
    assert hf.load_contexts_dataset(tmp_path / "files", cache_dir=fresh) == contexts
    assert datasets.utils.are_progress_bars_disabled() == before


def test_bars_the_environment_keeps_on_with_standard_error_closed_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``HF_DATASETS_DISABLE_PROGRESS_BARS=0`` keeps datasets' bars on (its switch then only
    warns): with ``sys.stderr`` None the save would fail in tqdm, so it is refused first."""
    bars = importlib.import_module("datasets.utils.tqdm")  # the module, not its tqdm class
    monkeypatch.setattr(bars, "HF_DATASETS_DISABLE_PROGRESS_BARS", False)
    monkeypatch.setattr(sys, "stderr", None)
    with pytest.warns(UserWarning, match="Cannot disable progress bars"):
        with pytest.raises(UDCGInputError, match="HF_DATASETS_DISABLE_PROGRESS_BARS=0 keeps"):
            hf.save_contexts_dataset(_generated(), tmp_path / "saved")
    assert not (tmp_path / "saved").exists()


def test_a_save_replaces_an_earlier_dataset_and_refuses_other_files(tmp_path: Path) -> None:
    """No shard of an earlier dataset stays beside the new one (an upload of the folder would
    carry it); a folder holding other files is refused before anything is written."""
    contexts, folder = _generated(), tmp_path / "saved"
    hf.save_contexts_dataset(contexts, folder)
    (folder / "data-00002-of-00003.arrow").write_bytes(b"an earlier dataset's shard")
    assert hf.save_contexts_dataset(contexts[:2], folder) == 2
    assert "data-00002-of-00003.arrow" not in os.listdir(folder)
    assert hf.load_contexts_dataset(folder) == contexts[:2]
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(UDCGInputError, match=r"holds 'notes.txt', which is not a file of a"):
        hf.save_contexts_dataset(contexts, folder)
    assert hf.load_contexts_dataset(folder) == contexts[:2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["saved"]  # no temporary folder left


def test_a_saved_dataset_keeps_its_link_mode_and_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a link, the target is replaced and the link stays; the folder keeps the replaced
    one's mode (a new one the umask's, not a temporary folder's 0700); the current folder, or
    one holding it, is refused before anything is touched."""
    contexts, real = _generated(), tmp_path / "disk" / "ds"
    hf.save_contexts_dataset(contexts, real)
    assert stat.S_IMODE(real.stat().st_mode) == 0o777 & ~_umask()
    real.chmod(0o750)
    (tmp_path / "link").symlink_to(real)
    hf.save_contexts_dataset(contexts[:1], tmp_path / "link")
    assert (tmp_path / "link").is_symlink() and hf.load_contexts_dataset(real) == contexts[:1]
    assert stat.S_IMODE(real.stat().st_mode) == 0o750
    monkeypatch.chdir(real)
    for name in (".", str(real / "x" / "..")):
        with pytest.raises(UDCGInputError, match="holds the current folder"):
            hf.save_contexts_dataset(contexts, name)
    assert hf.load_contexts_dataset(real) == contexts[:1]
    assert sorted(os.listdir(real.parent)) == ["ds"]


def test_a_save_from_a_removed_folder_and_over_a_killed_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An absolute folder is written from a working folder removed meanwhile; a killed run's
    half-written folder beside it is removed by the next save."""
    contexts, gone = _generated(), tmp_path / "gone"
    gone.mkdir()
    (tmp_path / ".ds.new-0123456789ab").mkdir()  # what a SIGKILL in save_to_disk leaves
    (tmp_path / ".ds.new-0123456789ab" / "data-00000-of-00001.arrow").write_text("half")
    (tmp_path / ".ds.new-backup").mkdir()  # a user's folder of a like name: not ours
    (tmp_path / ".ds.new-backup" / "notes.txt").write_text("mine")
    monkeypatch.chdir(gone)
    gone.rmdir()
    assert hf.save_contexts_dataset(contexts, tmp_path / "ds") == len(contexts)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".ds.new-backup", "ds"]


class _Killed(BaseException):
    """What a SIGKILL does to the rest of a save."""


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-renames"])
def test_a_swap_killed_midway_leaves_a_whole_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exchange: bool
) -> None:
    """A run killed at its first rename or its first deletion leaves one of the two datasets
    whole under the name (no rename at all where the folders' names swap in one step); the
    next save leaves no folder beside it."""
    earlier, later = _generated()[:2], _generated()[2:5]
    folder = tmp_path / "ds"
    hf.save_contexts_dataset(earlier, folder)
    if not exchange:
        monkeypatch.setattr(hf, "_exchange", lambda a, b: False)
    for what in ("rename", "rmtree"):
        with monkeypatch.context() as patch:
            if what == "rename":
                patch.setattr(Path, "rename", lambda *a: (_ for _ in ()).throw(_Killed()))
            else:
                patch.setattr(hf.shutil, "rmtree", lambda *a, **k: (_ for _ in ()).throw(_Killed()))
            try:
                hf.save_contexts_dataset(later, folder)
            except _Killed:
                pass
        if exchange or what == "rmtree":
            assert hf.load_contexts_dataset(folder) in (earlier, later)
    hf.save_contexts_dataset(later, folder)
    assert hf.load_contexts_dataset(folder) == later
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def _umask() -> int:
    """The process's umask, read without setting it (Linux's /proc)."""
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if "Umask" in x)
    return int(line.split()[1], 8)


def test_a_json_copy_with_inferred_types_loads(tmp_path: Path) -> None:
    """JSON written by json.dumps (``Dataset.to_json`` rounds floats to 10 digits), read back
    with the types ``datasets`` infers (all-null columns become the null type)."""
    contexts = list(udcg.demo_contexts())[:50]
    rows = hf.contexts_to_dataset(contexts).to_list()
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert hf.load_contexts_dataset("json", data_files=str(tmp_path / "c.jsonl")) == contexts


def test_a_hub_id_without_a_network_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(UDCGInputError, match=r"^nobody/no-such-set: cannot load") as info:
        hf.load_contexts_dataset("nobody/no-such-set")
    assert "\n" not in str(info.value)


def test_a_hand_made_dataset_needs_only_qid_and_passages() -> None:
    ds = datasets.Dataset.from_dict(
        {
            "qid": [1, 2],
            "passages": [
                [{"doc_id": "d1", "relevant": True}],
                [{"doc_id": "d2", "relevant": None}],
            ],
            "outcomes": [[{"model": "m", "correct": True}], []],
        }
    )
    assert hf.contexts_from_dataset(ds) == [
        Context("1", [Passage("d1", relevant=True)], outcomes={"m": {"correct": True}}),
        Context("2", [Passage("d2")]),
    ]


def test_fields_outside_the_schema_are_kept_as_the_jsonl_reader_keeps_them(
    tmp_path: Path,
) -> None:
    """A folder of contexts JSONL read through ``datasets`` (which makes every key a column or
    struct field, null where a row lacks it) gives the contexts the JSONL reader gives."""
    from udcg.io.contexts.jsonl import read_contexts

    lines = [
        {"qid": "q1", "topic": "books", "passages": [{"doc_id": "d1", "title": "Emma"}]},
        {"qid": "q2", "passages": [{"doc_id": "d2"}, {"doc_id": "d3", "title": "Paris"}]},
        {"qid": "q3", "grade": "A", "passages": [], "outcomes": {"m": {"correct": True, "ms": 3}}},
    ]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    expected = list(read_contexts(tmp_path / "c.jsonl"))
    assert expected[0].extra == {"topic": "books"} and expected[2].extra == {"grade": "A"}
    assert expected[2].outcomes == {"m": {"correct": True, "ms": 3}}
    assert hf.load_contexts_dataset(str(tmp_path)) == expected


def _one_row(**columns: object) -> datasets.Dataset:
    return datasets.Dataset.from_dict({k: [v] for k, v in columns.items()})


@pytest.mark.parametrize(
    ("ds", "message"),
    [
        (
            lambda: datasets.Dataset.from_dict({"passages": [[]]}),
            "dataset: column 'qid' is missing (columns: passages)",
        ),
        (
            lambda: _one_row(qid="q", passages=[{"doc_id": "d", "score": "high"}]),
            "dataset row 0: field 'passages[0].score': ",
        ),
        (
            lambda: _one_row(qid="q", passages=[{"relevant": True, "grade": 1.0}]),
            "dataset row 0: field 'passages[0].grade': 'relevant' and 'grade' are both set",
        ),
        (
            lambda: _one_row(qid="q", passages=[], extra="[1]"),
            "dataset row 0: field 'extra': must be null or a string holding one JSON object",
        ),
        (
            lambda: _one_row(qid="q", passages=[{"abstain_prob": [{"prob": 0.5}]}]),
            "dataset row 0: field 'passages[0].abstain_prob': must be a list of",
        ),
        (
            lambda: _one_row(qid="q", passages=[{"abstain_prob": [{"judge": "j", "prob": 2.0}]}]),
            "dataset row 0: field 'passages[0].abstain_prob.j': ",
        ),
        (
            lambda: _one_row(qid="q", passages="d1,d2"),
            "dataset row 0: field 'passages': must be a list",
        ),
        (
            lambda: _one_row(qid="q", passages=[{"doc_id": "d", "grade": -1.0}]),
            "dataset row 0: field 'passages[0].grade': must be true, false or a finite number",
        ),
        (
            lambda: _one_row(
                qid="q",
                passages=[{"abstain_prob": [{"judge": "j", "prob": p} for p in (0.2, 0.9)]}],
            ),
            "dataset row 0: field 'passages[0].abstain_prob': judge 'j' is given twice",
        ),
        (
            lambda: _one_row(qid="q", passages=[{"doc_id": "d", "extra": '{"doc_id": "e"}'}]),
            "dataset row 0: field 'passages[0].extra': holds 'doc_id', which has its own column",
        ),
        (
            lambda: _one_row(qid="q", run="r", passages=[], extra='{"run": "s"}'),
            "dataset row 0: field 'extra': holds 'run', which has its own column",
        ),
        (
            lambda: _one_row(
                qid="q", passages=[], outcomes=[{"model": "m", "correct": c} for c in (1, 0)]
            ),
            "dataset row 0: field 'outcomes[1].model': 'm' is given twice",
        ),
    ],
)
def test_mistakes_are_one_line_naming_the_row_and_column(ds: object, message: str) -> None:
    """``message``: the start of the error."""
    with pytest.raises(UDCGInputError) as info:
        hf.contexts_from_dataset(ds())  # type: ignore[operator]
    assert "\n" not in str(info.value)
    assert str(info.value).startswith(message)


def test_the_error_points_at_the_bad_row() -> None:
    rows = hf.contexts_to_dataset(_generated()).to_list()
    rows[2]["passages"][0]["abstain_prob"] = [{"judge": "j", "prob": 1.5}]
    ds = datasets.Dataset.from_list(rows, features=hf.contexts_to_dataset([]).features)
    match = r"^dataset row 2: field 'passages\[0\]\.abstain_prob\.j': must be a probability"
    with pytest.raises(UDCGInputError, match=match):
        hf.contexts_from_dataset(ds)


def test_without_datasets_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)
    message = "Hugging Face datasets needs the 'datasets' extra: pip install 'udcg[datasets]'"
    with pytest.raises(UDCGInputError, match=f"^{re.escape(message)}$"):
        hf.contexts_to_dataset([])


def test_legacy_sequence_features_are_read_as_lists_of_structs() -> None:
    """``Sequence({...})`` stores a struct of lists; it reads like a list of structs."""
    judge = datasets.Sequence(
        {"judge": datasets.Value("string"), "prob": datasets.Value("float64")}
    )
    features = datasets.Features(
        {
            "qid": datasets.Value("string"),
            "passages": datasets.Sequence(
                {"doc_id": datasets.Value("string"), "abstain_prob": judge}
            ),
        }
    )
    passages = {
        "doc_id": ["a", "b"],
        "abstain_prob": [{"judge": ["j"], "prob": [0.5]}, {"judge": [], "prob": []}],
    }
    ds = datasets.Dataset.from_dict({"qid": ["q"], "passages": [passages]}, features=features)
    assert isinstance(ds[0]["passages"], dict)
    assert hf.contexts_from_dataset(ds) == [
        Context("q", [Passage("a", abstain_prob={"j": 0.5}), Passage("b")])
    ]


def _train(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    """``train.py`` (the 'train' extra) with ``overrides``, its outputs in ``tmp_path``."""
    for module in ("hydra", "torch", "lightning"):
        pytest.importorskip(module)
    return subprocess.run(
        [sys.executable, "train.py", *overrides, f"hydra.run.dir={tmp_path}"],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_train_data_hf_reads_a_dataset_like_the_jsonl(tmp_path: Path) -> None:
    contexts = simulate(60, 5) + simulate(10, 3, seed=1)
    hf.contexts_to_dataset(contexts).save_to_disk(tmp_path / "set")
    write_contexts(tmp_path / "set.jsonl", contexts)
    common = ("judge=sim", "k=5", "n_bootstrap=100")
    from_hf = _train(tmp_path / "a", "data=hf", f"data.id_or_path={tmp_path / 'set'}", *common)
    assert from_hf.returncode == 0, from_hf.stderr
    from_jsonl = _train(
        tmp_path / "b", "data=jsonl", f"data.path={tmp_path / 'set.jsonl'}", *common
    )
    assert from_jsonl.returncode == 0, from_jsonl.stderr
    weights = [(tmp_path / run / "udcg_theta_k5.safetensors").read_bytes() for run in "ab"]
    assert weights[0] == weights[1]


def test_train_data_hf_bad_row_exits_2_with_one_line(tmp_path: Path) -> None:
    rows = hf.contexts_to_dataset(simulate(5, 3)).to_list()
    rows[1]["passages"][0]["grade"] = 1.0
    features = hf.contexts_to_dataset([]).features
    datasets.Dataset.from_list(rows, features=features).save_to_disk(tmp_path / "bad")
    done = _train(tmp_path / "o", "data=hf", f"data.id_or_path={tmp_path / 'bad'}")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "train.py: error: dataset row 1: field 'passages[0].grade': "
        "'relevant' and 'grade' are both set"
    ]


def test_evaluate_dataset_hf_reports_like_the_jsonl(tmp_path: Path, evaluate_config) -> None:
    pytest.importorskip("hydra")
    from udcg.cli.benchmark import run_evaluate

    contexts = simulate(40, 3, per_query=1, seed=2)
    hf.contexts_to_dataset(contexts).save_to_disk(tmp_path / "set")
    write_contexts(tmp_path / "set.jsonl", contexts)
    common = ("retriever=given", "judge=sim")
    reports = [
        run_evaluate(evaluate_config(*overrides, *common), tmp_path / name)[0]
        for name, overrides in (
            ("hf", ("dataset=hf", f"dataset.id_or_path={tmp_path / 'set'}")),
            ("jsonl", ("dataset=jsonl", f"dataset.path={tmp_path / 'set.jsonl'}")),
        )
    ]
    assert reports[0]["setup"]["dataset"] == "hf" and reports[0]["setup"]["n_contexts"] == 40
    assert reports[0]["means"].keys() >= {"UDCG", "nDCG"}
    assert reports[0]["means"] == reports[1]["means"]
    assert reports[0]["setup"]["accuracy"] == reports[1]["setup"]["accuracy"]


def test_hf_specs_read_wherever_a_contexts_file_is_read(tmp_path: Path) -> None:
    """``read_contexts("hf:DIR")`` (and ``hf:DIR#SPLIT``) reads the saved dataset; written back
    as JSONL, the bytes equal the file the dataset was made from."""
    contexts = _generated()
    write_contexts(tmp_path / "c.jsonl", contexts)
    hf.contexts_to_dataset(contexts).save_to_disk(tmp_path / "set")
    datasets.DatasetDict({"dev": hf.contexts_to_dataset(contexts)}).save_to_disk(tmp_path / "dd")
    assert list(read_contexts(f"hf:{tmp_path / 'set'}")) == contexts
    assert list(read_contexts(f"hf:{tmp_path / 'dd'}#dev")) == contexts
    assert (
        _jsonl(tmp_path, "back.jsonl", list(read_contexts(f"hf:{tmp_path / 'set'}")))
        == (tmp_path / "c.jsonl").read_bytes()
    )
    # a Path is a file name, never a dataset
    with pytest.raises(UDCGInputError, match="no such file"):
        read_contexts(Path(f"hf:{tmp_path / 'set'}"))
    with pytest.raises(UDCGInputError, match=r"no split 'train' \(splits: dev\)"):
        read_contexts(f"hf:{tmp_path / 'dd'}")
    with pytest.raises(UDCGInputError, match=r"^hf:: expected hf:ID or hf:DIR after hf:$"):
        read_contexts("hf:")


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "udcg", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


def test_a_command_reads_hf_like_the_jsonl(tmp_path: Path) -> None:
    contexts = simulate(30, 4, seed=3)
    write_contexts(tmp_path / "c.jsonl", contexts)
    hf.contexts_to_dataset(contexts).save_to_disk(tmp_path / "set")
    outputs = [
        _cli("score", source, "--judge", "sim", "-o", str(tmp_path / f"{name}.json"))
        for name, source in (("hf", f"hf:{tmp_path / 'set'}"), ("file", str(tmp_path / "c.jsonl")))
    ]
    assert [o.returncode for o in outputs] == [0, 0], [o.stderr for o in outputs]
    assert outputs[0].stdout == outputs[1].stdout and "UDCG" in outputs[0].stdout
    assert (tmp_path / "hf.json").read_bytes() == (tmp_path / "file.json").read_bytes()
    missing = _cli("score", f"hf:{tmp_path / 'nothing'}", "--judge", "sim")
    assert missing.returncode == 2
    (line,) = missing.stderr.strip().splitlines()
    assert line.startswith(f"udcg score: error: {tmp_path / 'nothing'}: cannot load the dataset: ")


def test_udcg_contexts_writes_a_dataset_that_reads_back_exactly(tmp_path: Path) -> None:
    """``udcg contexts -o hf:DIR`` (save_to_disk), read back, written as JSONL: the same bytes
    as ``-o FILE``."""
    from udcg.cli.contexts import main

    files = {
        "run": "q2 Q0 d1 1 3 bm25\nq1 Q0 d1 1 2 bm25\nq1 Q0 d2 2 2 bm25\nq1 Q0 d3 3 -1 bm25\n",
        "topics": '{"qid": "q1", "text": "Who wrote Emma?", "answers": ["Austen"]}\n'
        '{"qid": "q2", "text": "Ωmega 東京?"}\n',
        "collection": "d1\tEmma\tAusten wrote Emma.\nd2\t\tCanberra.\nd3\tX\ty\n",
        "qrels": "q1 0 d2 2\nq1 0 d3 0\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    common = [
        *(str(tmp_path / "run"), "--topics", str(tmp_path / "topics")),
        *("--collection", str(tmp_path / "collection"), "--qrels", str(tmp_path / "qrels")),
        *("-k", "2"),
    ]
    assert main([*common, "-o", str(tmp_path / "c.jsonl")]) == 0
    assert main([*common, "-o", f"hf:{tmp_path / 'set'}"]) == 0
    assert (tmp_path / "set" / "state.json").is_file()
    back = hf.load_contexts_dataset(tmp_path / "set")
    assert back == list(read_contexts(tmp_path / "c.jsonl"))
    assert _jsonl(tmp_path, "back.jsonl", back) == (tmp_path / "c.jsonl").read_bytes()
    assert datasets.load_from_disk(str(tmp_path / "set")).data.schema == hf.SCHEMA
    assert main([*common, "-o", "hf:"]) == 2


def test_a_dataset_input_is_recorded_by_its_files(tmp_path: Path) -> None:
    """``udcg score --out`` and ``weights calibrate`` of ``hf:DIR`` record the dataset's
    SHA-256 (another dataset there, another record), as they record a file's."""
    import numpy as np

    from udcg.cli.main import main as udcg_main
    from udcg.io.manifests import manifest_path
    from udcg.theta import UDCGTheta
    from udcg.theta.simulate import simulate_contexts

    fitting = simulate_contexts(40, 3, seed=3)
    rel = np.array([[p.relevant for p in c.passages] for c in fitting], dtype=float)
    u = np.array([[1 - p.abstain_prob["sim"] for p in c.passages] for c in fitting])
    ok = np.array([c.outcomes["sim"]["correct"] for c in fitting], dtype=float)
    weights = tmp_path / "w"
    UDCGTheta(3, val_fraction=0.0).fit(rel, u, ok).save_pretrained(
        weights, card={"utility": "abstention", "judge_model": "sim"}
    )
    data, spec = tmp_path / "ds", f"hf:{tmp_path / 'ds'}"
    recorded = []
    for seed in (5, 6):
        hf.save_contexts_dataset(simulate_contexts(30, 3, seed=seed), data)
        out = tmp_path / f"s{seed}.jsonl"
        assert udcg_main(["score", spec, "--judge", "sim", "--out", str(out)]) == 0
        made = json.loads(manifest_path(out).read_text())
        assert made["input_sha256"] == hf.dataset_sha256(spec) is not None
        cal = tmp_path / f"cal{seed}"
        assert udcg_main(["weights", "calibrate", str(weights), spec, "-o", str(cal)]) == 0
        card = json.loads((cal / "config.json").read_text())
        recorded.append((made["input_sha256"], card["calibration_input_sha256"]))
    assert recorded[0][0] != recorded[1][0] and recorded[0][1] != recorded[1][1]
    (data / ".git").mkdir()  # a clone's hidden files are not the dataset's
    (data / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    assert hf.dataset_sha256(spec) == recorded[1][0]
