"""Every network advice ddptui prints, applied as written, and the run then ends well.

Real sshd hosts in network namespaces, real torchrun on gloo, real nft rules, a real
listener on the rendezvous port. Each test first meets the fault as a user would (the run
refused, the advice in ddptui's words), then does what the advice says, read from the
advice itself where it names a value, and runs again to the end. The loopback name needs no
advice any more: the route's address is used for the user (the first test).
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cluster import Cluster
from jobs import ddptui, run_id_of, seqs, spawn_ddptui, write_job

pytestmark = [pytest.mark.cluster, pytest.mark.torchrun]
_ports = itertools.count(29960)
TINY = ["--d-model", "32", "--n-layers", "1", "--n-heads", "2", "--seq-len", "32",
        "--batch-size", "8", "--corpus-bytes", "100000", "--eval-batches", "1",
        "--eval-every", "1000", "--snapshot-every", "0", "--log-every", "1"]
STEPS = 6


def hosts(c: Cluster, tmp: Path, *, port: int | None = None, worker: bool = False,
          nodes: dict[str, dict[str, Any]] | None = None, lines: int = 4,
          env: dict[str, str] | None = None, setup: list[str] | None = None) -> Path:
    ns: list[dict[str, Any]] = [{"host": h.name, "workdir": str(tmp / f"work-{h.name}"),
                                 **(nodes or {}).get(h.name, {})} for h in c.hosts]
    job: dict[str, Any] = ({"args": [*TINY, "--steps", str(STEPS)]} if worker else
                           {"script": "job.py"})
    if setup:
        job["setup"] = setup
    return write_job(tmp, {
        "defaults": {"python": sys.executable, "nproc_per_node": 2,
                     "env": {"JOB_LINES": str(lines), **(env or {})}},
        "nodes": ns,
        "rendezvous": {"port": port or next(_ports), "join_timeout": 30},
        "job": job,
        "ssh": {"config_file": str(c.ssh_config), "known_hosts": str(c.known_hosts),
                "connect_timeout": 5},
    })


def run(path: Path, tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return ddptui("run", str(path), "--headless", *extra, state=tmp / "state", timeout=180)


def refused(res: subprocess.CompletedProcess[str]) -> str:
    """The run was refused before any rank started: ddptui's words for why."""
    assert res.returncode == 2, res.stdout[-3000:] + res.stderr
    assert "Traceback" not in res.stderr and "the run was not started" in res.stderr, res.stderr
    return res.stderr


def ended_well(res: subprocess.CompletedProcess[str], tmp: Path, lines: int = 4) -> Path:
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    run_dir = tmp / "state" / "runs" / run_id_of(res.stdout)
    for rank in range(4):
        assert seqs(run_dir / "ranks" / f"rank{rank}.log") == list(range(lines)), rank
    return run_dir


def test_names_resolving_to_loopback_use_the_routes_address(cluster2: Cluster,
                                                            tmp_path: Path) -> None:
    """Debian's `127.0.1.1 <hostname>` on every node: `ddptui check` passes, naming the
    interface and address it chose, and a 2 x 2 run trains every step on them."""
    path = hosts(cluster2, tmp_path, worker=True)
    with cluster2.own_names_to("127.0.1.1"):
        for h in cluster2.hosts:
            got = cluster2.exec(h, ["getent", "hosts", h.name], check=True).stdout.decode()
            assert got.split()[0] == "127.0.1.1", got
        res = ddptui("check", str(path), state=tmp_path / "state", timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        for h in cluster2.hosts:
            assert (f"! hostname: node {h.name}: using eth0 {h.ip} toward the rendezvous; its "
                    f"name {h.name} resolves to 127.0.1.1 (loopback)") in res.stdout, res.stdout
        js = json.loads(ddptui("check", str(path), "--json", state=tmp_path / "state",
                               timeout=120).stdout)
        assert js["ok"] is True
        assert js["nodes"]["node2"]["hostname"]["detail"] == f"eth0 {cluster2['node2'].ip} (chosen)"
        res = run(path, tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    assert "using eth0" in res.stdout + res.stderr  # said where the run's lines are
    run_dir = tmp_path / "state" / "runs" / run_id_of(res.stdout)
    records = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]
    trained = {r["step"] for r in records if r.get("kind") == "metric" and "loss" in r}
    assert set(range(1, STEPS + 1)) <= trained, sorted(trained)
    done = [r for r in records if r.get("kind") == "summary"]
    assert sorted(r["rank"] for r in done) == [0, 1, 2, 3] and all(
        r["step"] == STEPS for r in done), done
    meta = json.loads((run_dir / "run.json").read_text())
    for h in cluster2.hosts:
        assert meta["routes"][h.name] == {
            "ifname": "eth0", "addr": h.ip, "local_addr": h.ip,
            "env": {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "=eth0"},
            "why": f"c10d advertises the node as {h.name!r}, which resolves to 127.0.1.1 "
                   f"(loopback) there; gloo binds to the address of {h.name!r}, which "
                   "resolves to 127.0.1.1 (loopback) there"}


def test_the_routes_address_reaches_a_torchrun_started_after_setup(cluster2: Cluster,
                                                                    tmp_path: Path) -> None:
    """With setup commands torchrun is not started early and held: the choice travels with
    the node's other files instead of with the release."""
    path = hosts(cluster2, tmp_path, setup=["true"])
    with cluster2.own_names_to("127.0.1.1"):
        res = run(path, tmp_path)
    run_dir = ended_well(res, tmp_path)
    assert set(json.loads((run_dir / "run.json").read_text())["routes"]) == {"node1", "node2"}


def test_loopback_names_without_preflight_then_with_it(cluster2: Cluster,
                                                       tmp_path: Path) -> None:
    """`--no-preflight` asks nothing, so nothing is chosen and gloo meets 127.0.1.1: the
    diagnosis says so and what to do; doing it (preflight on) runs to the end."""
    path = hosts(cluster2, tmp_path)
    with cluster2.own_names_to("127.0.1.1"):
        res = run(path, tmp_path, "--no-preflight")
        assert res.returncode != 0, res.stdout[-3000:]
        out = res.stdout + res.stderr
        assert "Traceback" not in res.stderr
        assert re.search(r"rank \d \(node node\d\) could not connect to a peer at 127\.0\.1\.1, a "
                         r"loopback address: a node advertised its own name", out), out[-3000:]
        assert "launch with preflight (without `--no-preflight`)" in out, out[-3000:]
        meta = json.loads((tmp_path / "state" / "runs" / run_id_of(res.stdout) /
                           "run.json").read_text())
        assert meta["diagnosis"]["cause"] == "loopback_name", meta["diagnosis"]
        ended_well(run(path, tmp_path), tmp_path)


def test_choosing_otherwise_as_the_caution_says(cluster2: Cluster, tmp_path: Path) -> None:
    """`addr:` and GLOO_SOCKET_IFNAME set by hand, as the caution offers: nothing is chosen
    for the user, and the run (the rendezvous node's included) ends well."""
    mine = {h.name: {"addr": h.ip, "env": {"GLOO_SOCKET_IFNAME": "eth0"}}
            for h in cluster2.hosts}
    path = hosts(cluster2, tmp_path, nodes=mine)
    with cluster2.own_names_to("127.0.1.1"):
        res = ddptui("check", str(path), state=tmp_path / "state", timeout=120)
        assert res.returncode == 0 and "! hostname" not in res.stdout, res.stdout
        res = run(path, tmp_path)
    run_dir = ended_well(res, tmp_path)
    assert "routes" not in json.loads((run_dir / "run.json").read_text())


def test_a_missing_interface_then_the_one_named(cluster2: Cluster, tmp_path: Path) -> None:
    bad = {"node2": {"env": {"NCCL_SOCKET_IFNAME": "eth9", "GLOO_SOCKET_IFNAME": "eth9"}}}
    port = next(_ports)
    said = refused(run(hosts(cluster2, tmp_path, port=port, nodes=bad), tmp_path))
    m = re.search(r"Name an interface it has in `env:` for this node; (\S+) routes to the "
                  r"rendezvous", said)
    assert m, said
    named = {"node2": {"env": {"NCCL_SOCKET_IFNAME": m[1], "GLOO_SOCKET_IFNAME": m[1]}}}
    ended_well(run(hosts(cluster2, tmp_path, port=port, nodes=named), tmp_path), tmp_path)


@pytest.mark.parametrize("verdict", ["drop", "reject with tcp reset"])
def test_a_firewalled_port_then_allowed(cluster2: Cluster, tmp_path: Path,
                                        verdict: str) -> None:
    port = next(_ports)
    path = hosts(cluster2, tmp_path, port=port)
    with cluster2.filtering("node1", port, verdict) as table:
        said = refused(run(path, tmp_path))
        advice = re.findall(r"Allow TCP (\d+) into node (\S+) from (the other nodes|node "
                            r"(\S+) itself)", said)
        # both: the firewall filters lo too, so the store's node cannot reach its own address
        assert sorted(a[3] for a in advice) == ["", "node1"], said
        for got_port, into, _, itself in advice:  # each as nft rules ahead of the block
            assert int(got_port) == port
            allow = (["iif", "lo"] if itself else
                     [w for h in cluster2.hosts if h.name != into for w in ("ip", "saddr", h.ip)])
            cluster2.exec(into, ["nft", "insert", "rule", "inet", table, "input", *allow, "tcp",
                                 "dport", got_port, "accept"], check=True)
        ended_well(run(path, tmp_path), tmp_path)


def test_a_port_held_by_another_program_then_a_free_port(cluster2: Cluster,
                                                        tmp_path: Path) -> None:
    port = next(_ports)
    with cluster2.holding_port("node1", port):
        said = refused(run(hosts(cluster2, tmp_path, port=port), tmp_path))
        assert "set `rendezvous.port` to a free port" in said, said
        ended_well(run(hosts(cluster2, tmp_path), tmp_path), tmp_path)


def test_a_port_held_by_another_run_then_that_run_stopped(cluster2: Cluster,
                                                          tmp_path: Path) -> None:
    port = next(_ports)
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    second_dir.mkdir()
    never = tmp_path / "never"  # the first run's ranks wait for it, bounded by the job
    first_path = hosts(cluster2, first_dir, port=port, env={"JOB_HOLD": str(never)})
    out = tmp_path / "first.out"
    first = spawn_ddptui("run", str(first_path), "--headless", state=tmp_path / "state",
                         out=out)
    try:
        deadline_lines = 0
        for _ in range(600):  # bounded: 60 s for every rank to be past its lines
            text = out.read_text(errors="replace")
            deadline_lines = sum(f"[seq 3] rank {r} says hello" in text for r in range(4))
            if deadline_lines == 4 or first.poll() is not None:
                break
            time.sleep(0.1)
        assert deadline_lines == 4, out.read_text()[-3000:]
        said = refused(run(hosts(cluster2, second_dir, port=port), tmp_path))
        m = re.search(r"`ddptui stop (\S+)`", said)
        assert m and m[1] == run_id_of(out.read_text()), said
        stop = ddptui("stop", m[1], state=tmp_path / "state", timeout=120)
        assert stop.returncode == 0, stop.stdout + stop.stderr
        ended_well(run(hosts(cluster2, second_dir, port=port), tmp_path), tmp_path)
    finally:
        first.kill()
        first.wait(timeout=30)
