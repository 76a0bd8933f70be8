"""The engine process: a real child process running a controller-shaped run, and the replica
store, calls and failures as the dashboard sees them.

The runs here are scripted (``fakes.ScriptedRun``, built inside the engine by name); the real
controller in an engine is driven end to end by tests/test_tui_e2e.py and test_tui_tmux.py.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, is_dataclass
from multiprocessing import Pipe
from pathlib import Path
from typing import Any, get_args

import pytest
from fakes import scripted
from replay import T0

from ddptui.chart.rows import chart_rows
from ddptui.chart.view import ChartView
from ddptui.engine.calls import (
    REQUESTS,
    Acked,
    AgainIs,
    Ask,
    ChartBuilt,
    EngineCalls,
    EngineError,
    Launch,
    NcclFactsNow,
    Opened,
    Rehearsed,
    Reply,
    Request,
    StacksTaken,
    Stop,
    Stopped,
)
from ddptui.engine.client import EngineClient, EngineProcess, Spare
from ddptui.events import NodeStatus
from ddptui.nccl import NcclFacts
from ddptui.outcome import LaunchError, RunResult, StopReport
from ddptui.rank_stacks import NodeStacks, RankStack, Stacks

pytestmark = pytest.mark.timeout(120)


def pump_until(client: EngineClient, cond: Any, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        client.pump(budget=0.05)
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError("the engine did not get there in time")


@pytest.fixture
def engine() -> Any:
    e = EngineProcess()
    yield e
    e.close(timeout=10)


def test_the_replica_gets_the_run_as_the_engine_stores_it(engine: EngineProcess,
                                                          tmp_path: Path) -> None:
    client = engine.open(scripted, str(tmp_path), 5000)
    assert client.run_id == "scripted"
    assert [ln.text for ln in client.store.recent_lines()] == ["before launch"]
    assert client.store.run_dir == tmp_path
    client.launch()
    pump_until(client, lambda: client.done)
    assert client.result == RunResult(0, [], {"a": 0}, stopped=False)
    assert client.store.run_info().status == "finished"
    assert client.store.seq == 1 + 5000 + 500  # every line, and every metric's own line
    assert client.store.rank_tail(0)[-1].text == "@ddptui loss 4990"
    assert client.store.rank_tail(1)[-1].text == "line 4999"
    assert client.store.series(0, "loss")[0][-1] == 4990
    assert [n.status for n in client.store.node_views()] == [NodeStatus.EXITED]
    # the engine's own store mirrored everything to disk; the replica wrote nothing there
    assert "line 4999" in (tmp_path / "lines.log").read_text()
    # the chart the engine builds is the one the replica's series make
    view = ChartView("loss", log_y=True)
    drawn = client.chart(view, 60, 20)
    assert drawn == chart_rows(view, [0, 1], client.store.series, 60, 20)
    rows, plotted = drawn.rows, drawn.plotted
    assert plotted == {0: 104}  # 500 points (the metrics are all rank 0's), 2 per column
    assert {code for row in rows[1:-2] for _, code in row if code >= 0} == {0}
    assert engine.process.poll() is None


def test_the_engine_leaves_the_environment_as_it_found_it(engine: EngineProcess) -> None:
    """Local nodes' torchrun inherits the engine's environment: no PYTHONPATH of ours."""
    env = Path(f"/proc/{engine.process.pid}/environ").read_bytes().split(b"\0")
    ours = [e for e in env if e.startswith(b"PYTHONPATH=")]
    mine = os.environ.get("PYTHONPATH")
    assert ours == ([] if mine is None else [f"PYTHONPATH={mine}".encode()])


def test_a_launch_error_comes_back_as_itself(engine: EngineProcess, tmp_path: Path) -> None:
    client = engine.open(scripted, str(tmp_path), 0, False, "node a: no torch there")
    with pytest.raises(LaunchError) as e:
        client.launch()
    assert e.value.problems == ["node a: no torch there", "and a second problem"]


def test_a_target_that_cannot_start_says_why(engine: EngineProcess, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    with pytest.raises(EngineError, match=r"Error: .*a-file"):
        engine.open(scripted, str(tmp_path / "a-file" / "run"))


def test_closing_the_dashboard_detaches_and_never_stops(tmp_path: Path) -> None:
    engine = EngineProcess()
    client = engine.open(scripted, str(tmp_path), 0, True)
    client.launch()
    pump_until(client, lambda: client.store.seq > 200)
    assert client.process_estimate() == (2 + 1, 1)  # world size 2, one agent on one node
    client.close()
    assert engine.process.poll() is not None
    assert (tmp_path / "detached").exists()
    assert not (tmp_path / "stopped").exists()


def test_stop_is_the_engines_and_its_report_comes_back(engine: EngineProcess,
                                                       tmp_path: Path) -> None:
    client = engine.open(scripted, str(tmp_path), 0, True)
    client.launch()
    assert client.stop(grace=2.5) == StopReport(errors={"a": "stopped with a grace of 2.5 s"})
    assert (tmp_path / "stopped").read_text() == "2.5"
    pump_until(client, lambda: client.done)
    assert client.store.run_info().status == "stopped"


def test_an_engine_that_dies_leaves_a_lost_run_not_a_hung_dashboard(tmp_path: Path) -> None:
    engine = EngineProcess()
    client = engine.open(scripted, str(tmp_path), 0, True)
    client.launch()
    pump_until(client, lambda: client.store.seq > 50)
    os.kill(engine.process.pid, signal.SIGKILL)
    pump_until(client, lambda: client.done)
    info = client.store.run_info()
    assert info.status == "lost"
    assert "ddptui attach scripted" in info.message
    with pytest.raises(EngineError):
        client.detach()
    with pytest.raises(EngineError):  # the dashboard then builds the chart itself
        client.chart(ChartView(), 60, 20)
    client.close()


def test_a_dashboard_that_dies_leaves_the_run_to_be_attached(tmp_path: Path) -> None:
    """A real dashboard-side process opens an engine and is SIGKILLed: the engine reads EOF
    on its socket, detaches (never stops) and ends by itself."""
    here = Path(__file__).resolve().parent
    script = (
        "import sys, time\n"
        f"sys.path[:0] = [{str(here)!r}]\n"
        "from ddptui.engine.client import EngineProcess\n"
        "from fakes import scripted\n"
        "e = EngineProcess()\n"
        f"c = e.open(scripted, {str(tmp_path)!r}, 0, True)\n"
        "c.launch()\n"
        "print(e.process.pid, flush=True)\n"
        "time.sleep(60)\n")
    dashboard = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                 text=True)
    try:
        assert dashboard.stdout is not None
        engine_pid = int(dashboard.stdout.readline())
        dashboard.kill()
        dashboard.wait(timeout=10)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{engine_pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not Path(f"/proc/{engine_pid}").exists(), "the engine outlived its dashboard"
    finally:
        dashboard.kill()
    assert (tmp_path / "detached").exists()
    assert not (tmp_path / "stopped").exists()


def test_a_spare_engine_is_used_once_and_then_replaced(tmp_path: Path) -> None:
    spare = Spare()
    spare.warm()
    first = spare._engine
    assert first is not None
    client = spare.open(scripted, str(tmp_path / "one"), 10)
    assert client.engine is first and spare._engine is None
    (tmp_path / "two").mkdir()
    other = spare.open(scripted, str(tmp_path / "two"), 10)
    assert other.engine is not first
    for c in (client, other):
        c.close()
        assert c.engine.process.poll() is not None
    spare.close()


# -- typed calls -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Unheard(Ask[Acked]):
    """A request of a later ddptui that this engine does not answer."""

    reply = Acked


def test_an_unknown_request_is_an_error_in_ddptuis_words(engine: EngineProcess,
                                                          tmp_path: Path) -> None:
    with pytest.raises(EngineError, match=r"Launch came before the engine had a run"):
        engine.calls.call(Launch())
    with pytest.raises(EngineError, match=r"the engine has no call 'Unheard': it answers Open, "
                                          r"Launch, Stop"):
        engine.calls.call(Unheard())
    client = engine.open(scripted, str(tmp_path))  # the engine is still there, and answers
    assert client.stacks(2).saved == "asked for 2"
    assert client.rehearse() == "sent SIGUSR2 to 1 rank(s), as the time limit would"
    assert (tmp_path / "rehearsed").read_text() == "yes"  # the engine's run was asked


SAMPLES: list[Reply] = [
    Opened("r1", None, Path("/tmp/r1"), b"\x80\x05snapshot"),
    Acked(),
    Stopped(StopReport({"a": [12, 13]}, {"b": "unreachable"})),
    ChartBuilt(chart_rows(ChartView(), [0],
                          lambda r, m: ([0, 1, 2], [1.0, 9.0, 2.0]) if m == "loss" else ([], []),
                          20, 6)),
    NcclFactsNow(NcclFacts()),
    StacksTaken(Stacks("r1", T0, [NodeStacks("a", [RankStack("a", 0, 0, 41, "Thread 1")])])),
    Rehearsed("sent SIGUSR2 to 4 rank(s), as the time limit would"),
    AgainIs("the ranks left at Slurm job 7's time limit"),
]


@pytest.mark.parametrize("reply", SAMPLES, ids=lambda r: type(r).__name__)
def test_each_reply_round_trips(reply: Reply) -> None:
    back = pickle.loads(pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))
    assert type(back) is type(reply)
    if isinstance(reply, NcclFactsNow):  # facts compare by what they say
        assert isinstance(back, NcclFactsNow)
        assert back.facts.to_dict() == reply.facts.to_dict()
    else:
        assert back == reply


def test_every_request_and_reply_is_a_frozen_slotted_dataclass() -> None:
    replies = set(get_args(Reply))
    assert {type(r) for r in SAMPLES} == replies  # a sample of each
    assert set(get_args(Request)) == set(REQUESTS)
    for kind in (*REQUESTS, *replies):
        assert is_dataclass(kind) and vars(kind)["__dataclass_params__"].frozen, kind
        assert "__slots__" in vars(kind), kind
    for request in REQUESTS:
        assert request.reply in replies, request


def test_a_reply_of_the_wrong_type_is_an_error_not_a_value() -> None:
    """The client checks each reply against its request's: an engine of another version
    that answers a stop with something else is said, not handed on."""
    ours, theirs = Pipe()

    def wrong_engine() -> None:
        number, _ = theirs.recv()
        theirs.send((number, True, Acked()))

    threading.Thread(target=wrong_engine, daemon=True).start()
    calls = EngineCalls(ours, lambda: None)
    with pytest.raises(EngineError, match="the engine answered Stop with a Acked, not a Stopped"):
        calls.call(Stop(1.0), timeout=10)
    theirs.close()
