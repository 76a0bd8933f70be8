"""The contract every transport keeps, so the session never knows SSH from local.

Commands are shell strings: the caller quotes every value with ``shlex.quote`` (the plan
does), and the transport runs them with ``sh -c`` on the node. Paths are absolute on the
node; ``home()`` is there so a ``~/...`` workdir can be made absolute once.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

#: Called with each piece of a command's output as it arrives; ``stderr`` says which stream.
OnOutput = Callable[[bytes, bool], None]


class Confirms(Protocol):
    """A node's stop report, to which a transport adds what it checked there afterwards."""

    @property
    def checked(self) -> list[str]:
        """Each thing found gone after the stop, in ddptui's words."""


#: What a node's stop program reports (:meth:`Transport.stop_run` passes it through).
Stopped = TypeVar("Stopped", bound=Confirms)


class TransportError(Exception):
    """A node could not be reached or answered wrongly; ``str()`` is one paragraph for a person."""

    def __init__(self, node: str, message: str) -> None:
        super().__init__(message)
        self.node = node


@dataclass(frozen=True, slots=True)
class CommandResult:
    exit_code: int
    stdout: str
    stderr: str


@dataclass(frozen=True, slots=True)
class Detached:
    """A program that must outlive the connection and ddptui (launch.sh, the sampler): run
    as ``sh script args`` in ``cwd``, no stdin, its output appended to ``log``. Each transport
    decides how it is let go (a new session over SSH, a job step of its own under Slurm)."""

    cwd: str
    script: str
    args: tuple[str, ...] = ()
    log: str = "/dev/null"
    #: What the scheduler calls it (a Slurm job-step name), where there is one.
    name: str | None = None

    def _program(self) -> str:
        argv = " ".join(shlex.quote(a) for a in (self.script, *self.args))
        return f"sh {argv} >> {shlex.quote(self.log)} 2>&1 < /dev/null"

    def foreground(self) -> str:
        """The program as the shell's own last command (its exit ends the caller's)."""
        return f"cd {shlex.quote(self.cwd)} && exec {self._program()}"

    def background(self) -> str:
        """The program in a session of its own; the shell says ``started`` and returns."""
        return f"cd {shlex.quote(self.cwd)} && (setsid {self._program()} &) && echo started"


class PythonCommand(str):
    """The shell line that runs a node program (``python -c SOURCE ARGS``), which also says
    what it runs: a transport whose node side is that Python already (the srun agent) runs
    the program there without a new interpreter; any other runs the line with ``sh -c``."""

    python: str
    source: str
    args: tuple[str, ...]

    def __new__(cls, python: str, source: str, args: tuple[str, ...], no_site: bool = False
                ) -> PythonCommand:
        q = shlex.quote(python)
        quoted = " ".join(shlex.quote(a) for a in args)
        line = super().__new__(cls, (
            f"command -v {q} >/dev/null 2>&1 || "
            f"{{ echo 'ddptui: no such interpreter: '{q} >&2; exit 127; }}; "
            f"exec {q} {'-S ' if no_site else ''}-c {shlex.quote(source)} {quoted}"))
        line.python, line.source, line.args = python, source, args
        return line


class Spawned(Protocol):
    """A command left running on the node, its output read a piece at a time."""

    def read(self, timeout: float) -> bytes | None:
        """What it printed since the last read, waiting up to ``timeout`` for something
        (``b""`` if nothing came); ``None`` once it has ended or its connection is gone."""

    def send(self, data: bytes) -> None:
        """Write ``data`` to its stdin; raise OSError or TransportError if it is gone."""

    def close(self) -> None:
        """Close its stdin and stop reading: a command that watches its stdin (as ddptui's
        own node programs do) then ends by itself; idempotent."""


class Transport(Protocol):
    node: str
    #: The address the node was reached at (ssh HostName after ~/.ssh/config), for rendezvous.
    address: str

    def connect(self, timeout: float) -> None:
        """Open the one connection that every later call reuses; raise TransportError."""

    def run(self, command: str, timeout: float) -> CommandResult:
        """Run ``sh -c command`` on the node, wait for it; raise TransportError on timeout."""

    def run_stream(self, command: str, timeout: float, *, stdin: Iterable[bytes] | None = None,
                   on_output: OnOutput | None = None) -> CommandResult:
        """:meth:`run`, with stdin fed from ``stdin``'s chunks (then closed) and the output
        handed to ``on_output`` as it comes: one stream of many files instead of a round trip
        per file, and setup output shown while it runs. An exception raised by ``stdin``
        ends the command (its stdin is cut short) and propagates."""

    def spawn(self, command: str) -> Spawned:
        """Start ``sh -c command`` on the node and return at once (see :class:`Spawned`);
        raise TransportError if it cannot be started."""

    def start_detached(self, job: Detached, timeout: float) -> CommandResult:
        """Start ``job`` so that it outlives this connection and ddptui, and return at once;
        ``started`` in the result's stdout when it was let go, its error otherwise."""

    def home(self) -> str:
        """The absolute home directory of the login user on the node."""

    def put_bytes(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        """Write a whole file atomically enough (temp name + rename); parents must exist."""

    def read_from(self, remote_path: str, offset: int, max_bytes: int) -> bytes:
        """Bytes of the file from ``offset``; b"" at its end; FileNotFoundError if absent."""

    def close(self) -> None:
        """Drop the connection; the job on the node is untouched."""

    def stop_run(self, run_id: str, stop_here: Callable[[], Stopped]) -> Stopped | None:
        """Stop run ``run_id`` on the node. ``stop_here`` runs the node's stop program
        (SIGTERM to every process of the run there, the grace, SIGKILL, what is left), the
        whole stop over SSH and locally; a scheduler's transport adds what its way of
        reaching the node needs (the run's job step cancelled), and adds to the report's
        ``checked`` what it found gone of that part. None: the node could not be
        asked, but holds nothing of the run any more (its job has ended). Raise
        :class:`TransportError` when nothing can say whether the run stopped there."""
