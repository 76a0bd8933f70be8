"""The engine process: a real child process running a controller-shaped run, and the replica
store, calls and failures as the dashboard sees them.

The runs here are scripted (``ScriptedRun``, built inside the engine by name); the real
controller in an engine is driven end to end by tests/test_tui_e2e.py and test_tui_tmux.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ddptui.chart.rows import chart_rows
from ddptui.engine.client import EngineClient, EngineProcess, Spare
from ddptui.engine.wire import EngineError
from ddptui.events import LogLine, Metric, NodeState, NodeStatus, RunStatus
from ddptui.outcome import LaunchError
from ddptui.store.store import Store

pytestmark = pytest.mark.timeout(120)
T0 = 1_700_000_000.0


class ScriptedRun:
    """Session-shaped: ``launch`` plays ``lines`` lines (and a metric every 10) into a
    real store with its disk mirror; ``forever`` keeps it going until stopped or detached.
    ``detach`` and ``stop`` leave a mark in ``local_dir`` for the test to find."""

    def __init__(self, local_dir: str, lines: int, forever: bool, fail: str) -> None:
        self.local_dir = Path(local_dir)
        self.run_id = "scripted"
        self.config = None
        self.store = Store(self.local_dir)
        self.store.set_run(run_id=self.run_id, status=RunStatus.LAUNCHING, world_size=2)
        self.store.add_node("a", 0)
        self.store.apply([LogLine("a", "before launch", T0, rank=0)])
        self.lines, self.forever, self.fail = lines, forever, fail
        self.result: Any = None
        self._done = threading.Event()
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._play, daemon=True)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def launch(self) -> None:
        if self.fail:
            raise LaunchError([self.fail, "and a second problem"])
        self.store.set_run(status=RunStatus.RUNNING)
        self._thread.start()

    def _play(self) -> None:
        i = 0
        while (i < self.lines or self.forever) and not self._halt.is_set():
            batch: list[Any] = [LogLine("a", f"line {i}", T0 + i, rank=i % 2, local_rank=i % 2)
                                for i in range(i, i + 10)]
            batch.append(Metric("a", i % 2, "metric", i, {"loss": 1 / (i + 1)}, T0 + i,
                                text=f"@ddptui loss {i}"))
            self.store.apply(batch)
            i += 10
            if self.forever:
                time.sleep(0.01)
        if self._halt.is_set():
            return
        self.store.apply([NodeState("a", NodeStatus.EXITED, T0 + i, "exit code 0", 1, 0)])
        self.store.set_run(status=RunStatus.FINISHED, exit_code=0)
        self.result = {"lines": i}
        self._done.set()

    def stop(self, grace: float | None = None) -> dict[str, Any]:
        (self.local_dir / "stopped").write_text(str(grace))
        self._halt.set()
        self._thread.join()
        self.store.set_run(status=RunStatus.STOPPED)
        self.result = {"stopped": True}
        self._done.set()
        return {"leftover": {}}

    def detach(self) -> None:
        (self.local_dir / "detached").write_text("yes")
        self._halt.set()
        self._thread.join(timeout=5)


def scripted(local_dir: str, lines: int = 0, forever: bool = False, fail: str = "") -> Any:
    return ScriptedRun(local_dir, lines, forever, fail)


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
    assert client.result == {"lines": 5000}
    assert client.store.run_info().status == "finished"
    assert client.store.seq == 1 + 5000 + 500  # every line, and every metric's own line
    assert client.store.rank_tail(0)[-1].text == "@ddptui loss 4990"
    assert client.store.rank_tail(1)[-1].text == "line 4999"
    assert client.store.series(0, "loss")[0][-1] == 4990
    assert [n.status for n in client.store.node_views()] == [NodeStatus.EXITED]
    # the engine's own store mirrored everything to disk; the replica wrote nothing there
    assert "line 4999" in (tmp_path / "lines.log").read_text()
    # the chart the engine builds is the one the replica's series make
    rows, plotted = client.chart("loss", True, 60, 20)
    assert (rows, plotted) == chart_rows("loss", True, [0, 1], client.store.series, 60, 20)
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
    assert client.stop(grace=2.5) == {"leftover": {}}
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
        client.chart("loss", False, 60, 20)
    client.close()


def test_a_dashboard_that_dies_leaves_the_run_to_be_attached(tmp_path: Path) -> None:
    """A real dashboard-side process opens an engine and is SIGKILLed: the engine reads EOF
    on its socket, detaches (never stops) and ends by itself."""
    here = Path(__file__).resolve().parent
    script = (
        "import sys, time\n"
        f"sys.path[:0] = [{str(here)!r}]\n"
        "from ddptui.engine.client import EngineProcess\n"
        "from test_engine_process import scripted\n"
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
