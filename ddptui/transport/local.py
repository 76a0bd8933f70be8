"""Local transport (``transport: local``): this machine, through subprocess and the filesystem.

Same contract as SSH so ddptui never branches on it: commands run under ``sh -c``,
files are written atomically (temp name + ``os.replace``). Each command gets its own session
so that a timeout can kill everything it started, not only the shell, without touching jobs
that were deliberately detached (they make their own session).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
from collections.abc import Callable, Iterable
from typing import IO

from ddptui.config import NodeConfig
from ddptui.transport.base import CommandResult, Detached, OnOutput, Stopped, TransportError


class LocalTransport:
    """A node that is this machine; there is nothing to connect, so nothing can drop."""

    def __init__(self, node: NodeConfig) -> None:
        self.node = node.name
        self.address = "127.0.0.1"

    def connect(self, timeout: float | None = None) -> None:
        """Nothing to open; kept so ddptui treats every node alike."""

    def run(self, command: str, timeout: float) -> CommandResult:
        try:
            proc = subprocess.Popen(
                ["sh", "-c", command],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            raise TransportError(self.node, f"{self.node} (local): cannot run sh: {exc}") from exc
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            # Bounded: a grandchild in another session could still hold the pipes open.
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=5)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            raise TransportError(
                self.node,
                f"{self.node} (local): command timed out after {timeout:g}s and was killed: "
                f"{command[:200]}",
            ) from None
        return CommandResult(
            proc.returncode,
            out.decode("utf-8", errors="replace"),
            err.decode("utf-8", errors="replace"),
        )

    def run_stream(self, command: str, timeout: float, *, stdin: Iterable[bytes] | None = None,
                   on_output: OnOutput | None = None) -> CommandResult:
        try:
            proc = subprocess.Popen(
                ["sh", "-c", command],
                stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            raise TransportError(self.node, f"{self.node} (local): cannot run sh: {exc}") from exc
        out, err = bytearray(), bytearray()
        lock = threading.Lock()  # on_output is called from one reader at a time

        def read(pipe: IO[bytes], buf: bytearray, is_err: bool) -> None:
            while chunk := pipe.read1(65536):  # type: ignore[attr-defined]
                buf.extend(chunk)
                if on_output is not None:
                    with lock:
                        on_output(chunk, is_err)

        readers = [threading.Thread(target=read, args=(p, b, e), daemon=True)
                   for p, b, e in ((proc.stdout, out, False), (proc.stderr, err, True))]
        for r in readers:
            r.start()
        try:
            if stdin is not None and proc.stdin is not None:
                with contextlib.suppress(BrokenPipeError):  # it ended early: its output says why
                    for chunk in stdin:
                        if proc.poll() is not None:
                            break  # it ended without reading all: its output says why
                        proc.stdin.write(chunk)
                        if not chunk:  # a pause while the caller waits for the output
                            proc.stdin.flush()
                with contextlib.suppress(BrokenPipeError):
                    proc.stdin.close()
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            raise TransportError(self.node, f"{self.node} (local): command timed out after "
                                            f"{timeout:g}s and was killed: {command[:200]}"
                                 ) from None
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
            raise
        finally:
            for r in readers:
                r.join(5)
        return CommandResult(proc.returncode, out.decode("utf-8", errors="replace"),
                             err.decode("utf-8", errors="replace"))

    def spawn(self, command: str) -> PipedCommand:
        try:
            proc = subprocess.Popen(["sh", "-c", command], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                    start_new_session=True)
        except OSError as exc:
            raise TransportError(self.node, f"{self.node} (local): cannot run sh: {exc}") from exc
        return PipedCommand(proc)

    def start_detached(self, job: Detached, timeout: float) -> CommandResult:
        return self.run(job.background(), timeout)

    def home(self) -> str:
        return os.path.expanduser("~")

    def put_bytes(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        import tempfile  # here: it imports shutil, and that bz2 and lzma (10 ms of a start)

        directory = os.path.dirname(remote_path) or "."
        fd, tmp = tempfile.mkstemp(prefix=".ddptui-tmp-", dir=directory)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                os.fchmod(fh.fileno(), mode)
            os.replace(tmp, remote_path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def read_from(self, remote_path: str, offset: int, max_bytes: int) -> bytes:
        with open(remote_path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if offset >= size or max_bytes <= 0:
                return b""
            fh.seek(offset)
            return fh.read(min(max_bytes, size - offset))

    def stop_run(self, run_id: str, stop_here: Callable[[], Stopped]) -> Stopped | None:
        """Signals alone: the node's stop program is the whole stop."""
        return stop_here()

    def close(self) -> None:
        """Nothing to drop; a job started here keeps running, as over SSH."""

    def __repr__(self) -> str:
        return f"LocalTransport({self.node!r})"


class PipedCommand:
    """A command left running here (``Transport.spawn``), as a channel would be on a node:
    closing its stdin is what tells it to end; a command that ignores that is killed."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    def read(self, timeout: float) -> bytes | None:
        out = self.proc.stdout
        if out is None or out.closed:
            return None
        ready, _, _ = select.select([out], [], [], timeout)
        if not ready:
            return b""
        return os.read(out.fileno(), 65536) or None

    def send(self, data: bytes) -> None:
        if self.proc.stdin is None:
            raise OSError("no stdin")
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def close(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        try:
            self.proc.wait(1)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
