"""What preflight asks a node: every question at once, answered in one JSON line.

One program per node, and every question in it at once (threads): an SSH round trip costs
more than most of the answers, and sixteen nodes must be checked in about the time one is.
:mod:`ddptui.diagnose.preflight.report` reads its line; it judges nothing. Its one argument
is a JSON object (see ``launch/precheck.py``), so no value of the hosts file ever becomes
program text.

The rendezvous port is tested the way torchrun will use it: the endpoint node binds it as
the c10d store does (``[::]`` dual-stack, else ``0.0.0.0``, with ``SO_REUSEADDR``) and
accepts for a bounded time; every node connects to the endpoint address, retrying while it
is refused (the listener may not be up yet), so a connect that *times out* means packets are
dropped, and one refused until the deadline means a reject or nothing listening. The
listener sends a nonce, so a connection that reaches some other program is told apart. The
connecting side closes first, so no TIME_WAIT is left on the port torchrun binds next.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    #: The program's argument (launch/precheck.py) and the answers: JSON objects.
    Json = dict[str, Any]


def which(name: str) -> bool:
    return any(os.access(os.path.join(d, name), os.X_OK)
               for d in os.environ.get("PATH", "").split(os.pathsep) if d)


def cmdline(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return None


def marker(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for e in f.read().split(b"\0"):
                if e.startswith(b"DDPTUI_RUN="):
                    return e[11:].decode(errors="replace")
    except OSError:
        return None
    return None


def port_holders(port: int) -> Json:
    inodes = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                for line in f.readlines()[1:]:
                    w = line.split()
                    if len(w) > 9 and w[3] == "0A" and int(w[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(f"socket:[{w[9]}]")
        except OSError:
            pass
    found = []
    for d in os.listdir("/proc") if inodes else ():
        if not d.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{d}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{d}/fd/{fd}") in inodes:
                    found.append({"pid": int(d), "cmd": cmdline(int(d)), "run": marker(int(d))})
                    break
            except OSError:
                pass
    return {"listening": len(inodes), "pids": found}


def listen(a: Json, t0: float) -> Json:
    port, s, err = a["port"], None, None
    for fam, host in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if fam == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            s.bind((host, port))
            s.listen(128)
            break
        except OSError as e:
            if s is not None:
                s.close()
            s, err = None, e
            if e.errno == errno.EADDRINUSE:
                break
    if s is None:
        assert err is not None
        res: Json = {"bound": False, "errno": err.errno, "error": str(err)}
        if err.errno == errno.EADDRINUSE:
            res["holders"] = port_holders(port)
        return res
    deadline, accepted = t0 + a["listen_s"], 0
    try:
        while accepted < a["expect"]:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            s.settimeout(left)
            try:
                c, _ = s.accept()
            except socket.timeout:
                break
            accepted += 1
            try:
                c.settimeout(1.0)
                c.sendall(a["nonce"].encode())
                c.recv(1)
            except OSError:
                pass
            c.close()
    finally:
        s.close()
    return {"bound": True, "accepted": accepted}


def connect(a: Json) -> Json:
    nonce = a["nonce"].encode()
    start = time.monotonic()
    deadline = start + a["connect_s"]
    info = socket.getaddrinfo(a["endpoint"], a["port"], type=socket.SOCK_STREAM)
    fam, sa = info[0][0], info[0][4]
    res: Json = {"addr": sa[0], "tries": 0}
    while True:
        res["tries"] += 1
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.settimeout(max(0.05, min(a["attempt_s"], deadline - time.monotonic())))
        try:
            s.connect(sa)
        except socket.timeout:
            s.close()
            res.update(result="timeout")
            break
        except ConnectionRefusedError:
            s.close()
            if time.monotonic() + 0.1 < deadline:
                time.sleep(0.05)
                continue
            res.update(result="refused")
            break
        except OSError as e:
            s.close()
            res.update(result="error", errno=e.errno, error=os.strerror(e.errno or 0))
            break
        got = b""
        try:
            s.settimeout(1.0)
            while len(got) < len(nonce):
                chunk = s.recv(len(nonce) - len(got))
                if not chunk:
                    break
                got += chunk
        except OSError:
            pass
        s.close()
        res.update(result="ok" if got == nonce else "foreign")
        break
    res["ms"] = round((time.monotonic() - start) * 1000)
    return res


def if_addrs() -> dict[str, list[str]]:
    import fcntl
    import ipaddress
    import struct
    res: dict[str, list[str]] = {}
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _, n in socket.if_nameindex():
        res[n] = []
        try:
            got = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", n.encode()[:15]))
            res[n].append(socket.inet_ntoa(got[20:24]))
        except OSError:
            pass
    s.close()
    try:
        with open("/proc/net/if_inet6") as f:
            for line in f:
                w = line.split()
                if len(w) == 6 and w[5] in res:
                    res[w[5]].append(str(ipaddress.ip_address(bytes.fromhex(w[0]))))
    except OSError:
        pass
    return res


def names() -> Json:
    hn = socket.gethostname()
    fq = socket.getfqdn()
    res: Json = {"hostname": hn, "fqdn": fq}
    for key, name in (("", fq), ("short_", hn)):
        try:
            res[key + "addrs"] = sorted({str(i[4][0]) for i in socket.getaddrinfo(name, None)})
        except OSError as e:
            res[key + "error"] = str(e)
    return res


def route(a: Json) -> Json:
    res: Json = {}
    try:
        addrs = [str(i[4][0]) for i in
                 socket.getaddrinfo(a["endpoint"], None, type=socket.SOCK_STREAM)]
    except OSError as e:
        return {"error": str(e)}
    res["dest"] = addrs[0]
    if which("ip"):
        p = subprocess.run(["ip", "-o", "route", "get", addrs[0]], capture_output=True,
                           text=True, timeout=5)
        res.update(rc=p.returncode, out=p.stdout.strip(), err=p.stderr.strip())
    return res


def workdir(a: Json) -> Json:
    wd = a["workdir"]
    if wd == "~" or wd.startswith("~/"):
        wd = os.path.expanduser(wd)
    p = wd
    while p and not os.path.isdir(p):
        p = os.path.dirname(p.rstrip("/")) or "/"
    res: Json = {"path": wd, "exists": p == wd, "probed": p}
    st = os.statvfs(p)
    res["free"] = st.f_bavail * st.f_frsize
    tmp = os.path.join(p, f".ddptui-check-{os.getpid()}")
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.unlink(tmp)
        res["writable"] = True
    except OSError as e:
        res["writable"] = False
        res["error"] = os.strerror(e.errno or 0)
    return res


def gpus() -> Json | None:
    if not which("nvidia-smi"):
        return None
    q = [subprocess.Popen(["nvidia-smi", arg, "--format=csv"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
         for arg in ("--query-gpu=index,name,uuid,memory.used,memory.total",
                     "--query-compute-apps=pid,process_name,used_gpu_memory,gpu_uuid")]
    res: Json = {}
    for key, p in zip(("query", "apps"), q):
        text, _ = p.communicate(timeout=20)
        res[key], res[key + "_rc"] = text, p.returncode
    pids = []
    for line in res["apps"].splitlines()[1:]:
        w = line.split(",")
        if w and w[0].strip().isdigit():
            pids.append(int(w[0]))
    res["procs"] = {str(p): {"cmd": cmdline(p), "run": marker(p)} for p in pids}
    return res


def cpus() -> Json:
    """The CPUs this process (so each rank started beside it) may run on, and how many the
    Slurm job holds on the node (``SLURM_CPUS_ON_NODE``; None off Slurm)."""
    get = getattr(os, "sched_getaffinity", None)
    return {"affinity": sorted(get(0)) if get is not None else None,
            "slurm_job": os.environ.get("SLURM_JOB_ID"),
            "slurm_cpus": os.environ.get("SLURM_CPUS_ON_NODE")}


def torch_versions() -> Json:
    import torch
    res: Json = {"torch": str(getattr(torch, "__version__", None)),
                 "path": os.path.dirname(getattr(torch, "__file__", None) or "") or None}
    res["cuda"] = getattr(getattr(torch, "version", None), "cuda", None)
    try:
        v = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]  # torch leaves it bare
        res["nccl"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
    except Exception:
        res["nccl"] = None
    try:
        res["cuda_available"] = bool(torch.cuda.is_available())
        res["devices"] = int(torch.cuda.device_count())
    except Exception:
        pass
    return res


def ask(a: Json) -> Json:
    """Every answer, each question in a thread of its own, within ``a["budget_s"]``."""
    t0 = time.monotonic()
    out: Json = {"v": 1, "python": sys.executable, "version": sys.version.split()[0]}
    threads: list[tuple[str, threading.Thread]] = []

    def bg(key: str, fn: Callable[[], object]) -> None:
        def run() -> None:
            try:
                out[key] = fn()
            except Exception as e:
                out[key] = {"error": type(e).__name__ + ": " + str(e)}
        t = threading.Thread(target=run, daemon=True)
        t.start()
        threads.append((key, t))

    if a.get("listen"):
        bg("listen", lambda: listen(a, t0))
    if a.get("connect"):
        bg("connect", lambda: connect(a))
    bg("names", names)
    bg("route", lambda: route(a))
    bg("workdir", lambda: workdir(a))
    bg("gpus", gpus)
    try:
        out["interfaces"] = if_addrs()
    except Exception as e:
        out["interfaces"] = {"error": type(e).__name__ + ": " + str(e)}
    out["env"] = {k: os.environ.get(k) for k in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME",
                                                  "CUDA_VISIBLE_DEVICES")}
    try:
        out["cpus"] = cpus()
    except Exception as e:
        out["cpus"] = {"error": type(e).__name__ + ": " + str(e)}
    if a.get("torch"):
        try:
            out["torch"] = torch_versions()
        except BaseException as e:
            out["torch"] = {"error": type(e).__name__ + ": " + str(e)}
    for _, t in threads:
        t.join(max(0.0, t0 + a["budget_s"] - time.monotonic()))
    out["pending"] = [k for k, t in threads if t.is_alive()]
    out["time"] = time.time()
    return dict(out)


if __name__ == "__main__":
    print(json.dumps(ask(json.loads(sys.argv[1]))), flush=True)
    os._exit(0)  # now: an interpreter's teardown (torch's) would skew the clock reading
