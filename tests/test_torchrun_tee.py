"""The node's torchrun: whole lines only in node.log, a block at a time, torchrun otherwise
unchanged (its own tee where torch's has another shape)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ddptui.launch import torchrun_tee
from ddptui.launch.staging import torchrun_program


class Dst(io.StringIO):
    """A destination that records each write, as torchrun's stdout would get them."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, s: str) -> int:
        self.writes.append(s)
        return super().write(s)


def tail(path: Path, finished: threading.Event, dst: Dst, keep: object = None,
         interval: float = 0.01) -> threading.Thread:
    t = threading.Thread(target=torchrun_tee.tail_logfile,
                         args=("[r3]:", str(path), dst, finished, interval, keep), daemon=True)
    t.start()
    return t


def test_a_line_written_in_two_parts_is_copied_whole(tmp_path: Path) -> None:
    path, dst, finished = tmp_path / "stdout.log", Dst(), threading.Event()
    t = tail(path, finished, dst)  # the file does not exist yet: the tail waits for it
    with open(path, "w", buffering=1) as f:
        f.write("first line\nsecond ha")
        f.flush()
        time.sleep(0.2)  # the tail reads the half line many times meanwhile
        f.write("lf\r\nthird\rlast without newline")
        f.flush()
    time.sleep(0.1)
    finished.set()
    t.join(10)
    assert not t.is_alive()
    assert dst.getvalue() == ("[r3]:first line\n[r3]:second half\n[r3]:third\n"
                              "[r3]:last without newline\n")
    assert all(w.endswith("\n") for w in dst.writes)


def test_a_line_is_copied_within_the_tees_own_poll_not_torchruns(tmp_path: Path) -> None:
    """torchrun asks for a look every 0.1 s (5 s here): the tee looks every POLL_S."""
    path, dst, finished = tmp_path / "stdout.log", Dst(), threading.Event()
    path.write_text("")
    t = tail(path, finished, dst, interval=5.0)
    time.sleep(0.3)  # the tail found nothing and sleeps
    with open(path, "a") as f:
        f.write("late line\n")
    end = time.monotonic() + 3
    while "late line" not in dst.getvalue() and time.monotonic() < end:
        time.sleep(0.01)
    arrived = dst.getvalue()
    finished.set()
    t.join(10)
    assert arrived == "[r3]:late line\n"
    assert torchrun_tee.POLL_S <= 0.05


def test_a_block_of_lines_is_one_write(tmp_path: Path) -> None:
    path, dst, finished = tmp_path / "stdout.log", Dst(), threading.Event()
    path.write_text("".join(f"line {i}\n" for i in range(1000)))
    finished.set()
    tail(path, finished, dst).join(10)
    assert len(dst.writes) == 1
    assert dst.getvalue().splitlines() == [f"[r3]:line {i}" for i in range(1000)]


def test_a_filter_keeps_its_lines_and_the_default_filter_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "stdout.log"
    path.write_text("keep a\ndrop b\nkeep c\n")
    finished = threading.Event()
    finished.set()
    dst = Dst()
    tail(path, finished, dst, lambda line: line.startswith("keep")).join(10)
    assert dst.getvalue() == "[r3]:keep a\n[r3]:keep c\n"
    torchrun_tee._keep_all = never = lambda _line: False  # stands for TailLog's default
    try:
        dst = Dst()
        tail(path, finished, dst, never).join(10)
    finally:
        torchrun_tee._keep_all = None
    assert dst.getvalue().count("[r3]:") == 3


def test_an_endless_line_is_copied_in_bounded_pieces(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torchrun_tee, "CHUNK", 64)
    monkeypatch.setattr(torchrun_tee, "LONGEST", 100)
    path, dst, finished = tmp_path / "stdout.log", Dst(), threading.Event()
    path.write_text("x" * 1000)
    finished.set()
    tail(path, finished, dst).join(10)
    lines = dst.getvalue().splitlines()
    assert "".join(line.removeprefix("[r3]:") for line in lines) == "x" * 1000
    assert max(map(len, lines)) <= len("[r3]:") + 100 + 64


def test_install_replaces_torchs_tail_and_keeps_its_default_filter() -> None:
    from torch.distributed.elastic.multiprocessing import tail_log
    original = tail_log.tail_logfile
    try:
        assert torchrun_tee.install()
        assert tail_log.tail_logfile is torchrun_tee.tail_logfile
        assert torchrun_tee._keep_all is not None and torchrun_tee._keep_all("x")
    finally:
        tail_log.tail_logfile = original
        torchrun_tee._keep_all = None


def test_a_torch_of_another_shape_runs_its_own_tee(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.elastic.multiprocessing import tail_log

    def other(path: str, dst: object) -> None: ...

    monkeypatch.setattr(tail_log, "tail_logfile", other)
    assert not torchrun_tee.install()
    assert tail_log.tail_logfile is other


RANK = """\
import os, sys, time
r = os.environ["RANK"]
for i in range(3):
    sys.stdout.write(f"part {i} of rank {r}"); sys.stdout.flush(); time.sleep(0.25)
    sys.stdout.write(" done\\n"); sys.stdout.flush()
print(f"to stderr from rank {r}", file=sys.stderr)
sys.stdout.write(f"rank {r} ends mid-line")
"""


def test_real_torchrun_through_it_writes_whole_lines(tmp_path: Path) -> None:
    """What launch.sh runs, as it runs it (the uploaded text, by path), on two ranks."""
    program = tmp_path / "torchrun.py"
    program.write_bytes(torchrun_program())
    (tmp_path / "rank.py").write_text(RANK)
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[ddptui 0 ${rank}] "}
    with open(tmp_path / "node.log", "ab") as log:
        done = subprocess.run(
            [sys.executable, str(program), "--standalone", "--nproc-per-node", "2",
             "--tee", "3", "--log-dir", str(tmp_path / "logs"), "rank.py"],
            cwd=tmp_path, env=env, stdout=log, stderr=log, timeout=180, check=False)
    out = (tmp_path / "node.log").read_text()
    assert done.returncode == 0, out
    lines = [x for x in out.splitlines() if x.startswith("[ddptui ")]
    expected = {f"[ddptui 0 {r}] {text}" for r in (0, 1) for text in
                [*(f"part {i} of rank {r} done" for i in range(3)),
                 f"to stderr from rank {r}", f"rank {r} ends mid-line"]}
    assert sorted(lines) == sorted(expected)
    assert "usage:" not in out and "Traceback" not in out
