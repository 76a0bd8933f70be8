"""Transports against real sshd processes (the cluster fixture) and the local machine.

No mocks: every failure mode (unknown or changed host key, wrong key, refused, unreachable,
ProxyJump) is produced by a real OpenSSH server or a real network condition.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import Cluster, ClusterFactory

from ddptui.config import HostsConfig, NodeConfig, SSHOptions
from ddptui.transport import openssh
from ddptui.transport.base import TransportError
from ddptui.transport.factory import make_transport
from ddptui.transport.local import LocalTransport
from ddptui.transport.ssh import SSHTransport


@pytest.fixture(autouse=True)
def _no_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's ssh agent must not make a wrong-key test pass."""
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


def _opts(c: Cluster, **kw: object) -> SSHOptions:
    base: dict[str, object] = {
        "config_file": str(c.ssh_config),
        "known_hosts": str(c.known_hosts),
        "connect_timeout": 10.0,
    }
    base.update(kw)
    return SSHOptions(**base)  # type: ignore[arg-type]


def _write_config(path: Path, blocks: dict[str, dict[str, str]]) -> Path:
    path.write_text(
        "\n".join(
            f"Host {host}\n" + "".join(f"    {k} {v}\n" for k, v in opts.items())
            for host, opts in blocks.items()
        )
    )
    return path


def _connect(node: NodeConfig, opts: SSHOptions, timeout: float = 10.0) -> SSHTransport:
    t = SSHTransport(node, opts)
    t.connect(timeout)
    return t


@pytest.fixture
def node1(cluster2: Cluster) -> Iterator[SSHTransport]:
    t = _connect(NodeConfig(name="n1", host="node1"), _opts(cluster2))
    try:
        yield t
    finally:
        t.close()


# -- round trips -----------------------------------------------------------------------------


@pytest.mark.cluster
def test_run_round_trip_non_ascii_and_exit_code(cluster2: Cluster, node1: SSHTransport) -> None:
    assert node1.address == cluster2["node1"].ip
    r = node1.run("printf 'héllo ✓ %s' \"$(hostname)\"; printf 'ërr ✗' >&2; exit 3", timeout=20)
    assert r.exit_code == 3
    assert r.stdout == "héllo ✓ node1"
    assert r.stderr == "ërr ✗"
    bad = node1.run(r"printf 'a\377b'", timeout=20)
    assert bad.stdout == "a\ufffdb"
    big = node1.run("head -c 3000000 /dev/zero | tr '\\0' x; echo done >&2", timeout=30)
    assert len(big.stdout) == 3_000_000 and big.stderr == "done\n"


@pytest.mark.cluster
def test_run_timeout_then_still_usable(node1: SSHTransport) -> None:
    start = time.monotonic()
    with pytest.raises(TransportError, match=r"timed out after 0\.5s"):
        node1.run("sleep 30", timeout=0.5)
    assert time.monotonic() - start < 5
    assert node1.run("echo ok", timeout=20).stdout == "ok\n"


@pytest.mark.cluster
def test_put_and_read_binary(cluster2: Cluster, node1: SSHTransport) -> None:
    path = str(cluster2["node1"].dir / "blob ü.bin")
    data = bytes(range(256)) * 2000 + "naïve ✓".encode()
    node1.put_bytes(data, path, mode=0o600)
    assert Path(path).read_bytes() == data
    assert Path(path).stat().st_mode & 0o777 == 0o600
    assert node1.read_from(path, 0, len(data) + 10) == data
    node1.put_bytes(b"replaced", path)  # over an existing file
    assert node1.read_from(path, 0, 100) == b"replaced"
    assert not [p for p in os.listdir(cluster2["node1"].dir) if "ddptui-tmp" in p]
    with pytest.raises(FileNotFoundError):
        node1.put_bytes(b"x", str(cluster2["node1"].dir / "no-such-dir" / "f"))
    assert node1.home() == os.path.expanduser("~")


@pytest.mark.cluster
def test_read_from_offsets(cluster2: Cluster, node1: SSHTransport) -> None:
    path = cluster2["node1"].dir / "log.txt"
    path.write_bytes(b"0123456789")
    assert node1.read_from(str(path), 0, 4) == b"0123"
    assert node1.read_from(str(path), 4, 100) == b"456789"
    assert node1.read_from(str(path), 10, 100) == b""
    assert node1.read_from(str(path), 50, 100) == b""
    with path.open("ab") as fh:  # a growing log: follow from where we were
        fh.write(b"abc\n")
    assert node1.read_from(str(path), 10, 100) == b"abc\n"
    with pytest.raises(FileNotFoundError):
        node1.read_from(str(path) + ".missing", 0, 10)


@pytest.mark.cluster
def test_threads_share_one_connection(cluster2: Cluster, node1: SSHTransport) -> None:
    errors: list[BaseException] = []
    base = cluster2["node1"].dir

    def work(i: int) -> None:
        try:
            for j in range(3):
                assert node1.run(f"echo {i}-{j}", timeout=30).stdout == f"{i}-{j}\n"
                blob = f"{i}:{j}:".encode() * 1000
                node1.put_bytes(blob, str(base / f"t{i}"))
                assert node1.read_from(str(base / f"t{i}"), 0, 1 << 20) == blob
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert errors == []


# -- resolution ------------------------------------------------------------------------------


@pytest.mark.cluster
def test_ssh_config_alias(cluster2: Cluster, tmp_path: Path) -> None:
    n2 = cluster2["node2"]
    cfg = _write_config(
        tmp_path / "config",
        {
            "gpu-box": {
                "HostName": n2.ip,
                "User": "root",
                "Port": "22",
                "IdentityFile": str(cluster2.key),
                "IdentitiesOnly": "yes",
                "UserKnownHostsFile": str(cluster2.known_hosts),
            }
        },
    )
    opts = SSHOptions(config_file=str(cfg), connect_timeout=10)
    t = _connect(NodeConfig(name="box", host="gpu-box"), opts)
    try:
        assert t.address == n2.ip
        assert t.run("hostname; id -un", timeout=20).stdout == "node2\nroot\n"
    finally:
        t.close()
    # Explicit fields of the hosts file win over the ssh config.
    with pytest.raises(TransportError, match=r"as user 'nobody'") as err:
        _connect(NodeConfig(name="box", host="gpu-box", user="nobody"), opts)
    assert f"{n2.ip}:22" in str(err.value)
    with pytest.raises(TransportError, match="refused") as err:
        _connect(NodeConfig(name="box", host="gpu-box", port=2), opts)
    assert f"{n2.ip}:2" in str(err.value) and "box" in str(err.value)


def test_match_exec_loads_invoke_only_when_evaluated(tmp_path: Path) -> None:
    """paramiko's ``invoke`` is left unloaded by ddptui's import (a twentieth of a second of
    every SSH launch) and still runs an ssh_config ``Match exec`` when a lookup meets one."""
    marker = tmp_path / "on-vpn"
    cfg = tmp_path / "config"
    cfg.write_text(f'Match host gpu-box exec "test -e {marker}"\n    HostName 10.9.9.9\n'
                   "Host gpu-box\n    HostName 10.1.1.1\n")
    probe = (
        "import sys\n"
        "import ddptui.transport.ssh\n"
        "from ddptui.config import SSHOptions\n"
        "from ddptui.transport.ssh.resolve import Resolver\n"
        "print('invoke.tasks' in sys.modules)\n"
        f"r = Resolver('box', SSHOptions(config_file={str(cfg)!r}))\n"
        "print(r.resolve('gpu-box').hostname)\n"
        "print('invoke.tasks' in sys.modules)\n"
    )

    def run() -> list[str]:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    assert run() == ["False", "10.1.1.1", "True"]
    marker.touch()
    assert run() == ["False", "10.9.9.9", "True"]


@pytest.mark.cluster
def test_proxy_jump(cluster_factory: ClusterFactory, tmp_path: Path) -> None:
    c = cluster_factory(2)
    n1, n2 = c.hosts
    # This sshd lets root in only from node1's address: a login proves the jump happened.
    c.start_sshd(n2, port=2222, extra_config=f"AllowUsers root@{n1.ip}")
    common = {
        "User": "root",
        "IdentityFile": str(c.key),
        "IdentitiesOnly": "yes",
        "UserKnownHostsFile": str(c.known_hosts),
    }
    cfg = _write_config(
        tmp_path / "config",
        {
            "jumpbox": {"HostName": n1.ip, **common},
            "inner": {"HostName": n2.ip, "Port": "2222", "ProxyJump": "jumpbox", **common},
            "inner-direct": {"HostName": n2.ip, "Port": "2222", **common},
            "deadjump": {"HostName": c.free_ip(), **common},
            "behind-dead": {"HostName": n2.ip, "ProxyJump": "deadjump", **common},
            "nothing-behind": {"HostName": c.free_ip(), "ProxyJump": "jumpbox", **common},
            "via-command": {
                "HostName": n2.ip,
                "Port": "2222",
                "ProxyCommand": f"ssh -F {c.ssh_config} -W %h:%p node1",
                **common,
            },
        },
    )
    opts = SSHOptions(config_file=str(cfg), connect_timeout=5)
    with pytest.raises(TransportError, match="authentication as user 'root' failed"):
        _connect(NodeConfig(name="direct", host="inner-direct"), opts)
    t = _connect(NodeConfig(name="inner", host="inner"), opts)
    try:
        assert t.address == n2.ip
        assert t.run("hostname; echo $SSH_CONNECTION", timeout=20).stdout.split()[:2] == [
            "node2",
            n1.ip,
        ]
        t.put_bytes(b"through the jump", str(n2.dir / "jumped"))
        assert t.read_from(str(n2.dir / "jumped"), 8, 100) == b"the jump"
    finally:
        t.close()
    t = _connect(NodeConfig(name="cmd", host="via-command"), opts)  # ProxyCommand, real ssh -W
    try:
        assert t.run("echo $SSH_CONNECTION", timeout=20).stdout.split()[0] == n1.ip
    finally:
        t.close()
    start = time.monotonic()
    with pytest.raises(TransportError, match=r"ProxyJump host deadjump .* failed") as err:
        _connect(NodeConfig(name="x", host="behind-dead"), opts, timeout=1.5)
    assert time.monotonic() - start < 6
    assert c.free_ip() in str(err.value)
    with pytest.raises(TransportError, match=r"ProxyJump host jumpbox .*tunnel to") as err:
        _connect(NodeConfig(name="y", host="nothing-behind"), opts, timeout=8)
    assert f"{c.free_ip()}:22" in str(err.value)


# -- host keys -------------------------------------------------------------------------------


def _config_without_known_hosts(c: Cluster, path: Path) -> Path:
    return _write_config(
        path,
        {
            h.name: {
                "HostName": h.ip,
                "User": "root",
                "IdentityFile": str(c.key),
                "IdentitiesOnly": "yes",
            }
            for h in c.hosts
        },
    )


@pytest.mark.cluster
def test_unknown_host_key_refused_with_instructions(cluster2: Cluster, tmp_path: Path) -> None:
    cfg = _config_without_known_hosts(cluster2, tmp_path / "config")
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    opts = SSHOptions(config_file=str(cfg), known_hosts=str(kh))
    ip = cluster2["node1"].ip
    fp = subprocess.run(
        ["ssh-keygen", "-lf", str(cluster2["node1"].dir / "ssh_host_ed25519_key.pub")],
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout.split()[1]
    with pytest.raises(TransportError) as err:
        _connect(NodeConfig(name="n1", host="node1"), opts)
    msg = str(err.value)
    assert err.value.node == "n1"
    assert f"{ip}:22" in msg and "not known" in msg and fp in msg
    assert f"ssh-keyscan -p 22 {ip} >> {kh}" in msg
    assert "accept_new_host_keys: true" in msg
    assert kh.read_text() == ""


@pytest.mark.cluster
def test_changed_host_key_is_loud(cluster2: Cluster, tmp_path: Path) -> None:
    cfg = _config_without_known_hosts(cluster2, tmp_path / "config")
    kh = tmp_path / "known_hosts"
    impostor = (cluster2["node2"].dir / "ssh_host_ed25519_key.pub").read_text().split()[:2]
    kh.write_text(f"# mine\n{cluster2['node1'].ip} {' '.join(impostor)}\n")
    for accept in (False, True):  # accept-new never overrides a changed key
        opts = SSHOptions(config_file=str(cfg), known_hosts=str(kh), accept_new_host_keys=accept)
        with pytest.raises(TransportError) as err:
            _connect(NodeConfig(name="n1", host="node1"), opts)
        msg = str(err.value)
        assert "HOST KEY HAS CHANGED" in msg and "man-in-the-middle" in msg
        assert f"{kh}:2" in msg
    assert len(kh.read_text().splitlines()) == 2


@pytest.mark.cluster
def test_accept_new_appends_then_works(cluster_factory: ClusterFactory, tmp_path: Path) -> None:
    c = cluster_factory(1)
    (h,) = c.hosts
    c.start_sshd(h, port=2200)
    cfg = _config_without_known_hosts(c, tmp_path / "config")
    kh = tmp_path / "sub" / "known_hosts"  # parent created as ssh would
    for port in (22, 2200):
        opts = SSHOptions(config_file=str(cfg), known_hosts=str(kh), accept_new_host_keys=True)
        t = _connect(NodeConfig(name="n", host="node1", port=port), opts)
        assert t.run("hostname", timeout=20).stdout == "node1\n"
        t.close()
    key = (h.dir / "ssh_host_ed25519_key.pub").read_text().split()[:2]
    assert kh.read_text().splitlines() == [
        f"{h.ip} {' '.join(key)}",
        f"[{h.ip}]:2200 {' '.join(key)}",
    ]
    # Now known: strict mode accepts it, and the real ssh client agrees with the format.
    strict = SSHOptions(config_file=str(cfg), known_hosts=str(kh))
    _connect(NodeConfig(name="n", host="node1", port=2200), strict).close()
    out = subprocess.run(
        ["ssh", "-F", str(cfg), "-o", f"UserKnownHostsFile={kh}", "-o", "BatchMode=yes",
         "-o", "StrictHostKeyChecking=yes", "-p", "2200", "node1", "hostname"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert out.stdout == "node1\n", out.stderr


@pytest.mark.cluster
def test_hashed_known_hosts(cluster2: Cluster, tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text(cluster2.known_hosts.read_text())
    subprocess.run(["ssh-keygen", "-H", "-f", str(kh)], capture_output=True, timeout=10, check=True)
    assert cluster2["node1"].ip not in kh.read_text()
    cfg = _config_without_known_hosts(cluster2, tmp_path / "config")
    t = _connect(NodeConfig(name="n1", host="node1"), SSHOptions(str(cfg), str(kh)))
    assert t.run("hostname", timeout=20).stdout == "node1\n"
    t.close()


# -- failures --------------------------------------------------------------------------------


@pytest.mark.cluster
def test_wrong_client_key(cluster2: Cluster, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)], check=True, timeout=10
    )
    node = NodeConfig(name="n1", host="node1", identity_file=str(wrong))
    with pytest.raises(TransportError) as err:
        _connect(node, _opts(cluster2))
    msg = str(err.value)
    assert "authentication as user 'root' failed" in msg
    assert f"{cluster2['node1'].ip}:22" in msg and str(wrong) in msg
    assert "BEGIN" not in msg and wrong.read_text().splitlines()[1] not in msg


@pytest.mark.cluster
def test_unreachable_address_fails_within_timeout(cluster2: Cluster) -> None:
    ip = cluster2.free_ip()
    start = time.monotonic()
    with pytest.raises(TransportError) as err:
        _connect(NodeConfig(name="ghost", host=ip), _opts(cluster2), timeout=1.0)
    assert time.monotonic() - start < 4
    msg = str(err.value)
    assert f"ghost ({ip}:22)" in msg
    assert "no answer within 1s" in msg or "unreachable" in msg


@pytest.mark.cluster
def test_dns_failure(cluster2: Cluster) -> None:
    # Inside a node's namespace: no route off the /24, so the resolver fails at once and
    # nothing leaves this machine.
    script = (
        "from ddptui.config import NodeConfig, SSHOptions\n"
        "from ddptui.transport.ssh import SSHTransport\n"
        "import sys\n"
        "opts = SSHOptions(config_file=sys.argv[1], known_hosts='/dev/null')\n"
        "try:\n"
        "    SSHTransport(NodeConfig(name='x', host='no-such-host.invalid'), opts).connect(5)\n"
        "except Exception as exc:\n"
        "    print(exc)\n"
    )
    repo = str(Path(__file__).resolve().parent.parent)
    empty = cluster2["node1"].dir / "empty_ssh_config"
    empty.write_text("")
    argv = ["env", f"PYTHONPATH={repo}", sys.executable, "-c", script, str(empty)]
    out = cluster2.exec("node1", argv, timeout=60)
    msg = out.stdout.decode()
    assert "x (no-such-host.invalid:22): cannot resolve the host name" in msg, out.stderr


@pytest.mark.cluster
def test_dead_node(cluster_factory: ClusterFactory) -> None:
    c = cluster_factory(1)
    t = _connect(NodeConfig(name="n1", host="node1"), _opts(c))
    assert t.run("true", timeout=20).exit_code == 0
    c.stop_host("node1", link_down=False)
    deadline = time.monotonic() + 10
    while t._transport is not None and t._transport.is_active():
        assert time.monotonic() < deadline, "paramiko did not notice the dropped connection"
        time.sleep(0.05)
    with pytest.raises(TransportError, match="lost"):
        t.run("true", timeout=5)
    with pytest.raises(TransportError, match="refused"):
        t.connect(5)  # reconnect attempt: the address answers, sshd is gone
    c.exec("node1", ["true"])  # the namespace itself is still there
    c.stop_host("node1")  # and now the cable too: silence
    start = time.monotonic()
    with pytest.raises(TransportError, match=r"no answer within 1s|unreachable"):
        t.connect(1.0)
    assert time.monotonic() - start < 3
    t.close()


@pytest.mark.cluster
def test_nodes_connect_at_once(cluster2: Cluster) -> None:
    """As the controller connects them (``map_at_once``): N nodes cost what the slowest one does,
    and a dead one is its own error, not the others'."""
    from ddptui.remote.reach import Done, Failed, map_at_once

    opts = _opts(cluster2, connect_timeout=1.5)
    good = [SSHTransport(NodeConfig(name=h.name, host=h.name), opts) for h in cluster2.hosts]
    # Three dead addresses, 1.5 s each: one after another that is 4.5 s, together 1.5 s.
    ghosts = [
        SSHTransport(NodeConfig(name=f"ghost{i}", host=cluster2.free_ip(i)), opts) for i in range(3)
    ]
    start = time.monotonic()
    every = [*good, *ghosts]
    res = {r.item.node: r for r in map_at_once(every, lambda t: t.connect())}
    elapsed = time.monotonic() - start
    try:
        assert isinstance(res["node1"], Done) and isinstance(res["node2"], Done)
        for g in ghosts:
            failed = res[g.node]
            assert isinstance(failed, Failed)
            assert isinstance(failed.error, TransportError) and failed.error.node == g.node
        assert elapsed < 3.5
        for t in good:
            assert t.run("hostname", timeout=20).stdout.strip() == t.node
    finally:
        for t in [*good, *ghosts]:
            t.close()


# -- local -----------------------------------------------------------------------------------


def test_local_transport_round_trips(tmp_path: Path) -> None:
    node = NodeConfig(name="me", host="localhost", transport="local")
    t = make_transport(node, HostsConfig(Path("h.yaml"), (node,)))
    assert isinstance(t, LocalTransport)
    t.connect(1)
    assert t.address == "127.0.0.1"
    r = t.run("printf 'ü ✓'; printf 'ërr' >&2; printf '\\377' >&2; exit 4", timeout=10)
    assert (r.exit_code, r.stdout, r.stderr) == (4, "ü ✓", "ërr\ufffd")
    path = str(tmp_path / "f.bin")
    data = bytes(range(256)) * 100
    t.put_bytes(data, path, mode=0o640)
    t.put_bytes(data + b"!", path, mode=0o640)
    assert (tmp_path / "f.bin").stat().st_mode & 0o777 == 0o640
    assert t.read_from(path, 0, 10**6) == data + b"!"
    assert t.read_from(path, 256, 3) == bytes([0, 1, 2])
    assert t.read_from(path, len(data) + 1, 10) == b""
    assert os.listdir(tmp_path) == ["f.bin"]
    with pytest.raises(FileNotFoundError):
        t.read_from(str(tmp_path / "nope"), 0, 1)
    assert t.home() == os.path.expanduser("~")
    t.close()


def test_local_timeout_kills_the_command_tree(tmp_path: Path) -> None:
    t = LocalTransport(NodeConfig(name="me", host="localhost", transport="local"))
    marker = tmp_path / "pid"
    start = time.monotonic()
    with pytest.raises(TransportError, match="timed out"):
        t.run(f"sleep 60 & echo $! > {marker}; wait", timeout=0.5)
    assert time.monotonic() - start < 5
    pid = int(marker.read_text())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and "Z" not in _proc_state(pid):
        assert time.monotonic() < deadline, "the command's child survived the timeout"
        time.sleep(0.05)


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0]
    except (OSError, IndexError):
        return "Z"


def test_factory_picks_ssh_for_ssh_nodes() -> None:
    node = NodeConfig(name="a", host="somewhere")
    t = make_transport(node, HostsConfig(Path("h.yaml"), (node,)))
    assert isinstance(t, SSHTransport) and t.node == "a"


def test_the_openssh_line_names_what_the_hosts_file_does_and_never_prompts() -> None:
    node = NodeConfig(name="a", host="gpu-a", user="alice", port=2222,
                      identity_file="~/keys/id a")
    opts = SSHOptions(config_file="~/ssh config", known_hosts="/k/known hosts",
                      connect_timeout=3.5, accept_new_host_keys=True)
    home = os.path.expanduser("~")
    assert openssh.argv(node, opts, "echo hi") == [
        "ssh", "-T", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
        "-o", "ConnectTimeout=4", "-o", "LogLevel=ERROR", "-F", f"{home}/ssh config",
        "-o", 'UserKnownHostsFile="/k/known hosts"', "-l", "alice", "-p", "2222",
        "-i", f"{home}/keys/id a", "-o", "IdentitiesOnly=yes", "--", "gpu-a", "echo hi"]
    bare = openssh.argv(NodeConfig(name="b", host="gpu-b"), SSHOptions(), "true")
    assert bare[-3:] == ["--", "gpu-b", "true"] and not {"-l", "-p", "-i", "-F"} & set(bare)


def test_the_openssh_line_reaches_a_known_host_and_refuses_an_unknown_one(
        cluster2: Cluster, tmp_path: Path) -> None:
    """Real OpenSSH on the line ddptui builds: the command runs, its stdin is the command's;
    a host whose key is not known is refused, even where ddptui itself would accept it new
    (the first contact is ddptui's to record)."""
    node = NodeConfig(name="node1", host="node1")
    ran = subprocess.run(openssh.argv(node, _opts(cluster2), "cat; echo done"),
                         input=b"from stdin\n", capture_output=True, timeout=30)
    assert ran.returncode == 0 and ran.stdout == b"from stdin\ndone\n", ran.stderr
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    refused = subprocess.run(openssh.argv(node, _opts(cluster2, known_hosts=str(empty),
                                                      accept_new_host_keys=True), "true"),
                             stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    assert refused.returncode == 255 and empty.read_text() == ""
