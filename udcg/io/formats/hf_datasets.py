"""Contexts and their judge labels as a Hugging Face ``datasets.Dataset``: one row per context.

The columns (``docs/formats.md``, "Hugging Face datasets", has the table): ``qid``, ``run``,
``question``, ``answers``, ``subqueries``, ``passages`` (a list of passage structs),
``outcomes`` (a list of per-model structs) and ``extra``. Judge-keyed maps become lists of
``{"judge", "prob"}`` structs and ``outcomes[model]`` a list of structs with a ``model`` field,
in the map's order, so every column has one Arrow type whatever judges or models a set holds.

* ``relevant`` is split in two: ``relevant`` (a boolean label) and ``grade`` (a graded label,
  a float); at most one is set.
* Keys the model does not know (``extra`` of a context or passage) and outcome values that no
  typed column holds exactly (an integer ``_prob`` label, a non-string ``answer``, keys beyond
  the Q-CARE labels) are kept as one JSON object in an ``extra`` string (null when none).
* An outcome's ``keys`` lists its keys in order, so keys given as null and the key order come
  back; a null ``keys`` (a hand-made dataset) means the typed fields that are set, then
  ``extra``'s keys.

Reading builds each row's JSON object and validates it with the data model
(:func:`udcg.io.contexts.model.parse_context`), so a wrong value fails like a bad JSONL line,
located as ``dataset row N`` (``N`` = the row index). ``datasets`` is the ``datasets`` extra.

On the command line, ``hf:ID`` or ``hf:DIR`` (``hf:DIR#SPLIT`` for a split other than
``train``) reads a dataset wherever a contexts file is read
(:func:`udcg.io.contexts.jsonl.read_contexts` takes such a string), and ``udcg contexts -o
hf:DIR`` writes one with ``save_to_disk``.
"""

from __future__ import annotations

import ctypes
import errno
import glob
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from udcg.errors import UDCGInputError
from udcg.io.contexts.checks import ANSWER_LABELS, Where, relevance
from udcg.io.contexts.model import JUDGE_PROB_KEYS, Context, Passage, parse_context
from udcg.io.files import exclusive_writer, live

if TYPE_CHECKING:
    import datasets

__all__ = [
    "HF_PREFIX",
    "SCHEMA",
    "contexts_from_dataset",
    "contexts_to_dataset",
    "load_contexts_dataset",
    "read_hf_contexts",
    "save_contexts_dataset",
]

#: What names a Hugging Face dataset where a contexts file is expected: ``hf:ID``, ``hf:DIR``.
HF_PREFIX = "hf:"

_JUDGE_PROBS = pa.list_(pa.struct([("judge", pa.string()), ("prob", pa.float64())]))
_STRINGS = pa.list_(pa.string())
#: outcome label -> its Arrow type (hard labels: booleans or nulls; ``_prob``: floats)
_LABEL_TYPES = {
    name: pa.list_(pa.list_(leaf)) if name.startswith("claim_") else pa.list_(leaf)
    for key in ANSWER_LABELS
    for name, leaf in ((key, pa.bool_()), (f"{key}_prob", pa.float64()))
}
_OUTCOME_TYPES = {"answer": pa.string(), "correct": pa.bool_(), "claims": _STRINGS, **_LABEL_TYPES}

#: The Arrow schema :func:`contexts_to_dataset` writes (one row per context).
SCHEMA = pa.schema(
    [
        ("qid", pa.string()),
        ("run", pa.string()),
        ("question", pa.string()),
        ("answers", _STRINGS),
        ("subqueries", _STRINGS),
        (
            "passages",
            pa.list_(
                pa.struct(
                    [
                        ("doc_id", pa.string()),
                        ("text", pa.string()),
                        ("score", pa.float64()),
                        ("relevant", pa.bool_()),
                        ("grade", pa.float64()),
                        ("abstain_prob", _JUDGE_PROBS),
                        ("answer_prob", _JUDGE_PROBS),
                        ("covers", pa.list_(pa.bool_())),
                        ("extra", pa.string()),
                    ]
                )
            ),
        ),
        (
            "outcomes",
            pa.list_(
                pa.struct(
                    [
                        ("model", pa.string()),
                        *_OUTCOME_TYPES.items(),
                        ("keys", _STRINGS),
                        ("extra", pa.string()),
                    ]
                )
            ),
        ),
        ("extra", pa.string()),
    ]
)


def _datasets() -> Any:
    """The ``datasets`` package, or the one-line error naming the extra."""
    try:
        import datasets
    except ModuleNotFoundError as exc:
        raise UDCGInputError(
            "Hugging Face datasets needs the 'datasets' extra: pip install 'udcg[datasets]'"
        ) from exc
    return datasets


#: one call at a time turns datasets' progress bars off (see :func:`_bars_off_without_stderr`)
_BARS_LOCK = threading.Lock()


@contextmanager
def _bars_off_without_stderr(hf: Any) -> Iterator[None]:
    """``datasets``' progress bars off while the block runs with standard error closed
    (``2>&-``: ``sys.stderr`` is None, and tqdm fails writing its bar there), their setting put
    back after; with standard error open, nothing changes. The lock keeps concurrent calls
    from putting back each other's setting. Bars the environment keeps on
    (``HF_DATASETS_DISABLE_PROGRESS_BARS=0``) are a one-line error before the block."""
    if live(sys.stderr) is not None:
        yield
        return
    with _BARS_LOCK:
        if hf.utils.are_progress_bars_disabled():
            yield
            return
        hf.utils.disable_progress_bars()  # a warning, dropped, where the environment says no
        if not hf.utils.are_progress_bars_disabled():
            raise UDCGInputError(
                "standard error is closed, and HF_DATASETS_DISABLE_PROGRESS_BARS=0 keeps the"
                " datasets library's progress bars on, which would fail writing there: unset"
                " it or open standard error"
            )
        try:
            yield
        finally:
            hf.utils.enable_progress_bars()


def _extra_json(extra: dict[str, Any]) -> str | None:
    return json.dumps(extra, ensure_ascii=False, allow_nan=False) if extra else None


#: the Python type of each leaf Arrow type of :data:`SCHEMA`
_PY_TYPES = {pa.string(): str, pa.bool_(): bool, pa.float64(): float}


def _fits(value: Any, arrow_type: pa.DataType) -> bool:
    """Whether ``value`` is stored exactly in a column of ``arrow_type`` (None always is)."""
    if value is None:
        return True
    if pa.types.is_list(arrow_type):
        item_type = arrow_type.value_type
        return isinstance(value, list) and all(_fits(item, item_type) for item in value)
    return type(value) is _PY_TYPES[arrow_type]


def _outcome_row(model: str, outcome: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"model": model, "keys": list(outcome)}
    extra = {}
    for key, value in outcome.items():
        if key in _OUTCOME_TYPES and _fits(value, _OUTCOME_TYPES[key]):
            row[key] = value
        else:
            extra[key] = value
    row["extra"] = _extra_json(extra)
    return row


def _passage_row(p: Passage) -> dict[str, Any]:
    graded = p.relevant is not None and type(p.relevant) is not bool
    return {
        "doc_id": p.doc_id,
        "text": p.text,
        "score": p.score,
        "relevant": None if graded else p.relevant,
        "grade": p.relevant if graded else None,
        **{
            key: [{"judge": j, "prob": v} for j, v in getattr(p, key).items()]
            for key in JUDGE_PROB_KEYS
        },
        "covers": p.covers,
        "extra": _extra_json(p.extra),
    }


def _row(ctx: Context) -> dict[str, Any]:
    return {
        "qid": ctx.qid,
        "run": ctx.run,
        "question": ctx.question,
        "answers": ctx.answers,
        "subqueries": ctx.subqueries,
        "passages": [_passage_row(p) for p in ctx.passages],
        "outcomes": [_outcome_row(m, o) for m, o in ctx.outcomes.items()],
        "extra": _extra_json(ctx.extra),
    }


def contexts_to_dataset(contexts: Iterable[Context]) -> datasets.Dataset:
    """A ``datasets.Dataset`` with one row per context, in :data:`SCHEMA`'s columns.

    Examples:
        >>> ds = contexts_to_dataset([Context("q1", [Passage("d1", relevant=2.0)], run="bm25")])
        >>> ds.num_rows, ds[0]["run"], ds[0]["passages"][0]["grade"]
        (1, 'bm25', 2.0)
    """
    table = pa.Table.from_pylist([_row(c) for c in contexts], schema=SCHEMA)
    return _datasets().Dataset(table)


def _json_object(text: Any, name: str, where: Where) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise where.error(name, "must be null or a string holding one JSON object")
    return value


def _struct_rows(value: Any) -> Any:
    """A list of structs from the struct of lists that a legacy ``Sequence({...})`` feature
    stores; anything else unchanged."""
    if not isinstance(value, dict) or not all(isinstance(v, list) for v in value.values()):
        return value
    lengths = {len(v) for v in value.values()}
    if len(lengths) != 1:
        return value
    return [dict(zip(value, items, strict=True)) for items in zip(*value.values(), strict=True)]


def _unknown(row: dict[str, Any], read: Iterable[str]) -> dict[str, Any]:
    """The fields of ``row`` outside ``read`` (a data file's keys the schema lacks), but those
    null (a row lacking a key other rows have)."""
    known = {*read, "extra"}
    return {k: v for k, v in row.items() if k not in known and v is not None}


def _with_extra(
    out: dict[str, Any], row: dict[str, Any], name: str, where: Where, read: Iterable[str] = ()
) -> Any:
    """``out`` (the schema's fields of ``row``; ``read``: others it took in), the other fields
    ``row`` holds (:func:`_unknown`) and its ``extra`` JSON, which may not name a field
    ``out`` holds."""
    out |= _unknown(row, [*out, *read])
    extra = _json_object(row.get("extra"), f"{name}extra", where)
    for key in extra:
        if out.get(key) is not None:
            raise where.error(f"{name}extra", f"holds {key!r}, which has its own column")
    return {**out, **extra}


def _passage_json(row: Any, name: str, where: Where) -> Any:
    if not isinstance(row, dict):
        return row  # parse_context names what it is
    out = {k: row.get(k) for k in ("doc_id", "text", "score", "relevant")}
    if row.get("grade") is not None:
        if out["relevant"] is not None:
            raise where.error(f"{name}.grade", "'relevant' and 'grade' are both set")
        out["relevant"] = relevance(row["grade"], f"{name}.grade", where)
    for key in JUDGE_PROB_KEYS:
        out[key] = _judge_map(row.get(key), f"{name}.{key}", where)
    out["covers"] = row.get("covers")
    return _with_extra(out, row, f"{name}.", where, read=["grade"])


def _judge_map(items: Any, name: str, where: Where) -> Any:
    items = _struct_rows(items)
    if items is None:
        return None
    if not isinstance(items, list) or not all(
        isinstance(i, dict) and isinstance(i.get("judge"), str) for i in items
    ):
        raise where.error(name, 'must be a list of {"judge": name, "prob": p} structs')
    out = {i["judge"]: i.get("prob") for i in items}
    if len(out) < len(items):
        twice = next(j for j in out if sum(i["judge"] == j for i in items) > 1)
        raise where.error(name, f"judge {twice!r} is given twice")
    return out


def _outcomes_json(items: Any, where: Where) -> Any:
    """The outcomes map of a list of structs with a ``model`` field (the schema's), or of a
    struct of structs keyed by model (a contexts JSONL's map as ``datasets`` reads it, null
    for a model a row lacks)."""
    items = _struct_rows(items)
    if items is None:
        return None
    if isinstance(items, dict) and all(v is None or isinstance(v, dict) for v in items.values()):
        items = [{**v, "model": m} for m, v in items.items() if v is not None]
    if not isinstance(items, list) or not all(
        isinstance(i, dict) and isinstance(i.get("model"), str) for i in items
    ):
        raise where.error("outcomes", 'must be a list of structs with a string "model"')
    out: dict[str, Any] = {}
    for i, row in enumerate(items):
        if row["model"] in out:
            raise where.error(f"outcomes[{i}].model", f"{row['model']!r} is given twice")
        extra = _json_object(row.get("extra"), f"outcomes[{i}].extra", where)
        typed = {k: row.get(k) for k in _OUTCOME_TYPES}
        typed |= _unknown(row, [*typed, "model", "keys"])
        keys = row.get("keys")
        if keys is None:
            keys = [k for k, v in typed.items() if v is not None] + list(extra)
        out[row["model"]] = {k: extra[k] if k in extra else typed.get(k) for k in keys}
    return out


def _context_json(row: dict[str, Any], where: Where) -> dict[str, Any]:
    out = {k: row.get(k) for k in ("qid", "run", "question", "answers", "subqueries")}
    passages = _struct_rows(row["passages"])
    if isinstance(passages, list):
        passages = [_passage_json(p, f"passages[{i}]", where) for i, p in enumerate(passages)]
    out["passages"] = passages
    out["outcomes"] = _outcomes_json(row.get("outcomes"), where)
    return _with_extra(out, row, "", where)


def contexts_from_dataset(ds: datasets.Dataset) -> list[Context]:
    """The contexts of a dataset in :data:`SCHEMA`'s columns (``qid`` and ``passages``
    required, the others optional), each row validated like a contexts JSONL line.

    Examples:
        >>> ctx = Context("q1", [Passage("d1", abstain_prob={"llama3": 0.25})])
        >>> contexts_from_dataset(contexts_to_dataset([ctx])) == [ctx]
        True
        >>> import datasets
        >>> contexts_from_dataset(datasets.Dataset.from_dict({"qid": ["q1"]}))
        Traceback (most recent call last):
        udcg.errors.UDCGInputError: dataset: column 'passages' is missing (columns: qid)
    """
    missing = [c for c in ("qid", "passages") if c not in ds.column_names]
    if missing:
        raise UDCGInputError(
            f"column {missing[0]!r} is missing (columns: {', '.join(ds.column_names)})",
            path="dataset",
        )
    contexts = []
    for i, row in enumerate(ds.with_format(None)):
        where = Where(f"dataset row {i}", None)
        contexts.append(parse_context(_context_json(row, where), where))
    return contexts


def load_contexts_dataset(
    id_or_path: str | Path, split: str = "train", **kwargs: Any
) -> list[Context]:
    """The contexts of a dataset: a folder written by ``save_to_disk`` (a ``DatasetDict``'s:
    ``split`` picks one; a single ``Dataset`` is its own split, ``train`` when it names none, as
    ``load_dataset`` names unsplit data, and another ``split`` is refused) through
    ``datasets.load_from_disk(path, **kwargs)``, anything else
    through ``datasets.load_dataset(id_or_path, split=split, **kwargs)``: a Hub id, a folder of
    data files, or a builder such as ``"parquet"`` with ``data_files=...``.

    Examples:
        >>> import tempfile
        >>> ctx = Context("q1", [Passage("d1", relevant=True)])
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     contexts_to_dataset([ctx]).save_to_disk(folder)
        ...     load_contexts_dataset(folder) == [ctx]
        True
    """
    hf = _datasets()
    folder = Path(id_or_path)
    if (folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file():
        with _bars_off_without_stderr(hf):
            ds = hf.load_from_disk(str(folder), **kwargs)
        if isinstance(ds, hf.DatasetDict):
            if split not in ds:
                raise UDCGInputError(f"no split {split!r} (splits: {', '.join(ds)})", path=folder)
            ds = ds[split]
        elif split != str(ds.split or "train"):
            raise UDCGInputError(
                f"no split {split!r}: the folder holds one dataset (split "
                f"{str(ds.split or 'train')!r}); name that split or none",
                path=folder,
            )
        return contexts_from_dataset(ds)
    try:
        with _bars_off_without_stderr(hf):
            ds = hf.load_dataset(str(id_or_path), split=split, **kwargs)
    except (
        FileNotFoundError,
        ConnectionError,
        ValueError,
        hf.exceptions.DatasetNotFoundError,
    ) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UDCGInputError(f"cannot load the dataset: {reason}", path=str(id_or_path)) from None
    return contexts_from_dataset(ds)


def read_hf_contexts(spec: str) -> list[Context]:
    """The contexts of ``hf:ID_OR_PATH`` or ``hf:ID_OR_PATH#SPLIT`` (default split
    ``train``), read with :func:`load_contexts_dataset`.

    Examples:
        >>> import tempfile
        >>> import datasets
        >>> ctx = Context("q1", [Passage("d1", relevant=True)])
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     datasets.DatasetDict({"dev": contexts_to_dataset([ctx])}).save_to_disk(folder)
        ...     read_hf_contexts(f"hf:{folder}#dev") == [ctx]
        True
    """
    name, split = hf_spec(spec)
    return load_contexts_dataset(name, split or "train")


def dataset_sha256(spec: str) -> str | None:
    """The SHA-256 of the dataset ``hf:DIR`` or ``hf:DIR#SPLIT`` names: every file under the
    local folder but hidden ones (its path in the folder and its bytes, in path order) and the
    split; None for a Hub id (no local folder).

    Examples:
        >>> import tempfile
        >>> ctx = Context("q1", [Passage("d1", "Paris.")])
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = save_contexts_dataset([ctx], folder)
        ...     first = dataset_sha256(f"hf:{folder}")
        ...     _ = save_contexts_dataset([ctx, ctx], folder)
        ...     first != dataset_sha256(f"hf:{folder}"), dataset_sha256("hf:nobody/none")
        (True, None)
    """
    name, split = hf_spec(spec)
    folder = Path(name)
    if not folder.is_dir():
        return None
    sha = hashlib.sha256(f"split={split or 'train'}\n".encode())
    files = (p.relative_to(folder) for p in folder.rglob("*") if p.is_file())
    for name in sorted(p for p in files if not any(part.startswith(".") for part in p.parts)):
        path = folder / name  # hidden ones aside: a clone's .git, udcg's own locks
        sha.update(f"{name.as_posix()}\n".encode("utf-8", "surrogateescape"))
        with path.open("rb") as handle:
            sha.update(hashlib.file_digest(handle, "sha256").digest())
    return sha.hexdigest()


def hf_spec(spec: str) -> tuple[str, str | None]:
    """``(ID_OR_PATH, SPLIT)`` of ``hf:ID_OR_PATH#SPLIT``, SPLIT None when none is named (a
    ``#`` followed by nothing or by a ``/`` is part of the name).

    Examples:
        >>> hf_spec("hf:runs/bm25#dev"), hf_spec("hf:runs/a#b/c")
        (('runs/bm25', 'dev'), ('runs/a#b/c', None))
    """
    if not spec.startswith(HF_PREFIX):
        raise UDCGInputError(f"expected {HF_PREFIX}ID or {HF_PREFIX}DIR", path=spec)
    name, hash_, split = spec.removeprefix(HF_PREFIX).rpartition("#")
    if not hash_ or not split or "/" in split:
        name, split = spec.removeprefix(HF_PREFIX), None
    if not name:
        raise UDCGInputError(
            f"expected {HF_PREFIX}ID or {HF_PREFIX}DIR after {HF_PREFIX}", path=spec
        )
    return name, split


def save_contexts_dataset(contexts: Iterable[Context], folder: str | Path) -> int:
    """Write ``contexts`` as a dataset in :data:`SCHEMA`'s columns to ``folder`` with
    ``save_to_disk``; returns the number of contexts. With standard error closed, without
    ``datasets``' progress bar.

    Examples:
        >>> import tempfile
        >>> ctx = Context("q1", [Passage("d1", "Paris.", 1.5)], run="bm25")
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     n = save_contexts_dataset([ctx], folder)
        ...     n, load_contexts_dataset(folder) == [ctx]
        (1, True)
    """
    given, folder = folder, Path(os.path.realpath(folder))  # a link's target is replaced
    _check_dataset_folder(folder)
    try:
        here = Path.cwd()
    except FileNotFoundError:  # a removed folder is in no folder of the disk
        here = None
    if here is not None and (folder == here or folder in here.parents):
        raise UDCGInputError("holds the current folder: name the dataset's own folder", path=given)
    ds = contexts_to_dataset(contexts)
    try:
        with exclusive_writer(folder, "dataset folder"):
            _swap_in(ds, folder)
    except OSError as exc:
        reason = exc.strerror or str(exc).splitlines()[0]
        raise UDCGInputError(f"cannot write the dataset: {reason}", path=str(given)) from None
    return int(ds.num_rows)


def _swap_in(ds: Any, folder: Path) -> None:
    """Save ``ds`` in a new folder beside ``folder`` (the replaced folder's mode, else the
    umask's), then swap the two and delete the earlier dataset, so no shard of it stays and
    a failure or a kill at any point leaves one of the two datasets whole in ``folder``."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    for stale in folder.parent.glob(f".{glob.escape(folder.name)}.*-*"):  # a killed run's
        ours = _BESIDE.fullmatch(stale.name[len(folder.name) + 1 :])
        if ours and stale.is_dir() and not _other_files(stale):
            shutil.rmtree(stale, ignore_errors=True)
    new = _beside(folder, "new")
    try:
        os.mkdir(new, 0o777)  # the kernel applies the umask
        if folder.exists():
            os.chmod(new, stat.S_IMODE(folder.stat().st_mode))
        with _bars_off_without_stderr(_datasets()):
            ds.save_to_disk(str(new))
        if not (folder.exists() and _exchange(new, folder)):  # `new` holds the earlier one
            _rename_over(new, folder)
    finally:
        shutil.rmtree(new, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two folders' names in one step (Linux's ``renameat2`` with ``RENAME_EXCHANGE``),
    so a run killed at any moment leaves ``b`` whole; False where the system or the file
    system cannot."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    at_cwd, exchange = -100, 2
    if renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def _rename_over(new: Path, folder: Path) -> None:
    """Put ``new`` in ``folder``'s place in two renames, the earlier dataset moved aside
    first and deleted last (put back if the second rename fails)."""
    old = _beside(folder, "old")
    if folder.exists():
        folder.rename(old)
    try:
        new.rename(folder)
    except OSError:
        if old.exists():
            old.rename(folder)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _beside(folder: Path, what: str) -> Path:
    return folder.parent / f".{folder.name}.{what}-{secrets.token_hex(6)}"


#: The end of a name :func:`_beside` makes (after ``.NAME``).
_BESIDE = re.compile(r"\.(new|old)-[0-9a-f]{12}")


def _other_files(folder: Path) -> list[str]:
    """The names in ``folder`` that are not files of a saved dataset, sorted."""
    return sorted(p.name for p in folder.iterdir() if not _DATASET_FILE.fullmatch(p.name))


#: The files ``save_to_disk`` writes in a dataset's folder.
_DATASET_FILE = re.compile(r"data-\d{5}-of-\d{5}\.arrow|dataset_info\.json|state\.json")


def _check_dataset_folder(folder: Path) -> None:
    """A folder to write a dataset to: new, empty, or an earlier dataset's (all replaced);
    one holding anything else is refused, as that would stay beside the new dataset."""
    if folder.exists() and not folder.is_dir():
        raise UDCGInputError("is not a folder: hf:DIR names the dataset folder", path=folder)
    if folder.is_dir():
        other = _other_files(folder)
        if other:
            raise UDCGInputError(
                f"holds {other[0]!r}, which is not a file of a saved dataset: choose a new or "
                "empty folder (or one an earlier dataset was saved to, which is replaced)",
                path=folder,
            )
