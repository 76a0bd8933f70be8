"""Preflight's node program run here for real (its sockets, its files), what it prints read
back, the recorded nvidia-smi captures read, and the one command quoted safely."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ddptui.config import HostsConfig, NodeConfig, RendezvousConfig
from ddptui.diagnose.preflight import Endpoint, parse_report
from ddptui.diagnose.preflight.ifname import ifname_problems, nccl_picks, parse_nccl
from ddptui.diagnose.preflight.probe import NODE_SRC
from ddptui.diagnose.preflight.report import read_gpus, read_route
from ddptui.launch.precheck import endpoint_of, node_args

DATA = Path(__file__).parent / "data" / "preflight"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_program(tmp: Path, **over: Any) -> subprocess.CompletedProcess[str]:
    args = {"workdir": str(tmp / "wd"), "endpoint": "127.0.0.1", "port": free_port(),
            "listen": True, "expect": 1, "connect": True, "nonce": "n0nce", "torch": False,
            "listen_s": 3.0, "connect_s": 1.5, "attempt_s": 1.0, "budget_s": 8.0, **over}
    return subprocess.run([sys.executable, "-c", NODE_SRC, json.dumps(args)],
                          capture_output=True, text=True, timeout=60)


def test_the_program_listens_connects_and_reports(tmp_path: Path) -> None:
    p = run_program(tmp_path)
    assert p.returncode == 0, p.stderr
    r = parse_report("a", p.stdout, received_at=json.loads(p.stdout)["time"] + 0.5)
    assert r.python == sys.executable and r.python_version == sys.version.split()[0]
    assert r.listen is not None and r.listen.bound and r.listen.accepted == 1
    assert r.connect is not None and r.connect.result == "ok" and r.connect.addr == "127.0.0.1"
    assert r.workdir is not None and r.workdir.writable and not r.workdir.exists
    assert r.workdir.free_bytes and r.workdir.free_bytes > 0
    assert not list((tmp_path).iterdir()), "the write test left a file or made the workdir"
    assert r.route_dev == "lo" and r.route_dest == "127.0.0.1"
    assert "lo" in r.interfaces and "127.0.0.1" in r.interfaces["lo"]
    assert r.hostname == socket.gethostname() and r.torch is None
    assert r.clock_offset == pytest.approx(-0.5)
    assert r.gpu_checked and r.gpu is None  # no nvidia-smi on this machine


def test_the_program_names_who_holds_the_port(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        p = run_program(tmp_path, port=port, connect=False)
    r = parse_report("a", p.stdout)
    assert r.listen is not None and not r.listen.bound and r.listen.in_use
    assert [h.pid for h in r.listen.holders] == [os.getpid()]
    assert "pytest" in (r.listen.holders[0].command or "") or sys.executable in (
        r.listen.holders[0].command or "")


def test_the_program_tells_refused_after_retrying(tmp_path: Path) -> None:
    p = run_program(tmp_path, listen=False, connect_s=0.6)
    r = parse_report("a", p.stdout)
    assert r.connect is not None and r.connect.result == "refused"
    assert r.listen is None and r.connect.ms is not None and r.connect.ms >= 500


def test_the_program_with_torch_reports_versions(tmp_path: Path) -> None:
    import torch

    p = run_program(tmp_path, torch=True, listen=False, connect=False)
    r = parse_report("a", p.stdout)
    assert r.torch is not None and r.torch.version == torch.__version__
    assert r.torch.cuda == torch.version.cuda and r.torch.error is None


def test_the_program_reports_an_unwritable_workdir(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        p = run_program(tmp_path, workdir=str(ro), listen=False, connect=False)
    finally:
        ro.chmod(0o700)
    r = parse_report("a", p.stdout)
    assert r.workdir is not None and r.workdir.exists
    # root writes anywhere; the program tries a real file rather than trusting the mode
    assert r.workdir.writable == (os.geteuid() == 0)


def test_no_answer_and_a_missing_interpreter() -> None:
    r = parse_report("b", "", exit_code=127,
                     stderr="ddptui: no such interpreter: /opt/py\n")
    assert r.python_missing and r.not_run == "ddptui: no such interpreter: /opt/py"
    r = parse_report("b", "motd\n", exit_code=1, stderr="Traceback...\nSyntaxError: x\n")
    assert not r.python_missing and r.not_run == "SyntaxError: x" and r.python is None


def test_recorded_h100_query_and_empty_process_list() -> None:
    g = read_gpus((DATA / "h100-nvidia-smi-query-idle.csv").read_text(),
                  (DATA / "h100-nvidia-smi-compute-apps.txt").read_text())
    assert [(x.index, x.name, x.used_mib, x.total_mib) for x in g.gpus] == [
        (0, "NVIDIA H100 80GB HBM3", 0.0, 81559.0)]
    assert g.gpus[0].uuid == "GPU-76d5d0e1-3ccb-a2a4-e982-f89aff455b2e"
    assert g.processes == ()


def test_busy_rows_in_the_recorded_format() -> None:
    head = (DATA / "h100-nvidia-smi-compute-apps.txt").read_text().splitlines()[0]
    apps = (f"{head}\n4242, python3, 20480 MiB, GPU-76d5d0e1-3ccb-a2a4-e982-f89aff455b2e\n"
            "77, a, b, c, [N/A], GPU-x\n")
    g = read_gpus((DATA / "h100-nvidia-smi-query-idle.csv").read_text(), apps,
                  {"4242": {"cmd": "python3 -m ddptui_worker", "run": "r1/0"}})
    p, q = g.processes
    assert (p.pid, p.name, p.used_mib, p.command, p.run) == (
        4242, "python3", 20480.0, "python3 -m ddptui_worker", "r1/0")
    assert (q.pid, q.name, q.used_mib, q.gpu_uuid) == (77, "a, b, c", None, "GPU-x")


def test_a_failing_nvidia_smi_is_kept_as_its_words() -> None:
    out = {"v": 1, "python": "/p", "gpus": {
        "query": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                 "driver.\n", "query_rc": 9, "apps": "", "apps_rc": 9, "procs": {}}}
    r = parse_report("a", json.dumps(out))
    assert r.gpu is not None and r.gpu.error is not None
    assert r.gpu.error.startswith("NVIDIA-SMI has failed") and r.gpu.gpus == ()


@pytest.mark.parametrize(("out", "want"), [
    ("10.0.0.1 dev eth0 src 10.0.0.2 uid 0 \\    cache", ("eth0", "10.0.0.2")),
    ("local 10.0.0.2 dev lo table local src 10.0.0.2 uid 0 \\    cache <local>",
     ("lo", "10.0.0.2")),
    ("8.8.8.8 via 192.0.2.1 dev ens5 src 192.0.2.2 uid 1000", ("ens5", "192.0.2.2")),
    ("garbage", (None, None)),
])
def test_route_lines(out: str, want: tuple[str | None, str | None]) -> None:
    assert read_route(out) == want


IFS = {"lo": ("127.0.0.1", "::1"), "eth0": ("10.0.0.2",), "eth1": ("10.1.0.2",),
       "docker0": ("172.17.0.1",), "ib0": (), "ens5": ("192.168.1.4",)}


@pytest.mark.parametrize(("value", "picks"), [
    ("eth", ["eth0", "eth1"]),             # prefixes
    ("eth0,ens", ["eth0", "ens5"]),        # a comma list
    ("=eth", []),                          # exact names only
    ("=eth1", ["eth1"]),
    ("^docker,lo", ["eth0", "eth1", "ens5"]),  # exclusions
    ("^=eth0", ["lo", "eth1", "docker0", "ens5"]),
    ("ib", []),                            # ib0 has no address: NCCL skips it
    ("eth0:1234", ["eth0"]),
    (" eth9 ", []),
])
def test_nccl_socket_ifname_syntax(value: str, picks: list[str]) -> None:
    assert nccl_picks(value, IFS) == picks


def test_nccl_spec_parts() -> None:
    spec = parse_nccl("^=a,b")
    assert (spec.exclude, spec.exact, spec.names) == (True, True, ("a", "b"))


@pytest.mark.parametrize(("env", "multi", "said"), [
    ({}, True, []),
    ({"NCCL_SOCKET_IFNAME": "eth0"}, True, []),
    ({"NCCL_SOCKET_IFNAME": "eth9"}, True, ["NCCL_SOCKET_IFNAME=eth9 selects no interface"]),
    ({"NCCL_SOCKET_IFNAME": "^eth,ens,docker"}, True, ["leaves only loopback (lo)"]),
    ({"NCCL_SOCKET_IFNAME": "^eth,ens,docker"}, False, []),
    ({"NCCL_SOCKET_IFNAME": "lo"}, True, ["leaves only loopback (lo)"]),
    ({"GLOO_SOCKET_IFNAME": "eth0,eth1"}, True, []),
    ({"GLOO_SOCKET_IFNAME": "eth0,eth9"}, True, ["GLOO_SOCKET_IFNAME=eth0,eth9 names eth9,"]),
    ({"GLOO_SOCKET_IFNAME": "eth"}, True, ["names eth, which this node does not have"]),
    ({"GLOO_SOCKET_IFNAME": "ib0"}, True, ["ib0 has no address"]),
    ({"GLOO_SOCKET_IFNAME": "lo"}, True, ["is loopback"]),
    ({"NCCL_SOCKET_IFNAME": "x", "GLOO_SOCKET_IFNAME": "y"}, True, ["NCCL_", "GLOO_"]),
])
def test_ifname_problems(env: dict[str, str], multi: bool, said: list[str]) -> None:
    got = ifname_problems(env, IFS, multi_node=multi)
    assert len(got) == len(said) and all(w in g for w, g in zip(said, got, strict=True)), got


def _config(**rdzv: Any) -> HostsConfig:
    return HostsConfig(Path("h.yaml"), (NodeConfig("a", "host-a"),
                                        NodeConfig("b", "host-b", addr="10.9.9.9")),
                       rendezvous=RendezvousConfig(**rdzv))


@pytest.mark.parametrize(("rdzv", "want"), [
    ({}, Endpoint("10.0.0.1", 29400, "a")),
    ({"backend": "static"}, Endpoint("10.0.0.1", 29500, "a")),
    ({"endpoint": "10.9.9.9", "port": 1234}, Endpoint("10.9.9.9", 1234, "b")),
    ({"endpoint": "host-b"}, Endpoint("host-b", 29400, "b")),
    ({"endpoint": "10.0.0.2"}, Endpoint("10.0.0.2", 29400, "b")),
    ({"endpoint": "store.example"}, Endpoint("store.example", 29400, None)),
])
def test_where_the_rendezvous_is(rdzv: dict[str, Any], want: Endpoint) -> None:
    names = {"b.cluster.local": {"10.0.0.2"}, "10.0.0.2": {"10.0.0.2"}}
    got = endpoint_of(_config(**rdzv), {"a": "10.0.0.1", "b": "10.0.0.2"},
                      lambda h: names.get(h, set()))
    assert got == want


def test_an_endpoint_named_otherwise_is_found_by_address() -> None:
    names = {"b.cluster.local": {"10.0.0.2"}, "host-b": {"10.0.0.2"}}
    got = endpoint_of(_config(endpoint="b.cluster.local"), {}, lambda h: names.get(h, set()))
    assert got == Endpoint("b.cluster.local", 29400, "b")


def test_the_command_quotes_every_value() -> None:
    from ddptui.launch import rank_env

    nasty = "/opt/it's $(rm -rf /) `id`/python3"
    node = NodeConfig("a", "h", python=nasty, workdir="~/w'; echo pwned")
    cfg = HostsConfig(Path("h.yaml"), (node,))
    rank = rank_env.for_node(cfg, node, project="/p'; id")
    args = node_args(node, Endpoint("x';id", 1, "a"), nonce="n", expect=2, with_torch=False)
    cmd = rank_env.command(rank, NODE_SRC, json.dumps(args), no_site=True, bare=False)
    words = shlex.split(cmd.rsplit("; exec ", 1)[1])
    assert words[:3] == [nasty, "-S", "-c"] and words[3] == NODE_SRC
    assert json.loads(words[-1]) == args and args["listen"] and not args["torch"]
    assert "cd '/p'\"'\"'; id' 2>/dev/null" in cmd
    full = rank_env.command(rank, NODE_SRC, json.dumps({**args, "torch": True}))
    assert shlex.split(full.rsplit("; exec ", 1)[1])[:2] == [nasty, "-c"]  # torch: site
    assert args["workdir"] == "~/w'; echo pwned" and args["endpoint"] == "x';id"


def test_no_preflight_reaches_the_engines_controller(tmp_path: Path) -> None:
    from ddptui.engine.process import new_run

    cfg = HostsConfig(tmp_path / "h.yaml", (NodeConfig("a", "localhost", transport="local"),))
    assert new_run(cfg, tmp_path, False).preflight is False  # type: ignore[attr-defined]
    assert new_run(cfg, tmp_path).preflight is True  # type: ignore[attr-defined]


def test_the_automatic_subset_on_sixteen_nodes(tmp_path: Path) -> None:
    """Sixteen local nodes, the endpoint listening for all sixteen connects (how long it takes
    is bench/preflight.py's business: a timed test fails on a busy machine, not on slow code)."""
    from ddptui.launch.precheck import before_launch
    from ddptui.remote.reach import answers, connect, map_at_once

    nodes = tuple(NodeConfig(f"n{i}", "localhost", transport="local",
                             python=sys.executable, workdir=str(tmp_path / f"w{i}"))
                  for i in range(16))
    cfg = HostsConfig(tmp_path / "h.yaml", nodes,
                      rendezvous=RendezvousConfig(endpoint="127.0.0.1", port=free_port()))
    opened = answers(map_at_once(list(nodes), lambda n: connect(n, cfg)))
    transports = {t.item.name: t.value for t in opened}
    try:
        assert len(transports) == len(nodes)
        outcome = before_launch(cfg, transports, {})
    finally:
        for t in transports.values():
            t.close()
    assert outcome.verdict.ok, outcome.verdict.problems
    assert outcome.endpoint.node == "n0"
    assert outcome.reports["n0"].listen is not None and outcome.reports["n0"].listen.accepted == 16
