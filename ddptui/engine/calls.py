"""The dashboard's calls to its engine: each a typed request with a typed reply, and the
channel they travel on.

A request names its reply's type (``Ask[Reply]``), so that :meth:`EngineCalls.call` returns
that type to mypy and checks it when it arrives; the engine dispatches on the request's type
(:mod:`ddptui.engine.process`). Calls are rare (a key press, a chart twice a second): they
travel pickled, unlike the store's changes (:mod:`ddptui.engine.wire`), which are packed.

Both ends of the channel live here, so that the engine's module and the dashboard's each
import this one and never each other.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Generic, TypeVar

from ddptui.chart.view import ChartView, Drawn
from ddptui.config import HostsConfig
from ddptui.nccl import NcclFacts
from ddptui.outcome import LaunchError, StopReport
from ddptui.rank_stacks import Stacks
from ddptui.run_port import RunPort

R = TypeVar("R", covariant=True)


class EngineError(Exception):
    """The engine failed, or an error inside it that is not a :class:`LaunchError`;
    ``str()`` names the error's kind."""


# Replies.

@dataclass(frozen=True, slots=True)
class Opened:
    """What the dashboard's client is built from: the run, and its store as it stood."""

    run_id: str
    config: HostsConfig | None
    run_dir: Path | None
    snapshot: bytes
    """The store's snapshot, packed by :func:`ddptui.engine.wire.pack_snapshot`."""


@dataclass(frozen=True, slots=True)
class Acked:
    """Done, with nothing to say back."""


@dataclass(frozen=True, slots=True)
class Stopped:
    report: StopReport


@dataclass(frozen=True, slots=True)
class ChartBuilt:
    drawn: Drawn


@dataclass(frozen=True, slots=True)
class NcclFactsNow:
    facts: NcclFacts


@dataclass(frozen=True, slots=True)
class Rehearsed:
    said: str


@dataclass(frozen=True, slots=True)
class AgainIs:
    why: str | None


@dataclass(frozen=True, slots=True)
class StacksTaken:
    stacks: Stacks


# Requests.

class Ask(Generic[R]):
    """A request whose reply is an ``R``; each request says which class that is."""

    __slots__ = ()

    @property
    def reply(self) -> type[R]:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Open(Ask[Opened]):
    """Build the run in the engine, as ``target(*args)`` (a module-level function, which
    pickles by name), and start sending its store's changes."""

    target: Callable[..., RunPort]
    args: tuple[object, ...]
    reply = Opened


@dataclass(frozen=True, slots=True)
class Launch(Ask[Acked]):
    reply = Acked


@dataclass(frozen=True, slots=True)
class Stop(Ask[Stopped]):
    grace: float | None
    reply = Stopped


@dataclass(frozen=True, slots=True)
class Detach(Ask[Acked]):
    reply = Acked


@dataclass(frozen=True, slots=True)
class BuildChart(Ask[ChartBuilt]):
    view: ChartView
    width: int
    height: int
    reply = ChartBuilt


@dataclass(frozen=True, slots=True)
class GetNcclFacts(Ask[NcclFactsNow]):
    reply = NcclFactsNow


@dataclass(frozen=True, slots=True)
class TakeStacks(Ask[StacksTaken]):
    rank: int | None
    reply = StacksTaken


@dataclass(frozen=True, slots=True)
class Rehearse(Ask[Rehearsed]):
    reply = Rehearsed


@dataclass(frozen=True, slots=True)
class Again(Ask[AgainIs]):
    reply = AgainIs


@dataclass(frozen=True, slots=True)
class Leave(Ask[Acked]):
    """Detach from a run still going (never stop it), send what the store holds, and end."""

    reply = Acked


#: Every request the engine answers.
Request = (Open | Launch | Stop | Detach | BuildChart | GetNcclFacts | TakeStacks | Rehearse
           | Again | Leave)
REQUESTS = (Open, Launch, Stop, Detach, BuildChart, GetNcclFacts, TakeStacks, Rehearse, Again,
            Leave)
Reply = Opened | Acked | Stopped | ChartBuilt | NcclFactsNow | StacksTaken | Rehearsed | AgainIs


def error_payload(e: BaseException) -> tuple[str, str, list[str] | None]:
    """An exception as the engine sends it: its kind, its text, a LaunchError's problems.
    Not the exception itself, whose class (paramiko's, say) the dashboard need not have
    imported to unpickle it."""
    problems = e.problems if isinstance(e, LaunchError) else None
    return type(e).__name__, str(e), problems


def _remote_error(kind: str, message: str, problems: list[str] | None) -> Exception:
    if kind == "LaunchError" and problems is not None:
        return LaunchError(problems)
    return EngineError(f"{kind}: {message}")


class EngineCalls:
    """Requests to the engine from any thread; one reader thread hands out the replies.

    A request travels pickled inside the message (``(number, bytes)``), so that one the
    engine cannot read is still answered, by its number, with the reason."""

    def __init__(self, conn: Connection, on_gone: Callable[[], None]) -> None:
        self._conn = conn
        self._on_gone = on_gone
        self._lock = threading.Lock()
        self._next = 0
        self._waiting: dict[int, Future[object]] = {}
        self.gone = False
        threading.Thread(target=self._read, name="engine-replies", daemon=True).start()

    def call(self, request: Ask[R], timeout: float | None = None) -> R:
        """``request`` answered in the engine: its reply, or its error raised here."""
        reply: Future[object] = Future()
        data = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:
            if self.gone:
                raise EngineError("the engine process has ended")
            number = self._next
            self._next += 1
            self._waiting[number] = reply
            try:
                self._conn.send((number, data))
            except (OSError, EOFError) as e:
                del self._waiting[number]
                raise EngineError(f"the engine process has ended ({e})") from None
        got = reply.result(timeout)
        if not isinstance(got, request.reply):
            raise EngineError(f"the engine answered {type(request).__name__} with a "
                              f"{type(got).__name__}, not a {request.reply.__name__}")
        return got

    def _read(self) -> None:
        while True:
            try:
                number, ok, payload = self._conn.recv()
            except (EOFError, OSError):
                break
            reply = self._waiting.pop(number, None)
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
