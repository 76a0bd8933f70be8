"""``ddptui clean``: the choice across a cluster (pure), the node program on real processes and
files, and over SSH to two hosts: old runs and caches freed on both, a live run untouched."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from jobs import NUMBERED, ddptui, marked_pids, run_id_of, spawn_ddptui
from test_ssh_run import hosts, wait_until

from ddptui.clean.choice import (
    CACHE_GRACE_S,
    NODE_SRC,
    LocalRun,
    NodeRun,
    NodeScan,
    Policy,
    choose,
    node_args,
    parse_freed,
    parse_scan,
    removal_request,
)
from ddptui.live.session import Session
from ddptui.remote import nodeops

NOW = 1_000_000.0
SECRET = "hf_clean-test-secret-value"
DAY = 86400.0


def run(run_id: str, ended: float, state: str = "done", code: tuple[str, ...] = ()) -> NodeRun:
    return NodeRun(run_id, 0, f"/w/.ddptui/runs/{run_id}/node0", state, ended, 10, code)


def scan(*runs: NodeRun, code: dict[str, float] | None = None,
         tmp: dict[str, float] | None = None) -> NodeScan:
    code = code or {}
    return NodeScan(tuple(runs), code, {c: 1 for c in code}, tmp or {}, NOW)


def test_a_run_alive_on_one_node_is_untouched_on_every_node() -> None:
    old = NOW - 30 * DAY
    scans = {"a": scan(run("r1", old, "live", ("c1",)), run("r2", old, code=("c2",)),
                       code={"c1": old, "c2": old}),
             "b": scan(run("r1", old, "done", ("c1",)), run("r2", old, code=("c2",)),
                       code={"c1": old, "c2": old})}
    choice = choose(scans, [], Policy(keep=0), NOW)
    assert choice.live == ["r1"]
    for node in "ab":
        assert [r.run_id for r in choice.node_runs[node]] == ["r2"]
        assert choice.node_code[node] == ["c2"], "c1 is used by the live run"
    launching = {"a": scan(run("r3", NOW, "launching", ("c3",)), code={"c3": old})}
    assert choose(launching, [], Policy(keep=0), NOW).node_code["a"] == []


def test_keep_the_newest_and_older_than() -> None:
    runs = [run(f"r{i}", NOW - i * DAY, code=(f"c{i}",)) for i in range(6)]
    caches = {f"c{i}": NOW - i * DAY - CACHE_GRACE_S - 1 for i in range(6)}
    s = {"a": scan(*runs, code=caches)}
    choice = choose(s, [], Policy(keep=2), NOW)
    assert [r.run_id for r in choice.node_runs["a"]] == ["r2", "r3", "r4", "r5"]
    assert choice.kept == ["r0", "r1"] and choice.node_code["a"] == ["c2", "c3", "c4", "c5"]
    choice = choose(s, [], Policy(keep=0, older_than_days=3.5), NOW)
    assert [r.run_id for r in choice.node_runs["a"]] == ["r4", "r5"]
    assert choice.node_code["a"] == ["c4", "c5"]
    choice = choose(s, [], Policy(keep=5, older_than_days=0), NOW)
    assert [r.run_id for r in choice.node_runs["a"]] == ["r5"]


def test_caches_recently_used_and_sync_leftovers() -> None:
    s = {"a": scan(code={"fresh": NOW - 10, "stale": NOW - CACHE_GRACE_S - 1},
                   tmp={".tmp-x-1": NOW - 10, ".tmp-y-2": NOW - 2 * 3600})}
    choice = choose(s, [], Policy(keep=0), NOW)
    assert choice.node_code["a"] == ["stale"], "a launch may be about to use a fresh one"
    assert choice.node_tmp["a"] == [".tmp-y-2"]


def test_local_runs() -> None:
    s = {"a": scan(run("r1", NOW - DAY)), "b": scan(run("r1", NOW - DAY))}
    local = [LocalRun("r1", False, NOW - DAY, ("a", "b")),
             LocalRun("r2", False, NOW - 2 * DAY, ("a", "b")),  # its node dirs are gone
             LocalRun("r3", True, NOW - 3 * DAY, ("a", "b")),  # run.json says running: stale
             LocalRun("r4", True, NOW - 4 * DAY, ("x",)),  # runs on nodes not in this file
             LocalRun("r5", False, NOW, ())]
    choice = choose(s, local, Policy(keep=1), NOW)
    assert choice.live == ["r4"]
    assert choice.kept == ["r5"] and choice.local == ["r1", "r2", "r3"]
    assert choose(s, local, Policy(keep=9), NOW).gone_from_nodes == ["r2", "r3"]


def test_parsers_skip_banners_and_refuse_garbage() -> None:
    assert parse_scan("welcome\nnot json\n") is None and parse_freed("") is None
    line = json.dumps({"runs": [], "code": [{"name": "c", "used": 1, "bytes": 2}], "tmp": [],
                       "now": 5})
    found = parse_scan("banner\n" + line)
    assert found is not None and found.code == {"c": 1.0} and found.code_bytes == {"c": 2}


# -- the node program, on real files and processes of this machine ------------------------

def sh(cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=60)


def node_dir(work: Path, run_id: str, *, code: str = "", rank: int = 0, **files: str) -> Path:
    d = work / ".ddptui" / "runs" / run_id / f"node{rank}"
    d.mkdir(parents=True)
    (d / "launch.sh").write_text(f"cd '{work}/.ddptui/code/{code}'\n" if code else "")
    (d / "node.log").write_bytes(b"x" * 5000)
    for name, text in files.items():
        (d / name).write_text(text)
    return d


def test_node_program_judges_liveness_and_frees_by_inode(tmp_path: Path) -> None:
    work = tmp_path / "work"
    code = work / ".ddptui" / "code"
    for c in ("c1", "c2", "c3", "c4"):
        (code / c).mkdir(parents=True)
        (code / f"{c}.manifest.json").write_text("{}")
    (code / "c1" / "big.bin").write_bytes(os.urandom(100_000))
    os.link(code / "c1" / "big.bin", code / "c4" / "big.bin")  # syncs share unchanged files
    (code / "c3" / "own.bin").write_bytes(os.urandom(50_000))
    group = subprocess.Popen(["sleep", "60"], start_new_session=True)
    marked = subprocess.Popen(["sleep", "60"], env={**os.environ, "DDPTUI_RUN": "marked/0"})
    dead = subprocess.Popen(["true"], start_new_session=True)
    dead.wait()
    try:
        node_dir(work, "done", code="c1", exit_code="0\n")
        node_dir(work, "group", code="c2", pgid=f"{group.pid}\n")
        node_dir(work, "marked", code="c3", pgid=f"{dead.pid}\n", exit_code="0\n")
        node_dir(work, "launching")
        old = node_dir(work, "crashed", pgid=f"{dead.pid}\n")
        os.utime(old / "launch.sh", (0, 0))
        res = sh(nodeops.python_cmd("python3", NODE_SRC, *node_args(str(work))))
        found = parse_scan(res.stdout)
        assert found is not None, res.stderr
        states = {r.run_id: r.state for r in found.runs}
        assert states == {"done": "done", "group": "live", "marked": "live",
                          "launching": "launching", "crashed": "done"}
        assert {r.run_id: r.code for r in found.runs}["group"] == ("c2",)
        assert set(found.code) == {"c1", "c2", "c3", "c4"}
        by_id = {r.run_id: r for r in found.runs}

        def remove(runs: list[str], caches: list[str], dry: bool) -> Any:
            todo = removal_request([by_id[r] for r in runs], caches, [], dry)
            res = sh(nodeops.python_cmd("python3", NODE_SRC, *node_args(str(work), todo)))
            freed = parse_freed(res.stdout)
            assert freed is not None, res.stderr
            return freed

        outside = tmp_path / "elsewhere" / "r" / "node0"
        outside.mkdir(parents=True)
        by_id["outside"] = NodeRun("outside", 0, str(outside), "done", 0, 1, ())
        assert remove(["outside"], ["..", "../code"], dry=False).runs == 0
        assert outside.is_dir() and code.is_dir(), "nothing outside the workdir's runs and code"
        only_c1 = remove([], ["c1"], dry=True)
        assert only_c1.code == 1 and only_c1.bytes < 100_000, "c4 still holds big.bin"
        both = remove([], ["c1", "c4"], dry=True)
        assert both.code == 2 and 100_000 < both.bytes < 200_000, "big.bin counted once"
        assert remove([], ["c1", "c3"], dry=True).code == 1, "c3 is used by a live run"
        freed = remove(["done", "crashed", "group"], ["c1", "c2", "c4"], dry=False)
        assert freed.runs == 2 and freed.skipped == ("group",)
        assert freed.code == 2, "c2 is used by a live run"
        assert freed.bytes > 100_000 + 2 * 5000
        left = sorted(p.name for p in (work / ".ddptui" / "runs").iterdir())
        assert left == ["group", "launching", "marked"]
        assert sorted(p.name for p in code.iterdir()) == [
            "c2", "c2.manifest.json", "c3", "c3.manifest.json"]
    finally:
        for p in (group, marked):
            p.kill()
            p.wait(5)


def test_clean_command_on_local_nodes(tmp_path: Path) -> None:
    """The whole command without SSH (`transport: local`); a node that cannot be scanned
    stops it before anything is removed anywhere."""
    def hosts_file(python: str) -> Path:
        path = tmp_path / f"hosts-{len(python)}.yaml"
        path.write_text(yaml.safe_dump({
            "defaults": {"python": python, "transport": "local"},
            "nodes": [{"name": n, "workdir": str(tmp_path / f"w{n}")} for n in "ab"]}))
        return path

    good = hosts_file(sys.executable)
    state = tmp_path / "state"
    # run ids of this test alone: a node program looks at every process of this machine, and
    # another test's marked processes ("r1/0") would make a run of the same id live
    ids = [f"clean-{secrets.token_hex(3)}-{i}" for i in range(3)]
    for age, run_id in enumerate(ids):
        t = time.time() - (age + 1) * DAY
        for rank, n in enumerate("ab"):
            d = node_dir(tmp_path / f"w{n}", run_id, rank=rank, exit_code="0\n")
            for p in (*d.iterdir(), d):
                os.utime(p, (t, t))
        local = state / "runs" / run_id
        local.mkdir(parents=True)
        (local / "run.json").write_text(json.dumps({
            "run_id": run_id, "config": {"path": str(good)}, "status": "finished",
            "ended_at": t, "nodes": [{"name": "a"}, {"name": "b"}]}))
    bad = ddptui("clean", "--keep", "0", str(hosts_file("/no/such/python")), state=state)
    assert bad.returncode == 2 and "nothing was removed" in bad.stderr, bad.stderr
    assert len(list((state / "runs").iterdir())) == 3
    res = ddptui("clean", "--keep", "1", str(good), state=state)
    assert res.returncode == 0, res.stdout + res.stderr
    for n in "ab":
        assert f"ddptui: node {n}: freed " in res.stdout and ": 2 runs, 0 code caches" in res.stdout
        assert [p.name for p in (tmp_path / f"w{n}" / ".ddptui" / "runs").iterdir()] == ids[:1]
    assert "here (" in res.stdout and ": 2 runs" in res.stdout.split("here (")[1]
    assert [p.name for p in (state / "runs").iterdir()] == ids[:1]


# -- over SSH: two hosts, two ranks each ---------------------------------------------------

def write_project(tmp: Path, version: int) -> None:
    """Each version is new content, so a code cache of its own on every node."""
    proj = tmp / "project"
    proj.mkdir(exist_ok=True)
    (proj / "job.py").write_text(NUMBERED + f"\n# version {version}\n")


@pytest.mark.cluster
@pytest.mark.torchrun
def test_clean_frees_old_runs_and_caches_and_keeps_a_live_run(cluster2: Any,
                                                             tmp_path: Path) -> None:
    d = hosts(cluster2, tmp_path, env={"JOB_LINES": "2"})
    d["job"]["script"] = "project/job.py"
    path = tmp_path / "hosts.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    state = tmp_path / "state"
    write_project(tmp_path, 1)
    res = ddptui("run", str(path), "--headless", "--no-preflight", state=state)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr
    write_project(tmp_path, 2)
    d["defaults"]["env"] = {"JOB_LINES": "100000", "JOB_DELAY": "0.05", "HF_TOKEN": SECRET}
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    out = tmp_path / "live.out"
    live = spawn_ddptui("run", str(path), "--headless", "--no-preflight", state=state, out=out)
    try:
        wait_until(lambda: "[seq 3] rank 3" in out.read_text(errors="replace"), 180,
                   "the long run to be under way")
        live_id = run_id_of(out.read_text())
        pids = sorted(marked_pids(live_id))
        works = [tmp_path / f"work-{h.name}" for h in cluster2.hosts]
        hour_ago = time.time() - 3600  # as if the old caches were last used an hour ago
        for w in works:
            for p in (w / ".ddptui" / "code").iterdir():
                os.utime(p, (hour_ago, hour_ago), follow_symlinks=False)
            assert len(list((w / ".ddptui" / "runs").iterdir())) == 2
            assert len([p for p in (w / ".ddptui" / "code").iterdir() if p.is_dir()]) == 2
        live_files = {p: p.stat().st_size for w in works
                      for p in (w / ".ddptui" / "runs" / live_id).rglob("*") if p.is_file()}

        res = ddptui("clean", "--keep", "0", str(path), state=state, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        for h in cluster2.hosts:
            line = next(ln for ln in res.stdout.splitlines() if f"node {h.name}:" in ln)
            assert "freed" in line and "1 run, 1 code cache" in line, res.stdout
            assert " 0 B" not in line
        assert f"kept 1 live run, untouched: {live_id}" in res.stdout
        for w in works:
            assert [p.name for p in (w / ".ddptui" / "runs").iterdir()] == [live_id]
            caches = [p for p in (w / ".ddptui" / "code").iterdir() if p.is_dir()]
            assert len(caches) == 1, "only the live run's code stays"
        assert sorted(marked_pids(live_id)) == pids, "the live run's processes are untouched"
        assert all(p.exists() and p.stat().st_size >= size for p, size in live_files.items())
        assert sorted(p.name for p in (state / "runs").iterdir()) == [live_id]
        assert live.poll() is None, "the run goes on"
    finally:
        live.kill()  # the laptop closes; the run goes on without its controller
        live.wait(30)
    attached = Session.attach(live_id, state_root=state, follow=False)
    try:  # run.json withholds HF_TOKEN; attach takes it back from each node's launch.sh
        assert {n.env["HF_TOKEN"] for n in attached.config.nodes} == {SECRET}
        assert attached.config.withheld_env == () and SECRET in attached.masker.values
    finally:
        attached.detach()
    # stop reads run.json too: stopping needs no secret
    stop = ddptui("stop", live_id, "--grace", "3", state=state, timeout=120)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert marked_pids(live_id) == []
    assert SECRET not in (state / "runs" / live_id / "run.json").read_text()

    dry = ddptui("clean", "--keep", "0", "--dry-run", "--keep-logs", str(path), state=state)
    assert dry.returncode == 0 and "would free" in dry.stdout and "1 run," in dry.stdout
    assert all((w / ".ddptui" / "runs" / live_id).is_dir() for w in works)
    res = ddptui("clean", "--keep", "0", "--keep-logs", str(path), state=state)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not any((w / ".ddptui" / "runs" / live_id).exists() for w in works)
    meta = json.loads((state / "runs" / live_id / "run.json").read_text())
    assert meta["node_files_removed"]["by"] == "ddptui clean"
    listing = ddptui("logs", state=state)
    assert any(live_id in ln and "node files removed" in ln
               for ln in listing.stdout.splitlines()), listing.stdout


def test_the_report_says_what_each_node_freed_and_what_stayed() -> None:
    from ddptui.clean.choice import Choice, Freed
    from ddptui.clean.sweep import CleanReport
    from ddptui.faces.clean import human_bytes, report_lines

    choice = Choice(local=["r1"], live=["r9"], kept=["r2", "r3"])
    report = CleanReport(False, Policy(keep=2, older_than_days=7), choice,
                         nodes={"a": Freed(1, 2, 3_400_000), "b": Freed(1, 0, 10, ("r8",))},
                         local_runs=1, local_bytes=2048, local_dir=Path("/s/runs"))
    lines = report_lines(report)
    assert lines[0] == "ddptui: node a: freed 3.4 MB: 1 run, 2 code caches"
    assert lines[1] == "ddptui: node b: freed 10 B: 1 run, 0 code caches"
    assert "left r8: it started running meanwhile" in lines[2]
    assert "ddptui: here (/s/runs): freed 2.0 KB: 1 run" in lines
    assert "ddptui: kept 1 live run, untouched: r9" in lines
    assert any("2 finished runs (the 2 newest, or younger than 7 days" in ln for ln in lines)
    report.dry_run, report.keep_logs = True, True
    lines = report_lines(report)
    assert lines[0].startswith("ddptui: node a: would free 3.4 MB")
    assert "kept the logs of 1 run (--keep-logs)" in "\n".join(lines)
    report.errors = ["node b: unreachable"]
    assert report_lines(report)[-3] == "ddptui: the local run dirs were kept, since not every " \
        "node was cleaned"
    assert human_bytes(999) == "999 B" and human_bytes(10**13) == "10.0 TB"
