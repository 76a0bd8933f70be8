"""`ddptui check` and the automatic preflight on a real cluster: real sshd, a real nft
firewall, a real listener on the rendezvous port, a second interpreter with another torch.

One cluster for the module; every test undoes its fault before it ends, so each starts from
the healthy cluster the first test proves passes.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cluster import Cluster
from jobs import ddptui, marked_pids, run_id_of, write_job

pytestmark = [pytest.mark.cluster]
_ports = itertools.count(29870)


def hosts_file(c: Cluster, tmp: Path, *, node2: dict[str, Any] | None = None,
               port: int | None = None) -> tuple[Path, int]:
    port = port or next(_ports)
    nodes: list[dict[str, Any]] = [{"host": h.name, "workdir": str(tmp / f"work-{h.name}")}
                                   for h in c.hosts]
    nodes[1].update(node2 or {})
    d = {
        "defaults": {"python": sys.executable, "nproc_per_node": 2},
        "nodes": nodes,
        "rendezvous": {"port": port},
        "job": {"script": "job.py"},
        "ssh": {"config_file": str(c.ssh_config), "known_hosts": str(c.known_hosts),
                "connect_timeout": 5},
    }
    return write_job(tmp, d), port


def check(path: Path, tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return ddptui("check", str(path), *extra, state=tmp / "state", timeout=120)


def failures(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln.startswith("✗ ")]


def row(out: str, node: str) -> list[str]:
    line = next(ln for ln in out.splitlines() if ln.startswith(node + " "))
    return line.split()[1:]


def marks(out: str, node: str) -> dict[str, str]:
    """The node's marks by column name, so that a new column moves no test."""
    head = next(ln for ln in out.splitlines() if ln.startswith("node "))
    names = re.split(r"\s{2,}", head.strip())[1:]
    return dict(zip(names, row(out, node), strict=True))


def test_healthy_cluster_passes(cluster2: Cluster, tmp_path: Path) -> None:
    path, port = hosts_file(cluster2, tmp_path)
    res = check(path, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert failures(res.stdout) == []
    assert "✗" not in res.stdout and "2 node(s) ready" in res.stdout
    # every check that applies without a GPU was made, on both nodes
    for node in ("node1", "node2"):
        m = marks(res.stdout, node)
        assert [m[c] for c in ("ssh", "python", "torch")] == ["✓"] * 3, res.stdout
        assert [m[c] for c in ("gpus", "gpu use", "cpus")] == ["-"] * 3, res.stdout  # no Slurm
        assert [m[c] for c in ("hostname", "network", "workdir", "clock", "reach")] == [
            "✓"] * 5, res.stdout
    assert marks(res.stdout, "node1")["port"] == "✓" and marks(res.stdout, "node2")["port"] == "-"
    js = json.loads(check(path, tmp_path, "--json").stdout)
    assert js["ok"] is True and js["endpoint"] == {"host": cluster2["node1"].ip, "port": port,
                                                   "node": "node1"}
    assert js["nodes"]["node2"]["hostname"]["detail"] == f"node2 → {cluster2['node2'].ip}"
    assert js["nodes"]["node2"]["network"]["detail"] == f"eth0 → {cluster2['node1'].ip}"


@pytest.mark.parametrize(("verdict", "said"), [
    ("drop", "✗ reach: node node2 cannot reach the rendezvous at {ip}:{port}: connection "
     "attempts time out, so packets are dropped (a firewall on node node1"),
    ("reject with tcp reset", "✗ reach: node node2: connections to the rendezvous at "
     "{ip}:{port} are refused while ddptui listened there: a firewall on node node1 rejects"),
])
def test_firewall_on_the_rendezvous_port(cluster2: Cluster, tmp_path: Path, verdict: str,
                                         said: str) -> None:
    path, port = hosts_file(cluster2, tmp_path)
    with cluster2.filtering("node1", port, verdict):
        res = check(path, tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    want = said.format(ip=cluster2["node1"].ip, port=port)
    assert any(ln.startswith(want) for ln in failures(res.stdout)), res.stdout
    assert marks(res.stdout, "node2")["reach"] == "✗" and marks(res.stdout, "node1")["port"] == "✓"


def test_port_already_bound_on_the_endpoint(cluster2: Cluster, tmp_path: Path) -> None:
    path, port = hosts_file(cluster2, tmp_path)
    with cluster2.holding_port("node1", port, seconds=60) as holder:
        res = check(path, tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert marks(res.stdout, "node1")["port"] == "✗"
    line = next(ln for ln in failures(res.stdout) if ln.startswith("✗ port:"))
    assert f"node node1: the rendezvous port {port} is already in use there by pid " \
           f"{holder.pid} ({sys.executable} -c import socket" in line, line
    assert "set `rendezvous.port` to a free port" in line


def test_socket_interface_missing_on_one_node(cluster2: Cluster, tmp_path: Path) -> None:
    env = {"NCCL_SOCKET_IFNAME": "eth9", "GLOO_SOCKET_IFNAME": "eth9"}
    path, _ = hosts_file(cluster2, tmp_path, node2={"env": env})
    res = check(path, tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert marks(res.stdout, "node1")["network"] == "✓"
    assert marks(res.stdout, "node2")["network"] == "✗"
    [line] = failures(res.stdout)
    assert line.startswith("✗ network: node node2: NCCL_SOCKET_IFNAME=eth9 selects no "
                           "interface with an address (it has lo, eth0)"), line
    assert "GLOO_SOCKET_IFNAME=eth9 names eth9, which this node does not have" in line
    assert "eth0 routes to the rendezvous" in line


def test_another_torch_on_one_node(cluster2: Cluster, tmp_path: Path) -> None:
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('__version__ = "2.99.0"\n')
    wrapper = tmp_path / "python-other"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={fake.parent}${{PYTHONPATH:+:$PYTHONPATH}} '
                       f'exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    path, _ = hosts_file(cluster2, tmp_path, node2={"python": str(wrapper)})
    res = check(path, tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    [line] = failures(res.stdout)
    import torch

    assert line.startswith(f"✗ torch: node node2 has torch 2.99.0 but node node1 has torch "
                           f"{torch.__version__}"), line
    assert row(res.stdout, "node2")[2] == "✗" and row(res.stdout, "node1")[2] == "✓"


def test_missing_interpreter(cluster2: Cluster, tmp_path: Path) -> None:
    path, _ = hosts_file(cluster2, tmp_path, node2={"python": "/opt/nowhere/python3"})
    res = check(path, tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert row(res.stdout, "node2")[:2] == ["✓", "✗"]
    [line] = failures(res.stdout)
    assert line.startswith("✗ python: node node2: the interpreter '/opt/nowhere/python3' does "
                           "not exist there (ddptui: no such interpreter"), line
    # node1 was still checked in full, and the port test did not blame it
    assert marks(res.stdout, "node1") == {
        "ssh": "✓", "python": "✓", "torch": "✓", "gpus": "-", "gpu use": "-", "cpus": "-",
        "hostname": "✓", "network": "✓", "workdir": "✓", "clock": "✓", "port": "✓",
        "reach": "✓"}


def test_run_stops_at_the_automatic_preflight(cluster2: Cluster, tmp_path: Path) -> None:
    path, port = hosts_file(cluster2, tmp_path)
    with cluster2.filtering("node1", port):
        res = ddptui("run", str(path), "--headless", state=tmp_path / "state", timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    assert "the run was not started" in res.stderr and "connection attempts time out" in \
        res.stderr and "--no-preflight" in res.stderr, res.stderr
    assert "[node2] ── failed (preflight: reach)" in res.stdout, res.stdout
    run_id = run_id_of(res.stdout)
    meta = json.loads((tmp_path / "state" / "runs" / run_id / "run.json").read_text())
    assert meta["status"] == "failed" and meta["preflight"]["ok"] is False
    assert marked_pids(run_id) == []
    for h in cluster2.hosts:  # nothing is left on a node (torchrun started early was stopped)
        assert not (tmp_path / f"work-{h.name}").exists()  # not even the workdir it made


def test_automatic_preflight_over_open_connections(cluster2: Cluster, tmp_path: Path) -> None:
    """Over open SSH connections, as a launch runs it: every check passes without a second
    torch import or a clock check (its cost is measured by bench/preflight.py, not here)."""
    from ddptui.config import load_config
    from ddptui.launch.precheck import before_launch
    from ddptui.remote.reach import answers, map_at_once, probe_node

    path, _ = hosts_file(cluster2, tmp_path)
    cfg = load_config(path)
    reached = answers(map_at_once(list(cfg.nodes), lambda n: probe_node(n, cfg)))
    transports = {r.item.name: r.value[0] for r in reached}
    try:
        assert len(reached) == len(cfg.nodes)
        outcome = before_launch(cfg, transports, {r.item.name: r.value[1] for r in reached})
    finally:
        for t in transports.values():
            t.close()
    assert outcome.verdict.ok, outcome.verdict.problems
    assert outcome.reports["node2"].torch is not None  # from reach's probe, not imported again
    assert outcome.reports["node1"].clock_offset is None, outcome

def test_gpus_from_a_stand_in_nvidia_smi(cluster2: Cluster, tmp_path: Path) -> None:
    """No GPU here: node2's nvidia-smi replays the recorded H100 query, and its process list
    names a real process of a (pretend) earlier ddptui run; node1 has none, so not applicable."""
    data = Path(__file__).parent / "data" / "preflight"
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              env={"DDPTUI_RUN": "20261122-000000-old/1"})
    try:
        head = (data / "h100-nvidia-smi-compute-apps.txt").read_text()
        apps = tmp_path / "apps.csv"
        apps.write_text(f"{head}{holder.pid}, python3, 20480 MiB, "
                        "GPU-76d5d0e1-3ccb-a2a4-e982-f89aff455b2e\n")
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        smi = bin_dir / "nvidia-smi"
        smi.write_text(f'#!/bin/sh\ncase "$*" in\n'
                       f'  *--query-gpu=*) cat {data / "h100-nvidia-smi-query-idle.csv"} ;;\n'
                       f'  *--query-compute-apps=*) cat {apps} ;;\n  *) exit 2 ;;\nesac\n')
        smi.chmod(0o755)
        wrapper = tmp_path / "python-gpu"
        wrapper.write_text(f'#!/bin/sh\nPATH={bin_dir}:$PATH exec {sys.executable} "$@"\n')
        wrapper.chmod(0o755)
        path, _ = hosts_file(cluster2, tmp_path, node2={"python": str(wrapper)})
        res = check(path, tmp_path)
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert res.returncode == 1, res.stdout + res.stderr
    assert row(res.stdout, "node1")[3:5] == ["-", "-"]
    assert row(res.stdout, "node2")[3:5] == ["✗", "✗"]
    lines = failures(res.stdout)
    assert any(ln.startswith("✗ gpus: node node2 has 1 GPU(s) (1× NVIDIA H100 80GB HBM3) but "
                             "nproc_per_node is 2: ranks would share a GPU") for ln in lines)
    busy = next(ln for ln in lines if ln.startswith("✗ gpu use:"))
    assert f"GPU 0 by pid {holder.pid} ({sys.executable} -c import time; time.sleep(60), " \
           "20,480 MiB)" in busy, busy
    assert busy.endswith("it is left from ddptui run 20261122-000000-old: "
                         "`ddptui stop 20261122-000000-old`."), busy


def test_env_that_changes_the_torch_of_one_nodes_ranks(cluster2: Cluster, tmp_path: Path,
                                                       ) -> None:
    """node2's `env:` puts a site's own torch on PYTHONPATH: a bare login there has the same
    torch as node1, its ranks would not. Both `check` and the automatic preflight say so,
    naming the node, both versions and the variable; no secret value shows; nothing starts."""
    import torch

    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text('__version__ = "2.99.0+site"\n')
    secret = "hf_n0t_f0r_y0ur_eyes_42"
    path, _ = hosts_file(cluster2, tmp_path, node2={
        "env": {"PYTHONPATH": str(site), "HF_TOKEN": secret}})
    res = check(path, tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert row(res.stdout, "node1")[2] == "✓" and row(res.stdout, "node2")[2] == "✗"
    [line] = failures(res.stdout)
    assert line.startswith(f"✗ torch: node node2 has torch 2.99.0+site but node node1 has "
                           f"torch {torch.__version__}"), line
    assert f"with PYTHONPATH in its `env:` they get torch 2.99.0+site from {site / 'torch'}" \
        in line and f"a bare login on node node2 gets torch {torch.__version__}" in line, line
    assert secret not in res.stdout + res.stderr

    res = ddptui("run", str(path), "--headless", state=tmp_path / "state", timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and secret not in res.stdout + res.stderr
    assert "the run was not started" in res.stderr, res.stderr
    assert "node node2 has torch 2.99.0+site but node node1" in res.stderr, res.stderr
    assert "with PYTHONPATH in its `env:`" in res.stderr, res.stderr
    assert "[node2] ── failed (preflight: torch)" in res.stdout, res.stdout
    run_id = run_id_of(res.stdout)
    meta = (tmp_path / "state" / "runs" / run_id / "run.json").read_text()
    assert secret not in meta and json.loads(meta)["preflight"]["ok"] is False
    assert marked_pids(run_id) == []
    for h in cluster2.hosts:  # nothing is left on a node, not even the workdir
        assert not (tmp_path / f"work-{h.name}").exists()
