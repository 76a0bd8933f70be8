"""A run is never listed as running when nothing of it is alive.

A controller that dies leaves ``running`` in run.json; listing settles it from local facts
at once, ``ddptui logs --check`` asks its nodes, attach follows it to its end.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from cluster import Cluster
from jobs import ddptui, marked_pids, run_id_of, seqs, spawn_ddptui, write_job
from test_lost_nodes import link, wait_for
from test_ssh_run import hosts, wait_until

from ddptui.store.owner import Owner, owner_of, this_controller
from ddptui.store.runs import list_runs
from ddptui.tui.screens.run_picker import run_label


def dead_controller() -> dict[str, Any]:
    proc = subprocess.Popen(["true"])
    proc.wait(10)
    return {**this_controller(), "pid": proc.pid}


def fake_run(root: Path, run_id: str, status: str, ends: dict[str, tuple[str, int | None]],
             controller: dict[str, Any] | None) -> Path:
    d = root / "runs" / run_id
    d.mkdir(parents=True)
    meta: dict[str, Any] = {"run_id": run_id, "status": status, "started_at": time.time(),
                            "nodes": [{"name": n, "node_rank": i, "run_dir": f"/w/{n}"}
                                      for i, n in enumerate(["a", "b"])],
                            "world_size": 4, "config": {"path": "hosts.yaml"}}
    if controller is not None:
        meta["controller"] = controller
    (d / "run.json").write_text(json.dumps(meta))
    recs = [{"type": "node_state", "node": n, "status": "running", "time": 1.0,
             "exit_code": None} for n in ("a", "b")]
    recs += [{"type": "node_state", "node": n, "status": s, "time": 2.0, "exit_code": c}
             for n, (s, c) in ends.items()]
    (d / "events.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs) + '{"torn')
    return d


def test_a_live_controller_is_told_from_a_dead_one() -> None:
    assert owner_of({"controller": this_controller()}) is Owner.ALIVE
    assert owner_of({"controller": dead_controller()}) is Owner.GONE
    assert owner_of({"controller": {**this_controller(), "host": "elsewhere"}}) is Owner.ELSEWHERE
    assert owner_of({}) is Owner.UNKNOWN


def test_listing_settles_a_stale_run_from_what_was_recorded(tmp_path: Path) -> None:
    gone = dead_controller()
    stopped = fake_run(tmp_path, "r-stopped", "stopping",
                       {"a": ("stopped", None), "b": ("stopped", None)}, gone)
    failed = fake_run(tmp_path, "r-failed", "running",
                      {"a": ("exited", 0), "b": ("failed", 3)}, gone)
    fake_run(tmp_path, "r-unknown", "running", {"a": ("exited", 0)}, gone)
    fake_run(tmp_path, "r-live", "running", {}, this_controller())
    cut = fake_run(tmp_path, "r-cut", "launching", {}, gone)
    meta = json.loads((cut / "run.json").read_text())
    (cut / "run.json").write_text(json.dumps({**meta, "nodes": []}))
    res = ddptui("logs", state=tmp_path, timeout=60)
    assert res.returncode == 0, res.stderr
    shown = {ln.split()[0]: ln.split()[3] for ln in res.stdout.splitlines()[1:]
             if ln.startswith("r-")}
    assert shown == {"r-stopped": "stopped", "r-failed": "failed", "r-unknown": "running?",
                     "r-live": "running", "r-cut": "failed"}, res.stdout
    assert "`ddptui logs --check` asks its nodes" in res.stdout
    meta = json.loads((failed / "run.json").read_text())
    assert meta["exit_code"] == 3 and meta["node_exit_codes"] == {"a": 0, "b": 3}
    assert "controller was gone" in meta["reconciled"]["by"]
    assert json.loads((stopped / "run.json").read_text())["exit_code"] == 130
    label = run_label(next(r for r in list_runs(tmp_path) if r.run_id == "r-unknown"))
    assert "running?" in label


def test_one_rule_judges_how_a_node_ended() -> None:
    """The follower and ``ddptui logs --check`` both judge by ``outcome.node_end``."""
    from ddptui.events import NodeStatus
    from ddptui.outcome import node_end

    cases = {  # (exit code, stop requested, hold expired) -> status
        (None, True, False): NodeStatus.STOPPED, (3, True, False): NodeStatus.STOPPED,
        (None, True, True): NodeStatus.STOPPED, (None, False, True): NodeStatus.FAILED,
        (None, False, False): NodeStatus.LOST, (0, False, False): NodeStatus.EXITED,
        (0, False, True): NodeStatus.EXITED, (3, False, False): NodeStatus.FAILED,
    }
    for (code, stop, expired), want in cases.items():
        status, said = node_end(code, stop, expired)
        assert status is want, (code, stop, expired)
        assert said
    assert node_end(3, True, False)[1] == "on request, exit code 3"
    assert node_end(None, False, True)[1].startswith("never released")


def test_a_check_tells_a_node_never_released_from_a_lost_one(tmp_path: Path) -> None:
    """Its controller died mid-launch and the early-started torchrun gave up waiting
    (``expired``, no exit code): the check records the run failed and says why, as a follower
    would, where a node with no trace at all would be lost."""
    import sys

    from ddptui.afterwards.reconcile import check_run
    from ddptui.config import load_config
    from ddptui.nodeprog import torchrun_tee
    from ddptui.store import rundir

    hosts_file = tmp_path / "hosts.yaml"
    hosts_file.write_text(f"defaults:\n  python: {sys.executable}\nnodes:\n"
                          f"  - name: a\n    transport: local\n    workdir: {tmp_path}/a\n")
    config = load_config(hosts_file)
    d = fake_run(tmp_path / "state", "r-held", "launching", {}, dead_controller())
    meta = json.loads((d / "run.json").read_text())
    node_dir = tmp_path / "a" / "node0"
    node_dir.mkdir(parents=True)
    (node_dir / torchrun_tee.EXPIRED).write_bytes(b"")
    meta.update(config=config.to_dict(),
                nodes=[{"name": "a", "node_rank": 0, "run_dir": str(node_dir)}])
    (d / rundir.RUN_JSON).write_text(json.dumps(meta))
    checked = check_run(tmp_path / "state", "r-held")
    assert list(checked.never_released) == ["a"]
    assert "recorded as failed (a: never released" in checked.text()
    assert "run the job again" in checked.text()
    assert json.loads((d / rundir.RUN_JSON).read_text())["status"] == "failed"


@pytest.mark.cluster
@pytest.mark.torchrun
def test_a_run_whose_controller_died_is_checked_on_its_nodes_then_attached(
        cluster2: Cluster, tmp_path: Path) -> None:
    n, go = 60, tmp_path / "go"
    # the job holds after its lines until the test has checked it while it runs: under load
    # the CLI calls before that check can outlast any fixed length of job
    d = hosts(cluster2, tmp_path, env={"JOB_LINES": str(n), "JOB_DELAY": "0.1",
                                       "JOB_HOLD": str(go)})
    job = tmp_path / "job"
    job.mkdir()
    path = write_job(job, d)
    state, out = tmp_path / "state", tmp_path / "run.out"
    proc = spawn_ddptui("run", str(path), "--headless", state=state, out=out)
    try:
        wait_until(lambda: "[seq 3] rank 3" in out.read_text(errors="replace"), 120,
                   "the run to be under way")
    finally:
        proc.send_signal(signal.SIGKILL)  # as a closed terminal would, with no time to record
        proc.wait(10)
    run_id = run_id_of(out.read_text())
    assert marked_pids(run_id)

    def status() -> str:
        listed = ddptui("logs", state=state, timeout=60).stdout
        return next(ln.split()[3] for ln in listed.splitlines() if ln.startswith(run_id))

    assert status() == "running?"
    checked = ddptui("logs", "--check", state=state, timeout=60)
    assert f"run {run_id}: still running on node1 (" in checked.stdout, checked.stdout
    assert status() == "detached"
    go.touch()
    wait_until(lambda: not marked_pids(run_id), 60, "the job to end on its own")
    checked = ddptui("logs", "--check", state=state, timeout=60)
    assert f"run {run_id}: nothing of it runs on its nodes; recorded as finished" in \
        checked.stdout, checked.stdout
    assert status() == "finished"
    res = ddptui("attach", run_id, "--headless", state=state, timeout=120)
    assert res.returncode == 0, res.stdout[-3000:]
    for rank in range(4):
        assert seqs(state / "runs" / run_id / "ranks" / f"rank{rank}.log") == list(range(n))
    assert status() == "finished"


@pytest.mark.cluster
@pytest.mark.torchrun
def test_attach_settles_a_stale_run_whose_node_is_gone(cluster2: Cluster,
                                                       tmp_path: Path) -> None:
    d = hosts(cluster2, tmp_path, env={"JOB_LINES": "100000", "JOB_DELAY": "0.05"})
    d["health"] = {"lost_after": 3}
    d["job"]["stop_grace"] = 2
    d["ssh"]["connect_timeout"] = 2
    job = tmp_path / "job"
    job.mkdir()
    state, out = tmp_path / "state", tmp_path / "run.out"
    first = spawn_ddptui("run", str(write_job(job, d)), "--headless", state=state, out=out)
    try:
        wait_for(first, out, "[seq 3] rank 3", 120)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    run_id = run_id_of(out.read_text())
    link(cluster2, "node2", "down")
    again = tmp_path / "attach.out"
    proc = spawn_ddptui("attach", run_id, "--headless", state=state, out=again)
    try:
        wait_for(proc, again, "ddptui: trying for up to", 60)
        link(cluster2, "node2", "up")
        assert proc.wait(60) == 255
    finally:
        if proc.poll() is None:
            proc.kill()
        link(cluster2, "node2", "up")
    text = again.read_text()
    assert "could not reach node node2" in text
    assert "ddptui: node node2 was lost" in text and "[node1] ── stopped" in text, text[-3000:]
    reached = next(ln for ln in text.splitlines() if ln.startswith("ddptui: node node2: "))
    assert reached.startswith("ddptui: node node2: reached again; fetched the "), reached
    # what the ranks left there may have ended with node1's store by then, or still run
    assert reached.endswith("; nothing of the run is left there") or re.search(
        r"; stopped \d+ process\(es\) of the run still running there \(pids [\d, ]+\)",
        reached), reached
    assert marked_pids(run_id) == []
    listed = ddptui("logs", state=state, timeout=60).stdout
    assert next(ln.split()[3] for ln in listed.splitlines() if ln.startswith(run_id)) == "failed"
