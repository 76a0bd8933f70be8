"""The dashboard's side of an engine: starting one, calls to it, and the replica store it
keeps up to date.

:class:`EngineClient` is what the dashboard holds as its run's handle (a
:class:`ddptui.run_port.RunHandle`): a replica of the engine's store, brought up to date by
:meth:`EngineClient.pump` on the dashboard's timer, and typed calls that the engine answers
(:mod:`ddptui.engine.calls`).
:class:`EngineProcess` starts an engine and :class:`Spare` keeps one ready. They run in the
dashboard's process, so they live here and not in :mod:`ddptui.engine.process`, the engine's
own code: the engine imports that, the wire and the calls, and nothing of the dashboard's.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection

from ddptui.chart.view import ChartView, Drawn
from ddptui.engine.calls import (
    Again,
    BuildChart,
    Detach,
    EngineCalls,
    EngineError,
    GetNcclFacts,
    Launch,
    Leave,
    Open,
    Opened,
    Rehearse,
    Stop,
    TakeStacks,
)
from ddptui.engine.wire import Done, Message, apply_change, decode, unpack_snapshot
from ddptui.events import RunStatus
from ddptui.nccl import NcclFacts
from ddptui.outcome import RunResult, StopReport
from ddptui.rank_stacks import DUMP_TIMEOUT_S, Stacks
from ddptui.run_port import RunPort
from ddptui.store.store import Store

#: How long one :meth:`EngineClient.pump` may keep the dashboard's event loop: a key waits
#: at most this long behind it. The dashboard pumps often, so this is not a rate limit.
PUMP_BUDGET_S = 0.005
#: A chart the engine has not built by then is built in the dashboard instead.
CHART_TIMEOUT_S = 5.0
#: py-spy on every node at once, with room for a slow connection.
STACKS_TIMEOUT_S = DUMP_TIMEOUT_S + 50
#: Decoded messages waiting for the dashboard's loop, at most (about two seconds of a flood).
INBOX_MESSAGES = 100


class EngineClient:
    """What the dashboard holds as its run's handle: a replica store and calls to the
    engine."""

    def __init__(self, engine: EngineProcess, opened: Opened) -> None:
        self.engine = engine
        self.run_id = opened.run_id
        self.config = opened.config
        self.store = Store.replica(unpack_snapshot(opened.snapshot), opened.run_dir)
        self.result: RunResult | None = None
        self._done = False
        self._closing = False
        self._pump_lock = threading.Lock()
        self._inbox: queue.Queue[list[Message]] = queue.Queue(maxsize=INBOX_MESSAGES)
        self._receiver = threading.Thread(target=self._receive, name="engine-feed", daemon=True)
        self._receiver.start()

    @property
    def done(self) -> bool:
        return self._done

    def launch(self) -> None:
        self.engine.calls.call(Launch())

    def stop(self, grace: float | None = None) -> StopReport:
        return self.engine.calls.call(Stop(grace)).report

    def detach(self) -> None:
        self.engine.calls.call(Detach())

    def rehearse(self) -> str:
        return self.engine.calls.call(Rehearse()).said

    def again(self) -> str | None:
        return self.engine.calls.call(Again()).why

    def chart(self, view: ChartView, width: int, height: int) -> Drawn:
        """The chart, built in the engine from its own series (see ``ddptui.chart.rows``);
        call it off the event loop. Raises :class:`EngineError` once the engine is gone."""
        return self.engine.calls.call(BuildChart(view, width, height),
                                      timeout=CHART_TIMEOUT_S).drawn

    def nccl_facts(self) -> NcclFacts:
        """What NCCL said so far, from the session's own facts (fed every NCCL line,
        where the replica's rings may have let the first ones go); call it off the event
        loop. Raises :class:`EngineError` once the engine is gone."""
        return self.engine.calls.call(GetNcclFacts(), timeout=CHART_TIMEOUT_S).facts

    def stacks(self, rank: int | None = None) -> Stacks:
        """The ranks' Python stacks, taken on the nodes through the engine's connections;
        call it off the event loop (py-spy takes a second or more)."""
        return self.engine.calls.call(TakeStacks(rank), timeout=STACKS_TIMEOUT_S).stacks

    def process_estimate(self) -> tuple[int, int]:
        """(processes, nodes), as the session counts them, from the replica alone: the
        dashboard asks on its event loop, which must not wait for another process."""
        nodes = len(self.config.nodes) if self.config is not None else len(self.store.nodes)
        world = self.store.run_info().world_size or len(self.store.ranks)
        return world + nodes, nodes

    def _receive(self) -> None:
        """Off the event loop: wait for the engine's messages and decode them, so that the
        loop only applies them. A full inbox holds the engine back (its backlog then keeps
        the newest lines)."""
        feed = self.engine.feed
        while True:
            try:
                data = feed.recv_bytes()
            except (EOFError, OSError):
                return
            changes = decode(data)
            while True:
                try:
                    self._inbox.put(changes, timeout=0.5)
                    break
                except queue.Full:
                    if self._closing:
                        return

    def pump(self, budget: float = PUMP_BUDGET_S) -> None:
        """Apply what the engine sent, for at most about ``budget`` seconds; the rest waits
        for the next call."""
        deadline = time.monotonic() + budget
        with self._pump_lock:
            while time.monotonic() < deadline:
                try:
                    changes = self._inbox.get_nowait()
                except queue.Empty:
                    return
                for change in changes:
                    if isinstance(change, Done):
                        self.result = change.result
                        self._done = True
                    else:
                        apply_change(self.store, change)

    def engine_gone(self) -> None:
        """The engine ended while the dashboard still needed it: say so, and let go."""
        if self._closing:
            return
        if not self._done:  # what the engine sent before it ended still counts
            self._receiver.join(timeout=5)
            self.pump(budget=5.0)
        if self._done:
            return
        code = self.engine.process.poll()
        self.store.set_run(status=RunStatus.LOST, message=(
            f"the engine process ended (exit code {code}); the run may still be going on its "
            f"nodes: `ddptui attach {self.run_id}` follows it again"))
        self._done = True

    def close(self) -> None:
        self._closing = True
        self.engine.close()


class EngineProcess:
    """A started engine with nothing to run yet. Spawned ahead of need, it has finished its
    imports (half a second or so) by the time a launch asks for it.

    A plain ``subprocess`` over two socket pairs, not ``multiprocessing``: its spawn starts a
    resource tracker that passes on the dashboard's stderr, which Textual has replaced.
    """

    def __init__(self) -> None:
        cmd, cmd_child = socket.socketpair()
        feed, feed_child = socket.socketpair()
        fds = (cmd_child.fileno(), feed_child.fileno())
        # Whatever the dashboard imports, the engine can import: its sys.path goes on the
        # command line, not into PYTHONPATH, which local nodes' torchrun would inherit.
        path = [p for p in sys.path if p]
        code = f"import sys; sys.path[:0] = {path!r}; " \
               f"from ddptui.engine.process import main; main{fds}"
        try:
            # A session of its own: the terminal's Ctrl-C and hang-up are the dashboard's.
            # Should the dashboard die, the engine reads EOF, detaches and ends.
            self.process = subprocess.Popen(
                [sys.executable, "-c", code], pass_fds=fds, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        finally:
            cmd_child.close()
            feed_child.close()
        self.feed = Connection(feed.detach())
        self._client: EngineClient | None = None
        self.calls = EngineCalls(Connection(cmd.detach()), self._gone)

    def open(self, target: Callable[..., RunPort], *args: object) -> EngineClient:
        """Run ``target(*args)`` (a run, built in the engine) and follow its store."""
        self._client = EngineClient(self, self.calls.call(Open(target, args)))
        return self._client

    def _gone(self) -> None:
        if self._client is not None:
            self._client.engine_gone()

    def close(self, timeout: float = 20.0) -> None:
        """Ask the engine to leave (it detaches from a run still going) and wait for it."""
        with contextlib.suppress(EngineError, TimeoutError):
            self.calls.call(Leave(), timeout=timeout)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


class Spare:
    """At most one idle engine kept ready, so that a launch or attach skips its start-up."""

    def __init__(self) -> None:
        self._engine: EngineProcess | None = None
        self._lock = threading.Lock()

    def warm(self) -> None:
        with self._lock:
            if self._engine is None:
                self._engine = EngineProcess()

    def open(self, target: Callable[..., RunPort], *args: object) -> EngineClient:
        with self._lock:
            engine, self._engine = self._engine, None
        if engine is None or engine.process.poll() is not None:
            engine = EngineProcess()
        try:
            return engine.open(target, *args)
        except BaseException:
            engine.close()
            raise

    def close(self) -> None:
        with self._lock:
            engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()
