"""Where the manifest of a derived file lives, the hash it records of the file's content, and
the judge it names (the full record and its checks: :mod:`udcg.labels.provenance`)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from udcg.io.files import MANIFEST, STDIO, PathType, open_binary


def file_sha256(path: PathType) -> str:
    """SHA-256 of the (uncompressed) bytes of ``path``.

    Examples:
        The same content, compressed or not, has one hash:

        >>> import gzip, tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     with gzip.open(Path(folder) / "a.jsonl.gz", "wt") as out:
        ...         _ = out.write("{}\\n")
        ...     _ = (Path(folder) / "b.jsonl").write_text("{}\\n")
        ...     hashes = [file_sha256(Path(folder) / name) for name in ("a.jsonl.gz", "b.jsonl")]
        >>> hashes[0] == hashes[1]
        True
    """
    sha = hashlib.sha256()
    with open_binary(path) as handle:
        while block := handle.read(1 << 20):
            sha.update(block)
    return sha.hexdigest()


def manifest_path(output: PathType) -> Path:
    """Where the manifest of ``output`` lives: ``OUT.manifest.json``.

    Examples:
        >>> manifest_path("out/contexts.jsonl.gz").as_posix()
        'out/contexts.jsonl.gz.manifest.json'
    """
    return Path(f"{os.fspath(output)}{MANIFEST}")


def contexts_sha256(source: PathType) -> str | None:
    """The SHA-256 a record gives a contexts input: a regular file's (:func:`file_sha256`), a
    local ``hf:DIR`` dataset's (:func:`udcg.io.formats.hf_datasets.dataset_sha256`); None for
    standard input, a pipe or a Hub id, whose bytes are not kept.

    Examples:
        >>> contexts_sha256("-"), contexts_sha256("hf:nobody/no-such-set")
        (None, None)
    """
    if isinstance(source, str) and source.startswith("hf:"):
        from udcg.io.formats.hf_datasets import dataset_sha256

        return dataset_sha256(source)
    if os.fspath(source) == STDIO or not os.path.isfile(source):
        return None
    return file_sha256(source)


def recorded_judges(output: PathType, sha256: str | None = None) -> dict[str, dict[str, str]]:
    """Judge key -> annotate step -> fingerprint of the judge whose values of that step
    ``output`` holds under that key, as the manifest beside it records them: its ``judges``
    (every key the file holds values of, carried from run to run), or, in a manifest without
    it, what the run that wrote it made (:func:`made_by`). Empty without a readable manifest of
    this content (its ``output_sha256`` is ``output``'s: not edited since); ``sha256``:
    ``output``'s, when the caller has it already (the file is not hashed again).

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     out = Path(folder) / "out.jsonl"
        ...     _ = out.write_text("{}\\n")
        ...     sha = file_sha256(out)
        ...     old = {"judge": "llama3", "judge_fingerprint": "fp-1", "steps": ["abstain"]}
        ...     _ = manifest_path(out).write_text(json.dumps({**old, "output_sha256": sha}))
        ...     before = recorded_judges(out)
        ...     judges = {"llama3": {"abstain": "fp-1"}, "gpt": {"answer_likelihood": "fp-2"}}
        ...     new = {"judges": judges, "output_sha256": sha}
        ...     _ = manifest_path(out).write_text(json.dumps(new))
        ...     after = recorded_judges(out)
        >>> before, after == judges
        ({'llama3': {'abstain': 'fp-1'}}, True)
    """
    if os.fspath(output) == STDIO or not Path(output).is_file():
        return {}
    try:
        manifest = json.loads(manifest_path(output).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if sha256 is None:
        sha256 = file_sha256(output)
    if not isinstance(manifest, dict) or manifest.get("output_sha256") != sha256:
        return {}
    judges = manifest.get("judges")
    key, fingerprint, steps = (manifest.get(f) for f in ("judge", "judge_fingerprint", "steps"))
    own = isinstance(key, str) and isinstance(fingerprint, str) and isinstance(steps, list)
    if judges is None and own:  # the run that wrote it, alone
        relevance, relabel = manifest.get("relevance"), manifest.get("relabel_relevance")
        mode = manifest.get("mode")
        judges = made_by({}, key, fingerprint, steps, relevance, relabel is True, mode)
    if not isinstance(judges, dict):
        return {}
    found = {
        k: {s: f for s, f in made.items() if isinstance(s, str) and isinstance(f, str)}
        for k, made in judges.items()
        if isinstance(k, str) and isinstance(made, dict)
    }
    if own and "abstain" in steps and found.get(key, {}).get("abstain") == fingerprint:
        # its own run's abstention, recorded before the mode was (0.3 development versions)
        found[key]["abstain"] = with_mode(fingerprint, manifest.get("mode"))
    return found


def values_made_by(output: PathType, key: str, step: str) -> str | None:
    """The fingerprint of the judge whose values of annotate ``step`` ``output`` holds under
    judge ``key``, as its manifest records them (:func:`recorded_judges`); None: not recorded.

    Examples:
        >>> values_made_by("no-such-file.jsonl", "llama3", "abstain") is None
        True
    """
    return recorded_judges(output).get(key, {}).get(step)


def relevance_made_by(judges: Mapping[str, Mapping[str, str]]) -> str | None:
    """Who LLM-labelled the relevance of a file whose values ``judges`` made
    (:func:`recorded_judges`), under any judge key: a passage has one ``relevant`` label,
    whichever key's LLM made it. Several makers are joined with `` + ``; None: no LLM did.

    Examples:
        >>> relevance_made_by({"sim": {"abstain": "fp-a"}, "big": {"relevance": "fp-b"}})
        'fp-b'
        >>> relevance_made_by({"sim": {"abstain": "fp-a"}}) is None
        True
    """
    made = sorted({m["relevance"] for m in judges.values() if "relevance" in m})
    return " + ".join(made) or None


#: the fingerprint prefix of a precomputed file, whose values take no abstention mode
PRECOMPUTED_FINGERPRINT = "precomputed:"


def with_mode(fingerprint: str, mode: str | None) -> str:
    """Who made abstention values: the judge's fingerprint, and the abstention mode unless it
    is the default ``first_token`` (so records from before the mode was recorded still agree)
    or the judge is a precomputed file (its values are what the file holds, in any mode).

    Examples:
        >>> with_mode("fp", "first_token"), with_mode("fp", "sequence")
        ('fp', 'fp|mode=sequence')
        >>> with_mode("precomputed:ab12", "sequence")
        'precomputed:ab12'
    """
    if mode in (None, "first_token") or fingerprint.startswith(PRECOMPUTED_FINGERPRINT):
        return fingerprint
    return f"{fingerprint}|mode={mode}"


def mode_of(made: str | None) -> str | None:
    """The abstention mode of values made by ``made`` (:func:`with_mode`'s record); None:
    unknown, or a precomputed file's values (they have none).

    Examples:
        >>> mode_of("fp"), mode_of("fp|mode=sequence"), mode_of("precomputed:ab12")
        ('first_token', 'sequence', None)
    """
    if made is None or made.startswith(PRECOMPUTED_FINGERPRINT):
        return None
    _, marked, mode = made.rpartition("|mode=")
    return mode if marked else "first_token"


def made_by(
    judges: Mapping[str, Mapping[str, str]],
    name: str,
    fingerprint: str,
    steps: Sequence[str],
    relevance: str | None,
    relabel_relevance: bool,
    mode: str | None = "first_token",
) -> dict[str, dict[str, str]]:
    """Who made the values of each judge key once the judge ``name`` with ``fingerprint`` has
    run ``steps`` on a file whose values ``judges`` made (:func:`recorded_judges`): the steps
    it runs are its own, the abstention step's with its ``mode`` (:func:`with_mode`), except
    string relevance (no LLM's labels: the earlier entry stays). A relabel of the relevance
    (``relabel_relevance``, string or LLM) replaces every passage's label, whichever key's LLM
    made it: it drops every key's ``relevance`` entry first.

    Examples:
        >>> earlier = {"vals": {"abstain": "fp-a", "relevance": "fp-a"},
        ...            "other": {"abstain": "fp-c"}}
        >>> made_by(earlier, "vals", "fp-b", ["answer_likelihood"], "string", False)["vals"]
        {'abstain': 'fp-a', 'relevance': 'fp-a', 'answer_likelihood': 'fp-b'}
        >>> made_by(earlier, "vals", "fp-b", ["relevance"], "string", True)
        {'vals': {'abstain': 'fp-a'}, 'other': {'abstain': 'fp-c'}}
        >>> made_by({}, "new", "fp-b", ["relevance"], "string", False)  # no values of its own
        {}
    """
    out = {key: dict(made) for key, made in judges.items()}
    if "relevance" in steps and relabel_relevance:  # every passage's label is this run's
        for made in out.values():
            made.pop("relevance", None)
    own = [s for s in steps if s != "relevance" or relevance != "string"]
    made = {s: with_mode(fingerprint, mode) if s == "abstain" else fingerprint for s in own}
    if made:
        out.setdefault(name, {}).update(made)
    return out
