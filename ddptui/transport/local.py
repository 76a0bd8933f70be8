"""Local transport (``transport: local``): this machine, through subprocess and the filesystem.

Same contract as SSH so the controller never branches on it: commands run under ``sh -c``,
files are written atomically (temp name + ``os.replace``). Each command gets its own session
so that a timeout can kill everything it started, not only the shell, without touching jobs
that were deliberately detached (they make their own session).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile

from ddptui.config import NodeConfig
from ddptui.transport.base import CommandResult, TransportError


class LocalTransport:
    """A node that is this machine; there is nothing to connect, so nothing can drop."""

    def __init__(self, node: NodeConfig) -> None:
        self.node = node.name
        self.address = "127.0.0.1"

    def connect(self, timeout: float | None = None) -> None:
        """Nothing to open; kept so the controller treats every node alike."""

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

    def home(self) -> str:
        return os.path.expanduser("~")

    def put_bytes(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
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

    def close(self) -> None:
        """Nothing to drop; a job started here keeps running, as over SSH."""

    def __repr__(self) -> str:
        return f"LocalTransport({self.node!r})"
