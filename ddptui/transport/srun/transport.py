"""``SrunTransport``: a node of a Slurm allocation, reached by job steps instead of SSH.

Everything a launch does on a node runs inside the job, so it is counted, limited and
cancelled with it, and it works where ``pam_slurm_adopt`` refuses SSH. Commands travel
through one long-lived agent step per node (:mod:`.agent`); the run itself, which must
outlive this connection and ddptui, is a step of its own (:meth:`SrunTransport.start_detached`)
whose ``srun`` is let go on this machine, so that ``scancel`` of that step stops exactly
the run on that node.
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Iterable

from ddptui import nodeprog
from ddptui.config import NodeConfig
from ddptui.nodeprog import node_files
from ddptui.slurm import client
from ddptui.slurm.jobinfo import SlurmError
from ddptui.transport.base import (
    CommandResult,
    Detached,
    OnOutput,
    PythonCommand,
    Stopped,
    TransportError,
)
from ddptui.transport.srun import frames, steps
from ddptui.transport.srun.agent import SOURCE
from ddptui.transport.srun.link import WHOLE, AgentLink, Channel, LinkClosed
from ddptui.transport.srun.names import AGENT_STEP, step_name

#: Removes ``torchelastic_*/<run id>_*`` from the node's temp dirs (``$TMPDIR``, ``/tmp``),
#: and the ``torchelastic_*`` dir left empty; prints each one removed.
_CLEAR_TEMP = ('for d in "${TMPDIR:-/tmp}"/torchelastic_*/__RUN__* /tmp/torchelastic_*/__RUN__*; '
               'do [ -e "$d" ] || continue; rm -rf "$d" && echo "$d"; '
               'rmdir "${d%/*}" 2>/dev/null; done; exit 0')

#: Exit code of :meth:`SrunTransport.read_from`'s command when the file is not there.
_ABSENT = 66
#: Writes and reads a node's files inside the agent (:mod:`ddptui.nodeprog.node_files`).
_FILES_SRC = nodeprog.source(node_files)


class _Read(str):
    """A read of a node's file by the agent itself (:data:`.frames.READ`), named as the
    messages about a command name it."""

    path: str
    offset: int
    most: int

    def __new__(cls, path: str, offset: int, most: int) -> _Read:
        read = super().__new__(cls, f"read {path} from byte {offset}")
        read.path, read.offset, read.most = path, offset, most
        return read


class SrunTransport:
    """A node of allocation ``job``; one session thread plus occasional other callers."""

    def __init__(self, node: NodeConfig, job: str) -> None:
        self.node = node.name
        self.host = node.host  # Slurm's node name
        self.address = node.addr or node.host
        self.job = job
        self.python = node.python
        self._link: AgentLink | None = None
        self._home: str | None = None

    def srun(self, *argv: str, name: str = AGENT_STEP) -> list[str]:
        """A step of the job on this node alone (:func:`.steps.step_argv`)."""
        return steps.step_argv(self.job, self.host, name, *argv)

    def connect(self, timeout: float = 30.0) -> None:
        self.close()
        try:
            link = AgentLink(self.srun(self.python, "-u", "-c", SOURCE))
        except OSError as exc:
            raise TransportError(self.node, f"{self.node}: cannot run srun here ({exc}); "
                                            "run ddptui where Slurm's client commands are "
                                            "installed (a login node).") from exc
        if not link.ready.wait(timeout) or link.closed.is_set():
            link.close(wait=1.0)
            said = link.complaint(wait=2.0)
            why = (f"srun said: {said}" if said else
                   f"no answer within {timeout:g} s (is the job still running? `squeue -j "
                   f"{self.job}`)")
            raise TransportError(self.node, f"{self.node}: could not start ddptui's step on "
                                            f"node {self.host} of Slurm job {self.job} with "
                                            f"{self.python}; {why}")
        self._link = link

    def _active(self) -> AgentLink:
        link = self._link
        if link is None or link.closed.is_set():
            raise self._ended(link.complaint() if link is not None else "")
        return link

    def _ended(self, said: str = "", during: str = "") -> TransportError:
        """The agent's step is gone (the job ended, the node failed, it was closed)."""
        return TransportError(self.node, f"{self.node}: the step of Slurm job {self.job} on "
                                         f"{self.host} has ended" +
                                         (f" during a command: {during[:200]}" if during else "")
                                         + (f" (srun said: {said})" if said else ""))

    def _open(self, command: str, stdin: bool, fed: bytes | None = None) -> Channel:
        """A node program for the agent's own interpreter runs in a fork of the agent (no
        new interpreter); any other command with ``sh -c``. ``fed``: its whole stdin."""
        try:
            link = self._active()
            if isinstance(command, _Read):
                return link.open_read(command.path, command.offset, command.most, _ABSENT)
            if isinstance(command, PythonCommand) and command.python == self.python:
                return link.open_program(command.source, command.args, stdin, fed)
            return link.open(command, stdin, fed)
        except LinkClosed as exc:
            raise self._ended(str(exc)) from None

    def run(self, command: str, timeout: float) -> CommandResult:
        return self.run_stream(command, timeout)

    def run_stream(self, command: str, timeout: float, *, stdin: Iterable[bytes] | None = None,
                   on_output: OnOutput | None = None) -> CommandResult:
        out, err, code = self._collect(command, timeout, stdin, on_output)
        return CommandResult(code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))

    def _collect(self, command: str, timeout: float, stdin: Iterable[bytes] | None,
                 on_output: OnOutput | None) -> tuple[bytes, bytes, int]:
        whole = _whole(stdin)
        ch = self._open(command, stdin is not None, whole)
        deadline = time.monotonic() + timeout
        fed: list[BaseException] = []  # what feeding stdin raised, raised here
        # a stream is fed beside the reading: a sync's stdin waits on its output
        if stdin is not None and whole is None:
            threading.Thread(target=_feed, args=(ch, stdin, fed), daemon=True,
                             name="ddptui-srun-stdin").start()
        try:
            out, err = bytearray(), bytearray()
            while True:
                if fed:
                    raise fed[0]
                left = deadline - time.monotonic()
                if left <= 0:
                    ch.kill()
                    raise TransportError(self.node, f"{self.node}: command timed out after "
                                                    f"{timeout:g}s and was killed: "
                                                    f"{command[:200]}")
                msg = ch.get(min(left, 1.0))
                if msg is None:
                    raise self._ended(during=command)
                kind, data = msg
                if kind in (frames.STDOUT, frames.STDERR):
                    (out if kind == frames.STDOUT else err).extend(data)
                    if on_output is not None:
                        on_output(data, kind == frames.STDERR)
                elif kind == frames.EXIT:
                    if fed:  # the command ended because its stdin failed
                        raise fed[0]
                    return bytes(out), bytes(err), int(data)
                elif kind == frames.FAILED:
                    what = "a program" if isinstance(command, PythonCommand) else "sh"
                    raise TransportError(self.node, f"{self.node}: cannot run {what} there: "
                                                    f"{data.decode('utf-8', 'replace')}")
        except LinkClosed as exc:
            raise self._ended(str(exc)) from None
        except BaseException:
            if not ch.ended:
                ch.kill()
            raise

    def spawn(self, command: str) -> StepCommand:
        return StepCommand(self._open(command, True))

    def start_detached(self, job: Detached, timeout: float) -> CommandResult:
        """The run's own step, its ``srun`` let go here (a new session, reparented), so that
        it lives on when ddptui ends; its task is ``job`` itself, not a daemon it leaves. Of
        Slurm's variables its ranks keep only the job's and the node's (:mod:`.stepenv`)."""
        try:
            steps.let_go(self.job, self.host, job.foreground(), job.name or "ddptui-run",
                         timeout)
        except (OSError, subprocess.SubprocessError) as exc:
            return CommandResult(1, "", f"could not start srun for the run's step: {exc}")
        return CommandResult(0, "started\n", "")

    def home(self) -> str:
        """``$HOME`` in the agent's step, which the agent says as it starts."""
        if self._home is None:
            home = self._active().home
            if not home.startswith("/"):
                raise TransportError(self.node, f"{self.node}: could not read $HOME there: it "
                                                f"is {home!r}, not an absolute path")
            self._home = home
        return self._home

    def _files(self, *args: str) -> PythonCommand:
        return PythonCommand(self.python, _FILES_SRC, args)

    def put_bytes(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        res = self.run_stream(self._files("put", remote_path, f"{mode:o}"), timeout=120,
                              stdin=[data])
        if res.exit_code != 0:
            raise OSError(f"{self.node}: cannot write {remote_path}: {res.stderr.strip()}")

    def read_from(self, remote_path: str, offset: int, max_bytes: int) -> bytes:
        if max_bytes <= 0:
            return b""
        out, err, code = self._collect(_Read(remote_path, int(offset), int(max_bytes)), 120,
                                       None, None)
        if code == _ABSENT:
            raise FileNotFoundError(remote_path)
        if code != 0:
            raise OSError(f"{self.node}: cannot read {remote_path}: "
                          f"{err.decode('utf-8', 'replace').strip()}")
        return out

    def stop_run(self, run_id: str, stop_here: Callable[[], Stopped]) -> Stopped | None:
        """The node's stop program, as over SSH (SIGTERM to every process of the run there,
        the grace, SIGKILL, and what is left, confirmed), then the run's step cancelled and
        awaited until Slurm no longer lists it, and torchrun's temp dirs of the run removed;
        each of these is said in the report's ``checked``.

        No ``scancel --signal`` first: the stop program signals every process of the run, so
        Slurm's SIGTERM would be a second one, which interrupts torchrun's own shutdown; and
        Slurm's answer to it tells nothing (22.05 delivers a signal to a running step and
        answers "Invalid job id specified" all the same; a step that has ended is answered
        with success). A step may end by itself at any moment (another node's stop ended the
        rendezvous, and torchrun with it): the node's processes say whether the run stopped
        there, so such a node is stopped, not lost. A job Slurm has ended holds nothing any
        more, so a node of it that cannot be reached has nothing to stop."""
        try:
            found = stop_here()
        except TransportError:
            try:
                if not client.job_running(self.job):
                    return None
            except SlurmError as e:
                raise TransportError(self.node, f"node {self.node}: neither the node nor Slurm "
                                                "could say whether the run stopped there: "
                                                f"{e}") from None
            raise
        found.checked.extend(self._step_gone(run_id))
        found.checked.extend(self._temp_dirs_gone(run_id))
        return found

    def _step_gone(self, run_id: str) -> list[str]:
        """The run's step on this node cancelled (its processes are gone: it ends anyway)
        and awaited until Slurm no longer lists it; what ``squeue -s`` then says."""
        try:
            ours = [s.step_id for s in client.steps(self.job)
                    if s.name == step_name(run_id) and s.nodes == self.host]
            for step in ours:
                with contextlib.suppress(SlurmError):  # it ended meanwhile
                    client.cancel(step)
                if not client.wait_step_gone(step):
                    raise TransportError(self.node, f"node {self.node}: Slurm still lists the "
                                         f"run's step {step} there {client.SETTLE_S:g} s after "
                                         f"its processes were stopped; `scancel {step}`, and "
                                         f"`squeue -s -j {self.job}` shows whether it went")
        except SlurmError as e:
            return [f"Slurm could not say whether a step of the run is left ({e})"]
        return [f"Slurm lists no step of the run on {self.host} (squeue -s)"]

    def _temp_dirs_gone(self, run_id: str) -> list[str]:
        """torchrun's ``torchelastic_*`` temp dirs of the run removed, and said.

        torchrun makes one in the node's temp dir only when it is given no ``--log-dir``
        (ddptui gives one in the node dir), and names its content after the rendezvous id
        (the run id unless the hosts file sets one), which is how the run's are told from
        the other runs' and jobs' on the node."""
        try:
            res = self.run(_CLEAR_TEMP.replace("__RUN__", shlex.quote(f"{run_id}_")), timeout=30)
        except TransportError:  # the agent's step ended with the job: nothing said
            return []
        if res.exit_code != 0:
            return []
        removed = res.stdout.split()
        if not removed:
            return ["no torchelastic temp dir of the run is left"]
        return [f"removed {len(removed)} torchelastic temp dir(s) of the run left in "
                f"{', '.join(sorted({p.rsplit('/', 1)[0] for p in removed}))}"]

    def close(self) -> None:
        link, self._link = self._link, None
        if link is not None:
            link.close()

    def __repr__(self) -> str:
        return f"SrunTransport({self.node!r}, job {self.job})"


def _whole(stdin: Iterable[bytes] | None) -> bytes | None:
    """A small stdin given as a list (a file written, exports), joined; None for a stream."""
    if isinstance(stdin, list | tuple) and sum(len(b) for b in stdin) <= WHOLE:
        return b"".join(stdin)
    return None


def _feed(ch: Channel, stdin: Iterable[bytes], fed: list[BaseException]) -> None:
    try:
        for chunk in stdin:
            if chunk:
                ch.send(chunk)
        ch.eof()
    except BaseException as e:
        fed.append(e)
        ch.kill()


class StepCommand:
    """A command left running in the agent's step (``Transport.spawn``)."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self._done = False

    def read(self, timeout: float) -> bytes | None:
        if self._done:
            return None
        end = time.monotonic() + timeout
        while True:
            msg = self.channel.get(max(0.0, end - time.monotonic()))
            if msg is None or msg[0] in (frames.EXIT, frames.FAILED):
                self._done = True
                return None
            kind, data = msg
            if kind == frames.STDOUT:
                return data
            if kind == 0 or time.monotonic() >= end:
                return b""

    def send(self, data: bytes) -> None:
        try:
            self.channel.send(data)
        except LinkClosed as exc:
            raise OSError(f"the step has ended {exc}".strip()) from None

    def close(self) -> None:
        if self._done:
            return
        try:
            self.channel.eof()
        except LinkClosed:
            self._done = True
            return
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            msg = self.channel.get(0.2)
            if msg is None or msg[0] in (frames.EXIT, frames.FAILED):
                self._done = True
                return
        self.channel.kill()
        self._done = True
