"""Lost nodes end the run: a killed host, a short partition, a long one (real sshd, torchrun).

A partition is the host's veth taken down in the root namespace: its address stops
answering, TCP connections stall rather than fail, as behind a cut cable.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cluster import Cluster, ClusterFactory
from jobs import ddptui, marked_pids, run_id_of, seqs, spawn_ddptui, write_job
from test_ssh_run import hosts, only_sshd_left, wait_until

from ddptui.events import NodeStatus
from ddptui.live.liveness import Watch, reached_again
from ddptui.remote.nodeops import StopResult


class Follower:
    """The part of a NodeFollower the watch reads: when it last heard from its node."""

    def __init__(self, silent_for: float) -> None:
        self.last_heard = time.monotonic() - silent_for
        self.trouble = "connection reset"
        self.ended = False
        self.halt = threading.Event()
        self.gave_up = ""

    def give_up(self, detail: str) -> bool:
        self.gave_up, self.ended = detail, True
        self.halt.set()
        return True


def watch_once(silent: dict[str, float], ended: tuple[str, ...] = (),
               failed: tuple[str, ...] = (), end_after_failure: float = 60.0,
               until: tuple[str, Callable[[Watch, list[str]], bool]] | None = None,
               ) -> tuple[Watch, dict[str, Follower], list[str]]:
    """Runs a watch until ``until`` (what it is waiting for, and a test of it) holds or, with
    none, for a fixed 0.3 s in which nothing may happen."""
    followers = {n: Follower(s) for n, s in silent.items()}
    for n in (*ended, *failed):
        followers[n].ended = True
    stopped: list[str] = []
    done = threading.Event()
    finished = {n: NodeStatus.FAILED for n in failed}
    w = Watch(followers=followers, finished=lambda: finished,  # type: ignore[arg-type]
              stopping=threading.Event(), done=done,
              end_run=lambda names, why: stopped.extend(names), drop=lambda name: None,
              lost_after=4, tick=0.01, end_after_failure=end_after_failure)
    w.start()
    if until is None:
        # A negative check: ~30 ticks in which nothing may happen. A slow machine gives the
        # watch fewer ticks, which can only make it pass more easily: a failure is a real bug.
        time.sleep(0.3)
    else:
        what, cond = until
        wait_until(lambda: cond(w, stopped), 15, what)
    done.set()
    w.join(5)
    return w, followers, stopped


def test_a_silent_node_is_lost_and_the_others_are_stopped() -> None:
    w, f, stopped = watch_once({"a": 0.0, "b": 9.0, "c": 1.0, "d": 20.0}, ended=("d",),
                               until=("the others to be stopped", lambda w, s: bool(s)))
    assert w.lost == ["b"] and sorted(stopped) == ["a", "c"]  # d had exited already
    assert f["b"].gave_up.startswith("lost: no answer for 9 s (health.lost_after is 4 s)")
    assert not f["a"].gave_up and not f["c"].gave_up


def test_a_failed_node_has_the_others_stopped_once_they_had_their_time() -> None:
    w, _, stopped = watch_once({"a": 0.0, "b": 0.0, "c": 0.0}, failed=("b",),
                               end_after_failure=0.05,
                               until=("the failure to stop the others",
                                      lambda w, s: w.failed is not None))
    assert w.failed == "b" and w.lost == [] and sorted(stopped) == ["a", "c"]
    w, _, stopped = watch_once({"a": 0.0, "b": 0.0}, failed=("b",), end_after_failure=60)
    assert w.failed is None and stopped == []  # still within their time
    w, _, stopped = watch_once({"a": 0.0, "b": 0.0}, ended=("a",), failed=("b",),
                               end_after_failure=0.05)
    assert w.failed is None and stopped == []  # nothing left to stop: the run just ends


def test_when_no_node_answers_none_is_declared_lost() -> None:
    w, _, stopped = watch_once({"a": 9.0, "b": 9.0})
    assert w.lost == [] and stopped == []
    w, _, stopped = watch_once({"a": 9.0},  # one node: nothing tells the two apart
                               until=("the node to be lost", lambda w, s: bool(w.lost)))
    assert w.lost == ["a"]


def lost_hosts(c: Cluster, tmp: Path, lost_after: float, lines: int,
               delay: float = 0.05) -> Path:
    d: dict[str, Any] = hosts(c, tmp, env={"JOB_LINES": str(lines), "JOB_DELAY": str(delay)})
    d["health"] = {"lost_after": lost_after}
    d["job"]["stop_grace"] = 2
    d["ssh"]["connect_timeout"] = 2
    job = tmp / "job"  # the project synced to the nodes: not the cluster's own files
    job.mkdir()
    return write_job(job, d)


def link(c: Cluster, host: str, state: str) -> None:
    subprocess.run(["ip", "link", "set", c[host].veth, state], check=True, timeout=10)


def summary(out: str) -> list[str]:
    """What the headless face says after the last line of the run."""
    lines = out.splitlines()
    last = max(i for i, ln in enumerate(lines) if ln.startswith("["))
    return lines[last + 1:]


def wait_for(proc: subprocess.Popen[bytes], out: Path, text: str, timeout: float) -> None:
    end = time.monotonic() + timeout
    while text not in out.read_text(errors="replace"):
        if time.monotonic() > end or proc.poll() is not None:
            raise AssertionError(f"no {text!r} within {timeout} s:\n"
                                 + out.read_text(errors="replace")[-4000:])
        time.sleep(0.2)


def read_meta(state: Path, run_id: str) -> dict[str, Any]:
    return json.loads((state / "runs" / run_id / "run.json").read_text())


@pytest.mark.cluster
@pytest.mark.torchrun
def test_a_killed_node_ends_the_run_naming_it(cluster_factory: ClusterFactory,
                                              tmp_path: Path) -> None:
    c = cluster_factory(2)
    state, out = tmp_path / "state", tmp_path / "run.out"
    proc = spawn_ddptui("run", str(lost_hosts(c, tmp_path, 4, 100000)), "--headless",
                        state=state, out=out)
    try:
        wait_for(proc, out, "[seq 5] rank 3", 120)
        t0 = time.monotonic()
        c.stop_host("node2")  # every process in it killed, its cable cut
        wait_for(proc, out, "ddptui: trying for up to", 40)
        took = time.monotonic() - t0
        proc.send_signal(signal.SIGINT)  # leave node2 as it is: it is dead
        assert proc.wait(30) == 255
    finally:
        if proc.poll() is None:
            proc.kill()
    text = out.read_text()
    said = summary(text)
    assert said[0].startswith("ddptui: node node2 was lost"), text[-3000:]
    assert took < 4 + 15, took
    assert "[node2] ── lost (lost: no answer for" in text
    meta = read_meta(state, run_id_of(text))
    assert meta["status"] == "failed" and meta["exit_code"] == 255
    assert meta["diagnosis"]["node"] == "node2" and meta["unstopped"] == ["node2"]
    assert "node2 left as they are; `ddptui stop" in text
    wait_until(lambda: only_sshd_left(c), 10, "node1 to hold nothing of the run")
    link(c, "node2", "up")  # the node comes back, later: a stop cleans up and records it
    c.start_sshd("node2")
    res = ddptui("stop", meta["run_id"], state=state, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    meta = read_meta(state, meta["run_id"])
    assert (meta["status"], meta["exit_code"], meta["unstopped"]) == ("failed", 255, [])


@pytest.mark.cluster
@pytest.mark.torchrun
def test_a_partition_shorter_than_lost_after_loses_and_repeats_no_line(
        cluster2: Cluster, tmp_path: Path) -> None:
    c = cluster2  # healed before the test ends, so the module's cluster is shared
    n = 50
    state, out = tmp_path / "state", tmp_path / "run.out"
    proc = spawn_ddptui("run", str(lost_hosts(c, tmp_path, 12, n, delay=0.1)), "--headless",
                        state=state, out=out)
    try:
        wait_for(proc, out, "[seq 10] rank 3", 120)
        link(c, "node2", "down")
        time.sleep(2.5)
        link(c, "node2", "up")
        assert proc.wait(120) == 0, out.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    text = out.read_text()
    assert "── lost" not in text
    run = state / "runs" / run_id_of(text)
    for rank in range(4):
        assert seqs(run / "ranks" / f"rank{rank}.log") == list(range(n)), rank
        shown = [ln for ln in text.splitlines() if ln.endswith(f"rank {rank} says hello")]
        assert len(shown) == n, rank


@pytest.mark.cluster
@pytest.mark.torchrun
def test_a_long_partition_fails_the_run_and_nothing_is_left_after_heal(
        cluster2: Cluster, tmp_path: Path) -> None:
    c = cluster2
    state, out = tmp_path / "state", tmp_path / "run.out"
    proc = spawn_ddptui("run", str(lost_hosts(c, tmp_path, 4, 100000)), "--headless",
                        state=state, out=out)
    try:
        wait_for(proc, out, "[seq 5] rank 3", 120)
        link(c, "node2", "down")
        wait_for(proc, out, "ddptui: trying for up to", 40)
        run_id = run_id_of(out.read_text())
        assert marked_pids(run_id), "node2's part goes on behind the partition"
        link(c, "node2", "up")
        assert proc.wait(60) == 255
    finally:
        if proc.poll() is None:
            proc.kill()
        link(c, "node2", "up")
    text = out.read_text()
    assert summary(text)[0].startswith("ddptui: node node2 was lost"), text[-3000:]
    reached = next(ln for ln in text.splitlines() if ln.startswith("ddptui: node node2: "))
    # what the ranks left there may have died with node1's store by then, or still run
    assert re.fullmatch(r"ddptui: node node2: reached again; fetched the \d+ line\(s\) its "
                        r"ranks and agent wrote while cut off; (stopped \d+ process\(es\) of "
                        r"the run still running there \(pids [\d, ]+\)(, \d+ of them by "
                        r"SIGKILL)?|nothing of the run is left there)", reached), reached
    assert marked_pids(run_id) == []
    wait_until(lambda: only_sshd_left(c), 10, "both hosts to hold nothing of the run")
    meta = read_meta(state, run_id)
    assert meta["status"] == "failed" and meta["unstopped"] == []
    assert next(n for n in meta["nodes"] if n["name"] == "node2")["cleanup"] == reached[20:]
    # every line node2's ranks wrote, the cut included, is here once and in order
    there = next(tmp_path.glob(f"work-node2/.ddptui/runs/{run_id}/*/node.log")).read_text()
    for rank in (2, 3):
        wrote = [int(m.group(1)) for m in re.finditer(
            rf"^\[ddptui {rank} \d+\] \[seq (\d+)\] rank {rank} says hello$", there, re.M)]
        kept = seqs(state / "runs" / run_id / "ranks" / f"rank{rank}.log")
        assert kept == wrote == list(range(len(wrote))), rank
        shown = sum(1 for ln in text.splitlines() if ln.endswith(f"rank {rank} says hello"))
        assert len(wrote) > shown + 20, "lines were written behind the cut"  # 20 a second


def test_what_the_reaper_did_is_said_plainly() -> None:
    none = StopResult([], [], [])
    assert reached_again(0, none, "r") == "reached again; nothing of the run is left there"
    said = reached_again(94, StopResult([11, 12], [12], []), "r")
    assert said == ("reached again; fetched the 94 line(s) its ranks and agent wrote while cut "
                    "off; stopped 2 process(es) of the run still running there (pids 11, 12), "
                    "1 of them by SIGKILL")
    said = reached_again("TransportError: gone", StopResult([11], [11], [11]), "r")
    assert "could not be fetched (TransportError: gone); `ddptui attach r` fetches it" in said
    assert said.endswith("processes [11] of the run are still alive after a stop")


@pytest.mark.cluster
@pytest.mark.torchrun
def test_a_module_missing_on_one_node_ends_the_run_naming_it(cluster2: Cluster,
                                                             tmp_path: Path) -> None:
    """node2 lacks a package node1 has: its ranks die at import, node1's wait in the
    rendezvous for ranks that never come; ddptui stops them after health.end_after_failure
    and says which module is missing where."""
    site = tmp_path / "site-node1"  # what only node1's environment has installed
    site.mkdir()
    (site / "fastkernels.py").write_text("SPEED = 1\n")
    d: dict[str, Any] = hosts(cluster2, tmp_path)
    d["nodes"][0]["env"] = {"PYTHONPATH": str(site)}
    d["health"] = {"end_after_failure": 3}
    d["job"]["stop_grace"] = 2
    job = tmp_path / "job"
    job.mkdir()
    path = write_job(job, d)
    (job / "job.py").write_text("import fastkernels\n" + (job / "job.py").read_text())
    t0 = time.monotonic()
    res = ddptui("run", str(path), "--headless", state=tmp_path / "state", timeout=180)
    took = time.monotonic() - t0
    said = summary(res.stdout) if "\n[" in res.stdout else res.stdout.splitlines()
    assert res.returncode not in (0, 2), res.stdout[-3000:] + res.stderr
    head = next(ln for ln in said if ln.startswith("ddptui: "))
    assert "fastkernels" in head and "node2" in head, res.stdout[-3000:]
    assert "node node2 failed and its ranks are gone" in res.stdout, res.stdout[-3000:]
    assert took < 120, took  # not the half hour node1's ranks would wait by themselves
    meta = read_meta(tmp_path / "state", run_id_of(res.stdout))
    assert meta["status"] == "failed" and meta["diagnosis"]["node"] == "node2"
    wait_until(lambda: only_sshd_left(cluster2), 15, "nothing of the run left")


def marked_on(run_id: str, node_rank: int) -> list[int]:
    """The run's processes on one node (by the node rank in their DDPTUI_RUN marker)."""
    want = f"DDPTUI_RUN={run_id}/{node_rank}".encode()
    found = []
    for pid in marked_pids(run_id):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if want in env:
            found.append(pid)
    return found


@pytest.mark.cluster
@pytest.mark.torchrun
def test_stop_stops_what_it_reaches_and_names_the_node_it_cannot(
        cluster_factory: ClusterFactory, tmp_path: Path) -> None:
    """The controller is gone (the laptop died), a node is cut off: ``ddptui stop`` still
    stops the node it reaches, says which it could not and what to do, and a later stop,
    once the node answers, finishes the job."""
    c = cluster_factory(2)
    state, out = tmp_path / "state", tmp_path / "run.out"
    proc = spawn_ddptui("run", str(lost_hosts(c, tmp_path, 120, 100000)), "--headless",
                        state=state, out=out)
    try:
        wait_for(proc, out, "[seq 5] rank 3", 120)
    finally:
        proc.kill()  # no stop, no detach: the run goes on without its controller
        proc.wait(30)
    run_id = run_id_of(out.read_text())
    assert marked_on(run_id, 0) and marked_on(run_id, 1)
    link(c, "node2", "down")
    try:
        res = ddptui("stop", run_id, "--grace", "2", state=state, timeout=90)
        assert res.returncode == 1, res.stdout + res.stderr
        assert "ddptui: node node2 could not be reached to stop the run there" in res.stderr
        assert f"run `ddptui stop {run_id}` again once it answers" in res.stderr
        assert "ddptui: node node1: clean" in res.stdout and "Traceback" not in res.stderr
        assert marked_on(run_id, 0) == [] and marked_on(run_id, 1), "node2 runs on, cut off"
        assert read_meta(state, run_id)["unstopped"] == ["node2"]
    finally:
        link(c, "node2", "up")
    res = ddptui("stop", run_id, "--grace", "2", state=state, timeout=90)
    assert res.returncode == 0, res.stdout + res.stderr
    assert marked_pids(run_id) == [] and read_meta(state, run_id)["unstopped"] == []


def test_the_reaper_fetches_again_what_was_written_until_its_stop() -> None:
    """A rank behind a healed partition writes on until the reaper stops it: the lines
    between the first fetch and the stop are fetched too (seen once in a hunt: the last one
    was missing)."""
    from ddptui.live.liveness import Reaper

    done: list[str] = []

    def fetch(_name: str, _t: object) -> int:
        done.append("fetch")
        return 3 if len(done) == 1 else 2

    def stop(_name: str, _t: object) -> StopResult:
        done.append("stop")
        return StopResult([7], [], [])

    r = Reaper(["node2"], 10, run_id="r", connect=lambda _n: SimpleNamespace(close=lambda: None),
               fetch=fetch, stop=stop, record=lambda *_: None)  # type: ignore[arg-type]
    r.run()
    assert done == ["fetch", "stop", "fetch"]
    assert r.report["node2"].startswith("reached again; fetched the 5 line(s)")
