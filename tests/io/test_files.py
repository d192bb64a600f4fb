"""File helpers: memory-mapped or read content for every kind of path, blank detection."""

from __future__ import annotations

import gzip
import mmap
import os
import threading
from pathlib import Path

import pytest

from udcg.io.files import is_blank, mapped_bytes
from udcg.io.trec_files import read_trec_run

RUN = b"q1 Q0 d1 1 2.5 t\nq1 Q0 d2 2 1.5 t\n"


def test_plain_files_are_mapped_and_gzip_is_decompressed(tmp_path: Path) -> None:
    plain, packed, empty = tmp_path / "run.txt", tmp_path / "run.gz", tmp_path / "empty"
    plain.write_bytes(RUN)
    packed.write_bytes(gzip.compress(RUN))
    empty.write_bytes(b"")
    mapped = mapped_bytes(plain)
    assert isinstance(mapped, mmap.mmap) and mapped[:] == RUN
    assert mapped_bytes(packed) == RUN
    assert mapped_bytes(empty) == b""


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_pipe_is_read_like_process_substitution(tmp_path: Path) -> None:
    fifo = tmp_path / "run.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_bytes, args=(RUN,))
    writer.start()
    run = read_trec_run(fifo)
    writer.join()
    assert run.to_dict() == {"q1": {"d1": 2.5, "d2": 1.5}}


@pytest.mark.parametrize(
    ("data", "blank"),
    [(b"", True), (b" \n\t\n", True), (b" " * 5000 + b"x", False), (b"x", False)],
)
def test_is_blank(data: bytes, blank: bool) -> None:
    assert is_blank(data, chunk=1024) is blank
