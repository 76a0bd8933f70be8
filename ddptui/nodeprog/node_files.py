"""A file written on a node for the srun connection (``SrunTransport.put_bytes``), run inside
its agent: a write was a shell and four programs (``mktemp``, ``cat``, ``chmod``, ``mv``).
(A read is the agent's own: ``srun_agent.Agent.read``.)

``put PATH MODE``: stdin's bytes become PATH, written under a temporary name beside it and
renamed over it, with MODE (octal).

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


if __name__ == "__main__":
    put(sys.argv[2], int(sys.argv[3], 8))
