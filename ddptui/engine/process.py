"""The dashboard's controller runs in a process of its own, the engine.

Following sixteen ranks means reading, parsing and storing tens of thousands of lines a second
in Python. Done in the dashboard's process, that work holds the GIL and the event loop waits
for it: keys took three to five times longer to show. So the controller, with its SSH
connections, followers, parser and disk mirror, lives in an engine process. The dashboard keeps
a replica of the store and brings it up to date on its own timer (:meth:`EngineClient.pump`).

The engine never stops a run by itself. If the dashboard closes it, or dies, the engine
detaches and the run goes on, ready to be attached again.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ddptui.chart.rows import Run, store_chart
from ddptui.engine.wire import (
    Backlog,
    apply_change,
    decode,
    encode,
    pack_snapshot,
    split_changes,
    unpack_snapshot,
)
from ddptui.events import RunStatus
from ddptui.launch.outcome import LaunchError
from ddptui.store.store import Change, Store

#: How long one :meth:`EngineClient.pump` may keep the dashboard's event loop: a key waits
#: at most this long behind it. The dashboard pumps often, so this is not a rate limit.
PUMP_BUDGET_S = 0.005
SEND_EVERY_S = 0.03
#: Events per message at most: a message is applied whole, so its size bounds a pump's.
MESSAGE_EVENTS = 1000
#: A chart the engine has not built by then is built in the dashboard instead.
CHART_TIMEOUT_S = 5.0
#: Decoded messages waiting for the dashboard's loop, at most (about two seconds of a flood).
INBOX_MESSAGES = 100


class EngineError(Exception):
    """The engine failed, or an error inside it that is not a :class:`LaunchError`;
    ``str()`` names the error's kind."""


# -- targets: what an engine runs (module-level so that they pickle by name) ---------------

def new_run(config: Any, state_root: Path | None) -> Any:
    from ddptui.launch.controller import Controller

    return Controller(config, state_root=state_root)


def attach_run(run_id: str, state_root: Path | None) -> Any:
    from ddptui.launch.controller import Controller

    return Controller.attach(run_id, state_root=state_root)


# -- the engine side -----------------------------------------------------------------------

def _error_payload(e: BaseException) -> tuple[str, str, list[str] | None]:
    return type(e).__name__, str(e), getattr(e, "problems", None)


def _redirect_output(path: str) -> None:
    """The engine shares the dashboard's terminal: a stray print or traceback would tear the
    screen, so its output goes to the run's ``engine.log`` (until then, nowhere)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


class _Leave(Exception):
    """SIGTERM: leave as on exit (detach, never stop)."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise _Leave


class _Engine:
    def __init__(self, cmd: Connection, feed: Connection) -> None:
        self.cmd, self.feed = cmd, feed
        self.ctl: Any = None
        self.backlog = Backlog()
        self.leaving = threading.Event()
        self._send_lock = threading.Lock()
        self._sender = threading.Thread(target=self._send_changes, name="engine-sender",
                                        daemon=True)

    def serve(self) -> None:
        while True:
            try:
                req, op, args = self.cmd.recv()
            except (EOFError, OSError, _Leave):  # the dashboard is gone, or going
                break
            if op == "exit":
                self._reply(req, True, None)
                break
            if op == "open":  # in order: every later call needs the controller
                self._handle(req, op, args)
            else:
                threading.Thread(target=self._handle, args=(req, op, args), daemon=True).start()
        self.leave()

    def leave(self) -> None:
        """Detach (never stop), let the sender flush what the store holds, then end."""
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends us at once
        if self.ctl is not None and not self.ctl.done:
            with contextlib.suppress(Exception):
                self.ctl.detach()
        self.leaving.set()
        if self._sender.is_alive():
            self._sender.join(timeout=5)

    def _reply(self, req: int, ok: bool, payload: Any) -> None:
        with self._send_lock, contextlib.suppress(OSError, EOFError):
            self.cmd.send((req, ok, payload))

    def _handle(self, req: int, op: str, args: tuple[Any, ...]) -> None:
        try:
            result = self._do(op, args)
        except BaseException as e:
            self._reply(req, False, _error_payload(e))
        else:
            try:
                self._reply(req, True, result)
            except Exception as e:  # a result that does not pickle is a bug, said as one
                self._reply(req, False, _error_payload(e))

    def _do(self, op: str, args: tuple[Any, ...]) -> Any:
        if op == "open":
            if self.ctl is not None:
                raise RuntimeError("this engine already runs a controller")
            target, target_args = args
            ctl = target(*target_args)
            local_dir = getattr(ctl, "local_dir", None)
            if local_dir is not None:
                _redirect_output(str(Path(local_dir) / "engine.log"))
            self.ctl = ctl
            snapshot = ctl.store.subscribe(self.backlog.add)
            self._sender.start()
            return ctl.run_id, getattr(ctl, "config", None), ctl.store.run_dir, \
                pack_snapshot(snapshot)
        if op in ("launch", "stop", "detach"):
            return getattr(self.ctl, op)(*args)
        if op == "chart":
            metric, log_y, width, height = args
            return store_chart(self.ctl.store, metric, log_y, width, height)
        raise ValueError(f"unknown engine call {op!r}")

    def _send_changes(self) -> None:
        """Batches of changes, then ``done`` (with the result) once the run is over."""
        told = False
        while True:
            leaving = self.leaving.is_set()
            done = self.ctl.done
            changes = self.backlog.take(0 if done or leaving else SEND_EVERY_S)
            if done and not told:  # every change of the run came before done was set
                changes.append(("done", self.ctl.result))
                told = True
            try:
                for part in split_changes(changes, MESSAGE_EVENTS):
                    self.feed.send_bytes(encode(part))
            except (OSError, EOFError, ValueError):
                return
            if leaving:
                return
            if told:
                self.leaving.wait(SEND_EVERY_S)


def main(cmd_fd: int, feed_fd: int) -> None:
    """The engine's entry; the dashboard starts it with the two sockets' descriptors."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_sigterm)
    _Engine(Connection(cmd_fd), Connection(feed_fd)).serve()


# -- the dashboard side --------------------------------------------------------------------

class _Calls:
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
        fut: Future[Any] = Future()
        with self._lock:
            if self.gone:
                raise EngineError("the engine process has ended")
            req = self._next
            self._next += 1
            self._waiting[req] = fut
            try:
                self._conn.send((req, op, args))
            except (OSError, EOFError) as e:
                del self._waiting[req]
                raise EngineError(f"the engine process has ended ({e})") from None
        return fut.result(timeout)

    def _read(self) -> None:
        while True:
            try:
                req, ok, payload = self._conn.recv()
            except (EOFError, OSError):
                break
            fut = self._waiting.pop(req, None)
            if fut is None:
                continue
            if ok:
                fut.set_result(payload)
            else:
                fut.set_exception(_remote_error(*payload))
        with self._lock:
            self.gone = True
            waiting, self._waiting = self._waiting, {}
        for fut in waiting.values():
            fut.set_exception(EngineError("the engine process ended before it answered"))
        self._on_gone()


def _remote_error(kind: str, message: str, problems: list[str] | None) -> Exception:
    if kind == "LaunchError" and problems is not None:
        return LaunchError(problems)
    return EngineError(f"{kind}: {message}")


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
        self.calls = _Calls(Connection(cmd.detach()), self._gone)

    def open(self, target: Callable[..., Any], *args: Any) -> EngineClient:
        """Run ``target(*args)`` (a controller, built in the engine) and follow its store."""
        reply = self.calls.call("open", target, args)
        self._client = EngineClient(self, *reply)
        return self._client

    def _gone(self) -> None:
        if self._client is not None:
            self._client.engine_gone()

    def close(self, timeout: float = 20.0) -> None:
        """Ask the engine to leave (it detaches from a run still going) and wait for it."""
        with contextlib.suppress(EngineError, TimeoutError):
            self.calls.call("exit", timeout=timeout)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


class EngineClient:
    """What the dashboard holds as its controller: a replica store and calls to the engine."""

    def __init__(self, engine: EngineProcess, run_id: str, config: Any, run_dir: Path | None,
                 snapshot: bytes) -> None:
        self.engine = engine
        self.run_id = run_id
        self.config = config
        self.store = Store.replica(unpack_snapshot(snapshot), run_dir)
        self.result: Any = None
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

    def stop(self, grace: float | None = None) -> Any:
        return self.engine.calls.call("stop", grace)

    def detach(self) -> None:
        self.engine.calls.call("detach")

    def chart(self, metric: str, log_y: bool, width: int, height: int
              ) -> tuple[list[list[Run]], dict[int, int]]:
        """The chart, built in the engine from its own series (see ``ddptui.chart.rows``); call it
        off the event loop. Raises :class:`EngineError` once the engine is gone."""
        built: tuple[list[list[Run]], dict[int, int]] = self.engine.calls.call(
            "chart", metric, log_y, width, height, timeout=CHART_TIMEOUT_S)
        return built

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


class Spare:
    """At most one idle engine kept ready, so that a launch or attach skips its start-up."""

    def __init__(self) -> None:
        self._engine: EngineProcess | None = None
        self._lock = threading.Lock()

    def warm(self) -> None:
        with self._lock:
            if self._engine is None:
                self._engine = EngineProcess()

    def open(self, target: Callable[..., Any], *args: Any) -> EngineClient:
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
