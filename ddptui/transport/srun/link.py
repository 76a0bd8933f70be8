"""ddptui's half of a node's agent step: one ``srun`` process whose pipes carry
every command's bytes, one reader thread handing each channel its own."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import signal
import subprocess
import threading
from collections import deque
from collections.abc import Sequence

from ddptui.transport.srun import frames

#: The most bytes of stdin one frame carries.
PIECE = 1 << 20
#: A command's stdin up to this size, known whole, is sent with its start in one write.
WHOLE = 1 << 20

#: What a channel's queue holds: (kind, bytes); None once the agent is gone.
Message = tuple[int, bytes] | None


class LinkClosed(Exception):
    """The agent's step ended: the allocation ended, the node failed, or it was closed."""


class Channel:
    """One command on the node: its output as it comes, its stdin, its end."""

    def __init__(self, link: AgentLink, number: int) -> None:
        self.link, self.number = link, number
        self.queue: queue.Queue[Message] = queue.Queue()
        self.ended = False

    def send(self, data: bytes) -> None:
        for i in range(0, len(data), PIECE):
            self.link.write(frames.frame(self.number, frames.STDIN, data[i:i + PIECE]))

    def eof(self) -> None:
        self.link.write(frames.frame(self.number, frames.EOF))

    def kill(self) -> None:
        with contextlib.suppress(LinkClosed):
            self.link.write(frames.frame(self.number, frames.KILL))

    def get(self, timeout: float) -> Message:
        """The next message, ``(0, b"")`` when none came in ``timeout``; None: the link died."""
        try:
            msg = self.queue.get(timeout=timeout)
        except queue.Empty:
            return 0, b""
        if msg is None or msg[0] in (frames.EXIT, frames.FAILED):
            self.ended = True
            self.link.forget(self.number)
        return msg


class AgentLink:
    """``argv`` (an ``srun ... python3 -u -c AGENT``) started here, spoken to by channels."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True)
        self.ready = threading.Event()
        self.home = ""  # $HOME in the agent's step, as its READY said
        self.closed = threading.Event()
        self.stderr: deque[bytes] = deque(maxlen=64)  # srun's own complaints, for messages
        self._stderr_done = threading.Event()
        self._channels: dict[int, Channel] = {}
        self._numbers = itertools.count(1)
        self._write_lock = threading.Lock()
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True, name="ddptui-srun-link").start()
        threading.Thread(target=self._read_stderr, daemon=True,
                         name="ddptui-srun-stderr").start()

    def open(self, command: str, stdin: bool, fed: bytes | None = None) -> Channel:
        """``sh -c command`` on the node; ``fed``: its whole stdin, sent with the start."""
        return self._open(frames.START, {"cmd": command, "stdin": stdin}, fed)

    def open_program(self, source: str, args: Sequence[str], stdin: bool,
                     fed: bytes | None = None) -> Channel:
        """The node program ``source`` with ``args``, in a fork of the agent's interpreter."""
        return self._open(frames.PROGRAM, {"src": source, "argv": list(args), "stdin": stdin},
                          fed)

    def open_read(self, path: str, offset: int, most: int, absent: int) -> Channel:
        """Up to ``most`` bytes of the node's file ``path`` from ``offset``, as the output of
        a command that exits 0, or ``absent`` when there is no such file."""
        return self._open(frames.READ, {"path": path, "offset": offset, "most": most,
                                        "absent": absent}, None)

    def _open(self, kind: int, spec: dict[str, object], fed: bytes | None) -> Channel:
        """A stdin known whole (``fed``) goes in the same write as the start and its end:
        one message for srun to forward to the step and the agent to read, not three."""
        with self._lock:
            if self.closed.is_set():
                raise LinkClosed(self.complaint())
            ch = Channel(self, next(self._numbers))
            self._channels[ch.number] = ch
        data = frames.frame(ch.number, kind, json.dumps(spec).encode())
        if fed is not None:
            data += b"".join(frames.frame(ch.number, frames.STDIN, fed[i:i + PIECE])
                             for i in range(0, len(fed), PIECE))
            data += frames.frame(ch.number, frames.EOF)
        self.write(data)
        return ch

    def forget(self, number: int) -> None:
        with self._lock:
            self._channels.pop(number, None)

    def write(self, data: bytes) -> None:
        pipe = self.proc.stdin
        try:
            with self._write_lock:
                if pipe is None or self.closed.is_set():
                    raise LinkClosed(self.complaint())
                pipe.write(data)
                pipe.flush()
        except (OSError, ValueError) as exc:
            raise LinkClosed(self.complaint()) from exc

    def complaint(self, wait: float = 0.0) -> str:
        """What srun said on its way out, if anything (its last lines); ``wait``: for the
        rest of it, once it is ending."""
        self._stderr_done.wait(wait)
        return " ".join(b"".join(self.stderr).decode("utf-8", "replace").split())[-600:]

    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        try:
            while True:
                head = _read_exactly(out, frames.HEADER.size)
                if head is None:
                    break
                number, kind, size = frames.HEADER.unpack(head)
                data = _read_exactly(out, size) if size else b""
                if data is None:
                    break
                if kind == frames.READY:
                    self.home = data.decode("utf-8", "surrogateescape")
                    self.ready.set()
                    continue
                with self._lock:
                    ch = self._channels.get(number)
                if ch is not None:
                    ch.queue.put((kind, data))
        finally:
            self._end()

    def _read_stderr(self) -> None:
        err = self.proc.stderr
        assert err is not None
        for line in iter(err.readline, b""):
            self.stderr.append(line)
        self._stderr_done.set()

    def _end(self) -> None:
        with self._lock:
            self.closed.set()
            channels, self._channels = list(self._channels.values()), {}
        for ch in channels:
            ch.queue.put(None)
        self.ready.set()  # a waiter for readiness finds the link closed instead

    def close(self, wait: float = 5.0) -> None:
        """Close the agent's stdin (it ends, and its commands with it), then reap srun."""
        with self._write_lock, contextlib.suppress(OSError, ValueError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(wait)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5)
        self._end()


def _read_exactly(pipe: object, n: int) -> bytes | None:
    buf = b""
    read = pipe.read  # type: ignore[attr-defined]
    while len(buf) < n:
        chunk = read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf
