"""A real Slurm cluster for tests: one munged, one slurmctld, one slurmd per node.

Why real: the srun transport depends on what Slurm does, not on what its manual says: when a
step starts, which process group a task gets, what ``scancel`` kills under
``proctrack/linuxproc``. See ``/work/shared/notes/slurm-on-one-machine.md`` for the facts the
layout rests on.

Layout of one cluster (``token`` is unique per cluster, as in :mod:`tests.cluster`, whose
network picking, lock and namespace helpers this module reuses, so ``reap_stale`` there also
removes a crashed run's namespaces here)::

    root netns: bridge ddptb<token> = <net>.1/24
        munged                        (own key, socket under a short run folder)
        slurmctld  UTS+mount ns: hostname sctl<token>, private /etc/hosts, binds <net>.1 only
    netns ddptui-<token>-sn<i>: eth0 = <net>.<i+1>/24
        slurmd -N sn<i>  UTS+mount ns: hostname sn<i>, private /etc/hosts

How names resolve: the daemons read a private hosts file bind-mounted on ``/etc/hosts`` in
their own mount namespace. Clients in the root namespace (pytest, ddptui, ``srun``) need no
name at all: ``SlurmctldHost=name(address)`` and every node's ``NodeAddr=`` give addresses, so
the machine's real ``/etc/hosts`` is never touched. Clients find the cluster through
``SLURM_CONF`` alone (:attr:`SlurmCluster.env`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from cluster import (
    BRIDGE_PREFIX,
    NETNS_PREFIX,
    REGISTRY,
    VETH_PREFIX,
    ClusterError,
    _ip_batch,
    _ip_batch_start,
    _kill_netnses,
    _lock,
    _netns_pids,
    _pick_network,
    _pid_alive,
    _wait_all,
    reap_stale,
)
from slurmconf import hosts_file, slurm_conf

#: What the harness runs; CI installs them (``.ci/run``), so a missing one is a failure.
SLURM_TOOLS = ("munged", "slurmctld", "slurmd", "srun", "salloc", "squeue", "scancel",
               "scontrol", "sinfo", "nsenter", "unshare", "ip")
_SBIN_PATH = "/usr/local/sbin:/usr/sbin:/sbin"
_GRANTED_RE = re.compile(r"Granted job allocation (\d+)")
#: Run ``argv`` with a private /etc/hosts and hostname: ``sh -c SCRIPT hosts name argv...``.
_NS_SCRIPT = 'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"'


def tool(name: str) -> str | None:
    """Where ``name`` is installed; daemons live in sbin, which a CI PATH may lack."""
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}:{_SBIN_PATH}")


def missing_tools() -> list[str]:
    return [t for t in SLURM_TOOLS if tool(t) is None]


class SlurmCluster:
    """N Slurm nodes on this machine; a context manager, or :meth:`create` and :meth:`close`.

    Attributes: ``nodes`` (names ``sn1``...), ``addresses`` (name -> IP), ``partition``
    (the default one), ``env`` (add it to a client's environment), ``conf`` (slurm.conf).
    """

    partition = "debug"

    def __init__(self, root: Path, n_nodes: int = 2, cpus_per_node: int = 2,
                 task_plugin: str = "task/none") -> None:
        if not 1 <= n_nodes <= 200:
            raise ValueError("n_nodes must be 1..200")
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.n_nodes = n_nodes
        self.cpus_per_node = cpus_per_node
        self.task_plugin = task_plugin
        self.token = secrets.token_hex(3)
        self.bridge = f"{BRIDGE_PREFIX}{self.token}"
        self.ctl_name = f"sctl{self.token}"
        self.nodes = [f"sn{i}" for i in range(1, n_nodes + 1)]
        self.addresses: dict[str, str] = {}
        self.gateway = ""
        self.ctld_port = 0
        self.conf = root / "slurm.conf"
        # Sockets (munge, slurmstepd's in the spool) must fit in 108 bytes: a short folder.
        self.run_dir = Path(tempfile.mkdtemp(prefix=f"ddpts-{self.token}-", dir="/tmp"))
        self.munge_socket = self.run_dir / "munge.socket"
        self._netns = {n: f"{NETNS_PREFIX}{self.token}-{n}" for n in self.nodes}
        self._veth = {n: f"{VETH_PREFIX}{self.token}{i}" for i, n in enumerate(self.nodes, 1)}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}  # daemon name -> process
        self._made_links = False
        self._closed = False

    # -- building -------------------------------------------------------------------------

    @classmethod
    def create(cls, root: Path, n_nodes: int = 2, cpus_per_node: int = 2,
               task_plugin: str = "task/none") -> SlurmCluster:
        """Build and start; on any failure tear down what was made and re-raise."""
        return cls(root, n_nodes, cpus_per_node, task_plugin).__enter__()

    def __enter__(self) -> SlurmCluster:
        try:
            self._build()
        except BaseException:
            with contextlib.suppress(Exception):
                self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def env(self) -> dict[str, str]:
        """For clients: the cluster's slurm.conf, and this interpreter's folder first on PATH.

        srun exports the client's environment to the task, so ``python3`` in a step is
        this test run's interpreter (and its packages), as tests/cluster.py's sshd does.
        """
        path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        return {"SLURM_CONF": str(self.conf), "PATH": path}

    def _build(self) -> None:
        missing = missing_tools()
        if missing:
            raise ClusterError(f"Slurm harness needs {', '.join(missing)} (see .ci/run)")
        with _lock():
            reap_stale()
            _reap_stale_daemons()
            (REGISTRY / self.token).write_text(f"{os.getpid()}\n")
            atexit.register(self.close)
            net = _pick_network()
            addrs = [str(a) for a in net.hosts()]
            self.gateway = addrs[0]
            self.addresses = {n: addrs[i] for i, n in enumerate(self.nodes, 1)}
            self._made_links = True
            _ip_batch([f"link add {self.bridge} type bridge",
                       f"addr add {self.gateway}/24 dev {self.bridge}",
                       f"link set {self.bridge} up"])
        _ip_batch([f"netns add {ns}" for ns in self._netns.values()]
                  + [f"link add {self._veth[n]} type veth peer name eth0 netns {self._netns[n]}"
                     for n in self.nodes]
                  + [f"link set {self._veth[n]} master {self.bridge} up" for n in self.nodes])
        _wait_all([_ip_batch_start([f"addr add {self.addresses[n]}/24 dev eth0",
                                    "link set eth0 up", "link set lo up"], netns=self._netns[n])
                   for n in self.nodes], "configuring a node's interfaces")
        self.ctld_port = _free_port(self.gateway)
        self._write_files()
        self._start("munged", [tool("munged") or "munged", "-F", "--force",
                               f"--key-file={self.run_dir / 'munge.key'}",
                               f"--socket={self.munge_socket}",
                               f"--pid-file={self.run_dir / 'munged.pid'}",
                               f"--seed-file={self.run_dir / 'munged.seed'}",
                               f"--log-file={self.root / 'munged.log'}"])
        self._wait_for(lambda: self.munge_socket.exists(), "munged's socket", 10.0)
        self._start("slurmctld", self._in_ns(None, self.ctl_name, [
            tool("slurmctld") or "slurmctld", "-D", "-i", "-f", str(self.conf)]))
        for n in self.nodes:
            self._start(f"slurmd-{n}", self._in_ns(self._netns[n], n, [
                tool("slurmd") or "slurmd", "-D", "-N", n, "-f", str(self.conf)]))
        self._wait_for(self._all_idle, "every node idle in sinfo", 20.0 + 0.5 * self.n_nodes)

    def _write_files(self) -> None:
        """Munge key, hosts file and slurm.conf; nothing outside ``root`` and ``run_dir``."""
        key = self.run_dir / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        self.run_dir.chmod(0o711)  # clients reach the socket through it
        for sub in ("state", *self.nodes):  # state, and each node's spool (slurmd wants it)
            (self.run_dir / sub).mkdir()
        (self.root / "plugstack.conf").write_text("")  # not /etc/slurm's
        hosts = {self.ctl_name: self.gateway, **self.addresses}
        (self.root / "hosts").write_text(hosts_file(hosts))
        self._register_daemons()
        self.conf.write_text(slurm_conf(
            cluster_name=f"ddpt{self.token}", ctl_name=self.ctl_name, ctl_address=self.gateway,
            ctld_port=self.ctld_port, munge_socket=self.munge_socket, run_dir=self.run_dir,
            log_dir=self.root, addresses=self.addresses, cpus_per_node=self.cpus_per_node,
            partition=self.partition, task_plugin=self.task_plugin))

    def _in_ns(self, netns: str | None, hostname: str, argv: list[str]) -> list[str]:
        """``argv`` with its own hostname and /etc/hosts (and a node's network, if given).

        ``nsenter`` rather than ``ip netns exec``: the latter remounts /sys, hiding the
        cgroup tree that slurmd reads. Every step execs, so the PID is the daemon's.
        """
        enter = ["nsenter", f"--net=/run/netns/{netns}", "--"] if netns else []
        return [*enter, "unshare", "--uts", "--mount", "--", "sh", "-c", _NS_SCRIPT,
                str(self.root / "hosts"), hostname, *argv]

    def _start(self, name: str, argv: list[str]) -> None:
        with open(self.root / f"{name}.out", "ab") as out:
            self._procs[name] = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, env={**_clean_env(), "PATH": f"{_SBIN_PATH}:/usr/bin:/bin"})
        self._register_daemons()

    def leftovers(self) -> list[str]:
        """What of this cluster is still on the machine: daemons, namespaces, links, files."""
        found = [f"{n} pid {p.pid}" for n, p in self._procs.items() if p.poll() is None]
        netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        found += [f"netns {ns}" for ns in self._netns.values()
                  if re.search(rf"^{re.escape(ns)}\b", netns, re.M)]
        found += [f"link {v}" for v in [*self._veth.values(), self.bridge]
                  if re.search(rf": {re.escape(v)}[@:]", links)]
        return found + ([str(self.run_dir)] if self.run_dir.exists() else [])

    def _register_daemons(self) -> None:
        """Record the daemons' PIDs, so that a later run can stop them if this one crashes."""
        lines = "".join(f"{p.pid} {name}\n" for name, p in self._procs.items())
        (REGISTRY / f"{self.token}.slurm").write_text(lines)

    def _wait_for(self, ready: Callable[[], bool], what: str, timeout: float) -> None:
        """Poll ``ready`` until true; a daemon that died or the deadline raises, with logs."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [f"{n} exited {p.returncode}" for n, p in self._procs.items()
                    if p.poll() is not None]
            if dead:
                raise ClusterError(f"{dead[0]} while waiting for {what}; {self._log_tails()}")
            if ready():
                return
            time.sleep(0.1)
        raise ClusterError(f"no {what} within {timeout:.0f}s; {self._log_tails()}")

    def _all_idle(self) -> bool:
        out = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False).stdout
        states = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
        return all(states.get(n) == "idle" for n in self.nodes)

    def _log_tails(self) -> str:
        tails = []
        for log in sorted(self.root.glob("*.log")) + sorted(self.root.glob("*.out")):
            lines = log.read_text(errors="replace").splitlines()[-5:]
            if lines:
                tails.append(f"{log.name}: " + " | ".join(lines))
        return "logs: " + " ;; ".join(tails)

    # -- using ------------------------------------------------------------------------------

    def run(self, argv: Sequence[str], timeout: float = 30.0, check: bool = True,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        """A client command (srun, squeue, ...) against this cluster; bounded by ``timeout``."""
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              env={**_clean_env(), **self.env}, input=input,
                              stdin=None if input is not None else subprocess.DEVNULL)
        if check and proc.returncode != 0:
            raise ClusterError(f"{' '.join(argv)} exited {proc.returncode}: "
                               f"{proc.stderr.strip()}")
        return proc

    def salloc(self, n: int = 1, *extra: str, timeout: float = 20.0) -> str:
        """A job of ``n`` nodes without a shell; returns its id once it is RUNNING."""
        proc = self.run(["salloc", "-N", str(n), "--no-shell", *extra], timeout=timeout)
        m = _GRANTED_RE.search(proc.stderr + proc.stdout)
        if m is None:
            raise ClusterError(f"salloc printed no job id: {proc.stderr.strip()}")
        job = m.group(1)
        self._wait_for(lambda: self.state(job) == "RUNNING", f"job {job} RUNNING", timeout)
        return job

    def state(self, job: str) -> str:
        """The job's state in squeue (``RUNNING``...), or ``""`` once it has left the queue."""
        return self.run(["squeue", "-h", "-j", job, "-o", "%T"], check=False).stdout.strip()

    def steps(self, job: str) -> list[str]:
        """The ids (``J.S``) of the job's running steps."""
        out = self.run(["squeue", "-h", "-s", "-j", job, "-o", "%i"], check=False).stdout
        return out.split()

    def daemon_pid(self, node: str) -> int:
        """The PID of the node's slurmd."""
        return self._procs[f"slurmd-{node}"].pid

    def node_pids(self, node: str) -> list[int]:
        """Every process in the node's network namespace: slurmd, slurmstepd, tasks."""
        return _netns_pids(self._netns[node])

    def squeue(self) -> list[dict[str, str]]:
        """Every job in the queue: ``{"id", "name", "state", "nodes"}`` (nodes as a hostlist)."""
        out = self.run(["squeue", "-h", "-o", "%i|%j|%T|%N"]).stdout
        keys = ("id", "name", "state", "nodes")
        return [dict(zip(keys, line.split("|"), strict=True)) for line in out.splitlines()]

    def scancel(self, job: str, wait: float = 15.0) -> None:
        """Cancel ``job`` (or ``J.S`` for a step); for a job, wait until it left the queue."""
        self.run(["scancel", job])
        if "." not in job:
            self._wait_for(lambda: self.state(job) == "", f"job {job} gone", wait)

    # -- tearing down -----------------------------------------------------------------------

    def close(self) -> None:
        """Cancel every job, stop each daemon by PID, remove namespaces, bridge and files.

        Safe to call twice and after a build that failed halfway.
        """
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        problems: list[str] = []
        if self._procs.get("slurmctld") and self._procs["slurmctld"].poll() is None:
            with contextlib.suppress(Exception):
                self.run(["scancel", "--user=root", "--full"], timeout=10, check=False)
                self._wait_for(lambda: not self.squeue(), "an empty queue", 10.0)
        # Nodes first: a slurmd stopping tells the controller, which must still be there.
        order = [n for n in self._procs if n.startswith("slurmd-")] + ["slurmctld", "munged"]
        for name in order:
            if name in self._procs and not _stop(self._procs[name]):
                problems.append(f"{name} survived SIGKILL")
        if self._made_links:
            survivors = _kill_netnses(list(self._netns.values()))  # slurmstepd, stray tasks
            problems += [f"{ns}: survivors {pids}" for ns, pids in survivors.items() if pids]
            _ip_batch([f"netns del {ns}" for ns in self._netns.values()]
                      + [f"link del {v}" for v in self._veth.values()]
                      + [f"link del {self.bridge}"], force=True)
        (REGISTRY / f"{self.token}.slurm").unlink(missing_ok=True)
        (REGISTRY / self.token).unlink(missing_ok=True)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        if problems:
            raise ClusterError(f"Slurm cluster {self.token} teardown left: {problems}")


def _clean_env() -> dict[str, str]:
    """This process's environment without SLURM_* (a test run inside a job must not leak)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}


def _free_port(address: str) -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes], grace: float = 5.0) -> bool:
    """SIGTERM, a bounded wait, then SIGKILL; True when the process is gone."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace)
    return proc.poll() is not None


def _reap_stale_daemons() -> None:
    """Stop daemons that a crashed run left in the root namespace (its netns go via reap_stale).

    A PID is only killed while its command line still names the daemon, so a reused PID of
    an unrelated process is left alone.
    """
    for f in REGISTRY.glob("*.slurm"):
        token = f.name.removesuffix(".slurm")
        owner = REGISTRY / token
        with contextlib.suppress(OSError, ValueError):
            if owner.exists() and _pid_alive(int(owner.read_text().strip() or "0")):
                continue
        for line in f.read_text().splitlines():
            pid_text, _, name = line.partition(" ")
            with contextlib.suppress(OSError, ValueError):
                cmd = Path(f"/proc/{int(pid_text)}/cmdline").read_bytes()
                if name.split("-")[0].encode() in cmd:
                    os.kill(int(pid_text), signal.SIGKILL)
        for run_dir in Path("/tmp").glob(f"ddpts-{token}-*"):
            shutil.rmtree(run_dir, ignore_errors=True)
        f.unlink(missing_ok=True)
