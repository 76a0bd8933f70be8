"""A real test cluster: K hosts, each a network namespace with its own hostname and OpenSSH sshd.

Why real: the parts under test (paramiko transport, torchrun rendezvous, detached process
groups) fail in ways mocks do not reproduce — host keys, ssh_config resolution, hostnames that
resolve to 127.0.0.1, processes that outlive a channel. The hosts share this machine's
filesystem and PID namespace; only the network, the hostname and ``/etc/hosts`` are their own.

Layout of one cluster (``token`` is unique per cluster, so parallel runs never collide)::

    root ns: bridge ddptb<token> = <net>.1/24, veth ddptv<token><i> enslaved to it
    ns ddptui-<token>-node<i>: eth0 = <net>.<i+1>/24, lo; no default route
             sshd (ListenAddress <net>.<i+1>) under `unshare --uts` with hostname node<i>

The /24 is picked at creation time so that it overlaps no route or address of this machine
(nor another live cluster's). Nothing is forwarded: ``ip_forward`` is left as it is (off here)
and the namespaces have no route beyond their /24.

Teardown (``Cluster.close``) kills every process in each namespace with SIGKILL, deletes the
namespaces, the bridge and ``/etc/netns/<ns>``. A crashed run's leftovers are removed by the
next run: every cluster registers its owner PID under :data:`REGISTRY` before it creates
anything, and anything carrying a token whose owner is dead is fair game.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import ipaddress
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

NETNS_PREFIX = "ddptui-"
BRIDGE_PREFIX = "ddptb"
VETH_PREFIX = "ddptv"
REGISTRY = Path("/run/ddptui-cluster")
SSHD = "/usr/sbin/sshd"
#: Candidate networks, tried in order; the first that touches nothing on this machine wins.
CANDIDATE_NETS = [f"10.213.{n}.0/24" for n in range(1, 255)]

_TOKEN_RE = re.compile(r"[0-9a-f]{6}")


class ClusterError(RuntimeError):
    """The environment could not build the cluster; the message says which step failed."""


def _sh(argv: Sequence[str], timeout: float = 20.0, check: bool = True) -> str:
    proc = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    if check and proc.returncode != 0:
        raise ClusterError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def _ip_batch_start(lines: Sequence[str], netns: str | None = None,
                    force: bool = False) -> subprocess.Popen[bytes]:
    """``ip -batch -`` running ``lines`` (inside ``netns`` with ``-n``), not waited for."""
    argv = ["ip", *(["-n", netns] if netns else []), *(["-force"] if force else []),
            "-batch", "-"]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write("".join(f"{line}\n" for line in lines).encode())
    proc.stdin.close()
    return proc


def _wait_all(procs: Sequence[subprocess.Popen[bytes]], what: str, check: bool = True,
              timeout: float = 60.0) -> None:
    """Wait for processes started together; the first failure (if ``check``) is raised."""
    deadline = time.monotonic() + timeout
    failed: list[str] = []
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            failed.append(f"{p.args} timed out")
            continue
        err = p.stderr.read().decode(errors="replace").strip() if p.stderr else ""
        if p.stderr:
            p.stderr.close()
        if p.returncode != 0:
            failed.append(f"{p.args} exited {p.returncode}: {err}")
    if check and failed:
        raise ClusterError(f"{what} failed: {failed[0]}")


def _ip_batch(lines: Sequence[str], force: bool = False) -> None:
    _wait_all([_ip_batch_start(lines, force=force)], "ip -batch", check=not force)


def environment_problem() -> str | None:
    """Why this machine cannot host a cluster, or None; checked before any fixture builds one."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, sshd)"
    for tool in (SSHD, "ip", "unshare", "ssh-keygen", "ssh"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _netns_pids(netns: str) -> list[int]:
    out = _sh(["ip", "netns", "pids", netns], check=False)
    return [int(p) for p in out.split() if p.isdigit()]


def _kill_netns(netns: str, deadline_s: float = 5.0) -> list[int]:
    """SIGKILL everything in ``netns`` until nothing is left; returns the survivors (if any)."""
    return _kill_netnses([netns], deadline_s)[netns]


def _kill_netnses(names: Sequence[str], deadline_s: float = 5.0) -> dict[str, list[int]]:
    """:func:`_kill_netns` for many namespaces at once (one pass over all, not one each)."""
    deadline = time.monotonic() + deadline_s
    left = {ns: _netns_pids(ns) for ns in names}
    while any(left.values()) and time.monotonic() < deadline:
        pids = [pid for got in left.values() for pid in got]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        # Reap our own children (sshd) so they do not linger as zombies in the listing.
        for pid in pids:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
        left = {ns: _netns_pids(ns) if got else [] for ns, got in left.items()}
    return left


@contextlib.contextmanager
def _lock() -> Iterator[None]:
    """One machine-wide lock around picking a subnet and reaping stale clusters."""
    REGISTRY.mkdir(parents=True, exist_ok=True)
    with open(REGISTRY / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _token_owner_alive(token: str) -> bool:
    try:
        pid = int((REGISTRY / token).read_text().strip() or "0")
    except (OSError, ValueError):
        return False
    return pid > 0 and _pid_alive(pid)


def reap_stale() -> list[str]:
    """Remove clusters of this project whose owning process is gone; returns what was removed.

    Prefix match alone would also hit a cluster another pytest is using right now, so a
    token is stale only when its registry file is missing or names a dead process.
    """
    removed: list[str] = []
    stale_tokens: set[str] = set()
    for name in _sh(["ip", "netns", "list"], check=False).split("\n"):
        ns = name.split(" ")[0].strip()
        if not ns.startswith(NETNS_PREFIX):
            continue
        token = ns[len(NETNS_PREFIX) : len(NETNS_PREFIX) + 6]
        if _TOKEN_RE.fullmatch(token) and not _token_owner_alive(token):
            stale_tokens.add(token)
            _kill_netns(ns)
            _sh(["ip", "netns", "del", ns], check=False)
            removed.append(ns)
    for line in _sh(["ip", "-o", "link", "show"], check=False).splitlines():
        parts = line.split(":")
        if len(parts) < 2:
            continue
        ifname = parts[1].strip().split("@")[0]
        for prefix in (BRIDGE_PREFIX, VETH_PREFIX):
            if ifname.startswith(prefix):
                token = ifname[len(prefix) : len(prefix) + 6]
                if _TOKEN_RE.fullmatch(token) and not _token_owner_alive(token):
                    stale_tokens.add(token)
                    _sh(["ip", "link", "del", ifname], check=False)
                    removed.append(ifname)
    netns_etc = Path("/etc/netns")
    if netns_etc.is_dir():
        for d in netns_etc.iterdir():
            if d.name.startswith(NETNS_PREFIX):
                token = d.name[len(NETNS_PREFIX) : len(NETNS_PREFIX) + 6]
                if _TOKEN_RE.fullmatch(token) and not _token_owner_alive(token):
                    shutil.rmtree(d, ignore_errors=True)
                    removed.append(str(d))
    if REGISTRY.is_dir():
        for f in REGISTRY.iterdir():
            if _TOKEN_RE.fullmatch(f.name) and not _token_owner_alive(f.name):
                f.unlink(missing_ok=True)
    return removed


def _pick_network() -> ipaddress.IPv4Network:
    """The first candidate /24 that overlaps no route or address here (other clusters included)."""
    taken: list[ipaddress.IPv4Network] = []
    for line in _sh(["ip", "-4", "route", "show", "table", "all"], check=False).splitlines():
        first = line.split()[0] if line.split() else ""
        if first in ("default", "broadcast", "local", "unreachable", "blackhole", "prohibit"):
            # local/broadcast lines name a host address in their second field.
            words = line.split()
            if first in ("local", "broadcast") and len(words) > 1:
                with contextlib.suppress(ValueError):
                    taken.append(ipaddress.ip_network(words[1], strict=False))
            continue
        with contextlib.suppress(ValueError):
            taken.append(ipaddress.ip_network(first, strict=False))
    for line in _sh(["ip", "-4", "-o", "addr", "show"], check=False).splitlines():
        m = re.search(r"inet (\S+)", line)
        if m:
            taken.append(ipaddress.ip_interface(m.group(1)).network)
    for cand in CANDIDATE_NETS:
        net = ipaddress.ip_network(cand)
        if not any(net.overlaps(t) for t in taken):
            return net
    raise ClusterError("no free 10.213.x.0/24 network for a test cluster")


@dataclass
class Host:
    """One node of the cluster: what a hosts file needs (name, ip) and where its files live."""

    name: str  # hostname inside the namespace, ssh_config alias, /etc/hosts name
    ip: str
    netns: str
    veth: str  # root-namespace end of its veth pair
    dir: Path  # this host's own scratch directory (sshd config, host key, log; free for tests)
    sshd_procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    stopped: bool = False

    @property
    def sshd_log(self) -> Path:
        return self.dir / "sshd.log"


def in_host(h: Host, *argv: str) -> list[str]:
    """``argv`` inside the host: its network namespace and /etc/hosts, and its own hostname."""
    return ["ip", "netns", "exec", h.netns, "unshare", "--uts", "sh", "-c",
            'hostname "$0" && exec "$@"', h.name, *argv]


class Cluster:
    """K hosts with sshd; build with :meth:`create`, always :meth:`close` (fixtures do)."""

    def __init__(self, root: Path, k: int) -> None:
        self.root = root
        self.k = k
        self.token = secrets.token_hex(3)
        self.bridge = f"{BRIDGE_PREFIX}{self.token}"
        self.network: ipaddress.IPv4Network | None = None
        self.gateway = ""
        self.hosts: list[Host] = []
        self.key = root / "id_ed25519"  # client private key, authorized on every host
        self.pubkey = root / "id_ed25519.pub"
        self.known_hosts = root / "known_hosts"
        self.ssh_config = root / "ssh_config"
        self.authorized_keys = root / "authorized_keys"
        self._closed = False

    # -- building -------------------------------------------------------------------------

    @classmethod
    def create(cls, root: Path, k: int = 2) -> Cluster:
        """Build and start a cluster; on any failure tear down what was made and re-raise."""
        if k < 1 or k > 200:
            raise ValueError("k must be 1..200")
        root.mkdir(parents=True, exist_ok=True)
        cluster = cls(root, k)
        try:
            cluster._build()
        except BaseException:
            cluster.close()
            raise
        return cluster

    def _build(self) -> None:
        problem = environment_problem()
        if problem:
            raise ClusterError(problem)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        with _lock():
            reap_stale()
            (REGISTRY / self.token).write_text(f"{os.getpid()}\n")
            atexit.register(self.close)
            self.network = _pick_network()
            addrs = list(self.network.hosts())
            self.gateway = str(addrs[0])
            _sh(["ip", "link", "add", self.bridge, "type", "bridge"])
            _sh(["ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge])
            _sh(["ip", "link", "set", self.bridge, "up"])
        for i in range(1, self.k + 1):
            name = f"node{i}"
            hdir = self.root / name
            hdir.mkdir(exist_ok=True)
            self.hosts.append(
                Host(
                    name=name,
                    ip=str(addrs[i]),
                    netns=f"{NETNS_PREFIX}{self.token}-{name}",
                    veth=f"{VETH_PREFIX}{self.token}{i}",
                    dir=hdir,
                )
            )
        self._write_hosts_files()
        # Each step is one process for all hosts (or one per host, all at once): on a loaded
        # 2-core machine a few hundred sequential `ip` and `ssh-keygen` runs cost seconds.
        keygen = self._start_keygen()
        _ip_batch([f"netns add {h.netns}" for h in self.hosts]
                  + [f"link add {h.veth} type veth peer name eth0 netns {h.netns}"
                     for h in self.hosts]
                  + [f"link set {h.veth} master {self.bridge} up" for h in self.hosts])
        _wait_all([_ip_batch_start([f"addr add {h.ip}/24 dev eth0", "link set eth0 up",
                                    "link set lo up"], netns=h.netns) for h in self.hosts],
                  "configuring a namespace's interfaces")
        _wait_all(keygen, "ssh-keygen")
        self._record_keys()
        self._write_ssh_config()
        for h in self.hosts:
            self.start_sshd(h)
        for h in self.hosts:  # all started above, so these waits overlap
            self.wait_port(h.ip, 22, timeout=10.0 + 0.5 * self.k, host=h)

    def _write_hosts_files(self, own_name_to: str | None = None) -> None:
        """Every host's /etc/hosts (``ip netns exec`` binds /etc/netns/NS/hosts over it):
        each name to its host's address, or a host's own name to ``own_name_to`` there."""
        for h in self.hosts:
            etc = Path("/etc/netns") / h.netns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(  # the same inode: running hosts see the new text
                "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n" + "".join(
                    f"{own_name_to if o is h and own_name_to else o.ip} {o.name}\n"
                    for o in self.hosts))

    @contextlib.contextmanager
    def own_names_to(self, address: str = "127.0.1.1") -> Iterator[None]:
        """Debian's default on every host while it lasts: its own name resolves to
        ``127.0.1.1`` there (the other hosts' names still to their addresses)."""
        self._write_hosts_files(address)
        try:
            yield
        finally:
            self._write_hosts_files()

    @contextlib.contextmanager
    def filtering(self, host: Host | str, port: int, verdict: str = "drop") -> Iterator[str]:
        """An nft table in the host whose input chain drops TCP to ``port`` (or answers with
        ``verdict``, e.g. ``reject with tcp reset``), lo included; yields the table's name,
        for rules put ahead of the block."""
        table = "ddptui_test"
        rules = (f"table inet {table} {{\n chain input {{\n"
                 f"  type filter hook input priority 0; policy accept;\n"
                 f"  tcp dport {port} {verdict}\n }}\n}}\n")
        self.exec(host, ["nft", "-f", "-"], input=rules.encode(), check=True)
        try:
            yield table
        finally:
            self.exec(host, ["nft", "delete", "table", "inet", table], check=True)

    @contextlib.contextmanager
    def holding_port(self, host: Host | str, port: int,
                     seconds: float = 120) -> Iterator[subprocess.Popen[bytes]]:
        """Another program listening on ``port`` in the host (on every address) while it
        lasts, once it listens."""
        h = self.host(host)
        code = ("import socket, time; s = socket.socket(); "
                f"s.bind(('0.0.0.0', {port})); s.listen(); time.sleep({seconds})")
        holder = subprocess.Popen(in_host(h, sys.executable, "-c", code),
                                  stdin=subprocess.DEVNULL)
        try:
            self.wait_port(h.ip, port, timeout=10)
            yield holder
        finally:
            holder.kill()
            holder.wait(timeout=10)

    def _start_keygen(self) -> list[subprocess.Popen[bytes]]:
        """The client key and every host key, generated concurrently."""
        def gen(path: Path, comment: str) -> subprocess.Popen[bytes]:
            path.unlink(missing_ok=True)
            return subprocess.Popen(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

        return [gen(self.key, "ddptui-test-client"),
                *(gen(h.dir / "ssh_host_ed25519_key", h.name) for h in self.hosts)]

    def _record_keys(self) -> None:
        self.authorized_keys.write_text(self.pubkey.read_text())
        lines = []
        for h in self.hosts:
            kind, b64 = (h.dir / "ssh_host_ed25519_key.pub").read_text().split()[:2]
            lines.append(f"{h.name},{h.ip} {kind} {b64}\n")
        self.known_hosts.write_text("".join(lines))

    def _write_ssh_config(self) -> None:
        blocks = [
            f"Host {h.name}\n"
            f"    HostName {h.ip}\n"
            f"    User root\n"
            f"    Port 22\n"
            f"    IdentityFile {self.key}\n"
            f"    IdentitiesOnly yes\n"
            f"    UserKnownHostsFile {self.known_hosts}\n"
            f"    StrictHostKeyChecking yes\n"
            f"    ConnectTimeout 5\n"
            f"    BatchMode yes\n"
            for h in self.hosts
        ]
        self.ssh_config.write_text("\n".join(blocks))

    def host_key_line(self, host: Host | str, port: int = 22) -> str:
        """The known_hosts line ssh would write for this host (``[ip]:port`` off port 22)."""
        h = self.host(host)
        kind, b64 = (h.dir / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        names = f"{h.name},{h.ip}" if port == 22 else f"[{h.name}]:{port},[{h.ip}]:{port}"
        return f"{names} {kind} {b64}\n"

    def start_sshd(self, host: Host | str, port: int = 22, extra_config: str = "") -> Path:
        """Start an (additional) sshd in the host; returns its config path.

        Off port 22 the host's key is also added to known_hosts under ``[name]:port`` and
        ``[ip]:port``, as ssh would have recorded it. ``extra_config`` lines come first, so
        they win over the defaults (sshd keeps the first value of each keyword).
        """
        h = self.host(host)
        cfg = h.dir / ("sshd_config" if port == 22 else f"sshd_config.{port}")
        pid_file = h.dir / ("sshd.pid" if port == 22 else f"sshd.{port}.pid")
        log = h.dir / ("sshd.log" if port == 22 else f"sshd.{port}.log")
        path_env = f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"
        cfg.write_text(
            f"{extra_config.strip()}\n"
            f"Port {port}\n"
            f"ListenAddress {h.ip}\n"
            f"HostKey {h.dir / 'ssh_host_ed25519_key'}\n"
            f"PidFile {pid_file}\n"
            "PermitRootLogin prohibit-password\n"
            "StrictModes no\n"
            "UsePAM no\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            f"AuthorizedKeysFile {self.authorized_keys}\n"
            "Subsystem sftp internal-sftp\n"
            "MaxSessions 100\n"
            "MaxStartups 100\n"
            "UseDNS no\n"
            "PrintMotd no\n"
            "LogLevel VERBOSE\n"
            # The same interpreter (and its torch) as this test process, as `python3` on PATH.
            # SHLVL=1: bash then skips ~/.bashrc for ssh commands. The hosts share root's
            # home, and a .bashrc doing `pyenv init` takes a machine-wide rehash lock; a
            # session SIGKILLed while holding it (stop_host, teardown, a stop test) left
            # every later command waiting 60 s. Without it a command also costs ~20 ms,
            # not ~250 ms.
            f"SetEnv PATH={path_env} SHLVL=1\n"
        )
        with open(log, "ab") as logf:
            proc = subprocess.Popen(
                in_host(h, SSHD, "-D", "-f", str(cfg), "-E", str(log)),
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        h.sshd_procs.append(proc)
        h.stopped = False
        if port != 22:
            with open(self.known_hosts, "a") as kh:
                kh.write(self.host_key_line(h, port))
            self.wait_port(h.ip, port, timeout=10.0, host=h, proc=proc)
        return cfg

    @staticmethod
    def wait_port(
        ip: str,
        port: int,
        timeout: float = 10.0,
        host: Host | None = None,
        proc: subprocess.Popen[bytes] | None = None,
    ) -> None:
        """Bounded wait until something accepts TCP at ip:port; raises ClusterError after."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            procs = [proc] if proc else (host.sshd_procs if host else [])
            for p in procs:
                if p.poll() is not None:
                    log = host.sshd_log.read_text(errors="replace") if host else ""
                    raise ClusterError(f"sshd for {ip}:{port} exited {p.returncode}: {log}")
            try:
                with socket.create_connection((ip, port), timeout=0.5):
                    return
            except OSError as exc:
                last = exc
                time.sleep(0.05)
        raise ClusterError(f"nothing accepted TCP at {ip}:{port} within {timeout}s: {last}")

    # -- using ------------------------------------------------------------------------------

    def host(self, host: Host | str) -> Host:
        if isinstance(host, Host):
            return host
        for h in self.hosts:
            if h.name == host or h.ip == host:
                return h
        raise KeyError(host)

    def __getitem__(self, name: str) -> Host:
        return self.host(name)

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.hosts]

    @property
    def ips(self) -> list[str]:
        return [h.ip for h in self.hosts]

    def free_ip(self, n: int = 0) -> str:
        """The n-th address of the cluster's /24 where no host lives (connects time out)."""
        assert self.network is not None
        if not 0 <= n < 200 - self.k:
            raise ValueError(n)
        return str(list(self.network.hosts())[-1 - n])

    def exec(
        self,
        host: Host | str,
        argv: Sequence[str],
        timeout: float = 30.0,
        check: bool = False,
        input: bytes | None = None,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run argv in the host's namespace with its hostname and /etc/hosts, like a login."""
        h = self.host(host)
        proc = subprocess.run(
            in_host(h, *argv),
            capture_output=True,
            timeout=timeout,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
        if check and proc.returncode != 0:
            raise ClusterError(
                f"{h.name}: {argv} exited {proc.returncode}: {proc.stderr.decode(errors='replace')}"
            )
        return proc

    def ssh_argv(self, host: Host | str, *remote: str) -> list[str]:
        """The real OpenSSH client, configured by the generated ssh_config (BatchMode)."""
        return ["ssh", "-F", str(self.ssh_config), self.host(host).name, *remote]

    def pids(self, host: Host | str) -> list[int]:
        """Every process in the host's network namespace (PIDs of the shared PID namespace)."""
        return _netns_pids(self.host(host).netns)

    def stop_host(self, host: Host | str, link_down: bool = True) -> None:
        """Simulate a dead node: kill everything in it and (by default) cut its cable.

        With the link down its address stops answering at all, so connects time out as to
        a powered-off machine; with ``link_down=False`` the address still answers and a
        connect is refused instead.
        """
        h = self.host(host)
        survivors = _kill_netns(h.netns)
        for p in h.sshd_procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)
        h.sshd_procs.clear()
        h.stopped = True
        if link_down:
            _sh(["ip", "link", "set", h.veth, "down"], check=False)
        if survivors:
            raise ClusterError(f"{h.name}: processes survived SIGKILL: {survivors}")

    def leftovers(self) -> list[str]:
        """Anything of this cluster still present on the machine (empty after close)."""
        found: list[str] = []
        netns = _sh(["ip", "netns", "list"], check=False)
        links = _sh(["ip", "-o", "link", "show"], check=False)
        for h in self.hosts:
            if re.search(rf"^{re.escape(h.netns)}\b", netns, re.M):
                found.append(f"netns {h.netns}")
            if re.search(rf": {re.escape(h.veth)}[@:]", links):
                found.append(f"link {h.veth}")
            if (Path("/etc/netns") / h.netns).exists():
                found.append(f"/etc/netns/{h.netns}")
            for p in h.sshd_procs:
                if p.poll() is None:
                    found.append(f"sshd pid {p.pid}")
        if re.search(rf": {re.escape(self.bridge)}[@:]", links):
            found.append(f"bridge {self.bridge}")
        return found

    def close(self) -> None:
        """Remove everything this cluster made; safe to call twice and after a failed build."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        problems: list[str] = []
        survivors = _kill_netnses([h.netns for h in self.hosts])
        for h in self.hosts:
            if survivors[h.netns]:
                problems.append(f"{h.name}: survivors {survivors[h.netns]}")
            for p in h.sshd_procs:
                if p.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        p.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=5)
        # One `ip` for every namespace and link; -force goes on past what is already gone
        # (a failed build, or veths that went with their namespace).
        if self.hosts:
            _ip_batch([f"netns del {h.netns}" for h in self.hosts]
                      + [f"link del {h.veth}" for h in self.hosts], force=True)
        for h in self.hosts:
            shutil.rmtree(Path("/etc/netns") / h.netns, ignore_errors=True)
        _sh(["ip", "link", "del", self.bridge], check=False)
        (REGISTRY / self.token).unlink(missing_ok=True)
        left = self.leftovers()
        if problems or left:
            raise ClusterError(f"cluster {self.token} teardown left: {problems + left}")


#: The type of the ``cluster_factory`` fixture: ``cluster_factory(k) -> Cluster``.
ClusterFactory = Callable[[int], Cluster]
