"""The node's half of a ``transport: srun`` connection (:mod:`ddptui.transport.srun.agent`):
runs many commands in one long-lived job step, speaking :mod:`ddptui.transport.srun.frames`
on stdin and stdout, and ends, taking its commands with it, when its stdin closes.

Run by whatever ``python3`` the node has, which may be as old as 3.6: so no deferred
annotations here (``from __future__ import annotations`` is 3.7's); they are quoted instead.
"""

import contextlib
import json
import os
import signal
import struct
import subprocess
import sys
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import BinaryIO

H = struct.Struct("!IBI")


class Agent:
    def __init__(self, inp: "BinaryIO", out: "BinaryIO") -> None:
        self.inp, self.out = inp, out
        self.lock = threading.Lock()
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def send(self, i: int, k: int, data: bytes = b"") -> None:
        with self.lock:
            self.out.write(H.pack(i, k, len(data)) + data)
            self.out.flush()

    def pump(self, i: int, fd: int, k: int) -> None:
        while True:
            try:
                b = os.read(fd, 65536)
            except OSError:
                b = b""
            if not b:
                return
            self.send(i, k, b)

    def watch(self, i: int, p: "subprocess.Popen[bytes]", threads: "list[threading.Thread]"
              ) -> None:
        for t in threads:
            t.join()
        code = p.wait()
        self.procs.pop(i, None)
        self.send(i, 13, str(code if code >= 0 else 128 - code).encode())

    def start(self, i: int, spec: "dict[str, object]") -> None:
        try:
            p = subprocess.Popen(["sh", "-c", str(spec["cmd"])], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, start_new_session=True,
                                 stdin=subprocess.PIPE if spec["stdin"] else subprocess.DEVNULL)
        except OSError as e:
            self.send(i, 14, str(e).encode())
            return
        assert p.stdout is not None and p.stderr is not None
        self.procs[i] = p
        ts = [threading.Thread(target=self.pump, args=(i, f.fileno(), k), daemon=True)
              for f, k in ((p.stdout, 11), (p.stderr, 12))]
        for t in ts:
            t.start()
        threading.Thread(target=self.watch, args=(i, p, ts), daemon=True).start()

    def readn(self, n: int) -> "bytes | None":
        buf = b""
        while len(buf) < n:
            b = self.inp.read(n - len(buf))
            if not b:
                return None
            buf += b
        return buf

    def serve(self) -> None:
        self.send(0, 10, b"ready")
        while True:
            h = self.readn(H.size)
            if h is None:
                break
            i, k, n = H.unpack(h)
            data = self.readn(n) if n else b""
            if data is None:
                break
            p = self.procs.get(i)
            if k == 1:
                self.start(i, json.loads(data.decode()))
            elif p is not None and p.stdin is not None and k in (2, 3):
                try:
                    if k == 2:
                        p.stdin.write(data)
                        p.stdin.flush()
                    else:
                        p.stdin.close()
                except (OSError, ValueError):
                    pass
            elif p is not None and k == 4:
                with contextlib.suppress(OSError):
                    os.killpg(p.pid, signal.SIGKILL)
        for p in list(self.procs.values()):
            with contextlib.suppress(OSError):
                os.killpg(p.pid, signal.SIGTERM)


if __name__ == "__main__":
    Agent(sys.stdin.buffer, sys.stdout.buffer).serve()
