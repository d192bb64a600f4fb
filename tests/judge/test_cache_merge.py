"""Merging judge caches: counts against a dict reference, the destination wins, CLI lines."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from udcg.cli.main import main
from udcg.errors import UDCGInputError
from udcg.judge.base import Judge
from udcg.judge.cache import JudgeCache
from udcg.judge.cached import CachedJudge


def _rows(path: Path) -> dict[str, object]:
    with sqlite3.connect(path) as conn:
        return {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM judge_cache")}


def _fill(path: Path, items: dict[str, object]) -> Path:
    with JudgeCache(path) as cache:
        cache.put_many(items)
    return path


def test_merge_matches_a_dict_reference(tmp_path: Path) -> None:
    a = {"k1": 0.25, "k2": "text", "k3": {"value": 0.5, "upper_bound": True}}
    b = {"k2": "text", "k3": {"value": 0.75, "upper_bound": True}, "k4": 0.5, "k5": 1.0}
    c = {"k5": 0.0, "k6": "x"}
    dest = _fill(tmp_path / "dest.sqlite", a)
    sources = [_fill(tmp_path / "b.sqlite", b), _fill(tmp_path / "c.sqlite", c)]
    reference = dict(a)
    expected = []
    for items in (b, c):
        same = sum(k in reference and reference[k] == v for k, v in items.items())
        differ = sum(k in reference and reference[k] != v for k, v in items.items())
        added = {k: v for k, v in items.items() if k not in reference}
        reference.update(added)
        expected.append((len(added), same, differ))
    with JudgeCache(dest) as cache:
        got = [cache.merge_from(s) for s in sources]
        assert cache.writes == sum(e[0] for e in expected)
    assert [(g.added, g.same, g.conflicts) for g in got] == expected == [(2, 1, 1), (1, 0, 1)]
    assert _rows(dest) == reference  # the first file to hold a key wins
    assert _rows(sources[0]) == b  # sources untouched


def test_merge_refuses_what_is_not_a_cache(tmp_path: Path) -> None:
    dest = _fill(tmp_path / "d.sqlite", {"k": 1})
    (tmp_path / "text.sqlite").write_text("not sqlite at all, " * 100)
    with sqlite3.connect(tmp_path / "other.sqlite") as conn:
        conn.execute("CREATE TABLE t (x)")
    with JudgeCache(dest) as cache:
        for name, message in [
            ("text.sqlite", "not a judge cache"),
            ("other.sqlite", "no judge_cache table"),
            ("missing.sqlite", "no such cache file"),
            ("d.sqlite", "destination cache itself"),
        ]:
            with pytest.raises(UDCGInputError, match=message):
                cache.merge_from(tmp_path / name)
    assert not (tmp_path / "missing.sqlite").exists()


def test_cli_merge_and_stats(tmp_path: Path, capsys) -> None:
    a = _fill(tmp_path / "a.sqlite", {"k1": 0.1, "k2": 0.2})
    b = _fill(tmp_path / "b.sqlite", {"k2": 0.3, "k3": 0.3})
    out = tmp_path / "m.sqlite"
    assert main(["cache", "merge", str(out), str(a), str(b)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{a}: 2 added, 0 already there",
        f"{b}: 1 added, 0 already there, 1 with a different value (kept as in {out})",
        f"{out}: 3 entries",
    ]
    assert _rows(out) == {"k1": 0.1, "k2": 0.2, "k3": 0.3}
    assert main(["cache", "stats", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"{out}: 3 entries, written 20")
    assert main(["cache", "merge", str(tmp_path / "new.sqlite"), str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err == f"udcg cache merge: error: {tmp_path / 'nope'}: no such cache file\n"
    assert not (tmp_path / "new.sqlite").exists()
    assert main(["cache", "stats", str(tmp_path / "nope")]) == 2
    capsys.readouterr()
    for folder in (f"{tmp_path / 'newdir'}/", str(tmp_path)):  # OUT is a file, not a folder
        assert main(["cache", "merge", folder, str(a)]) == 2
        assert "is a folder: OUT is the cache file to write" in capsys.readouterr().err
    assert not (tmp_path / "newdir").exists()


class _TokenJudge(Judge):
    """Answers 0.25 under the run-time settings ``{"abstain_token": token}``; without a token
    it cannot resolve them (a server that does not answer)."""

    name, fingerprint = "tok", "tok:v1"

    def __init__(self, token: str | None) -> None:
        self.token, self.asked = token, 0

    def key_settings(self, operation: str) -> dict[str, object]:
        self.resolving = getattr(self, "resolving", 0) + 1
        if self.token is None:
            raise UDCGInputError("no tokenizer endpoint answered")
        return {"abstain_token": self.token, "unlisted": "min(last,rest)"}

    def abstain_prob(self, questions, passages, mode="first_token"):
        self.asked += len(questions)
        return np.full(len(questions), 0.25)


def test_merge_keeps_the_judges_recorded_key_settings(tmp_path: Path, capsys) -> None:
    """The key-settings record a cached judge stores is merged like any entry (a conflict kept
    as in OUT), so the merged cache answers a rerun that cannot resolve the settings."""
    source = tmp_path / "judge-1.sqlite"
    CachedJudge(_TokenJudge("\u0120NO"), source).abstain_prob(["q"], ["p"])
    out = tmp_path / "judge.sqlite"
    assert main(["cache", "merge", str(out), str(source)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"{source}: 2 added, 0 already there"
    assert _rows(out) == _rows(source)
    offline = _TokenJudge(None)
    rerun = CachedJudge(offline, out)
    for _ in range(3):  # chunk after chunk: the server that did not answer is not asked again
        assert rerun.abstain_prob(["q"], ["p"]).tolist() == [0.25]
    assert offline.asked == 0 and offline.resolving == 1
    settings = {k: v for k, v in _rows(source).items() if isinstance(v, dict)}
    other = _fill(
        tmp_path / "judge-2.sqlite", {k: {**v, "abstain_token": "NO"} for k, v in settings.items()}
    )
    assert main(["cache", "merge", str(out), str(other)]) == 0
    assert "1 with a different value (kept as in" in capsys.readouterr().out
    assert _rows(out) == _rows(source)


def test_a_judge_back_mid_run_must_still_have_the_recorded_settings(tmp_path: Path) -> None:
    """Keys made from the record while the server did not answer are checked before misses go
    to it: a server back with another abstention token is refused, the same one is asked."""
    cache = tmp_path / "judge.sqlite"
    CachedJudge(_TokenJudge("\u0120NO"), cache).abstain_prob(["q"], ["p"])
    for token, refused in (("NO", True), ("\u0120NO", False)):
        judge = _TokenJudge(None)
        rerun = CachedJudge(judge, cache)
        assert rerun.abstain_prob(["q"], ["p"]).tolist() == [0.25] and judge.asked == 0
        judge.token = token  # the server is back
        if refused:
            with pytest.raises(UDCGInputError, match=r"settings are now .*'abstain_token': 'NO'"):
                rerun.abstain_prob(["q2"], ["p"])
            assert judge.asked == 0
        else:
            assert rerun.abstain_prob(["q2"], ["p"]).tolist() == [0.25] and judge.asked == 1


def _copied_while_writing(tmp_path: Path) -> tuple[Path, Path, JudgeCache]:
    """A cache of 5 entries, all in its -wal, its writer still open, and a copy of its three
    files made then: (the cache, the copy, the writer)."""
    import shutil

    source = tmp_path / "run" / "judge.sqlite"
    source.parent.mkdir()
    writer = JudgeCache(source)
    writer.put_many({f"{i:064x}": i / 100 for i in range(5)})
    copy = tmp_path / "copies" / "judge.sqlite"
    copy.parent.mkdir()
    for suffix in ("", "-wal", "-shm"):
        shutil.copy(f"{source}{suffix}", f"{copy}{suffix}")
    return source, copy, writer


def test_merge_writes_nothing_to_its_input(tmp_path: Path) -> None:
    """The copy recipe done twice: FILE with its -wal and -shm copied while the writer ran,
    later the checkpointed FILE alone copied over it, leaving a stale -wal beside a newer FILE.
    The merge must not write to its input: checkpointing that -wal into it on close replaced
    the newer entries (49 of 181 left in the report that found it). Reading the copy through
    that -wal, which SQLite replays over the newer file, is refused, naming it."""
    import shutil

    source, copy, writer = _copied_while_writing(tmp_path)
    writer.put_many({f"{i:064x}": i / 100 for i in range(5, 60)})
    assert writer.checkpoint()
    writer.close()
    shutil.copy(source, copy)  # copy 2: FILE alone, beside copy 1's -wal and -shm
    before = copy.read_bytes()
    merged = JudgeCache(tmp_path / "merged.sqlite")
    # SQLite would replay copy 1's -wal over the newer file: 5 entries instead of 60
    with pytest.raises(UDCGInputError, match=r"judge\.sqlite-wal drops or changes 55 entries"):
        merged.merge_from(copy)
    assert len(merged) == 0 and copy.read_bytes() == before
    assert Path(f"{copy}-wal").exists()
    for suffix in ("-wal", "-shm"):  # without the stale files the copy holds every entry
        Path(f"{copy}{suffix}").unlink()
    assert merged.merge_from(copy).added == 60
    merged.close()


def test_a_wal_that_drops_entries_is_named_through_a_link_and_a_live_one_is_read(
    tmp_path: Path, capsys
) -> None:
    """The -wal beside the file a link names is the one SQLite replays, and the one refused; a
    writer's own -wal is read: one that only adds entries, one a checkpoint stopped part-way
    behind a reader (the file alone is not readable then), and one holding a drop once
    checkpointed, as the refusal says."""
    import shutil

    source, copy, writer = _copied_while_writing(tmp_path)
    writer.put_many({f"{i:064x}": i / 100 for i in range(5, 9)})
    assert writer.checkpoint()
    shutil.copy(source, copy)
    link = tmp_path / "latest.sqlite"
    link.symlink_to(copy)
    with pytest.raises(UDCGInputError, match=r"copies/judge\.sqlite: judge\.sqlite-wal drops"):
        JudgeCache(tmp_path / "m.sqlite").merge_from(link)
    writer.put_many({f"{i:064x}": i / 100 for i in range(9, 12)})  # the writer's own adds
    assert JudgeCache(tmp_path / "live.sqlite").merge_from(source).added == 12
    reader = sqlite3.connect(source)  # another process reading: the checkpoint stops part-way
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM judge_cache").fetchall()
    writer.put_many({f"{i:064x}": i / 100 for i in range(12, 15)})
    with sqlite3.connect(source) as other:
        other.execute("PRAGMA wal_checkpoint").fetchone()
    assert JudgeCache(tmp_path / "partial.sqlite").merge_from(source).added == 15
    reader.close()
    assert writer.drop([f"{0:064x}"]) == 1  # not checkpointed: in the writer's -wal
    assert main(["cache", "merge", str(tmp_path / "d.sqlite"), str(source)]) == 2
    assert f"run `udcg cache checkpoint {source}` where it was" in capsys.readouterr().err
    assert main(["cache", "checkpoint", str(source)]) == 0
    assert main(["cache", "merge", str(tmp_path / "d.sqlite"), str(source)]) == 0
    assert len(JudgeCache(tmp_path / "d.sqlite")) == 14
    writer.close()


def test_a_cache_table_without_its_primary_key_is_refused(tmp_path: Path) -> None:
    """Made by another tool, the same columns without the primary key would let one key hold
    two values (a merge inserting duplicates instead of keeping the destination's)."""
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE judge_cache (key TEXT, value TEXT, created REAL)")
        conn.execute("INSERT INTO judge_cache VALUES (?, '0.5', 1.0)", ("a" * 64,))
    with pytest.raises(UDCGInputError, match="no primary key on 'key'"):
        JudgeCache.check_file(other)
    with pytest.raises(UDCGInputError, match="no primary key on 'key'"):
        JudgeCache(tmp_path / "merged.sqlite").merge_from(other)


def test_a_piped_cache_is_named_as_such(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "judge.sqlite"
    os.mkfifo(fifo)
    with pytest.raises(UDCGInputError, match="not a regular file \\(a pipe or a device\\)"):
        JudgeCache.check_file(fifo)
    with pytest.raises(UDCGInputError, match="no such cache file"):
        JudgeCache.check_file(tmp_path / "missing.sqlite")
