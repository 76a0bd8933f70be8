"""A command on its own channel of the node's connection: output read as it comes, and
optionally a stream in.

Kept apart from :mod:`ddptui.transport.ssh.transport` (which keeps the handshake): every
command ddptui runs over SSH goes through here, and this is the one place that writes to a
remote stdin. It drains the output between the chunks it sends, so a command that talks
while it reads cannot fill its window and stall both ends.
"""

from __future__ import annotations

import select
import shlex
import time
from collections.abc import Iterable

import paramiko

from ddptui.transport.base import CommandResult, OnOutput, TransportError

#: What ddptui offers to receive before the node waits (paramiko's default is 2 MB).
WINDOW = 8 << 20
PACKET = 1 << 15


def run_stream(t: paramiko.Transport, node: str, address: str, command: str, timeout: float,
               stdin: Iterable[bytes] | None, on_output: OnOutput | None) -> CommandResult:
    deadline = time.monotonic() + timeout
    try:
        chan = t.open_session(window_size=WINDOW, max_packet_size=PACKET, timeout=timeout)
    except (paramiko.SSHException, EOFError, OSError) as exc:
        raise TransportError(node, f"{node} ({address}): could not open a channel for a "
                                   f"command ({exc or type(exc).__name__}); the server may "
                                   "limit sessions (MaxSessions).") from exc
    out, err = bytearray(), bytearray()

    def drain() -> bool:
        got = False
        while chan.recv_ready():
            b = chan.recv(65536)
            out.extend(b)
            got = True
            if on_output is not None:
                on_output(b, False)
        while chan.recv_stderr_ready():
            b = chan.recv_stderr(65536)
            err.extend(b)
            got = True
            if on_output is not None:
                on_output(b, True)
        return got

    try:
        chan.exec_command(f"sh -c {shlex.quote(command)}")
        if stdin is not None:
            chan.settimeout(max(1.0, deadline - time.monotonic()))
            for chunk in stdin:
                drain()
                if chan.exit_status_ready() or chan.closed:
                    break  # it ended without reading all: its output says why
                try:
                    chan.sendall(chunk)
                except TimeoutError:
                    raise TransportError(node, f"{node} ({address}): sending to a command "
                                               f"timed out after {timeout:g}s") from None
                except OSError:
                    break  # the channel closed under us: the command ended early
            chan.shutdown_write()
        while True:
            if drain():
                continue
            if chan.closed or (chan.eof_received and chan.exit_status_ready()):
                break
            if not t.is_active():
                raise TransportError(node, f"{node} ({address}): the SSH connection was lost "
                                           f"while running a command: {command[:200]}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TransportError(node, f"{node} ({address}): command timed out after "
                                           f"{timeout:g}s (it may still be running there): "
                                           f"{command[:200]}")
            if chan.eof_received:
                chan.status_event.wait(min(left, 0.5))
            else:
                select.select([chan], [], [], min(left, 0.5))
        code = chan.recv_exit_status() if chan.exit_status_ready() else -1
    except TransportError:
        raise
    except (paramiko.SSHException, EOFError, OSError) as exc:
        raise TransportError(node, f"{node} ({address}): the connection broke while running "
                                   f"a command: {exc or type(exc).__name__}") from exc
    finally:
        chan.close()
    return CommandResult(code, out.decode("utf-8", errors="replace"),
                         err.decode("utf-8", errors="replace"))


class ChannelCommand:
    """A command left running on its own channel (``Transport.spawn``): read with a timeout,
    closed by closing the channel, which sshd turns into end of file on its stdin."""

    def __init__(self, chan: paramiko.Channel) -> None:
        self.chan = chan

    def read(self, timeout: float) -> bytes | None:
        if self.chan.closed:
            return None
        self.chan.settimeout(timeout)
        try:
            data = self.chan.recv(65536)
        except TimeoutError:
            return b""
        except (paramiko.SSHException, EOFError, OSError):
            return None
        return data or None

    def send(self, data: bytes) -> None:
        try:
            self.chan.sendall(data)
        except (paramiko.SSHException, EOFError) as exc:
            raise OSError(f"the channel is closed: {exc}") from exc

    def close(self) -> None:
        self.chan.close()


def spawn(t: paramiko.Transport, node: str, address: str, command: str) -> ChannelCommand:
    chan = None
    try:
        chan = t.open_session(timeout=15)
        chan.exec_command(f"sh -c {shlex.quote(command)}")
    except (paramiko.SSHException, EOFError, OSError) as exc:
        if chan is not None:
            chan.close()
        raise TransportError(node, f"{node} ({address}): could not start a command on its own "
                                   f"channel ({exc or type(exc).__name__})") from exc
    return ChannelCommand(chan)
