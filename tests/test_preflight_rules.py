"""Preflight's rules on constructed reports: every check passing, failing and not applying,
and the one line each failure gives (what is wrong, where, what to do)."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest

from ddptui.config import HostsConfig, NodeConfig, RendezvousConfig
from ddptui.diagnose.preflight import CHECKS, Endpoint, Mark, NodeReport, Verdict, judge
from ddptui.diagnose.preflight.report import (
    Connect,
    Gpu,
    GpuInfo,
    GpuProcess,
    Listen,
    PortHolder,
    TorchInfo,
    Workdir,
    read_gpus,
)
from ddptui.faces.check import print_check
from ddptui.launch.precheck import Outcome

DATA = Path(__file__).parent / "data" / "preflight"
IPS = {"a": "10.0.0.1", "b": "10.0.0.2", "c": "10.0.0.3"}
EP = Endpoint("10.0.0.1", 29400, "a")
#: The versions the H100 capture printed (h100-nvidia-smi.txt's last lines).
H100_TORCH = TorchInfo("2.11.0+cu130", "13.0", "2.28.9", True, 1)


def config(*names: str, **node: Any) -> HostsConfig:
    return HostsConfig(Path("h.yaml"), tuple(NodeConfig(n, f"host-{n}", **node)
                                             for n in names or ("a", "b")))


def healthy(name: str, **over: Any) -> NodeReport:
    r = NodeReport(
        name, python="/usr/bin/python3", python_version="3.11.7",
        torch=TorchInfo("2.13.0+cpu"), hostname=name, fqdn=name, host_addrs=(IPS[name],),
        route_dest=EP.host, route_dev="lo" if name == "a" else "eth0", route_src=IPS[name],
        interfaces={"lo": ("127.0.0.1",), "eth0": (IPS[name],)},
        workdir=Workdir("/w", True, True, 50 << 30), gpu_checked=True, gpu=None,
        listen=Listen(True, 2) if name == "a" else None, connect=Connect("ok", EP.host, None, 3),
        clock_offset=0.01)
    return dataclasses.replace(r, **over)


def verdict(reports: list[NodeReport], cfg: HostsConfig | None = None,
            endpoint: Endpoint = EP) -> Verdict:
    cfg = cfg or config(*(r.node for r in reports))
    return judge(cfg, {r.node: r for r in reports}, endpoint)


def only_failure(v: Verdict) -> tuple[str, str, str]:
    [r] = [r for r in v.results if r.mark == Mark.FAIL]
    assert r.problem is not None
    return r.node, r.check, r.problem


def test_a_healthy_cpu_cluster_passes() -> None:
    v = verdict([healthy("a"), healthy("b")])
    assert v.ok and v.problems == []
    marks = {(r.node, r.check): r.mark for r in v.results}
    assert [marks["a", c] for c in CHECKS] == [Mark.PASS] * 3 + [Mark.SKIP] * 3 + \
        [Mark.PASS] * 6  # gpus, gpu use: no nvidia-smi; cpus: not on Slurm
    assert marks["b", "port"] == Mark.SKIP and marks["b", "reach"] == Mark.PASS
    assert v.get("b", "network").detail == "eth0 → 10.0.0.1"  # type: ignore[union-attr]


def test_unreachable_and_missing_interpreter_stop_the_other_checks() -> None:
    down = NodeReport("b", unreachable="cannot connect to 10.0.0.2:22: timed out")
    v = verdict([healthy("a"), down])
    assert only_failure(v) == ("b", "ssh",
                               "node b (host-b): cannot connect to 10.0.0.2:22: timed out")
    assert all(r.mark == Mark.SKIP for r in v.results if r.node == "b" and r.check != "ssh")
    gone = NodeReport("b", not_run="ddptui: no such interpreter: /opt/py", python_missing=True)
    node, check, line = only_failure(verdict([healthy("a"), gone]))
    assert (node, check) == ("b", "python")
    assert "the interpreter 'python3' does not exist there (ddptui: no such interpreter" in line
    broken = NodeReport("b", not_run="SyntaxError: invalid syntax")
    assert only_failure(verdict([healthy("a"), broken]))[2].startswith(
        "node b: python3 could not run the check: SyntaxError")


def test_torch_versions_must_agree_and_the_odd_one_is_named() -> None:
    odd = TorchInfo("2.99.0")
    v = verdict([healthy("a"), healthy("b"), healthy("c", torch=odd)])
    assert only_failure(v) == ("c", "torch", (
        "node c has torch 2.99.0 but node a has torch 2.13.0+cpu: ranks of different builds "
        "fail or hang at the first collective. Install the same torch on every node, or point "
        "node c's `python:` at an environment that has it."))
    # two nodes, a tie: node rank 0 is the reference; a CUDA or NCCL difference alone counts
    other = dataclasses.replace(H100_TORCH, nccl="2.21.5")
    node, _, line = only_failure(verdict([healthy("a", torch=H100_TORCH),
                                          healthy("b", torch=other)]))
    assert node == "b" and line.startswith("node b has NCCL 2.21.5 but node a has NCCL 2.28.9")
    node, _, line = only_failure(verdict([healthy("a", torch=TorchInfo(error="ImportError: x")),
                                          healthy("b")]))
    assert node == "a" and "cannot import torch (ImportError: x)" in line
    assert verdict([healthy("a", torch=None), healthy("b")]).get(
        "a", "torch").mark == Mark.SKIP  # type: ignore[union-attr]


def h100(apps: str = "", procs: dict[str, Any] | None = None, **gpu: Any) -> GpuInfo:
    apps = apps or (DATA / "h100-nvidia-smi-compute-apps.txt").read_text()
    g = read_gpus((DATA / "h100-nvidia-smi-query-idle.csv").read_text(), apps, procs)
    return dataclasses.replace(g, **gpu)


@pytest.mark.parametrize(("nproc", "gpu", "torch", "mark", "said"), [
    (1, "h100", H100_TORCH, Mark.PASS, "1× NVIDIA H100 80GB HBM3"),
    ("gpu", "h100", H100_TORCH, Mark.PASS, "1×"),
    (2, "h100", H100_TORCH, Mark.FAIL, "has 1 GPU(s) (1× NVIDIA H100 80GB HBM3) but "
     "nproc_per_node is 2: ranks would share a GPU, which NCCL refuses"),
    (1, "h100", TorchInfo("2.11.0+cpu"), Mark.FAIL, "its torch 2.11.0+cpu is a CPU build"),
    (1, "h100", dataclasses.replace(H100_TORCH, cuda_available=False), Mark.FAIL,
     "torch cannot use them (torch.cuda.is_available() is False): the driver is older than "
     "CUDA 13.0 needs"),
    ("auto", None, TorchInfo("2.13.0+cpu"), Mark.SKIP, "no nvidia-smi"),
    (2, None, TorchInfo("2.13.0+cpu"), Mark.SKIP, "no nvidia-smi"),
    ("gpu", None, TorchInfo("2.13.0+cpu"), Mark.FAIL, "has no nvidia-smi, so no NVIDIA GPU"),
    ("gpu", "none", H100_TORCH, Mark.FAIL, "lists no GPU but nproc_per_node is `gpu`"),
    (1, "broken", H100_TORCH, Mark.FAIL, "nvidia-smi fails (NVIDIA-SMI has failed"),
])
def test_gpus_against_nproc_per_node(nproc: Any, gpu: str | None, torch: TorchInfo,
                                     mark: Mark, said: str) -> None:
    info = {"h100": h100(), None: None, "none": GpuInfo(),
            "broken": GpuInfo(error="NVIDIA-SMI has failed because it couldn't communicate "
                                    "with the NVIDIA driver.")}[gpu]
    r = healthy("a", gpu=info, torch=torch)
    v = verdict([r], config("a", nproc_per_node=nproc))
    got = v.get("a", "gpus")
    assert got is not None and got.mark == mark
    assert said in (got.problem or got.detail), got


BUSY = (DATA / "h100-nvidia-smi-compute-apps.txt").read_text().splitlines()[0] + \
    "\n4242, python3, 20480 MiB, GPU-76d5d0e1-3ccb-a2a4-e982-f89aff455b2e\n"


@pytest.mark.parametrize(("gpu", "mark", "said"), [
    (h100(), Mark.PASS, "idle"),
    (h100(BUSY, {"4242": {"cmd": "python3 -m ddptui_worker", "run": "20261122-1-ab/1"}}),
     Mark.FAIL, "node a: GPU 0 by pid 4242 (python3 -m ddptui_worker, 20,480 MiB). A new run "
     "there would run out of memory or share the GPU; it is left from ddptui run "
     "20261122-1-ab: `ddptui stop 20261122-1-ab`."),
    (h100(BUSY, {"4242": {"cmd": "python train.py", "run": None}}), Mark.FAIL,
     "stop it if it is an orphan of an earlier run, or choose other GPUs"),
    (h100(BUSY), Mark.FAIL, "GPU 0 by pid 4242 (python3, 20,480 MiB)"),
    (dataclasses.replace(h100(), gpus=(Gpu(0, "NVIDIA H100 80GB HBM3", "u", 30000.0,
                                           81559.0),)),
     Mark.FAIL, "GPU 0 holds 30,000 MiB for a process not shown here (another container?)"),
    (None, Mark.SKIP, "not applicable"),
])
def test_gpus_already_in_use(gpu: GpuInfo | None, mark: Mark, said: str) -> None:
    got = verdict([healthy("a", gpu=gpu)], config("a")).get("a", "gpu use")
    assert got is not None and got.mark == mark
    assert said in (got.problem or got.detail), got


def test_a_process_row_for_a_gpu_shows_its_index() -> None:
    g = GpuInfo((Gpu(0, "A", "u0", 1.0, 2.0), Gpu(1, "A", "u1", 1.0, 2.0)),
                (GpuProcess(9, "x", 5.0, "u1"),))
    got = verdict([healthy("a", gpu=g)], config("a")).get("a", "gpu use")
    assert got is not None and "GPU 1 by pid 9 (x, 5 MiB)" in (got.problem or "")


USING_B = ("node b: using eth0 10.0.0.2 toward the rendezvous; its name b resolves to 127.0.1.1 "
           "(loopback)")
NO_WAY = {"route_src": None, "route_dev": None}


@pytest.mark.parametrize(("over", "node", "backend", "mark", "said"), [
    # the name fails, the route gives the address and interface to use instead
    ({"host_addrs": ("127.0.1.1",)}, {}, "c10d", Mark.PASS,
     USING_B + " (torchrun --local-addr, GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME set for this "
     "run; set `addr:` and GLOO_SOCKET_IFNAME in its `env:` to choose otherwise)"),
    ({"host_addrs": ("127.0.1.1",)}, {"addr": "10.0.0.2"}, "c10d", Mark.PASS,
     USING_B + " (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME set"),
    ({"host_addrs": ("127.0.1.1",)}, {"env": {"GLOO_SOCKET_IFNAME": "eth0"}}, "c10d",
     Mark.PASS, USING_B + " (torchrun --local-addr set"),
    ({"host_addrs": ("127.0.1.1",)}, {"env": {"GLOO_SOCKET_IFNAME": "eth0"}}, "static",
     Mark.PASS, "b → 127.0.1.1"),
    ({"host_addrs": ("127.0.1.1",)}, {"addr": "10.0.0.2", "env": {
        "GLOO_SOCKET_IFNAME": "eth0"}}, "c10d", Mark.PASS, "b → 127.0.1.1"),
    # the fqdn is fine, the short name is not: gloo's trap only
    ({"fqdn": "b.lan", "short_addrs": ("127.0.1.1",)}, {}, "c10d", Mark.PASS,
     USING_B + " (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME set"),
    ({"host_addrs": None, "host_error": "[Errno -2] Name or service not known"}, {}, "c10d",
     Mark.PASS, "node b: using eth0 10.0.0.2 toward the rendezvous; its name b does not "
     "resolve ([Errno -2] Name or service not known)"),
    # no routable address known: refused, as before
    ({"host_addrs": ("127.0.1.1",), **NO_WAY}, {}, "c10d", Mark.FAIL,
     "node b: c10d advertises the node as 'b', which resolves to 127.0.1.1 (loopback) there; "
     "gloo binds to the address of 'b', which resolves to 127.0.1.1 (loopback) there; no "
     "route toward the rendezvous was found there, so no address the other nodes reach is "
     "known for it. Map the name to the node's network address in /etc/hosts, or set "
     "`addr:` for this node and GLOO_SOCKET_IFNAME in its `env:`."),
    ({"host_addrs": ("127.0.1.1",), "route_src": "127.0.0.1", "route_dev": "lo"}, {}, "c10d",
     Mark.FAIL, "its route toward the rendezvous leaves from 127.0.0.1 (lo), so no address"),
    ({"host_addrs": ("127.0.1.1",), "interfaces": {"lo": ("127.0.0.1",)}}, {}, "c10d",
     Mark.FAIL, "its route toward the rendezvous leaves from 10.0.0.2 (eth0), so no address"),
    ({"fqdn": None}, {}, "c10d", Mark.SKIP, "not checked"),
])
def test_hostname_resolving_to_loopback(over: dict[str, Any], node: dict[str, Any],
                                        backend: str, mark: Mark, said: str) -> None:
    cfg = HostsConfig(Path("h"), (NodeConfig("a", "host-a"), NodeConfig("b", "host-b", **node)),
                      rendezvous=RendezvousConfig(backend=backend))  # type: ignore[arg-type]
    got = verdict([healthy("a"), healthy("b", **over)], cfg).get("b", "hostname")
    assert got is not None and got.mark == mark and said in (got.problem or got.detail), got


def test_the_rendezvous_node_binds_on_the_interface_that_holds_its_address() -> None:
    """Its route to its own address leaves over lo, with the address of eth0 as source."""
    v = verdict([healthy("a", host_addrs=("127.0.1.1",)), healthy("b")])
    got = v.get("a", "hostname")
    assert got is not None and got.mark == Mark.PASS and got.detail == "eth0 10.0.0.1 (chosen)"
    [chosen] = v.routes
    assert (chosen.node, chosen.ifname, chosen.addr, chosen.local_addr) == (
        "a", "eth0", "10.0.0.1", "10.0.0.1")
    assert dict(chosen.env) == {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "=eth0"}
    assert v.ok and [r.node for r in v.cautions] == ["a"]


def test_the_users_nccl_interface_is_kept() -> None:
    v = verdict([healthy("a"), healthy("b", host_addrs=("127.0.1.1",),
                                       login_env={"NCCL_SOCKET_IFNAME": "eth"})])
    [chosen] = v.routes
    assert dict(chosen.env) == {"GLOO_SOCKET_IFNAME": "eth0"}


def test_loopback_is_no_trap_on_one_machine() -> None:
    loop = {"host_addrs": ("127.0.0.1",), "fqdn": "localhost"}
    for cfg in (config("a"), config("a", "b", transport="local")):
        v = verdict([healthy(n.name, **loop) for n in cfg.nodes], cfg)
        assert v.ok, v.problems


@pytest.mark.parametrize(("over", "env", "mark", "said"), [
    ({"route_error": "[Errno -2] Name or service not known"}, {}, Mark.FAIL,
     "node b cannot reach the rendezvous endpoint 10.0.0.1 ([Errno -2] Name or service not"),
    ({}, {"NCCL_SOCKET_IFNAME": "eth9"}, Mark.FAIL,
     "node b: NCCL_SOCKET_IFNAME=eth9 selects no interface with an address (it has lo, eth0), "
     "so NCCL stops with 'Bootstrap : no socket interface found'. Name an interface it has in "
     "`env:` for this node; eth0 routes to the rendezvous."),
    ({}, {"NCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth0"}, Mark.PASS,
     "eth0 → 10.0.0.1"),
    ({"login_env": {"GLOO_SOCKET_IFNAME": "eth9"}}, {}, Mark.FAIL, "GLOO_SOCKET_IFNAME=eth9"),
    ({"login_env": {"GLOO_SOCKET_IFNAME": "eth9"}}, {"GLOO_SOCKET_IFNAME": "eth0"}, Mark.PASS,
     "eth0"),  # the hosts file's env wins over the login's
    ({"interfaces": {}, "route_dest": None}, {}, Mark.SKIP, "not checked"),
])
def test_route_and_socket_interfaces(over: dict[str, Any], env: dict[str, str], mark: Mark,
                                     said: str) -> None:
    cfg = HostsConfig(Path("h"), (NodeConfig("a", "host-a"), NodeConfig("b", "host-b", env=env)))
    got = verdict([healthy("a"), healthy("b", **over)], cfg).get("b", "network")
    assert got is not None and got.mark == mark and said in (got.problem or got.detail), got


@pytest.mark.parametrize(("over", "mark", "said"), [
    ({"workdir": Workdir("/w", False, False, 1 << 40, "Permission denied")}, Mark.FAIL,
     "node a: workdir /w (to be created) is not writable (Permission denied)"),
    ({"workdir": Workdir("/w", True, True, 300 << 20)}, Mark.FAIL,
     "node a: only 0.3 GiB free at /w: logs and snapshots may fill it midway"),
    ({"workdir": None, "errors": {"workdir": "PermissionError: x"}}, Mark.FAIL,
     "could not check workdir ~/.ddptui-work: PermissionError: x."),
    ({"workdir": None}, Mark.SKIP, "not checked"),
    ({"clock_offset": -7.25}, Mark.FAIL, "node a's clock is -7.2 s off this machine's"),
    ({"clock_offset": None}, Mark.SKIP, "not checked"),
])
def test_workdir_and_clock(over: dict[str, Any], mark: Mark, said: str) -> None:
    v = verdict([healthy("a", **over)], config("a"))
    [got] = [r for r in v.results if r.check in ("workdir", "clock") and
             (r.mark != Mark.PASS or mark == Mark.PASS)]
    assert got.mark == mark and said in (got.problem or got.detail), got


def test_port_in_use_names_the_holder_and_the_fix() -> None:
    held = Listen(False, 0, "[Errno 98] Address already in use", True,
                  (PortHolder(777, "python -m torch.distributed.run ...", "r9/0"),))
    v = verdict([healthy("a", listen=held), healthy("b", connect=Connect("foreign"))])
    assert only_failure(v) == ("a", "port", (
        "node a: the rendezvous port 29400 is already in use there by pid 777 (python -m "
        "torch.distributed.run ..., ddptui run r9), so torchrun cannot start its store: "
        "`ddptui stop r9`, or set `rendezvous.port` to a free port."))
    assert v.get("b", "reach").detail == "port taken"  # type: ignore[union-attr]
    anon = Listen(False, 0, "[Errno 98] Address already in use", True)
    line = only_failure(verdict([healthy("a", listen=anon), healthy("b")]))[2]
    assert "in use there, so torchrun" in line and "stop it (a leftover torchrun?)" in line
    denied = Listen(False, 0, "[Errno 13] Permission denied")
    assert "cannot bind the rendezvous port 29400 ([Errno 13]" in only_failure(
        verdict([healthy("a", listen=denied), healthy("b")]))[2]


@pytest.mark.parametrize(("conn", "said"), [
    (Connect("timeout", "10.0.0.1"), "node b cannot reach the rendezvous at 10.0.0.1:29400: "
     "connection attempts time out, so packets are dropped (a firewall on node a or on the "
     "way). Allow TCP 29400 into node a from the other nodes"),
    (Connect("refused", "10.0.0.1"), "node b: connections to the rendezvous at 10.0.0.1:29400 "
     "are refused while ddptui listened there: a firewall on node a rejects them."),
    (Connect("error", "10.0.0.1", "No route to host"), "fails: No route to host (a firewall "
     "REJECT with an ICMP error, or a routing problem)"),
    (Connect("unresolved"), "the rendezvous endpoint '10.0.0.1' does not resolve there"),
    (Connect("foreign"), "something other than node a answers at 10.0.0.1:29400"),
])
def test_reaching_the_rendezvous(conn: Connect, said: str) -> None:
    node, check, line = only_failure(verdict([healthy("a"), healthy("b", connect=conn)]))
    assert (node, check) == ("b", "reach") and said in line, line


def test_the_store_node_blocked_from_its_own_address_is_told_so() -> None:
    """A firewall that filters lo too: the advice names the node itself, not the others."""
    _, _, said = only_failure(verdict([healthy("a", connect=Connect("refused", "10.0.0.1")),
                                       healthy("b")]))
    assert said.endswith("Allow TCP 29400 into node a from node a itself (its connections to "
                         "10.0.0.1 arrive over lo)."), said


def test_reach_is_not_judged_without_the_listener() -> None:
    refused = Connect("refused")
    gone = NodeReport("a", not_run="ddptui: no such interpreter: x", python_missing=True)
    v = verdict([gone, healthy("b", connect=refused)])
    assert only_failure(v)[:2] == ("a", "python")
    assert v.get("b", "reach").detail == "not tested: node a did not listen"  # type: ignore
    # an endpoint that is none of the nodes (by name or address): nobody listened, so a
    # refusal says nothing, while a drop still does
    outside = Endpoint("store.example", 29400, None)
    v = verdict([healthy("a", listen=None), healthy("b", connect=refused)], endpoint=outside)
    assert v.ok and v.get("b", "reach").mark == Mark.SKIP  # type: ignore[union-attr]
    v = verdict([healthy("a", listen=None), healthy("b", connect=Connect("timeout"))],
                endpoint=outside)
    assert only_failure(v)[2].startswith("node b cannot reach the rendezvous at "
                                         "store.example:29400: connection attempts time out")


def test_the_check_face_table_lines_json_and_exit_code() -> None:
    bad = healthy("b", connect=Connect("timeout", "10.0.0.1"), clock_offset=3.0)
    v = verdict([healthy("a"), bad])
    out = io.StringIO()
    code = print_check(Outcome(v, {}, EP, 1.24), ["a", "b"], out)
    text = out.getvalue().splitlines()
    assert code == 1
    assert text[0].split() == ["node", "ssh", "python", "torch", "gpus", "gpu", "use", "cpus",
                               "hostname", "network", "workdir", "clock", "port", "reach"]
    assert text[1].split() == ["a", "✓", "✓", "✓", "-", "-", "-", "✓", "✓", "✓", "✓", "✓", "✓"]
    assert text[2].split() == ["b", "✓", "✓", "✓", "-", "-", "-", "✓", "✓", "✓", "✗", "-", "✗"]
    assert text[4].startswith("✗ clock: node b's clock is +3.0 s off")
    assert text[5].startswith("✗ reach: node b cannot reach the rendezvous at 10.0.0.1:29400")
    assert text[6] == "torch 2.13.0+cpu on every node checked; rendezvous 10.0.0.1:29400 on a"
    assert text[7] == "ddptui: 2 problem(s) on b; a run would fail or hang (1.2 s)"
    out = io.StringIO()
    assert print_check(Outcome(v, {}, EP, 1.0), ["a", "b"], out, json_out=True) == 1
    js = json.loads(out.getvalue())
    assert js["ok"] is False and js["checks"] == list(CHECKS) and len(js["problems"]) == 2
    assert js["nodes"]["b"]["reach"]["status"] == "fail"
    assert js["nodes"]["a"]["gpus"] == {"status": "n/a", "detail": "no nvidia-smi",
                                        "problem": None}
    ok = io.StringIO()
    assert print_check(Outcome(verdict([healthy("a"), healthy("b")]), {}, EP, 0.4),
                       ["a", "b"], ok) == 0
    assert ok.getvalue().splitlines()[-1] == "ddptui: 2 node(s) ready (0.4 s)"



def test_parts_that_did_not_answer_in_time_fail() -> None:
    """A hung nvidia-smi, NFS workdir or name service is a broken node, not a skipped check."""
    out = {"v": 1, "python": "/usr/bin/python3", "version": "3.11.7", "time": 0.0,
           "interfaces": {"lo": ["127.0.0.1"], "eth0": ["10.0.0.2"]},
           "route": {"dest": "10.0.0.1", "rc": 0, "out": "10.0.0.1 dev eth0 src 10.0.0.2"},
           "connect": {"result": "ok", "addr": "10.0.0.1", "ms": 2},
           "pending": ["gpus", "workdir", "names"]}
    from ddptui.diagnose.preflight import parse_report

    r = dataclasses.replace(parse_report("b", json.dumps(out)), torch=TorchInfo("2.13.0+cpu"))
    v = verdict([healthy("a"), r])
    fails = {x.check: x.problem for x in v.results if x.mark == Mark.FAIL}
    assert set(fails) == {"gpus", "workdir", "hostname"}, fails
    assert "nvidia-smi fails (nvidia-smi did not answer in time)" in fails["gpus"]
    assert "could not check workdir ~/.ddptui-work: no answer in time" in fails["workdir"]
    assert fails["hostname"].startswith("node b: looking up its own hostname failed (no "
                                        "answer in time)")


def test_the_endpoint_node_gets_no_loopback_hint() -> None:
    cfg = HostsConfig(Path("h"), (NodeConfig("a", "host-a", env={"NCCL_SOCKET_IFNAME": "eth9"}),
                                  NodeConfig("b", "host-b")))
    node, check, line = only_failure(verdict([healthy("a"), healthy("b")], cfg))
    assert (node, check) == ("a", "network") and line.endswith("in `env:` for this node.")
