"""File helpers: a pipe is read like a file (gzip sniffed without consuming it)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from udcg.io.trec_files import read_trec_run

RUN = b"q1 Q0 d1 1 2.5 t\nq1 Q0 d2 2 1.5 t\n"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_pipe_is_read_like_process_substitution(tmp_path: Path) -> None:
    fifo = tmp_path / "run.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_bytes, args=(RUN,))
    writer.start()
    run = read_trec_run(fifo)
    writer.join()
    assert run.to_dict() == {"q1": {"d1": 2.5, "d2": 1.5}}
