"""Big reads of a growing remote file through an exec channel (``tail | head``), not SFTP.

A log flood is mostly big reads. paramiko's SFTP client moves them as 32 KiB requests, each
answered and copied in Python: bench/stream.py measured about a third of what one exec
channel's stream carries on the same connection. The bytes are the same ones: the file only
grows, so ``n`` bytes from ``offset`` exist; output cut short (the file vanished, a node
without ``head -c``) is returned as it is, never padded, so the caller's offset stays exact.
"""

from __future__ import annotations

import shlex

import paramiko

#: Reads this big or bigger go through :func:`read_by_exec`; smaller ones stay on SFTP.
STREAM_READ_MIN = 256 * 1024


def read_by_exec(t: paramiko.Transport, remote_path: str, offset: int, n: int,
                 timeout: float) -> bytes:
    """At most ``n`` bytes of ``remote_path`` from ``offset``; paramiko's errors propagate."""
    chan = t.open_session(timeout=timeout)
    try:
        chan.settimeout(timeout)
        chan.exec_command(f"tail -c +{offset + 1} -- {shlex.quote(remote_path)} | head -c {n}")
        parts: list[bytes] = []
        got = 0
        while got < n:
            data = chan.recv(min(1 << 20, n - got))
            if not data:
                break
            parts.append(data)
            got += len(data)
        return b"".join(parts)
    finally:
        chan.close()
