"""The node's torchrun: whole lines only in node.log, a block at a time, torchrun otherwise
unchanged (its own tee where torch's has another shape)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ddptui.launch.staging import torchrun_program
from ddptui.nodeprog import bar_states, rendezvous_pace, torchrun_tee


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
        f.write("lf\r\nthird\r\nlast without newline")
        f.flush()
    time.sleep(0.1)
    finished.set()
    t.join(10)
    assert not t.is_alive()
    assert dst.getvalue() == ("[r3]:first line\n[r3]:second half\n[r3]:third\n"
                              "[r3]:last without newline\n")
    assert all(w.endswith("\n") for w in dst.writes)


def test_a_line_is_copied_within_the_tees_own_poll_not_torchruns(tmp_path: Path) -> None:
    """torchrun asks for a look every 0.1 s (60 s here): the tee looks every POLL_S."""
    path, dst, finished = tmp_path / "stdout.log", Dst(), threading.Event()
    path.write_text("")
    t = tail(path, finished, dst, interval=60.0)
    # The tail found nothing and sleeps: should it not have got there yet on a slow machine,
    # it finds the line sooner, so this sleep can only make the test pass more easily.
    time.sleep(0.3)
    with open(path, "a") as f:
        f.write("late line\n")
    end = time.monotonic() + 30  # generous, yet short of the 60 s a tail of torchrun's takes
    while "late line" not in dst.getvalue() and time.monotonic() < end:
        time.sleep(0.01)
    arrived = dst.getvalue()
    finished.set()
    t.join(10)
    assert arrived == "[r3]:late line\n", f"30 s waiting for the late line: {arrived!r}"
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


LEAVES = """\
import os, sys, time
r = int(os.environ["RANK"])
print(f"rank {r} starts", flush=True)
time.sleep({0: 10, 1: 0.1, 2: 1.0}[r])
sys.exit(3 if r == 2 else 0)
"""


def test_a_rank_that_ends_well_is_said_by_the_agent_and_a_failed_one_is_not(
        tmp_path: Path) -> None:
    """torchrun logs only failures; the tee's agent says when a rank ended with code 0
    (rank 1), and nothing for rank 2's exit 3 nor for rank 0, which torchrun then stopped."""
    program = tmp_path / "torchrun.py"
    program.write_bytes(torchrun_program())
    (tmp_path / "rank.py").write_text(LEAVES)
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[ddptui ${rank} ${local_rank}] "}
    with open(tmp_path / "node.log", "ab") as log:
        done = subprocess.run(
            [sys.executable, str(program), "--standalone", "--nproc-per-node", "3",
             "--tee", "3", "--log-dir", str(tmp_path / "logs"), "rank.py"],
            cwd=tmp_path, env=env, stdout=log, stderr=log, timeout=180, check=False)
    out = (tmp_path / "node.log").read_text()
    assert done.returncode != 0, out
    said = re.findall(r"^ddptui: rank (\d) \(local_rank (\d), pid \d+\) exited with code 0$",
                      out, re.M)
    assert said == [("1", "1")], out


def test_a_torch_of_another_shape_says_no_exits(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.elastic.multiprocessing.api import SubprocessContext

    def other(self: object) -> None: ...

    monkeypatch.setattr(SubprocessContext, "_capture_process_failures", other)
    assert not torchrun_tee.install_exits()
    assert SubprocessContext._capture_process_failures is other



def test_the_rendezvous_names_its_records_as_torch_does_without_reading_the_stack(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The same name as torch's ``inspect.stack()`` gives, at every depth, from the frame
    itself; a torch whose function has another shape keeps its own."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as rendezvous

    torch_own = rendezvous.get_method_name
    monkeypatch.setattr(rendezvous, "get_method_name", torch_own)
    assert rendezvous_pace.install_names()
    ours = rendezvous.get_method_name
    assert ours is not torch_own

    def record_from_here(depth: int) -> tuple[str, str]:
        return torch_own(depth), ours(depth)

    def next_rendezvous() -> list[tuple[str, str]]:
        said = []
        for depth in (0, 1, 2, 3):  # a loop: a comprehension would be a frame of its own
            said.append(record_from_here(depth))
        return said

    said = next_rendezvous()
    assert [a for a, _ in said] == ["get_method_name", "record_from_here", "next_rendezvous",
                                    "test_the_rendezvous_names_its_records_as_torch_does_"
                                    "without_reading_the_stack"]
    assert [b for _, b in said][1:] == [a for a, _ in said][1:]  # depth 0: each its own frame
    assert torch_own(10_000) == ours(10_000) == "no_method_name"

    def other(depth: int = 2, extra: int = 0) -> str:
        return "torch's"

    monkeypatch.setattr(rendezvous, "get_method_name", other)
    assert not rendezvous_pace.install_names()
    assert rendezvous.get_method_name is other



@pytest.mark.parametrize(("argv", "nodes"), [
    (["--nnodes", "2", "--nproc-per-node", "1", "x.py"], 2),
    (["--nnodes=1:4", "x.py"], 4), (["--standalone", "x.py"], None),
    (["--nnodes", "two", "x.py"], None), (["--nnodes"], None)])
def test_the_jobs_node_count_is_read_from_torchruns_arguments(argv: list[str],
                                                              nodes: int | None) -> None:
    assert rendezvous_pace.job_nodes(argv) == nodes


def test_the_rendezvous_polls_and_spreads_its_joins_for_the_jobs_size_up_to_torchs_pace(
        ) -> None:
    """A wait for the other nodes polls the store at most 333 times a second, or as torch
    does (50 ms for up to 16 nodes, torch's 1 s from 334), and first joins are spread
    over 1 ms a node (torch's 0.3 s from 300); any other pause is torch's."""
    paced = rendezvous_pace.paced
    assert paced(1, 1) == paced(2, 1) == paced(16, 1) == 0.05
    assert paced(100, 1) == pytest.approx(0.3) and paced(334, 1) == paced(5000, 1) == 1.0
    for nodes in (1, 2, 16, 100, 333, 334, 5000):
        reads = nodes / paced(nodes, 1)  # the store's reads a second: 333, or torch's own
        assert reads <= max(1 / 0.003, nodes / 1.0) + 1e-6
    assert paced(2, (0, 0.3)) == (0, 0.002) and paced(5000, (0, 0.3)) == (0, 0.3)
    assert paced(2, 0.5) == 0.5 and paced(2, (0, 1)) == (0, 1) and paced(2, 3) == 3


def test_torchs_rendezvous_pauses_go_through_the_pace_once_put_in_place(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as rendezvous

    slept: list[object] = []
    monkeypatch.setattr(rendezvous, "_delay", lambda seconds: slept.append(seconds))
    assert not rendezvous_pace.install_pace(["--standalone", "x.py"])  # no count: torch's
    assert rendezvous_pace.install_pace(["--nnodes", "2", "x.py"])
    rendezvous._delay(seconds=1)  # the wait's poll, as torch calls it
    rendezvous._delay(seconds=(0, 0.3))  # the first join's spread
    assert slept == [0.05, (0, 0.002)]

    def other(seconds: float, jitter: float) -> None: ...

    monkeypatch.setattr(rendezvous, "_delay", other)
    assert not rendezvous_pace.install_pace(["--nnodes", "2"])
    assert rendezvous._delay is other


# -- progress bars: a carriage return on its own ends a bar state --------------------------

cut = bar_states.cut
#: What tqdm, Lightning (tqdm too), HF Trainer (tqdm.write for its log dicts), a print loop
#: and pip write, with the node.log pieces each must become.
STREAMS = {
    "tqdm": ("\r  0%|          | 0/3\r 33%|###3      | 1/3\r 67%|######6   | 2/3"
             "\r100%|##########| 3/3\n",
             "\r  0%|          | 0/3\n\r 33%|###3      | 1/3\n\r 67%|######6   | 2/3\n"
             "100%|##########| 3/3\n"),
    "tqdm.write": ("\r 10%|#         |\r                \r{'loss': 0.5, 'epoch': 1}\n"
                   "\r 11%|#1        |\r 12%|#2        |\n",
                   "\r 10%|#         |\n{'loss': 0.5, 'epoch': 1}\n\r 11%|#1        |\n"
                   " 12%|#2        |\n"),
    "print end=CR": ("step 1\rstep 2\rstep 3\r\ndone\n", "\rstep 1\n\rstep 2\nstep 3\ndone\n"),
    "CR LF lines": ("a\r\nb\r\n\r\nc\n", "a\nb\n\nc\n"),
    "lines between bars": ("line 1\n\rbar 1\rbar 2\nline 2\n\rbar 3\n",
                           "line 1\n\rbar 1\nbar 2\nline 2\nbar 3\n"),
    # Lightning's validation bar (tqdm position 1, leave=False), as an H100 recorded it
    # (tests/data/metrics-gpu/h100-lightning-gpu-tqdm.stdout): down a line, a state, back up
    "nested bar": ("\rEpoch 0: 50%| 1/2\n\rVal: 0%| 0/2\x1b[A\n\rVal: 50%| 1/2\x1b[A\n"
                   "\r           \x1b[A\rEpoch 0: 100%| 2/2\n",
                   "Epoch 0: 50%| 1/2\n\rVal: 0%| 0/2\n\rVal: 50%| 1/2\nEpoch 0: 100%| 2/2\n"),
    # rich's Live told it draws on a terminal (Lightning's RichProgressBar, as
    # tests/data/metrics-gpu/lightning-cpu-rich-tty.stdout recorded it): each drawing erases
    # the one before (CR, erase, then up and erase per line it had), then draws what was
    # printed meanwhile and its rows, a postfix wrapped below its row; at its end, a newline
    # and the cursor shown again
    "rich Live": ("\x1b[?25l\r\x1b[2Kwarn one\nwarn two\n"
                  "\r\x1b[2KEpoch 0/1 ━ 1/2 v_num: 0\n      train_loss: 1.5"
                  "\r\x1b[2K\x1b[1A\x1b[2KEpoch 0/1 ━━ 2/2 v_num: 0\n      train_loss: 0.5\n"
                  "Validation ━ 1/1\r\x1b[2K\x1b[1A\x1b[2K\x1b[1A\x1b[2Kprinted meanwhile\n"
                  "Epoch 1/1 ━ 1/2 v_num: 0\n      train_loss: 0.25\n\x1b[?25hdone\n",
                  "warn one\nwarn two\n\rEpoch 0/1 ━ 1/2 v_num: 0 train_loss: 1.5\n"
                  "\rEpoch 0/1 ━━ 2/2 v_num: 0 train_loss: 0.5\n\rValidation ━ 1/1\n"
                  "printed meanwhile\nEpoch 1/1 ━ 1/2 v_num: 0 train_loss: 0.25\ndone\n"),
    # a transient display: at its end, after the cursor is shown, it goes up and erases itself
    "rich transient": ("\x1b[?25l\r\x1b[2Kworking 1/2\r\x1b[2Kworking 2/2\n\x1b[?25h"
                       "\r\x1b[1A\x1b[2Knext line\n",
                       "\rworking 1/2\nworking 2/2\nnext line\n"),
}


@pytest.mark.parametrize("name", STREAMS)
def test_a_stream_is_cut_as_a_terminal_shows_it_wherever_its_reads_end(name: str) -> None:
    """Every state a piece of its own, the last one before a newline an ordinary line, blank
    states dropped: whole, and cut in two and in three at every place (a CR LF split, a
    state split), the same pieces."""
    stream, want = STREAMS[name]

    def pieces(parts: list[str]) -> str:
        out, rest, bar = "", "", False
        for part in parts:
            block, rest, _, bar = cut(rest + part, bar)
            out += block
        assert rest == ""
        return out

    assert pieces([stream]) == want
    n = len(stream)
    for i in range(n + 1):
        assert pieces([stream[:i], stream[i:]]) == want, i
        for j in range(i, n + 1, 3):
            assert pieces([stream[:i], stream[i:j], stream[j:]]) == want, (i, j)


def test_a_recorded_validation_bar_leaves_no_line_of_its_own() -> None:
    """Lightning on an H100: every validation state is a bar state, none a line."""
    data = (Path(__file__).parent / "data" / "metrics-gpu" / "h100-lightning-gpu-tqdm.stdout"
            ).read_bytes().decode()
    block, rest, _, _ = cut(data, False)
    lines = block.split("\n")
    assert rest == "" and "\x1b" not in block
    assert sum(ln.startswith("\rValidation") for ln in lines) >= 10
    assert [ln for ln in lines if ln.startswith("Validation")] == []


def test_what_cut_holds_and_says() -> None:
    assert cut("a\nb\nc", False) == ("a\nb\n", "c", True, False)
    assert cut("c", True) == ("", "c", False, True)  # still the state after a CR
    assert cut("\r 1%\r 2%", False) == ("\r 1%\n", " 2%", True, True)
    assert cut("step 1\r", False) == ("", "step 1\r", False, False)  # a CR LF, maybe
    assert cut("step 1\r\n", False) == ("step 1\n", "", True, False)
    assert cut("\r\r  \r\t\rx\n", False) == ("x\n", "", True, False)  # blank states


def test_a_drawing_held_and_at_a_ranks_end() -> None:
    """What a quiet look shows of a drawing still open (its rows as states; what was printed
    above them waits), and what a rank that ends in one leaves (all of it, as lines)."""
    held = "\x1b[2K\x1b[1A\x1b[2Ksaid\nEpoch 0/1 ━ 1/2\n   loss: 1.5"
    assert cut("\r" + held, False) == ("", held, True, True)
    assert bar_states.showing(held, True) == "\rEpoch 0/1 ━ 1/2 loss: 1.5\n"
    assert bar_states.showing(held + "\r\x1b[2K", True) == \
        "\rEpoch 0/1 ━ 1/2 loss: 1.5\n"  # a CR that may begin the next drawing
    assert bar_states.ending(held + "\n", True) == "said\nEpoch 0/1 ━ 1/2 loss: 1.5\n"
    assert bar_states.showing(" 50%|#####", True) == "\r 50%|#####\n"
    assert bar_states.showing("\x1b[?25l", True) == ""  # nothing to see
    assert bar_states.ending("last words\r", False) == "last words\n"
    assert bar_states.ending("", False) == ""


def test_a_drawing_of_unknown_height_keeps_the_rows_it_erased() -> None:
    """A drawing whose next one is no drawing (a CR and a plain state) counts its display
    as the lines it erased: its own ups."""
    stream = ("\r\x1b[2K\x1b[1A\x1b[2Kprinted\nEpoch 0/1 1/2\nValidation 1/1\r50%\n")
    assert cut(stream, False)[0] == "printed\n\rEpoch 0/1 1/2\n\rValidation 1/1\n50%\n"


def write_and_wait(path: Path, text: str, dst: Dst, want: str) -> None:
    with open(path, "a", newline="") as f:
        f.write(text)
    end = time.monotonic() + 5
    while dst.getvalue() != want and time.monotonic() < end:
        time.sleep(0.01)
    assert dst.getvalue() == want


def test_a_bar_that_stops_moving_is_shown_within_a_look_and_ends_as_a_line(
        tmp_path: Path) -> None:
    """A state is copied once the file stays quiet (tqdm writes CR + state, and the next CR
    may come minutes later), once; the newline that ends the bar makes its final state a
    line, which the controller puts in the state's place (ddptui.bars)."""
    path, dst, finished = tmp_path / "stdout.log", Dst(), threading.Event()
    path.write_text("")
    t = tail(path, finished, dst)
    write_and_wait(path, "\r 50%|#####", dst, "[r3]:\r 50%|#####\n")
    # More looks at a quiet file, in which the state must not be shown again: a negative
    # check; fewer looks on a slow machine can only make it pass more easily.
    time.sleep(0.1)
    write_and_wait(path, "\r 60%|######", dst, "[r3]:\r 50%|#####\n[r3]:\r 60%|######\n")
    write_and_wait(path, "\n", dst, "[r3]:\r 50%|#####\n[r3]:\r 60%|######\n[r3]: 60%|######\n")
    write_and_wait(path, "epoch 1\r", dst, "[r3]:\r 50%|#####\n[r3]:\r 60%|######\n"
                   "[r3]: 60%|######\n[r3]:\repoch 1\n")  # a print(end="\r") loop
    write_and_wait(path, "epoch 2\r", dst, "[r3]:\r 50%|#####\n[r3]:\r 60%|######\n"
                   "[r3]: 60%|######\n[r3]:\repoch 1\n[r3]:\repoch 2\n")  # epoch 1 not again
    finished.set()
    t.join(10)
    assert dst.getvalue().endswith("[r3]:\repoch 2\n[r3]:epoch 2\n")  # the rank's last words


def test_a_nested_bar_that_stops_moving_is_shown_once_without_its_cursor_up(
        tmp_path: Path) -> None:
    """A validation bar's state waits for its newline after the cursor-up: shown when the
    file is quiet as the state it draws, and not again when the newline comes."""
    path, dst, finished = tmp_path / "stdout.log", Dst(), threading.Event()
    path.write_text("")
    t = tail(path, finished, dst)
    write_and_wait(path, "\n\rVal: 50%|#####\x1b[A", dst, "[r3]:\n[r3]:\rVal: 50%|#####\n")
    # More looks at a quiet file, in which the state must not be shown again: a negative
    # check; fewer looks on a slow machine can only make it pass more easily.
    time.sleep(0.1)
    write_and_wait(path, "\n\rVal: 60%|######\x1b[A\n", dst,
                   "[r3]:\n[r3]:\rVal: 50%|#####\n[r3]:\rVal: 60%|######\n")
    finished.set()
    t.join(10)
    assert "\x1b" not in dst.getvalue()


def test_a_flood_of_states_keeps_every_state_and_line_in_order(tmp_path: Path) -> None:
    path, dst, finished = tmp_path / "stdout.log", Dst(), threading.Event()
    path.write_text("")
    t = tail(path, finished, dst)
    with open(path, "a", newline="") as f:
        for i in range(20_000):
            f.write(f"\r{i}/20000")
            if i % 1000 == 999:
                f.write(f"\nline {i}\n")
            if i % 500 == 0:
                f.flush()
    finished.set()
    t.join(30)
    lines = dst.getvalue().split("\n")[:-1]
    assert [x for x in lines if "line" in x] == [f"[r3]:line {i}" for i in range(999, 20_000,
                                                                            1000)]
    states = [int(x[5:].split("/")[0]) for x in lines if x.startswith("[r3]:\r")]
    assert states == sorted(set(states)) and len(states) >= 19_980  # in order, each once
    assert all(x.startswith("[r3]:") and "\r" not in x[6:] for x in lines)


def test_a_state_longer_than_the_longest_line_is_copied_in_bounded_pieces(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torchrun_tee, "CHUNK", 64)
    monkeypatch.setattr(torchrun_tee, "LONGEST", 100)
    path, dst, finished = tmp_path / "stdout.log", Dst(), threading.Event()
    path.write_text("\r" + "x" * 1000 + "\rdone\n")
    finished.set()
    tail(path, finished, dst).join(10)
    lines = dst.getvalue().split("\n")[:-1]
    assert "".join(line.removeprefix("[r3]:").lstrip("\r") for line in lines) == \
        "x" * 1000 + "done"
    assert lines[0].startswith("[r3]:\rx") and lines[-1] == "[r3]:done"
    assert max(map(len, lines)) <= len("[r3]:\r") + 100 + 64


def test_a_drawing_that_stops_moving_is_shown_within_a_look_and_not_again(
        tmp_path: Path) -> None:
    """rich's display, quiet between two refreshes: its rows shown once the file is quiet,
    once; the next drawing's CR ends it, and its rows are not copied again."""
    path, dst, finished = tmp_path / "stdout.log", Dst(), threading.Event()
    path.write_text("")
    t = tail(path, finished, dst)
    first = "[r3]:\rEpoch 0/1 ━ 1/2 v_num: 0 train_loss: 1.5\n"
    write_and_wait(path, "\r\x1b[2KEpoch 0/1 ━ 1/2 v_num: 0\n      train_loss: 1.5", dst, first)
    # More looks at a quiet file, in which the rows must not be shown again: a negative
    # check; fewer looks on a slow machine can only make it pass more easily.
    time.sleep(0.1)
    second = "[r3]:\rEpoch 0/1 ━ 2/2 v_num: 0 train_loss: 0.5\n"
    write_and_wait(path, "\r\x1b[2K\x1b[1A\x1b[2KEpoch 0/1 ━ 2/2 v_num: 0\n      train_loss: 0.5",
                   dst, first + second)
    write_and_wait(path, "\n\x1b[?25h", dst,
                   first + second + "[r3]:Epoch 0/1 ━ 2/2 v_num: 0 train_loss: 0.5\n")
    finished.set()
    t.join(10)
    assert "\x1b" not in dst.getvalue()
