"""Stalls and stragglers judged from rank views with a clock passed in, the words ddptui says
about them, and the reading of py-spy's stacks (recorded on the namespace cluster)."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddptui.config import load_config
from ddptui.config.model import HealthConfig
from ddptui.events import Metric, NodeStatus, Stall
from ddptui.faces.headless import Printer
from ddptui.faces.stacks import show_stacks
from ddptui.live.follow import Batch
from ddptui.rank_stacks import NodeStacks, RankStack, Stacks, main_frames, read_stacks, stacks_lines
from ddptui.remote.stacks import parse_stacks, stacks_cmd, take
from ddptui.store import rundir
from ddptui.store.health import (
    StallWatch,
    assess,
    shown_health,
    stall_text,
    stall_texts,
    stalled_marks,
    whole_run_text,
)
from ddptui.store.store import Store
from ddptui.store.views import NodeView, RankView
from ddptui.transport.local import LocalTransport
from ddptui.tui.notices import stall_notices

CFG = HealthConfig(stall_after=10.0, straggler_fraction=0.25)


def rank(r: int, node: str, heard: float, step: int | None = None) -> RankView:
    return RankView(r, node, last_line_time=heard, last_step=step,
                    last_step_time=None if step is None else heard)


def test_a_rank_quiet_while_the_others_go_on_is_stalled_alone() -> None:
    ranks = [rank(0, "a", 99.0), rank(1, "a", 99.5), rank(2, "b", 85.0), rank(3, "b", 89.0)]
    h = assess(ranks, 100.0, live_nodes={"a", "b"}, config=CFG)
    assert [h[r].stalled for r in range(4)] == [False, False, True, True]
    assert not h[2].whole_run and h[2].idle_s == 15.0 and h[2].mark == "stalled"
    # just under the threshold is not a stall
    assert not assess(ranks, 94.9, live_nodes={"a", "b"}, config=CFG)[2].stalled


def test_ranks_stopping_a_read_apart_are_not_one_alone() -> None:
    """Rank 3 passed the threshold first, but the others went quiet 0.2 s after it: no rank
    goes on, so it is no stall of one rank; a moment later it is the whole run's."""
    ranks = [rank(0, "a", 90.2), rank(1, "a", 90.2), rank(2, "b", 90.2), rank(3, "b", 90.0)]
    assert not any(h.stalled for h in assess(ranks, 100.1, live_nodes={"a", "b"},
                                             config=CFG).values())
    h = assess(ranks, 100.3, live_nodes={"a", "b"}, config=CFG)
    assert all(h[r].stalled and h[r].whole_run for r in range(4))


def test_every_rank_stopping_together_is_a_whole_run_stall() -> None:
    ranks = [rank(r, "ab"[r // 2], 80.0 + r) for r in range(4)]
    h = assess(ranks, 100.0, live_nodes={"a", "b"}, config=CFG)
    assert all(h[r].stalled and h[r].whole_run for r in range(4))


def test_only_running_nodes_are_judged() -> None:
    ranks = [rank(0, "a", 99.0), rank(1, "b", 0.0)]
    h = assess(ranks, 100.0, live_nodes={"a"}, config=CFG)
    assert not h[1].stalled and h[1].idle_s == 100.0


def test_a_rank_that_never_reports_steps_is_judged_only_with_the_others() -> None:
    """Rank 0 reports steps, ranks 1-3 printed only at start (a rank-0-only script)."""
    ranks = [rank(0, "a", 99.0, step=40)] + [rank(r, "a", 1.0) for r in (1, 2, 3)]
    assert not any(h.stalled for h in assess(ranks, 100.0, live_nodes={"a"},
                                             config=CFG).values())
    ranks[0] = rank(0, "a", 70.0, step=40)  # now rank 0 stopped too: the whole run did
    assert all(h.stalled for h in assess(ranks, 100.0, live_nodes={"a"}, config=CFG).values())


def test_stragglers_as_the_runs_judge_named_them() -> None:
    """The table's mark is the insight judge's chronic straggler, read through the store's
    rank views; step times equal in synchronous DDP say nothing of it any more."""
    store = Store()
    for step in range(30):
        store.apply([Metric("ab"[r // 2], r, "metric", step,
                            {"compute_ms": 30.0 if r == 3 else 10.0, "step_time_s": 0.03},
                            100.0 + step) for r in range(4)])
    ranks = store.rank_views()
    assert [r.straggler for r in ranks] == [False, False, False, True]
    h = assess(ranks, 130.0, live_nodes={"a", "b"}, config=CFG)
    assert h[3].straggler and h[3].mark == "straggler" and not h[0].straggler
    assert not assess(ranks, 130.0, live_nodes={"a"}, config=CFG)[3].straggler  # b is done


def test_the_watch_tells_a_stall_once_and_its_end_once() -> None:
    w = StallWatch(CFG)
    ranks = [rank(0, "a", 100.0), rank(1, "a", 100.0)]
    assert w.update(ranks, 105.0, {"a"}) == []
    ranks[0] = rank(0, "a", 120.0)
    found = w.update(ranks, 120.5, {"a"})
    assert found == [Stall("a", 1, 120.5, True, 20.5, False)]
    assert w.update(ranks, 125.0, {"a"}) == []  # still stalled: said once
    ranks = [rank(0, "a", 130.0), rank(1, "a", 130.0)]  # rank 1 again, 30 s after its last
    assert w.update(ranks, 130.2, {"a"}) == [Stall("a", 1, 130.2, False, 30.0, False)]
    assert w.update(ranks, 130.4, {"a"}) == []


def test_a_rank_that_ends_is_no_stall_and_is_said_to_be_none() -> None:
    w = StallWatch(CFG)
    ranks = [rank(0, "a", 100.0), rank(1, "b", 100.0)]
    found = w.update(ranks, 111.0, {"a", "b"})
    assert [(s.rank, s.whole_run) for s in found] == [(0, True), (1, True)]
    # rank 0 printed its traceback (ending): a line, so its stall is over; node b stopped
    # running: no word for rank 1, its node's state says it
    ranks[0] = rank(0, "a", 112.0)
    assert w.update(ranks, 113.0, {"a"}, ending=[0]) == [Stall("a", 0, 113.0, False, 12.0,
                                                               True)]
    assert w.stalled == {}
    # a dying rank's silence is no new stall: said once as such, past the threshold
    assert w.update(ranks, 120.0, {"a"}, ending=[0]) == []
    assert w.update(ranks, 200.0, {"a"}, ending=[0]) == [
        Stall("a", 0, 200.0, False, 88.0, after_error=True)]
    assert w.update(ranks, 300.0, {"a"}, ending=[0]) == []
    # heard from again with a plain line: judged as any rank from then on
    ranks[0] = rank(0, "a", 301.0)
    assert w.update(ranks, 302.0, {"a"}) == [] and w.excused == {}
    assert w.update(ranks, 312.0, {"a"}) == [Stall("a", 0, 312.0, True, 11.0, True)]


def test_the_faces_show_the_verdicts_that_stand_and_judge_none() -> None:
    nodes = [NodeView("a", 0, NodeStatus.RUNNING, since=90.0),
             NodeView("b", 1, NodeStatus.RUNNING, since=90.0)]
    ranks = [rank(0, "a", 119.0), rank(1, "a", 100.0), rank(2, "b", 100.0),
             rank(3, "b", 100.0)]
    # quiet for 20 s, past the threshold: still no face calls a rank stalled on its own
    assert shown_health(ranks, nodes, [], 120.0, CFG)[1].mark == ""
    told = [Stall("a", 1, 111.0, True, 11.0), Stall("b", 2, 111.0, True, 11.0),
            Stall("b", 3, 111.0, False, 11.0, after_error=True)]
    marks = {r: h.mark for r, h in shown_health(ranks, nodes, told, 120.0, CFG).items()}
    assert marks == {0: "", 1: "stalled", 2: "stalled", 3: "silent after error"}
    # rank 1 heard from again (the watch's word is on its way), node b restarted: none stands
    ranks[1] = rank(1, "a", 119.5)
    nodes[1] = NodeView("b", 1, NodeStatus.RUNNING, since=118.0)
    assert stalled_marks(told, ranks, nodes) == {}


def test_ranks_silent_after_an_error_are_said_in_one_line() -> None:
    one = Stall("gpu-b", 3, 0.0, False, 64.6, after_error=True)
    assert stall_text(one) == ("rank 3 on gpu-b: no line or metric for 65 s since its last "
                               "line, an error; not a stall: the error says why")
    more = [one, Stall("gpu-b", 2, 0.0, False, 70.0, after_error=True),
            Stall("gpu-a", 0, 0.0, False, 80.0, after_error=True)]
    said = stall_texts(more)
    assert [(s.rank, text) for s, text in said] == [
        (3, "ranks 2, 3 on gpu-b; 0 on gpu-a: no line or metric for 65 s since their last "
            "lines, errors; not a stall: the errors say why")]


def test_what_ddptui_says_of_a_stall() -> None:
    alone = Stall("gpu-b", 3, 0.0, True, 12.4, False)
    assert stall_text(alone) == ("rank 3 on gpu-b stalled: no line or metric for 12 s while "
                                 "the other ranks go on")
    whole = [Stall("gpu-a", r, 0.0, True, 125.0 + r, True) for r in range(4)]
    whole.append(Stall("gpu-b", 4, 0.0, True, 125.0, True))
    assert whole_run_text(whole) == (
        "the whole run stalled: no rank has printed a line or metric for 128 s (ranks 0-3 on "
        "gpu-a; 4 on gpu-b); one rank is likely stuck before a collective the others wait in, "
        "and its Python stack shows which")
    back = Stall("gpu-b", 3, 0.0, False, 40.0, False)
    assert stall_text(back) == "rank 3 on gpu-b is going again after 40 s without a line or metric"
    out = io.StringIO()
    Printer(out)(Batch("gpu-b", [*whole, alone, back], {}))
    assert out.getvalue().splitlines() == [f"[gpu-a ddptui] ⚠ {whole_run_text(whole)}",
                                           f"[gpu-b ddptui] ⚠ {stall_text(alone)}",
                                           f"[gpu-b ddptui] {stall_text(back)}"]


def test_toasts_group_a_whole_run_stall() -> None:
    stalls = [Stall("a", r, 0.0, True, 5.0, True) for r in range(3)]
    stalls.append(Stall("b", 7, 0.0, False, 9.0, False))
    notices = stall_notices(stalls)
    assert len(notices) == 2
    assert notices[0].severity == "warning" and notices[0].title == "The run stalled"
    assert notices[0].message == (f"{whole_run_text(stalls[:3])}. Press k for the ranks' "
                                  "Python stacks.")
    assert notices[1].message == stall_text(stalls[-1])
    alone = stall_notices([Stall("b", 2, 0.0, True, 5.0, False)])[0]
    assert alone.title == "Rank stalled" and "rank 2 on b stalled" in alone.message


# py-spy 0.4.3's dumps of a hung run on the namespace cluster (2 x 2 ranks, gloo): rank 3
# slept before the all_reduce the other three waited in.
WAITING = """Process 12688: /usr/bin/python3 -u /w/job.py
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)

Thread 12688 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:3252)
    _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)
    <module> (job.py:18)
"""
SLEEPING = """Process 12696: /usr/bin/python3 -u /w/job.py
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)

Thread 12696 (idle): "MainThread"
    wait_forever (job.py:8)
    <module> (job.py:17)
"""


def recorded() -> Stacks:
    return Stacks("run-1", 0.0, [
        NodeStacks("node1", [RankStack("node1", 0, 0, 12688, WAITING),
                             RankStack("node1", 1, 1, 12691, WAITING)]),
        NodeStacks("node2", [RankStack("node2", 2, 0, 12689, WAITING),
                             RankStack("node2", 3, 1, 12696, SLEEPING)]),
    ])


def test_the_stacks_name_the_rank_outside_any_collective() -> None:
    assert main_frames(SLEEPING) == ["wait_forever (job.py:8)", "<module> (job.py:17)"]
    assert read_stacks(recorded()) == (
        "ddptui: rank 3 on node2 (in wait_forever (job.py:8)) is in no collective while "
        "ranks 0, 1, 2 wait in one: look there first")
    lines = stacks_lines(recorded())
    assert lines[0].startswith("ddptui: rank 3 on node2") and "rank 3 on node2 (pid 12696):" \
        in lines and "      wait_forever (job.py:8)" in lines
    one = stacks_lines(recorded(), rank=3)
    assert one[0] == "rank 3 on node2 (pid 12696):" and "rank 0 on node1 (pid 12688):" not in one
    # every rank in a collective, or only one rank seen: nothing to single out
    every_waits = Stacks("r", 0.0, [NodeStacks("a", [RankStack("a", 0, 0, 1, WAITING)])])
    assert read_stacks(every_waits) == ""


def test_a_thread_other_than_main_does_not_count() -> None:
    two = SLEEPING + 'Thread 99 (idle): "pin_memory"\n    all_reduce (torch/distributed/x.py:1)\n'
    assert main_frames(two) == ["wait_forever (job.py:8)", "<module> (job.py:17)"]


def test_what_a_node_answers() -> None:
    ok = parse_stacks("n", "/venv/bin/python", 'banner\n{"py_spy": "/venv/bin/py-spy", '
                      '"python": "/venv/bin/python", "ranks": [{"rank": 2, "local_rank": 0, '
                      '"pid": 7, "stack": "x", "error": ""}]}\n')
    assert ok == NodeStacks("n", [RankStack("n", 2, 0, 7, "x")])
    none = parse_stacks("n", "/venv/bin/python", '{"py_spy": null, "python": "/venv/bin/python",'
                        ' "ranks": [{"rank": 2, "local_rank": 0, "pid": 7, "stack": "", '
                        '"error": ""}]}')
    assert none.problem == ("py-spy is not on n: pip install py-spy in the node's environment "
                            "(the one of /venv/bin/python)")
    assert stacks_lines(Stacks("r", 0.0, [none])) == [none.problem]
    gone = parse_stacks("n", "py", '{"py_spy": "/x", "python": "py", "ranks": []}')
    assert gone.problem == "no rank process of this run is alive on n"
    broken = parse_stacks("n", "py", "", "ddptui: no such interpreter: py\n")
    assert broken.problem == "the stacks program failed on n: ddptui: no such interpreter: py"
    refused = RankStack("n", 1, 1, 9, "", "Permission denied (os error 13)")
    assert stacks_lines(Stacks("r", 0.0, [NodeStacks("n", [refused])])) == [
        "rank 1 on n (pid 9): py-spy could not read it: Permission denied (os error 13)"
        " (py-spy reads the rank's memory with ptrace: run ddptui's user as root on the node, "
        "or as the ranks' own user with kernel.yama.ptrace_scope at 0 or 1)"]


def test_the_command_quotes_what_it_is_given() -> None:
    cmd = stacks_cmd("/opt/my env/python", "run-1", 1, {3, 1})
    assert "'/opt/my env/python'" in cmd and "DDPTUI_RUN=run-1/1 1,3 10" in cmd
    assert rundir.stacks_file(Path("/r"), "20261122-201503-001") == Path(
        "/r/stacks/stacks-20261122-201503-001.txt")


SPY = Path(sys.executable).with_name("py-spy")


@pytest.mark.skipif(not SPY.exists(), reason="py-spy is in the test extra")
def test_the_stacks_of_a_local_node_found_by_marker_read_and_saved(tmp_path: Path) -> None:
    """As a node runs it (here a ``transport: local`` node): a marked process with torchrun's
    RANK, its child with the same RANK (as a data loader's worker has), and an unmarked one."""
    body = ("import os, time\n"
            "def in_the_rank():\n"
            "    if os.environ.get('CHILD'):\n"
            "        time.sleep(60)\n"
            "    import subprocess, sys\n"
            "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],\n"
            "                     env={**os.environ, 'CHILD': '1'})\n"
            "    time.sleep(60)\n"
            "in_the_rank()\n")
    env = {**os.environ, "DDPTUI_RUN": "run-x/0", "RANK": "5", "LOCAL_RANK": "1"}
    ranked = subprocess.Popen([sys.executable, "-c", body, "--token", "s3cret-value"], env=env,
                              start_new_session=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env={**os.environ, "RANK": "5"})
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(f"defaults: {{python: {sys.executable}}}\n"
                     "nodes: [{host: here, transport: local}]\n")
    config = load_config(hosts)
    children = Path(f"/proc/{ranked.pid}/task/{ranked.pid}/children")

    def asleep() -> Stacks | None:
        """The stacks, once the rank has started its child and sleeps on line 8."""
        if not children.read_text().split():
            return None
        got = take("run-x", config, {"here": LocalTransport(config.nodes[0])}, tmp_path,
                   mask=lambda text: text.replace("s3cret-value", "***"))
        stacks = [s.stack for n in got.nodes for s in n.ranks]
        return got if any("in_the_rank (<string>:8)" in s for s in stacks) else None

    try:
        end = time.monotonic() + 30
        while (got := asleep()) is None:
            assert time.monotonic() < end, ("timed out after 30 s waiting for the rank to "
                                            "start its child and sleep on line 8")
            time.sleep(0.1)
        assert [n.problem for n in got.nodes] == [""] and len(got.nodes[0].ranks) == 1, got
        s = got.nodes[0].ranks[0]
        assert (s.rank, s.local_rank, s.pid) == (5, 1, ranked.pid)
        assert "in_the_rank (<string>:8)" in s.stack, s.stack
        saved = Path(got.saved).read_text()
        assert saved.startswith("rank 5 on here (pid ") and "in_the_rank" in saved
        # the rank's command line heads its stack: a secret in it is masked, kept and shown
        assert "--token ***" in s.stack and "s3cret" not in s.stack + saved
        assert Path(got.saved).parent == tmp_path / rundir.STACKS
    finally:
        os.killpg(ranked.pid, signal.SIGKILL)  # the rank and its child, which we started
        other.kill()
        for p in (ranked, other):
            p.wait(10)


def test_stacks_of_an_unknown_run_says_where_it_looked(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert show_stacks(tmp_path, "no-such-run", out=out, err=err) == 2
    assert err.getvalue().startswith("ddptui: no run 'no-such-run' under ")
    assert "`ddptui logs` lists the runs there" in err.getvalue() and out.getvalue() == ""
