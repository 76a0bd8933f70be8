"""Every stand-in for a run that the tests hand the dashboard or an engine, in one module that
mypy checks (pyproject.toml's ``[tool.mypy] files``): each is a
:class:`ddptui.run_port.RunPort` or a :class:`ddptui.run_port.RunHandle` because mypy says
so (the annotated returns and assignments below), not because a test happened to call the
methods it has. A fake that lacked ``stacks`` and ``nccl_facts`` once went unnoticed.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from replay import T0, node_events, scenario
from test_nccl_cli import LO, SUBSYS, as_rank, raw_from_headless
from test_stall_health import recorded

from ddptui.chart.rows import store_chart
from ddptui.chart.view import ChartView, Drawn
from ddptui.config import HostsConfig
from ddptui.engine.calls import EngineError
from ddptui.events import Event, LogLine, Metric, NodeState, NodeStatus, RunStatus, Stall
from ddptui.nccl import NcclFacts
from ddptui.outcome import LaunchError, RunResult, StopReport
from ddptui.rank_stacks import Stacks
from ddptui.run_port import RunHandle, RunPort
from ddptui.store.store import Store

# -- the dashboard's handles -----------------------------------------------------------------


class FakeController:
    """A run handle; launch plays a recorded run (``name``, see ``replay.scenario``) into
    the store. Counts what the dashboard asked of it."""

    instances: ClassVar[list[FakeController]] = []

    def __init__(self, name: str = "train", run_id: str = "fake-run", fail: str = "") -> None:
        self.store = Store()
        self.run_id = run_id
        self.config: HostsConfig | None = None
        self.name = name
        self.fail = fail
        self.launched = self.stopped = self.detached = self.pumped = self.closed = 0
        self._done = False
        self.result: RunResult | None = None
        FakeController.instances.append(self)

    @property
    def done(self) -> bool:
        return self._done

    def launch(self) -> None:
        self.launched += 1
        if self.fail:
            raise LaunchError([self.fail])
        scenario(self.name, self.store)
        self.store.set_run(run_id=self.run_id)

    def stop(self, grace: float | None = None) -> StopReport:
        self.stopped += 1
        self.store.apply([NodeState(n.name, NodeStatus.STOPPED, T0 + 9, exit_code=-15)
                          for n in self.store.node_views()])
        self.store.set_run(status=RunStatus.STOPPED, ended_at=T0 + 9)
        self.result = RunResult(exit_code=0, failures=[], node_exit_codes={}, stopped=True)
        self._done = True
        return StopReport()

    def detach(self) -> None:
        self.detached += 1

    def rehearse(self) -> str:
        self.rehearsed = getattr(self, "rehearsed", 0) + 1
        return "sent SIGUSR2 to 0 rank(s), as the time limit would"

    def again(self) -> str | None:
        """A reason set by a test: its time limit ended the run (``slurm.resubmit``)."""
        return getattr(self, "again_because", None)

    def nccl_facts(self) -> NcclFacts:
        """What the store's NCCL lines say, as the session's facts would."""
        facts = NcclFacts()
        for line in self.store.recent_lines():
            facts.feed_line(line)
        return facts

    def stacks(self, rank: int | None = None) -> Stacks:
        """No rank process anywhere: the recorded run has no live ranks to dump."""
        return Stacks(self.run_id, T0, [])

    def process_estimate(self) -> tuple[int, int]:
        return 4, 2

    def pump(self) -> None:
        self.pumped += 1

    def close(self) -> None:
        self.closed += 1

    def chart(self, view: ChartView, width: int, height: int) -> Drawn:
        return store_chart(self.store, view, width, height)


class StackedController(FakeController):
    """A run whose ranks' stacks are the ones recorded on the cluster."""

    asked: ClassVar[list[int | None]] = []

    def stacks(self, rank: int | None = None) -> Stacks:
        StackedController.asked.append(rank)
        return recorded()


class NcclRun(FakeController):
    """Two nodes of recorded NCCL output: gpu0 bootstraps on loopback, gpu1 guesses its
    NIC's speed. Its facts are the controller's: fed every NCCL line, and put in the store as
    the session puts its gatherer's; ``gone``: the engine ended, as the real client then
    says."""

    def __init__(self, *, gone: bool = False) -> None:
        super().__init__(run_id="nccl-run")
        self.gone = gone
        self.asked = 0
        self.events: dict[str, list[Event]] = {
            "gpu0": node_events("gpu0", raw_from_headless(LO)),
            "gpu1": node_events("gpu1", as_rank(SUBSYS, 1))}

    def launch(self) -> None:
        self.launched += 1
        self.store.set_run(run_id=self.run_id, status=RunStatus.RUNNING, started_at=T0,
                           world_size=2)
        for i, (node, events) in enumerate(self.events.items()):
            self.store.add_node(node, i)
            self.store.apply([NodeState(node, NodeStatus.RUNNING, T0, pid=4100 + i), *events])
        self.store.set_run(nccl=self.facts())

    def nccl_facts(self) -> NcclFacts:
        self.asked += 1
        if self.gone:
            raise EngineError("EOFError: the engine process has ended")
        return self.facts()

    def facts(self) -> NcclFacts:
        facts = NcclFacts()
        for events in self.events.values():
            for ev in events:
                if isinstance(ev, LogLine):
                    facts.feed_line(ev)
        return facts


# -- runs an engine process builds by name ---------------------------------------------------


class ScriptedRun:
    """Session-shaped: ``launch`` plays ``lines`` lines (and a metric every 10) into a
    real store with its disk mirror; ``forever`` keeps it going until stopped or detached.
    ``detach`` and ``stop`` leave a mark in ``local_dir`` for the test to find."""

    def __init__(self, local_dir: str, lines: int, forever: bool, fail: str) -> None:
        self.local_dir = Path(local_dir)
        self.run_id = "scripted"
        self.config: HostsConfig | None = None
        self.store = Store(self.local_dir)
        self.store.set_run(run_id=self.run_id, status=RunStatus.LAUNCHING, world_size=2)
        self.store.add_node("a", 0)
        self.store.apply([LogLine("a", "before launch", T0, rank=0)])
        self.lines, self.forever, self.fail = lines, forever, fail
        self.result: RunResult | None = None
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
            batch: list[Event] = [LogLine("a", f"line {i}", T0 + i, rank=i % 2,
                                          local_rank=i % 2) for i in range(i, i + 10)]
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
        self.result = RunResult(0, [], {"a": 0}, stopped=False)
        self._done.set()

    def stop(self, grace: float | None = None) -> StopReport:
        (self.local_dir / "stopped").write_text(str(grace))
        self._halt.set()
        self._thread.join()
        self.store.set_run(status=RunStatus.STOPPED)
        self.result = RunResult(0, [], {"a": None}, stopped=True)
        self._done.set()
        return StopReport(errors={"a": f"stopped with a grace of {grace} s"})

    def rehearse(self) -> str:
        (self.local_dir / "rehearsed").write_text("yes")
        return "sent SIGUSR2 to 1 rank(s), as the time limit would"

    def again(self) -> str | None:
        return None

    def detach(self) -> None:
        (self.local_dir / "detached").write_text("yes")
        self._halt.set()
        self._thread.join(timeout=5)

    def nccl_facts(self) -> NcclFacts:
        return NcclFacts()

    def stacks(self, rank: int | None = None) -> Stacks:
        return Stacks(self.run_id, T0, [], saved=f"asked for {rank}")


class StalledRun(ScriptedRun):
    """A scripted run whose rank 1 stalls once launched, and whose stacks are the recorded."""

    def launch(self) -> None:
        super().launch()
        self.store.apply([Stall("a", 1, T0 + 5, True, 65.0, False)])

    def stacks(self, rank: int | None = None) -> Stacks:
        got = recorded()
        return Stacks(got.run_id, got.time, got.nodes, saved=f"asked for {rank}")


def scripted(local_dir: str, lines: int = 0, forever: bool = False, fail: str = "") -> RunPort:
    return ScriptedRun(local_dir, lines, forever, fail)


def stalled(local_dir: str) -> RunPort:
    return StalledRun(local_dir, 0, True, "")


if TYPE_CHECKING:  # the handles, as the dashboard's factories must return them
    _handles: list[RunHandle] = [FakeController(), StackedController(), NcclRun()]
