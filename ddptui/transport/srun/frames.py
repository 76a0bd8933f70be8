"""The messages between ddptui and a node's agent (:mod:`.agent`): a 9-byte header
(channel, kind, length) and the bytes. One definition for both ends' numbers."""

from __future__ import annotations

import struct

HEADER = struct.Struct("!IBI")

# ddptui -> agent: a shell command (START) or a node program run in a fork of the agent
# (PROGRAM: no new interpreter); both then take STDIN, EOF and KILL alike. READ: a file's
# bytes from an offset, read by a thread of the agent (answered like a command: STDOUT,
# STDERR, EXIT)
START, STDIN, EOF, KILL, PROGRAM, READ = 1, 2, 3, 4, 5, 6
# agent -> ddptui; READY carries the step's $HOME
READY, STDOUT, STDERR, EXIT, FAILED = 10, 11, 12, 13, 14


def frame(channel: int, kind: int, data: bytes = b"") -> bytes:
    return HEADER.pack(channel, kind, len(data)) + data
