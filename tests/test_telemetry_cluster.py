"""Telemetry end to end over real SSH: two hosts in network namespaces, a stand-in
nvidia-smi on each node's PATH (through the hosts file's env), the controller in an engine
process as the dashboard runs it. Samples reach the dashboard's replica and telemetry.jsonl,
and after stop no sampler is left on any node."""

from __future__ import annotations

import itertools
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cluster import Cluster
from jobs import ddptui, write_job

from ddptui.config import load_config
from ddptui.engine.client import EngineClient, EngineProcess
from ddptui.engine.process import new_run
from ddptui.live.session import Session
from ddptui.store import rundir
from ddptui.store.samples import read_telemetry

pytestmark = [pytest.mark.cluster, pytest.mark.torchrun, pytest.mark.timeout(240)]
STANDIN = Path(__file__).parent / "data" / "telemetry"
_ports = itertools.count(29680)


def pump_until(client: EngineClient, cond: Any, within: float, what: str) -> None:
    end = time.monotonic() + within
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {within} s waiting for {what}")
        client.pump(budget=0.05)
        time.sleep(0.05)


def samplers_on(c: Cluster) -> dict[str, list[str]]:
    """Every process on each host whose command line runs the sampler or nvidia-smi."""
    found: dict[str, list[str]] = {}
    for h in c.hosts:
        for pid in c.pids(h):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if rundir.SAMPLER_SCRIPT in cmd or "nvidia-smi" in cmd:
                found.setdefault(h.name, []).append(cmd)
    return found


def hosts_file(c: Cluster, tmp_path: Path) -> Path:
    path = f"{STANDIN}:{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    return write_job(tmp_path, {
        "defaults": {"python": sys.executable, "nproc_per_node": 1,
                     "env": {"JOB_LINES": "600", "JOB_DELAY": "0.1", "PATH": path}},
        "nodes": [{"host": h.name, "workdir": str(tmp_path / f"work-{h.name}")} for h in c.hosts],
        "rendezvous": {"backend": "c10d", "port": next(_ports)},
        "job": {"script": "job.py", "stop_grace": 5},
        "ssh": {"config_file": str(c.ssh_config), "known_hosts": str(c.known_hosts),
                "connect_timeout": 5},
    })


def only_sshd_left(c: Cluster, within: float = 10.0) -> None:
    """Nothing but the sshd listeners, once the last sessions have closed (bounded)."""
    def left() -> dict[str, set[int]]:
        return {h.name: set(c.pids(h)) - {p.pid for p in h.sshd_procs} for h in c.hosts
                if set(c.pids(h)) - {p.pid for p in h.sshd_procs}}
    end = time.monotonic() + within
    while left() and time.monotonic() < end:
        time.sleep(0.2)
    assert left() == {}, {n: [Path(f"/proc/{p}/cmdline").read_bytes()[:200] for p in pids
                              if Path(f"/proc/{p}").exists()] for n, pids in left().items()}


def test_samples_reach_the_dashboard_and_disk_and_stop_leaves_no_sampler(
        cluster2: Cluster, tmp_path: Path) -> None:
    c = cluster2
    config = load_config(hosts_file(c, tmp_path))
    engine = EngineProcess()
    try:
        client = engine.open(new_run, config, tmp_path / "state")
        client.launch()
        names = [h.name for h in c.hosts]

        def enough() -> bool:
            samples = client.store.node_samples()
            return all(len([s for s in samples.get(n, []) if s.gpus and s.cpu is not None]) >= 3
                       for n in names)

        pump_until(client, enough, 90, "three samples with GPUs from every node")
        assert samplers_on(c).keys() == set(names)
        latest = {n: client.store.node_samples()[n][-1] for n in names}
        for s in latest.values():
            assert s.gpus[0].name == "NVIDIA H100 80GB HBM3" and s.gpus[0].mem_total == 81559
            assert s.mem_total and s.load1 is not None and "lo" in s.net
        client.stop()
        pump_until(client, lambda: client.done, 60, "the run to end")
        assert samplers_on(c) == {}
        run_dir = rundir.run_dir(tmp_path / "state", client.run_id)
        on_disk = list(read_telemetry(run_dir))
        assert {s.node for s in on_disk} == set(names)
        assert len(on_disk) >= 6 and all(s.gpus or s.cpu is None for s in on_disk[2:])
        printed = ddptui("logs", client.run_id, "--telemetry", "--node", names[1],
                         state=tmp_path / "state")
        lines = printed.stdout.splitlines()
        assert printed.returncode == 0 and len(lines) == len([s for s in on_disk
                                                              if s.node == names[1]])
        assert f" {names[1]} | cpu " in lines[-1] and "| gpu0 " in lines[-1]
    finally:
        engine.close()
    only_sshd_left(c)  # nothing of the run is left either


def wait_until(cond: Any, within: float, what: str) -> None:
    end = time.monotonic() + within
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {within} s waiting for {what}")
        time.sleep(0.2)


def test_detach_ends_the_samplers_and_attach_starts_them_again(cluster2: Cluster,
                                                               tmp_path: Path) -> None:
    c = cluster2
    state = tmp_path / "state"
    ctl = Session(load_config(hosts_file(c, tmp_path)), state_root=state)
    names = [h.name for h in c.hosts]
    try:
        ctl.launch()
        wait_until(lambda: all(len(ctl.store.node_samples().get(n, [])) >= 2 for n in names),
                   90, "samples from every node")
        ctl.detach()
        assert samplers_on(c) == {}  # the job goes on; nobody samples for nobody
        ctl = Session.attach(ctl.run_id, state_root=state)
        wait_until(lambda: samplers_on(c).keys() == set(names), 30, "samplers again")
        wait_until(lambda: all(ctl.store.node_samples().get(n) for n in names), 30,
                   "samples after attach")
    finally:
        ctl.stop(grace=5)
        ctl.wait(60)
    assert samplers_on(c) == {}
    only_sshd_left(c)


def test_telemetry_false_starts_no_sampler(cluster2: Cluster, tmp_path: Path) -> None:
    """``health: {telemetry: false}``: the ranks run and are followed, nothing samples them."""
    c = cluster2
    path = hosts_file(c, tmp_path)
    path.write_text(path.read_text() + "\nhealth: {telemetry: false}\n")
    config = load_config(path)
    assert config.health.telemetry is False
    ctl = Session(config, state_root=tmp_path / "state")
    names = [h.name for h in c.hosts]
    try:
        ctl.launch()
        wait_until(lambda: all(v.lines >= 5 for v in ctl.store.node_views()), 60,
                   "lines from every node")
        # A negative check (nothing can be waited for): a sampler, were one started, would
        # have written its first sample by now. Only a real bug fails it; a slow machine can
        # only make it pass more easily (fewer samples written).
        time.sleep(1.5)
        assert samplers_on(c) == {} and not any(ctl.store.node_samples().get(n) for n in names)
    finally:
        ctl.stop(grace=5)
        ctl.wait(60)
    only_sshd_left(c)
