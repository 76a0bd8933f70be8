"""Runs over real SSH to real sshd hosts in network namespaces, each with its own hostname."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cluster import Cluster
from jobs import ddptui, marked_pids, run_id_of, seqs, spawn_ddptui, write_job

from ddptui.config import load_config
from ddptui.live.session import Session

pytestmark = [pytest.mark.cluster, pytest.mark.torchrun]
_ports = itertools.count(29600)
NASTY = ["it's a \"test\"", "$(touch /tmp/pwned)", "a; rm -rf /", "`id`", "ünïcødé ✓", "", " "]


def hosts(c: Cluster, tmp: Path, *, backend: str = "c10d", env: dict[str, str] | None = None,
          args: list[str] | None = None, **overrides: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "defaults": {"python": sys.executable, "nproc_per_node": 2,
                     "env": {"JOB_LINES": "8", **(env or {})}},
        "nodes": [{"host": h.name, "workdir": str(tmp / f"work-{h.name}")} for h in c.hosts],
        "rendezvous": {"backend": backend, "port": next(_ports)},
        "job": {"script": "job.py", "args": args or []},
        "ssh": {"config_file": str(c.ssh_config), "known_hosts": str(c.known_hosts),
                "connect_timeout": 5},
    }
    for k, v in overrides.items():
        d[k] = v
    return d


def wait_until(cond: Any, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.2)


def only_sshd_left(c: Cluster) -> bool:
    for h in c.hosts:
        listeners = {p.pid for p in h.sshd_procs}
        if set(c.pids(h)) - listeners:
            return False
    return True


@pytest.mark.parametrize("backend", ["c10d", "static"])
def test_two_hosts_two_procs_every_rank_and_per_rank_logs(cluster2: Cluster, tmp_path: Path,
                                                          backend: str) -> None:
    path = write_job(tmp_path, hosts(cluster2, tmp_path, backend=backend))
    res = ddptui("run", str(path), "--headless", state=tmp_path / "state")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    for rank, node in [(0, "node1"), (1, "node1"), (2, "node2"), (3, "node2")]:
        assert f"[{node} r{rank}] [seq 7] rank {rank} says hello" in res.stdout
        assert f"[{node} r{rank}] @metric step=7" in res.stdout
    run = tmp_path / "state" / "runs" / run_id_of(res.stdout)
    for rank in range(4):
        assert seqs(run / "ranks" / f"rank{rank}.log") == list(range(8))
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "finished" and meta["exit_code"] == 0
    # torchrun saw each host under its own hostname, not localhost
    assert "node1" in (run / "nodes" / "node1.log").read_text() or backend == "static"


def test_user_script_args_and_env_arrive_verbatim(cluster2: Cluster, tmp_path: Path) -> None:
    env = {f"JOBV_{i}": v for i, v in enumerate(NASTY)}
    path = write_job(tmp_path, hosts(cluster2, tmp_path, env=env, args=NASTY))
    res = ddptui("run", str(path), "--headless", state=tmp_path / "state")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    argv = next(ln for ln in res.stdout.splitlines() if ln.startswith("[node1 r0] ARGV "))
    assert json.loads(argv.split("ARGV ", 1)[1]) == NASTY
    envl = next(ln for ln in res.stdout.splitlines() if ln.startswith("[node1 r0] ENV "))
    assert json.loads(envl.split("ENV ", 1)[1]) == env
    assert not Path("/tmp/pwned").exists()


def test_stop_mid_run_leaves_no_process_on_any_node(cluster2: Cluster, tmp_path: Path) -> None:
    path = write_job(tmp_path, hosts(cluster2, tmp_path,
                                     env={"JOB_LINES": "100000", "JOB_DELAY": "0.05"}))
    ctl = Session(load_config(path), state_root=tmp_path / "state")
    ctl.launch()
    try:
        wait_until(lambda: len(ctl.store.ranks) == 4, 180, "lines from all four ranks")
        assert marked_pids(ctl.run_id)
    finally:
        t0 = time.monotonic()
        report = ctl.stop(grace=3)
    result = ctl.wait(30)
    assert report.clean, report
    assert result is not None and result.stopped and result.exit_code == 130
    wait_until(lambda: only_sshd_left(cluster2), 10, "every run process to be gone")
    assert time.monotonic() - t0 < 3 + 15
    assert marked_pids(ctl.run_id) == []


def test_sigkilled_controller_then_attach_loses_and_repeats_nothing(cluster2: Cluster,
                                                                   tmp_path: Path) -> None:
    n = 120
    path = write_job(tmp_path, hosts(cluster2, tmp_path,
                                     env={"JOB_LINES": str(n), "JOB_DELAY": "0.05"}))
    state = tmp_path / "state"
    out = tmp_path / "first.out"
    proc = spawn_ddptui("run", str(path), "--headless", state=state, out=out)
    try:
        wait_until(lambda: "[seq 10] rank 3" in out.read_text(errors="replace"), 180,
                   "the run to be under way")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    run_id = run_id_of(out.read_text())
    # the job went on without its controller: every line of every rank arrives below (a
    # look at its processes here would race the job's own end on a loaded machine)
    res = ddptui("attach", run_id, "--headless", state=state)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    for rank in range(4):
        assert seqs(state / "runs" / run_id / "ranks" / f"rank{rank}.log") == list(range(n))
    shown = (state / "runs" / run_id / "lines.log").read_text().splitlines()
    for rank in range(4):
        tag = f"[{rank}] "
        got = [int(x.split()[2].rstrip("]")) for x in shown
               if x.startswith(tag + "[seq ") and x.endswith(f"rank {rank} says hello")]
        assert got == list(range(n)), rank
    wait_until(lambda: marked_pids(run_id) == [], 15, "the run's last processes to exit")


def test_failing_rank_names_node_rank_and_last_lines(cluster2: Cluster, tmp_path: Path) -> None:
    path = write_job(tmp_path, hosts(cluster2, tmp_path, env={"JOB_FAIL_RANK": "3"}))
    res = ddptui("run", str(path), "--headless", state=tmp_path / "state")
    assert res.returncode not in (0, 2), res.stdout[-3000:]
    assert "ddptui: node node2, rank 3 failed: exit code 1" in res.stdout
    assert "RuntimeError: rank 3 gave up at line 4" in res.stdout
    assert "last lines of rank 3:" in res.stdout and "    [seq 4] rank 3 says hello" in res.stdout
    wait_until(lambda: only_sshd_left(cluster2), 30, "every run process to be gone")


def bad(c: Cluster, tmp: Path, **node2: Any) -> dict[str, Any]:
    d = hosts(c, tmp)
    d["nodes"][1].update(node2)
    return d


@pytest.mark.parametrize("case", ["python", "unreachable", "wrong_key", "unknown_host_key"])
def test_bad_node_is_exit_2_and_nothing_starts_anywhere(cluster2: Cluster, tmp_path: Path,
                                                        case: str) -> None:
    if case == "python":
        d = bad(cluster2, tmp_path, python="/opt/no-such-env/bin/python3")
        expect = ["node2", "/opt/no-such-env/bin/python3", "does not exist"]
    elif case == "unreachable":
        ip = cluster2.free_ip()
        d = bad(cluster2, tmp_path, host=ip, identity_file=str(cluster2.key), user="root")
        d["ssh"]["connect_timeout"] = 2
        expect = [ip]
    elif case == "wrong_key":
        other = tmp_path / "other_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)],
                       check=True, timeout=30)
        d = bad(cluster2, tmp_path, identity_file=str(other))
        d["ssh"]["config_file"] = None
        d["nodes"][1]["host"] = cluster2.hosts[1].ip
        d["nodes"][1]["user"] = "root"
        d["nodes"][0].update(host=cluster2.hosts[0].ip, user="root",
                             identity_file=str(cluster2.key))
        expect = [cluster2.hosts[1].ip, "root"]
    else:
        kh = tmp_path / "known_hosts"
        kh.write_text(cluster2.host_key_line(cluster2.hosts[0]))
        d = hosts(cluster2, tmp_path)
        d["ssh"]["known_hosts"] = str(kh)
        d["ssh"]["config_file"] = None
        for node, h in zip(d["nodes"], cluster2.hosts, strict=True):
            node.update(host=h.ip, user="root", identity_file=str(cluster2.key))
        expect = [cluster2.hosts[1].ip, "known_hosts"]
    d["ssh"] = {k: v for k, v in d["ssh"].items() if v is not None}
    path = write_job(tmp_path, d)
    res = ddptui("run", str(path), "--headless", state=tmp_path / "state", timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    for word in expect:
        assert word in res.stderr, res.stderr
    assert not list(tmp_path.glob("work-*/.ddptui/runs/*")), "a node got a run directory"
    wait_until(lambda: only_sshd_left(cluster2), 30,
               "the preflight's ssh sessions to end, leaving only sshd")


def test_a_host_that_dies_mid_run_is_lost_and_stop_says_so(cluster_factory: Any,
                                                           tmp_path: Path) -> None:
    from ddptui.events import NodeStatus

    c = cluster_factory(2)
    # lost_after far off: this is about a stop that cannot reach a node (tests/test_lost_nodes.py
    # has the run ending by itself)
    (tmp_path / "job").mkdir()  # the project synced to the nodes: not the cluster's files
    path = write_job(tmp_path / "job", hosts(c, tmp_path, health={"lost_after": 600},
                                             env={"JOB_LINES": "100000", "JOB_DELAY": "0.05"}))
    ctl = Session(load_config(path), state_root=tmp_path / "state")
    ctl.launch()

    def view(name: str) -> Any:
        return next(n for n in ctl.store.node_views() if n.name == name)

    try:
        wait_until(lambda: len(ctl.store.ranks) == 4, 180, "lines from all four ranks")
        c.stop_host("node2")  # every process in it killed, its link down: silence
        wait_until(lambda: "unreachable" in view("node2").detail, 60,
                   "node2 to be seen as unreachable")
        assert view("node1").status is NodeStatus.RUNNING
    finally:
        report = ctl.stop(grace=2)
    assert report.leftover.get("node1") == [], report
    assert "node2" in report.errors and not report.clean
    result = ctl.wait(30)
    assert result is not None and result.node_exit_codes["node2"] is None
    detail = next(n.detail for n in ctl.store.node_views() if n.name == "node2")
    assert "could not be reached" in detail
    wait_until(lambda: set(c.pids(c.hosts[0])) <= {p.pid for p in c.hosts[0].sshd_procs}, 10,
               "node1 to hold nothing of the run")
    if ctl.reaper is not None:  # node2 never comes back: stop seeking it (every second, for
        ctl.reaper.cancel.set()  # 3 x lost_after), which would reach later tests' clusters
