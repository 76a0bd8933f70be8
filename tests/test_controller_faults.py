"""Faults on the controller's side, over the SSH namespace cluster: a ddptui that dies in the
middle of its launch, a run name used twice, a full disk here; and an exception in each of
the controller's own threads."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cluster import Cluster
from jobs import ddptui, marked_pids, seqs, spawn_ddptui, write_job
from test_ssh_run import hosts, only_sshd_left, wait_until

from ddptui.config import load_config
from ddptui.events import RunStatus
from ddptui.live import attach
from ddptui.live.evidence import Evidence
from ddptui.live.follow import NodeFollower
from ddptui.live.session import Session
from ddptui.run_state import NodeRecord, RunRecord
from ddptui.store import rundir
from ddptui.telemetry.parse import SamplerParser

pytestmark = [pytest.mark.cluster, pytest.mark.torchrun]

#: A ddptui that dies (as under SIGKILL: no cleanup, no word) at one point of its launch.
DIES_AT = textwrap.dedent("""\
    import os, sys
    from pathlib import Path
    from ddptui.config import load_config
    from ddptui.launch import phases, project
    from ddptui.live.session import Session

    hosts, state, run_id, where = sys.argv[1:5]
    real = phases.release_all
    if where == "sync":  # every node's torchrun started early, held, none let go
        project.sync_all = lambda *a, **k: os._exit(9)
    else:  # every node let go, the run not yet recorded as running
        phases.release_all = lambda *a, **k: (real(*a, **k), os._exit(9))
    Session(load_config(hosts), state_root=Path(state), run_id=run_id).launch()
""")


def die_in_launch(path: Path, state: Path, run_id: str, where: str) -> None:
    done = subprocess.run([sys.executable, "-c", DIES_AT, str(path), str(state), run_id, where],
                          capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 9, done.stdout + done.stderr
    meta = json.loads((state / "runs" / run_id / "run.json").read_text())
    assert meta["status"] == "launching" and meta["nodes"], meta


def test_attach_undoes_a_launch_its_ddptui_left_before_letting_the_nodes_go(
        cluster2: Cluster, tmp_path: Path) -> None:
    path = write_job(tmp_path, hosts(cluster2, tmp_path))
    state, run_id = tmp_path / "state", "cut-short"
    die_in_launch(path, state, run_id, "sync")
    assert marked_pids(run_id), "torchrun, started early, waits on the nodes"
    res = ddptui("attach", run_id, "--headless", state=state, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    said = " ".join(res.stderr.split())
    assert f"run {run_id} was caught in its launch" in said, said
    assert "node node1: its torchrun waits for the go-ahead" in said, said
    assert "Run the job again" in said
    wait_until(lambda: only_sshd_left(cluster2), 15, "every run process to be gone")
    assert marked_pids(run_id) == []
    meta = json.loads((state / "runs" / run_id / "run.json").read_text())
    assert meta["status"] == "failed" and "caught in its launch" in meta["error"][0]
    assert not list(tmp_path.glob(f"work-*/.ddptui/runs/{run_id}"))  # node dirs removed


def test_attach_follows_a_launch_its_ddptui_left_after_letting_every_node_go(
        cluster2: Cluster, tmp_path: Path) -> None:
    n = 40
    path = write_job(tmp_path, hosts(cluster2, tmp_path,
                                     env={"JOB_LINES": str(n), "JOB_DELAY": "0.05"}))
    state, run_id = tmp_path / "state", "let-go"
    die_in_launch(path, state, run_id, "release")
    res = ddptui("attach", run_id, "--headless", state=state)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    for rank in range(4):
        assert seqs(state / "runs" / run_id / "ranks" / f"rank{rank}.log") == list(range(n))
    assert json.loads((state / "runs" / run_id / "run.json").read_text())["status"] == "finished"
    assert marked_pids(run_id) == []


def test_a_run_name_used_before_is_refused_here_and_on_the_nodes(cluster2: Cluster,
                                                                  tmp_path: Path) -> None:
    path = write_job(tmp_path, hosts(cluster2, tmp_path))
    state = tmp_path / "state"
    first = ddptui("run", str(path), "--headless", "--run-id", "twice", state=state)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr
    kept = (state / "runs" / "twice" / "run.json").read_bytes()
    node_files = {p: p.read_bytes() for p in tmp_path.glob("work-*/.ddptui/runs/twice/*/*")
                  if p.is_file()}
    assert any(p.name == "exit_code" for p in node_files)

    here = ddptui("run", str(path), "--headless", "--run-id", "twice", state=state)
    assert here.returncode == 2 and "a run named twice is already kept in" in here.stderr
    assert (state / "runs" / "twice" / "run.json").read_bytes() == kept

    fresh = tmp_path / "fresh-state"  # this machine knows nothing of it: the nodes do
    there = ddptui("run", str(path), "--headless", "--run-id", "twice", state=fresh)
    said = " ".join(there.stderr.split())
    assert there.returncode == 2, there.stdout[-2000:] + there.stderr
    assert "node node1: this run's name was used before" in said, said
    assert "finished" not in there.stdout  # no verdict read from the first run's files
    assert {p: p.read_bytes() for p in node_files} == node_files  # untouched
    assert json.loads((fresh / "runs" / "twice" / "run.json").read_text())["status"] == "failed"
    assert marked_pids("twice") == []


def test_a_full_disk_here_is_said_the_run_ends_and_attach_fetches_the_rest_later(
        cluster2: Cluster, tmp_path: Path) -> None:
    n = 12_000
    path = write_job(tmp_path, hosts(cluster2, tmp_path, env={"JOB_LINES": str(n)}))
    state = tmp_path / "small"
    state.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(state)], check=True,
                   timeout=30)
    try:
        res = ddptui("run", str(path), "--headless", "--run-id", "full", state=state,
                     timeout=300)
        kept = tmp_path / "kept"  # what the small disk holds, moved where there is room
        subprocess.run(["cp", "-a", str(state), str(kept)], check=True, timeout=60)
    finally:
        subprocess.run(["umount", "-l", str(state)], check=False, timeout=30)
    said = " ".join(res.stdout.split())
    assert res.returncode == 75, res.stdout[-3000:] + res.stderr[-3000:]
    assert "ddptui can no longer keep this run's lines on this machine" in said, said[-3000:]
    assert "No space left on device" in said
    assert "this run's record here is incomplete" in said and "ddptui attach full" in said
    assert "Traceback" not in res.stderr
    assert marked_pids("full") == []
    again = ddptui("attach", "full", "--headless", state=kept)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr
    for rank in range(4):  # every line once, the ones the full disk missed fetched again
        assert seqs(kept / "runs" / "full" / "ranks" / f"rank{rank}.log") == list(range(n))


def two_beside(cluster2: Cluster, tmp_path: Path, rendezvous: dict[str, Any],
               ) -> dict[str, tuple[int, str, Path]]:
    """Two runs of their own (workdirs, lengths, names) on the same two nodes, started in the
    same second: run name -> (exit code, output, state dir)."""
    procs = {}
    for name, n in (("short", 30), ("long", 90)):
        tmp = tmp_path / name
        tmp.mkdir()
        path = write_job(tmp, hosts(cluster2, tmp, env={"JOB_LINES": str(n), "JOB_DELAY": "0.05"},
                                    rendezvous=rendezvous))
        procs[name] = (spawn_ddptui("run", str(path), "--headless", "--run-id", name,
                                    state=tmp / "state", out=tmp / "out.txt"), tmp / "state", n)
    out = {}
    for name, (proc, state, _) in procs.items():
        code = proc.wait(timeout=240)
        out[name] = (code, (state.parent / "out.txt").read_text(), state)
    wait_until(lambda: only_sshd_left(cluster2), 15, "every run process to be gone")
    assert marked_pids("short") == [] and marked_pids("long") == []
    return out


def test_two_runs_started_together_on_the_same_nodes_each_get_a_port_and_finish(
        cluster2: Cluster, tmp_path: Path) -> None:
    runs = two_beside(cluster2, tmp_path, {"backend": "c10d"})  # the port left to ddptui
    ports = set()
    for name, n in (("short", 30), ("long", 90)):
        code, out, state = runs[name]
        assert code == 0, out[-3000:]
        for rank in range(4):  # every step once: neither run shared the other's store
            assert seqs(state / "runs" / name / "ranks" / f"rank{rank}.log") == list(range(n))
        ports.add(json.loads((state / "runs" / name / "run.json").read_text())
                  ["rendezvous"]["port"])
    assert ports == {29400, 29401}
    moved = [out for _, out, _ in runs.values() if "this run uses 29401" in out]
    assert len(moved) == 1 and "rendezvous port 29400 is held by run " in moved[0]


def test_a_fixed_port_another_run_holds_is_refused_naming_that_run(
        cluster2: Cluster, tmp_path: Path) -> None:
    runs = two_beside(cluster2, tmp_path, {"backend": "c10d", "port": 29455})
    refused = [name for name, (code, _, _) in runs.items() if code == 2]
    assert len(refused) == 1, {k: v[1][-2000:] for k, v in runs.items()}
    other = "long" if refused[0] == "short" else "short"
    code, out, state = runs[other]
    assert code == 0, out[-3000:]
    said = " ".join(runs[refused[0]][1].split())
    assert "node node1: the rendezvous port 29455 on " in said, said
    locks = {str(p): sorted((f.name, f.read_text()) for f in p.iterdir())
             for p in Path(rundir.RDZV_LOCKS).glob("*-29455*")}
    assert f"is held by run {other}, which is still running there" in said, (said, locks,
                                                                               runs[other][1])
    assert f"`ddptui stop {other}`" in said
    n = 30 if other == "short" else 90
    for rank in range(4):
        assert seqs(state / "runs" / other / "ranks" / f"rank{rank}.log") == list(range(n))
    assert not list((tmp_path / refused[0]).glob(f"work-*/.ddptui/runs/{refused[0]}"))


def local_session(tmp_path: Path, port: int) -> Session:
    return Session(load_config(write_job(tmp_path, {
        "defaults": {"python": sys.executable, "nproc_per_node": 1, "transport": "local",
                     "env": {"JOB_LINES": "30", "JOB_DELAY": "0.05"}},
        "nodes": [{"name": "a", "workdir": str(tmp_path / "wa")},
                  {"name": "b", "workdir": str(tmp_path / "wb")}],
        "rendezvous": {"endpoint": "127.0.0.1", "port": port},
        "health": {"lost_after": 5},
        "job": {"script": "job.py"}})), state_root=tmp_path / "state")


def said_by_ddptui(ctl: Session) -> str:
    return " ".join(line for line in (ctl.local_dir / "lines.log").read_text().splitlines()
                    if "ddptui" in line)


def injected(times: int = 1) -> Callable[..., None]:
    left = [times]

    def fail(*args: object, **kw: object) -> None:
        if left[0] > 0:
            left[0] -= 1
            raise RuntimeError("injected")
    return fail


@pytest.mark.parametrize("thread", ["consumer", "follower", "telemetry"])
def test_an_exception_in_a_thread_of_ddptuis_own_is_said_and_the_run_still_ends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, thread: str) -> None:
    """Each long-lived thread of the controller: the consumer goes on with its next batch, a
    follower's node ends as lost, named, and telemetry stops for that node; the run ends."""
    ctl = local_session(tmp_path, {"consumer": 29761, "follower": 29762, "telemetry": 29763}[
        thread])
    if thread == "consumer":
        real = Evidence.add
        fail = injected()

        def add(self: Evidence, events: list[object]) -> None:
            if any("[seq 5]" in str(getattr(e, "text", "")) for e in events):
                fail()
            real(self, events)  # type: ignore[arg-type]
        monkeypatch.setattr(Evidence, "add", add)
    elif thread == "follower":
        real_emit = NodeFollower._parse_and_emit

        def emit(self: NodeFollower, raw: Any, data: bytes) -> None:
            if self.node == "b" and b"[seq 5]" in data:
                raise RuntimeError("injected")
            real_emit(self, raw, data)
        monkeypatch.setattr(NodeFollower, "_parse_and_emit", emit)
    else:
        monkeypatch.setattr(SamplerParser, "feed", lambda self, line, now: injected(99)())
    ctl.launch()
    result = ctl.wait(120)
    assert result is not None, "the run must end"
    said = said_by_ddptui(ctl)
    if thread == "consumer":
        assert "ddptui's own consumer failed (RuntimeError('injected'))" in said, said
        assert result.exit_code == 0 and result.problem and "consumer failed" in result.problem
    elif thread == "follower":
        assert "ddptui stopped following node b: RuntimeError('injected')" in said, said
        assert result.node_exit_codes["a"] == 0 and result.node_exit_codes["b"] is None
        if ctl.reaper is not None:
            ctl.reaper.cancel.set()
    else:
        assert "ddptui stopped reading this node's telemetry: RuntimeError('injected')" in said
        assert result.exit_code == 0
    assert marked_pids(ctl.run_id) == [] or thread == "follower"


def test_attach_follows_nothing_when_no_node_holds_the_run(cluster2: Cluster,
                                                          tmp_path: Path) -> None:
    path = write_job(tmp_path, hosts(cluster2, tmp_path))
    state = tmp_path / "state"
    first = ddptui("run", str(path), "--headless", "--run-id", "cleaned", state=state)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr
    for d in tmp_path.glob("work-*/.ddptui/runs/cleaned"):
        shutil.rmtree(d)
    kept = json.loads((state / "runs" / "cleaned" / "run.json").read_text())
    res = ddptui("attach", "cleaned", "--headless", state=state, timeout=60)
    said = " ".join(res.stderr.split())
    assert res.returncode == 0, res.stdout + res.stderr
    assert said == ("ddptui: nothing of run cleaned is left on its nodes (their node "
                    "directories are gone), so there is nothing to follow. It finished, exit "
                    "code 0, as recorded here; `ddptui logs cleaned` shows its logs."), said
    assert "lost" not in res.stdout + res.stderr
    meta = json.loads((state / "runs" / "cleaned" / "run.json").read_text())
    assert (meta["status"], meta["exit_code"]) == (kept["status"], kept["exit_code"])


def test_a_live_run_whose_nodes_hold_nothing_is_said_unknown() -> None:
    record = RunRecord("r1", status=RunStatus.RUNNING,
                       nodes={"a": NodeRecord("a", 0, "/w/a"), "b": NodeRecord("b", 1, "/w/b")})
    attach.nothing_left("r1", record, {"a": {"gone"}})  # b did not answer: the watch judges
    attach.nothing_left("r1", record, {"a": {"gone"}, "b": {"pgid"}})  # b holds it
    with pytest.raises(attach.NothingLeft) as e:
        attach.nothing_left("r1", record, {"a": {"gone"}, "b": {"gone"}})
    assert e.value.exit_code is None
    assert "though it is recorded here as running: how it ended is unknown" in str(e.value)
