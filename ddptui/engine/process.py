"""The dashboard's session runs in a process of its own, the engine.

Following sixteen ranks means reading, parsing and storing tens of thousands of lines a second
in Python. Done in the dashboard's process, that work holds the GIL and the event loop waits
for it: keys took three to five times longer to show. So the session, with its SSH
connections, followers, parser and disk mirror, lives in an engine process. The dashboard keeps
a replica of the store and brings it up to date on its own timer (:meth:`EngineClient.pump`).

The engine never stops a run by itself. If the dashboard closes it, or dies, the engine
detaches and the run goes on, ready to be attached again.

This module is the engine's side (``main`` is its entry): of the engine package it imports
the two channels' plain ends (:mod:`ddptui.engine.wire` for changes, :mod:`ddptui.engine.calls`
for calls) and nothing else, so the engine never loads the dashboard's side,
:mod:`ddptui.engine.client`, which starts engines and follows them. It answers each call by
the request's type; a request it does not know, or cannot read, is answered with an error.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import threading
from multiprocessing.connection import Connection
from pathlib import Path
from types import FrameType
from typing import assert_never

from ddptui.chart.memo import ChartMemo
from ddptui.chart.rows import store_chart
from ddptui.config import HostsConfig
from ddptui.engine.calls import (
    REQUESTS,
    Acked,
    Again,
    AgainIs,
    BuildChart,
    ChartBuilt,
    Detach,
    EngineError,
    GetNcclFacts,
    Launch,
    Leave,
    NcclFactsNow,
    Open,
    Opened,
    Rehearse,
    Rehearsed,
    Reply,
    Request,
    StacksTaken,
    Stop,
    Stopped,
    TakeStacks,
    error_payload,
)
from ddptui.engine.wire import Backlog, Done, Message, encode, pack_snapshot, split_changes
from ddptui.run_port import RunPort
from ddptui.store import rundir

SEND_EVERY_S = 0.03
#: Events per message at most: a message is applied whole, so its size bounds a pump's.
MESSAGE_EVENTS = 1000


# Targets: what an engine runs (module-level so that they pickle by name). Their return
# types are mypy's check that the session is a RunPort.

def new_run(config: HostsConfig, state_root: Path | None, preflight: bool = True) -> RunPort:
    """A new run, its torchruns started warm first where no connection is needed
    (:mod:`ddptui.launch.warm`): they import torch while the engine makes and launches it."""
    from ddptui.launch import warm

    run_id, started = warm.new_run(config)
    from ddptui.live.session import Session

    session = Session(config, state_root=state_root, run_id=run_id)
    session.preflight, session.warm = preflight, started
    return session


def next_attempt(config: HostsConfig, state_root: Path | None, previous: str,
                 preflight: bool = True) -> RunPort:
    """The attempt after run ``previous``, which its allocation's time limit ended, in a new
    allocation asked for here (``slurm.resubmit``; see :mod:`ddptui.afterwards.resubmit`)."""
    from ddptui.afterwards.resubmit import start_attempt
    from ddptui.outcome import LaunchError
    from ddptui.slurm.allocation import resolve
    from ddptui.slurm.jobinfo import SlurmError
    from ddptui.store.runs import state_root as resolve_root

    try:
        session = start_attempt(config, resolve_root(state_root), previous,
                                lambda c: resolve(c, say=print))
    except SlurmError as e:
        raise LaunchError([f"the next attempt of run {previous} got no allocation: {e}"]) \
            from None
    assert session is not None  # resolve raises rather than return nothing
    session.preflight = preflight
    return session


def attach_run(run_id: str, state_root: Path | None) -> RunPort:
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


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Leave


def _read(data: bytes) -> Request:
    """A request as the dashboard pickled it; in ddptui's words when it is not one."""
    try:
        request = pickle.loads(data)
    except Exception as e:
        raise EngineError(f"the engine could not read a request ({type(e).__name__}: {e}); "
                          "is the dashboard the same version of ddptui?") from None
    if not isinstance(request, REQUESTS):
        raise EngineError(f"the engine has no call {type(request).__name__!r}: it answers "
                          + ", ".join(r.__name__ for r in REQUESTS))
    return request


class _Engine:
    def __init__(self, cmd: Connection, feed: Connection) -> None:
        self.cmd, self.feed = cmd, feed
        self.run: RunPort | None = None
        self.backlog = Backlog()
        self.chart_memo = ChartMemo()  # each redraw computes only the new points' part
        self.leaving = threading.Event()
        self._send_lock = threading.Lock()
        self._sender = threading.Thread(target=self._send_changes, name="engine-sender",
                                        daemon=True)

    def serve(self) -> None:
        while True:
            try:
                number, data = self.cmd.recv()
            except (EOFError, OSError, _Leave):  # the dashboard is gone, or going
                break
            try:
                request = _read(data)
            except EngineError as e:
                self._reply(number, False, error_payload(e))
                continue
            if isinstance(request, Leave):
                self._reply(number, True, Acked())
                break
            if isinstance(request, Open):  # in order: every later call needs the run
                self._handle(number, request)
            else:
                threading.Thread(target=self._handle, args=(number, request),
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

    def _reply(self, number: int, ok: bool, payload: object) -> None:
        with self._send_lock, contextlib.suppress(OSError, EOFError):
            self.cmd.send((number, ok, payload))

    def _handle(self, number: int, request: Request) -> None:
        try:
            reply = self._answer(request)
        except BaseException as e:
            self._reply(number, False, error_payload(e))
        else:
            try:
                self._reply(number, True, reply)
            except Exception as e:  # a reply that does not pickle is a bug, said as one
                self._reply(number, False, error_payload(e))

    def _answer(self, request: Request) -> Reply:
        """One call of :class:`ddptui.engine.client.EngineClient`, by its request's type."""
        if isinstance(request, Open):
            return self._open(request)
        run = self.run
        if run is None:
            raise EngineError(f"{type(request).__name__} came before the engine had a run")
        match request:
            case Launch():
                run.launch()
                return Acked()
            case Stop(grace):
                return Stopped(run.stop(grace))
            case Detach():
                run.detach()
                return Acked()
            case BuildChart(view, width, height):
                return ChartBuilt(store_chart(run.store, view, width, height,
                                              memo=self.chart_memo))
            case GetNcclFacts():
                return NcclFactsNow(run.nccl_facts())
            case TakeStacks(rank):
                return StacksTaken(run.stacks(rank))
            case Rehearse():
                return Rehearsed(run.rehearse())
            case Again():
                return AgainIs(run.again())
            case Leave():  # answered by serve, which then ends
                return Acked()
            case _:
                assert_never(request)

    def _open(self, request: Open) -> Opened:
        """Build the run, send its output to its ``engine.log``, and start sending its
        store's changes; the reply is what :class:`EngineClient` is built from."""
        if self.run is not None:
            raise EngineError("this engine already runs a run")
        run = request.target(*request.args)
        run_dir = run.store.run_dir
        if run_dir is not None:
            _redirect_output(str(Path(run_dir) / rundir.ENGINE_LOG))
        self.run = run
        snapshot = run.store.subscribe(self.backlog.add)
        self._sender.start()
        return Opened(run.run_id, run.config, run_dir, pack_snapshot(snapshot))

    def _send_changes(self) -> None:
        """Batches of changes, then ``done`` (with the result) once the run is over."""
        run = self.run
        assert run is not None  # started by _open
        told = False
        while True:
            leaving = self.leaving.is_set()
            done = run.done
            changes: list[Message] = [*self.backlog.take(0 if done or leaving else SEND_EVERY_S)]
            if done and not told:  # every change of the run came before done was set
                changes.append(Done(run.result))
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
