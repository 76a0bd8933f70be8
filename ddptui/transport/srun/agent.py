"""The node's half of a ``transport: srun`` connection: one long-lived job step per node that
runs many commands, so that each costs a message instead of a new step (``srun`` takes about
a tenth of a second to place one; a launch runs a dozen commands per node).

:data:`SOURCE` is run on the node as ``python3 -u -c SOURCE`` inside the step, so every
process it starts belongs to the job (its accounting, its ``scancel``). It speaks
:mod:`ddptui.transport.srun.frames` on stdin and stdout, and ends, taking its commands with
it, when its stdin closes: the controller closed the connection or died.
"""

from __future__ import annotations

#: Kept to the standard library and to Python 3.6, the oldest interpreter a node may offer.
SOURCE = r'''
import json, os, signal, struct, subprocess, sys, threading
H = struct.Struct("!IBI")
out, inp = sys.stdout.buffer, sys.stdin.buffer
lock = threading.Lock()
procs = {}

def send(i, k, data=b""):
    with lock:
        out.write(H.pack(i, k, len(data)) + data)
        out.flush()

def pump(i, fd, k):
    while True:
        try:
            b = os.read(fd, 65536)
        except OSError:
            b = b""
        if not b:
            return
        send(i, k, b)

def watch(i, p, threads):
    for t in threads:
        t.join()
    code = p.wait()
    procs.pop(i, None)
    send(i, 13, str(code if code >= 0 else 128 - code).encode())

def start(i, spec):
    try:
        p = subprocess.Popen(["sh", "-c", spec["cmd"]], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True,
                             stdin=subprocess.PIPE if spec["stdin"] else subprocess.DEVNULL)
    except OSError as e:
        send(i, 14, str(e).encode())
        return
    procs[i] = p
    ts = [threading.Thread(target=pump, args=(i, p.stdout.fileno(), k), daemon=True)
          for k in (11,)] + [threading.Thread(target=pump, args=(i, p.stderr.fileno(), 12),
                                              daemon=True)]
    for t in ts:
        t.start()
    threading.Thread(target=watch, args=(i, p, ts), daemon=True).start()

def readn(n):
    buf = b""
    while len(buf) < n:
        b = inp.read(n - len(buf))
        if not b:
            return None
        buf += b
    return buf

send(0, 10, b"ready")
while True:
    h = readn(H.size)
    if h is None:
        break
    i, k, n = H.unpack(h)
    data = readn(n) if n else b""
    if data is None:
        break
    p = procs.get(i)
    if k == 1:
        start(i, json.loads(data.decode()))
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
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
for p in list(procs.values()):
    try:
        os.killpg(p.pid, signal.SIGTERM)
    except OSError:
        pass
'''
