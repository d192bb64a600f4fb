"""File helpers: a pipe is read like a file (gzip sniffed without consuming it)."""

from __future__ import annotations

import contextvars
import os
import stat
import threading
from pathlib import Path

import pytest

from udcg.errors import UDCGInputError
from udcg.io.files import atomic_write
from udcg.io.formats.trec import read_trec_run

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


def test_exclusive_writer_nests_in_its_process_and_refuses_another(tmp_path):
    """The holder may take its own lock again (a command, then the library); another process
    is refused in one line; the lock file goes with the outermost holder."""
    import subprocess
    import sys

    from udcg.io.files import exclusive_writer

    out = tmp_path / "out.jsonl"
    other = (
        "import sys; from udcg.io.files import exclusive_writer\n"
        "from udcg.errors import UDCGInputError\n"
        "try:\n"
        f"    with exclusive_writer({str(out)!r}): pass\n"
        "except UDCGInputError as e:\n"
        "    print(e); sys.exit(2)\n"
    )
    with exclusive_writer(out):
        with exclusive_writer(out):
            pass
        assert Path(f"{out}.lock").exists()  # the inner exit keeps the outer lock
        run = subprocess.run([sys.executable, "-c", other], capture_output=True, text=True)
        assert run.returncode == 2, run.stderr
        assert run.stdout.startswith(f"{out}: another process is writing this output")
    assert not Path(f"{out}.lock").exists()
    assert subprocess.run([sys.executable, "-c", other]).returncode == 0
    link = tmp_path / "link.jsonl"  # another name of the file: the same lock, beside the file
    link.symlink_to(out.name)
    with exclusive_writer(link):
        assert Path(f"{out}.lock").exists() and not Path(f"{link}.lock").exists()
        run = subprocess.run([sys.executable, "-c", other], capture_output=True, text=True)
        assert run.returncode == 2, run.stderr


def test_exclusive_writer_refuses_another_thread_of_its_process(tmp_path: Path) -> None:
    """Two threads of one process (a service running two commands) on one output: the second
    is refused, as a second process is, and the first keeps its lock to its end."""
    import threading

    from udcg.errors import UDCGInputError
    from udcg.io.files import exclusive_writer

    out, got = tmp_path / "out.jsonl", []

    def other() -> None:
        try:
            with exclusive_writer(out):
                got.append("taken")
        except UDCGInputError as exc:
            got.append(str(exc))

    with exclusive_writer(out):
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert Path(f"{out}.lock").exists()
    assert got == [
        f"{out}: another run in this process (another thread) is writing this output (lock "
        f"{os.path.realpath(out)}.lock); wait for it to finish or choose another output path"
    ]
    other()  # once released, another thread takes it
    assert got[-1] == "taken"


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_atomic_write_gives_the_usual_permissions_under_the_umask(tmp_path, umask: int) -> None:
    before = os.umask(umask)
    try:
        with atomic_write(tmp_path / "out.txt") as out:
            out.write("x")
    finally:
        os.umask(before)
    assert stat.S_IMODE((tmp_path / "out.txt").stat().st_mode) == 0o666 & ~umask


def test_a_replaced_file_keeps_its_permissions_through_a_link_too(tmp_path: Path) -> None:
    """As ``>``, ``cp`` and ``sort -o`` leave them: a private file stays private."""
    private = tmp_path / "private.jsonl"
    private.write_text("old\n")
    private.chmod(0o600)
    (tmp_path / "link.jsonl").symlink_to(private.name)
    for name in ("private.jsonl", "link.jsonl"):
        with atomic_write(tmp_path / name) as out:
            out.write(f"{name}\n")
        assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert private.read_text() == "link.jsonl\n"


def test_a_name_of_a_descriptor_takes_no_lock(tmp_path: Path) -> None:
    """``/dev/stdout`` on a pipe leads to ``pipe:[N]``, no file to put a lock beside: written
    through the descriptor, it takes none, as ``-`` takes none."""
    import subprocess
    import sys

    code = (
        "from udcg.io.files import exclusive_writer\n"
        "with exclusive_writer('/dev/stdout'):\n"
        "    print('written')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "written\n"), done.stderr


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
def test_a_replaced_file_keeps_its_owner_and_drops_set_id_bits(tmp_path: Path) -> None:
    """As ``>`` leaves a file: written by root, another user's file stays theirs; a set-user-ID
    bit is not carried onto the new file."""
    theirs = tmp_path / "theirs.jsonl"
    theirs.write_text("old\n")
    os.chown(theirs, 65534, 65534)
    theirs.chmod(0o4750)
    with atomic_write(theirs) as out:
        out.write("new\n")
    after = theirs.stat()
    assert (after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == (65534, 65534, 0o750)


def test_a_replaced_file_keeps_its_group_where_only_the_group_may_be_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not root, a member of the file's group: the owner cannot be set, the group can."""
    from udcg.io import files

    old = tmp_path / "old.jsonl"
    old.write_text("")
    calls = []

    def fchown(fd: int, uid: int, gid: int) -> None:
        calls.append((uid, gid))
        if uid != -1:
            raise PermissionError("not the owner")

    monkeypatch.setattr(files.os, "fchown", fchown)
    with open(tmp_path / "new.jsonl", "wb") as new:
        files.keep_owner_and_mode(new.fileno(), old)
    before = old.stat()
    assert calls == [(before.st_uid, before.st_gid), (-1, before.st_gid)]


def test_a_file_that_may_not_be_replaced_is_refused_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where ``>`` would be refused: a file the process may not write, and another user's
    file in a sticky folder it does not own (the rename would fail after the work)."""
    from udcg.io import files

    kept = tmp_path / "kept.jsonl"
    kept.write_text("old\n")
    monkeypatch.setattr(files.os, "access", lambda path, mode: False)
    with pytest.raises(UDCGInputError, match=r"kept\.jsonl: permission denied"):
        with atomic_write(kept) as out:
            out.write("new\n")
    monkeypatch.undo()
    sticky = tmp_path / "shared"
    sticky.mkdir()
    sticky.chmod(0o1777)
    theirs = sticky / "theirs.jsonl"
    theirs.write_text("old\n")
    stranger = theirs.stat().st_uid + 4242  # neither the file's owner nor the folder's
    monkeypatch.setattr(files.os, "geteuid", lambda: stranger)
    with pytest.raises(UDCGInputError, match="another user's file in a folder with the sticky"):
        files.refuse_unreplaceable(theirs)
    assert kept.read_text() == theirs.read_text() == "old\n"


def test_a_link_to_a_name_of_a_folder_is_refused(tmp_path: Path) -> None:
    """``out.jsonl -> results/`` names a folder: Path() would drop the slash and write a file
    ``results``; ``>`` refuses it too."""
    (tmp_path / "out.jsonl").symlink_to("results/")
    with pytest.raises(UDCGInputError, match=r"is a link to 'results/', which names a folder"):
        with atomic_write(tmp_path / "out.jsonl") as out:
            out.write("never\n")
    assert not (tmp_path / "results").exists()


def test_atomic_write_writes_through_a_link_and_keeps_it(tmp_path: Path) -> None:
    """As ``>``, ``sort -o`` and ``cp`` do: the link's target gets the content (through a
    chain of links, relative to each link's folder; a dangling link's target is created), the
    link stays a link, and no temporary file is left in either folder."""
    (tmp_path / "data").mkdir()
    real = tmp_path / "data" / "real.txt"
    real.write_text("old\n")
    (tmp_path / "data" / "hop.txt").symlink_to("real.txt")
    link = tmp_path / "out.txt"
    link.symlink_to("data/hop.txt")
    with atomic_write(link) as out:
        out.write("new\n")
    assert link.is_symlink() and os.readlink(link) == "data/hop.txt"
    assert (tmp_path / "data" / "hop.txt").is_symlink() and real.read_text() == "new\n"
    dangling = tmp_path / "later.txt"
    dangling.symlink_to("data/later-target.txt")
    with atomic_write(dangling) as out:
        out.write("made\n")
    assert dangling.is_symlink()
    assert (tmp_path / "data" / "later-target.txt").read_text() == "made\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "later.txt", "out.txt"]
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == [
        "hop.txt",
        "later-target.txt",
        "real.txt",
    ]
    loop = tmp_path / "loop.txt"
    loop.symlink_to("loop.txt")
    with pytest.raises(UDCGInputError, match=r"loop\.txt: too many levels of symbolic links"):
        with atomic_write(loop) as out:
            out.write("never\n")


def _zip(data: bytes) -> bytes:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("run.txt", data)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("name", "pack"),
    [
        ("bzip2", lambda data: __import__("bz2").compress(data)),
        ("xz", lambda data: __import__("lzma").compress(data)),
        ("zip", _zip),
    ],
)
def test_other_compressions_are_named_not_read_as_text(tmp_path: Path, name, pack) -> None:
    """gzip is read; another compression is refused as such, not as invalid UTF-8."""
    from udcg.io.formats.collection import read_collection

    for path, read in (
        (tmp_path / "run.txt.x", read_trec_run),
        (tmp_path / "docs.tsv.x", lambda p: read_collection(p, {"d1"})),
    ):
        path.write_bytes(pack(RUN if read is read_trec_run else b"d1\ttext\n"))
        with pytest.raises(UDCGInputError, match=f"^{path}: compressed with {name}, which udcg"):
            read(path)


def test_text_that_starts_like_a_compression_magic_is_read(tmp_path: Path) -> None:
    path = tmp_path / "run.txt"
    path.write_bytes(b"BZh Q0 d1 1 2.5 t\nPK Q0 d2 1 1.5 t\n")
    assert read_trec_run(path).to_dict() == {"BZh": {"d1": 2.5}, "PK": {"d2": 1.5}}


def test_exclusive_writer_nests_through_a_linked_folder_and_dotdot(tmp_path: Path) -> None:
    """One folder under several names (a link to it, ``..``) is one lock: the process that
    holds it takes it again, as it does under one name."""
    from udcg.io.files import exclusive_writer

    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    names = [
        tmp_path / "real" / "out.jsonl",
        tmp_path / "link" / "out.jsonl",
        tmp_path / "real" / "sub" / ".." / "out.jsonl",
    ]
    with exclusive_writer(names[0]), exclusive_writer(names[1]), exclusive_writer(names[2]):
        assert sorted(os.listdir(tmp_path / "real")) == ["out.jsonl.lock", "sub"]
    assert sorted(os.listdir(tmp_path / "real")) == ["sub"]


def test_inputs_read_once_keep_a_commands_standard_input_from_another_threads_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command that ends in another thread leaves this command's standard input as read;
    outside a command, a new standard input object on a file rewritten at its inode (or a new
    file that took the inode) is read anew."""
    import sys

    from udcg.cli.common import run_command
    from udcg.io.files import inputs_read_once, open_binary

    data = tmp_path / "in.txt"
    data.write_bytes(b"first\n")
    monkeypatch.setattr(sys, "stdin", data.open())
    with inputs_read_once():
        with open_binary("-") as handle:
            assert handle.read() == b"first\n"
        other = threading.Thread(target=run_command, args=("t", lambda: None))
        other.start()
        other.join()
        with open_binary("-") as handle:
            assert handle.read() == b"first\n"
    for text in (b"second\n", b"third\n"):
        data.unlink()
        data.write_bytes(text)
        sys.stdin.close()
        monkeypatch.setattr(sys, "stdin", data.open())
        with open_binary("-") as handle:
            assert handle.read() == text
    sys.stdin.close()


def test_a_pipe_opened_again_in_one_command_gives_the_same_bytes(tmp_path: Path) -> None:
    """``<(...)`` read by a sweep's members (each opens the name again, through any reader):
    one read; outside a command a pipe is streamed, read once."""
    from udcg.demo_data.demo import SOURCE, load_source
    from udcg.io.files import inputs_read_once, read_bytes, read_once

    def pipe(data: bytes) -> tuple[int, str]:
        read, write = os.pipe()
        threading.Thread(target=lambda: (os.write(write, data), os.close(write))).start()
        return read, f"/proc/self/fd/{read}"

    line = b"q1 Q0 d1 1 2.0 r\n"
    read, name = pipe(line)
    try:
        with inputs_read_once():
            assert read_bytes(read_once(name)) == read_bytes(name) == read_bytes(read_once(name))
        assert read_bytes(name) == b""  # outside: read anew, and the pipe is drained
    finally:
        os.close(read)
    read, name = pipe(SOURCE.read_bytes())  # a demo source: a JSON file of 100 KB and more
    try:
        with inputs_read_once():
            assert load_source(name) == load_source(name) == load_source(SOURCE)
    finally:
        os.close(read)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_named_pipe_named_again_in_one_command_is_not_opened_again(tmp_path: Path) -> None:
    """A FIFO's writer is gone after the first read: opening it again would wait for ever."""
    from udcg.io.files import inputs_read_once, read_bytes, read_once

    fifo = tmp_path / "run.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_bytes, args=(b"q1 Q0 d1 1 2.0 r\n",))
    writer.start()
    with inputs_read_once():
        first = read_bytes(read_once(fifo))
        writer.join()
        done: list[bytes] = []
        reread = contextvars.copy_context().run  # this command's, in a thread that may hang
        again = threading.Thread(target=reread, args=(lambda: done.append(read_bytes(fifo)),))
        again.start()
        again.join(timeout=10)
    hung = again.is_alive()
    if hung:  # free the reader before failing
        with open(fifo, "wb"):
            pass
        again.join()
    assert not hung and done == [first] == [b"q1 Q0 d1 1 2.0 r\n"]


def test_two_pipes_one_writer_feeds_are_read_side_by_side(monkeypatch: pytest.MonkeyPatch) -> None:
    """One writer alternates between two pipes, more than a pipe's buffer each (``tee
    >(...)``); a command reads them on two threads (``udcg trec`` parses qrels and run at
    once): each read waits only for its own pipe, or the writer and both readers stop."""
    from udcg._threads import run_concurrently
    from udcg.io.files import inputs_read_once, read_bytes

    chunk, rounds = b"x" * 4096, 64  # 256 KiB per pipe
    (ra, wa), (rb, wb) = os.pipe(), os.pipe()

    def write() -> None:
        for _ in range(rounds):
            os.write(wa, chunk)
            os.write(wb, chunk)
        os.close(wa)
        os.close(wb)

    done: list[list[bytes]] = []

    def command() -> None:
        with inputs_read_once():
            names = (f"/proc/self/fd/{ra}", f"/proc/self/fd/{rb}")
            done.append(run_concurrently(*(lambda n=n: read_bytes(n) for n in names)))

    writer, reader = threading.Thread(target=write), threading.Thread(target=command)
    monkeypatch.setenv("UDCG_NUM_THREADS", "2")
    writer.start()
    reader.start()
    reader.join(timeout=20)
    hung = reader.is_alive()
    for fd in (ra, rb):  # frees a stuck writer and reader before failing
        os.close(fd)
    writer.join()
    assert not hung and done == [[chunk * rounds, chunk * rounds]]
