"""The dashboard's side of an engine: calls to it, and the replica store it keeps up to date.

:class:`EngineClient` is what the dashboard holds as its run's handle (the shape of
:class:`ddptui.tui.handle.RunHandle`): a replica of the engine's store, brought up to date by
:meth:`EngineClient.pump` on the dashboard's timer, and calls that the engine answers.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddptui.chart.rows import Run
from ddptui.config import HostsConfig
from ddptui.engine.wire import apply_change, decode, unpack_snapshot
from ddptui.events import RunStatus
from ddptui.launch.outcome import LaunchError, RunResult, StopReport
from ddptui.launch.stacks import DUMP_TIMEOUT_S, Stacks
from ddptui.nccl import NcclFacts
from ddptui.store.store import Change, Store

if TYPE_CHECKING:
    from ddptui.engine.process import EngineProcess

#: How long one :meth:`EngineClient.pump` may keep the dashboard's event loop: a key waits
#: at most this long behind it. The dashboard pumps often, so this is not a rate limit.
PUMP_BUDGET_S = 0.005
#: A chart the engine has not built by then is built in the dashboard instead.
CHART_TIMEOUT_S = 5.0
#: py-spy on every node at once, with room for a slow connection.
STACKS_TIMEOUT_S = DUMP_TIMEOUT_S + 50
#: Decoded messages waiting for the dashboard's loop, at most (about two seconds of a flood).
INBOX_MESSAGES = 100


class EngineError(Exception):
    """The engine failed, or an error inside it that is not a :class:`LaunchError`;
    ``str()`` names the error's kind."""


def error_payload(e: BaseException) -> tuple[str, str, list[str] | None]:
    """An exception as the engine sends it: its kind, its text, a LaunchError's problems."""
    return type(e).__name__, str(e), getattr(e, "problems", None)


def _remote_error(kind: str, message: str, problems: list[str] | None) -> Exception:
    if kind == "LaunchError" and problems is not None:
        return LaunchError(problems)
    return EngineError(f"{kind}: {message}")


class EngineCalls:
    """Requests to the engine from any thread; one reader thread hands out the replies."""

    def __init__(self, conn: Connection, on_gone: Callable[[], None]) -> None:
        self._conn = conn
        self._on_gone = on_gone
        self._lock = threading.Lock()
        self._next = 0
        self._waiting: dict[int, Future[Any]] = {}
        self.gone = False
        threading.Thread(target=self._read, name="engine-replies", daemon=True).start()

    def call(self, op: str, *args: Any, timeout: float | None = None) -> Any:
        """``op(*args)`` in the engine; its result, or its error raised here."""
        reply: Future[Any] = Future()
        with self._lock:
            if self.gone:
                raise EngineError("the engine process has ended")
            request = self._next
            self._next += 1
            self._waiting[request] = reply
            try:
                self._conn.send((request, op, args))
            except (OSError, EOFError) as e:
                del self._waiting[request]
                raise EngineError(f"the engine process has ended ({e})") from None
        return reply.result(timeout)

    def _read(self) -> None:
        while True:
            try:
                request, ok, payload = self._conn.recv()
            except (EOFError, OSError):
                break
            reply = self._waiting.pop(request, None)
            if reply is None:
                continue
            if ok:
                reply.set_result(payload)
            else:
                reply.set_exception(_remote_error(*payload))
        with self._lock:
            self.gone = True
            waiting, self._waiting = self._waiting, {}
        for reply in waiting.values():
            reply.set_exception(EngineError("the engine process ended before it answered"))
        self._on_gone()


class EngineClient:
    """What the dashboard holds as its run's handle: a replica store and calls to the
    engine."""

    def __init__(self, engine: EngineProcess, run_id: str, config: HostsConfig | None,
                 run_dir: Path | None, snapshot: bytes) -> None:
        self.engine = engine
        self.run_id = run_id
        self.config = config
        self.store = Store.replica(unpack_snapshot(snapshot), run_dir)
        self.result: RunResult | None = None
        self._done = False
        self._closing = False
        self._pump_lock = threading.Lock()
        self._inbox: queue.Queue[list[Change]] = queue.Queue(maxsize=INBOX_MESSAGES)
        self._receiver = threading.Thread(target=self._receive, name="engine-feed", daemon=True)
        self._receiver.start()

    @property
    def done(self) -> bool:
        return self._done

    def launch(self) -> None:
        self.engine.calls.call("launch")

    def stop(self, grace: float | None = None) -> StopReport:
        report: StopReport = self.engine.calls.call("stop", grace)
        return report

    def detach(self) -> None:
        self.engine.calls.call("detach")

    def chart(self, metric: str, log_y: bool, width: int, height: int
              ) -> tuple[list[list[Run]], dict[int, int]]:
        """The chart, built in the engine from its own series (see ``ddptui.chart.rows``);
        call it off the event loop. Raises :class:`EngineError` once the engine is gone."""
        built: tuple[list[list[Run]], dict[int, int]] = self.engine.calls.call(
            "chart", metric, log_y, width, height, timeout=CHART_TIMEOUT_S)
        return built

    def nccl_facts(self) -> NcclFacts:
        """What NCCL said so far, from the controller's own facts (fed every NCCL line,
        where the replica's rings may have let the first ones go); call it off the event
        loop. Raises :class:`EngineError` once the engine is gone."""
        facts: NcclFacts = self.engine.calls.call("nccl", timeout=CHART_TIMEOUT_S)
        return facts

    def stacks(self, rank: int | None = None) -> Stacks:
        """The ranks' Python stacks, taken on the nodes through the engine's connections;
        call it off the event loop (py-spy takes a second or more)."""
        stacks: Stacks = self.engine.calls.call("stacks", rank, timeout=STACKS_TIMEOUT_S)
        return stacks

    def process_estimate(self) -> tuple[int, int]:
        """(processes, nodes), as the controller counts them, from the replica alone: the
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
                    if change[0] == "done":
                        self.result = change[1]
                        self._done = True
                    else:
                        apply_change(self.store, change)

    def engine_gone(self) -> None:
        """The engine ended while the dashboard still needed it: say so, and let go."""
        if self._closing or self._done:
            return
        self._receiver.join(timeout=5)  # what the engine sent before it ended still counts
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
