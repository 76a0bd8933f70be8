"""The dashboard's controller runs in a process of its own, the engine.

Following sixteen ranks means reading, parsing and storing tens of thousands of lines a second
in Python. Done in the dashboard's process, that work holds the GIL and the event loop waits
for it: keys took three to five times longer to show. So the controller, with its SSH
connections, followers, parser and disk mirror, lives in an engine process. The dashboard keeps
a replica of the store and brings it up to date on its own timer (:meth:`EngineClient.pump`).

The engine never stops a run by itself. If the dashboard closes it, or dies, the engine
detaches and the run goes on, ready to be attached again.

This module is the engine's side (``main`` is its entry): it imports the wire
(:mod:`ddptui.engine.wire`) and nothing else of the engine package, so the engine never loads
the dashboard's side, :mod:`ddptui.engine.client`, which starts engines and follows them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol

from ddptui.chart.rows import store_chart
from ddptui.config import HostsConfig
from ddptui.engine.wire import Backlog, encode, error_payload, pack_snapshot, split_changes
from ddptui.nccl import NcclFacts
from ddptui.outcome import RunResult, StopReport
from ddptui.remote.stacks import Stacks
from ddptui.store import rundir
from ddptui.store.store import Store

SEND_EVERY_S = 0.03
#: Events per message at most: a message is applied whole, so its size bounds a pump's.
MESSAGE_EVENTS = 1000


class Runnable(Protocol):
    """What an engine runs: :class:`ddptui.live.session.Session` (tests script
    stand-ins), built in the engine by a target such as :func:`new_run`."""

    store: Store
    run_id: str
    config: HostsConfig | None
    #: The run's local directory, where the engine writes its ``engine.log``.
    local_dir: Path

    @property
    def done(self) -> bool: ...
    @property
    def result(self) -> RunResult | None: ...
    def launch(self) -> None: ...
    def stop(self, grace: float | None = None) -> StopReport: ...
    def detach(self) -> None: ...
    def nccl_facts(self) -> NcclFacts: ...
    def stacks(self, rank: int | None = None) -> Stacks: ...


# Targets: what an engine runs (module-level so that they pickle by name).

def new_run(config: HostsConfig, state_root: Path | None, preflight: bool = True) -> Runnable:
    from ddptui.live.session import Session

    ctl = Session(config, state_root=state_root)
    ctl.preflight = preflight
    return ctl


def attach_run(run_id: str, state_root: Path | None) -> Runnable:
    from ddptui.live.session import Session

    return Session.attach(run_id, state_root=state_root)


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
        self.run: Runnable | None = None
        self.backlog = Backlog()
        self.leaving = threading.Event()
        self._send_lock = threading.Lock()
        self._sender = threading.Thread(target=self._send_changes, name="engine-sender",
                                        daemon=True)

    def serve(self) -> None:
        while True:
            try:
                request, op, args = self.cmd.recv()
            except (EOFError, OSError, _Leave):  # the dashboard is gone, or going
                break
            if op == "exit":
                self._reply(request, True, None)
                break
            if op == "open":  # in order: every later call needs the controller
                self._handle(request, op, args)
            else:
                threading.Thread(target=self._handle, args=(request, op, args),
                                 daemon=True).start()
        self.leave()

    def leave(self) -> None:
        """Detach (never stop), let the sender flush what the store holds, then end."""
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends us at once
        if self.run is not None and not self.run.done:
            with contextlib.suppress(Exception):
                self.run.detach()
        self.leaving.set()
        if self._sender.is_alive():
            self._sender.join(timeout=5)

    def _reply(self, request: int, ok: bool, payload: Any) -> None:
        with self._send_lock, contextlib.suppress(OSError, EOFError):
            self.cmd.send((request, ok, payload))

    def _handle(self, request: int, op: str, args: tuple[Any, ...]) -> None:
        try:
            result = self._call(op, args)
        except BaseException as e:
            self._reply(request, False, error_payload(e))
        else:
            try:
                self._reply(request, True, result)
            except Exception as e:  # a result that does not pickle is a bug, said as one
                self._reply(request, False, error_payload(e))

    def _call(self, op: str, args: tuple[Any, ...]) -> Any:
        """One call of :class:`ddptui.engine.client.EngineClient`, by name."""
        if op == "open":
            target, target_args = args
            return self._open(target, target_args)
        run = self.run
        if run is None:
            raise RuntimeError(f"engine call {op!r} before open")
        if op == "launch":
            return run.launch()
        if op == "stop":
            (grace,) = args
            return run.stop(grace)
        if op == "detach":
            return run.detach()
        if op == "chart":
            metric, log_y, width, height = args
            return store_chart(run.store, metric, log_y, width, height)
        if op == "nccl":
            return run.nccl_facts()
        if op == "stacks":
            (rank,) = args
            return run.stacks(rank)
        raise ValueError(f"unknown engine call {op!r}")

    def _open(self, target: Callable[..., Runnable], args: tuple[Any, ...]
              ) -> tuple[str, HostsConfig | None, Path | None, bytes]:
        """Build the run, send its output to its ``engine.log``, and start sending its
        store's changes; the reply is what :class:`EngineClient` is built from."""
        if self.run is not None:
            raise RuntimeError("this engine already runs a controller")
        run = target(*args)
        _redirect_output(str(Path(run.local_dir) / rundir.ENGINE_LOG))
        self.run = run
        snapshot = run.store.subscribe(self.backlog.add)
        self._sender.start()
        return run.run_id, run.config, run.store.run_dir, pack_snapshot(snapshot)

    def _send_changes(self) -> None:
        """Batches of changes, then ``done`` (with the result) once the run is over."""
        run = self.run
        assert run is not None  # started by _open
        told = False
        while True:
            leaving = self.leaving.is_set()
            done = run.done
            changes = self.backlog.take(0 if done or leaving else SEND_EVERY_S)
            if done and not told:  # every change of the run came before done was set
                changes.append(("done", run.result))
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
