"""A file written or read on a node for the srun connection (``SrunTransport.put_bytes`` and
``read_from``), run inside its agent: a write or a follower's read was a shell and two or
three programs (``mktemp``, ``cat``, ``chmod``, ``mv``; ``tail``, ``head``), and a follower
reads many times a second.

``put PATH MODE``: stdin's bytes become PATH, written under a temporary name beside it and
renamed over it, with MODE (octal). ``read PATH OFFSET MAX ABSENT``: up to MAX bytes of PATH
from OFFSET on stdout; exit code ABSENT when there is no such file.

Run by the agent's interpreter, which may be as old as 3.6 (as the agent's).
"""

import contextlib
import os
import sys

#: Bytes moved at a time.
PIECE = 1 << 20


def put(path: str, mode: int) -> None:
    tmp = os.path.join(os.path.dirname(path) or "/", ".ddptui-tmp-" + os.urandom(6).hex())
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            while True:
                data = os.read(0, PIECE)
                if not data:
                    break
                while data:
                    data = data[os.write(fd, data):]
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        sys.exit(f"{e.strerror}: {e.filename or path}")


def read(path: str, offset: int, most: int, absent: int) -> None:
    try:
        f = open(path, "rb")  # noqa: SIM115  (closed below: its absence has an exit of its own)
    except FileNotFoundError:
        sys.exit(absent)
    except OSError as e:
        sys.exit(f"{e.strerror}: {path}")
    with f:
        f.seek(offset)
        out = sys.stdout.buffer
        while most > 0:
            data = f.read(min(most, PIECE))
            if not data:
                break
            out.write(data)
            most -= len(data)
        out.flush()


if __name__ == "__main__":
    if sys.argv[1] == "put":
        put(sys.argv[2], int(sys.argv[3], 8))
    else:
        read(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
