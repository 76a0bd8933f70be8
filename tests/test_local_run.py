"""The embedded demo as a new user runs it, and bad hosts files as a careless one writes them."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from jobs import ddptui, marked_pids, run_id_of

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    state = tmp_path_factory.mktemp("state")
    res = ddptui("run", str(ROOT / "hosts.example.yaml"), "--headless", state=state, timeout=400)
    return res, state


@pytest.mark.torchrun
def test_example_runs_as_shipped(demo: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    res, state = demo
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    out = res.stdout
    # c10d orders nodes by (hostname, pid): on one machine either node may hold ranks 0-1
    owner: dict[int, str] = {}
    for node, rank in re.findall(r"^\[(local-[ab]) r(\d)\] @metric step=\d+ .*loss=", out, re.M):
        assert owner.setdefault(int(rank), node) == node, "a rank moved between nodes"
    assert sorted(owner) == [0, 1, 2, 3]
    assert sorted(owner.values()) == ["local-a", "local-a", "local-b", "local-b"]
    for rank, node in owner.items():
        assert re.search(rf"^\[{node} r{rank}\] @summary", out, re.M), rank
    assert "ddptui: run" in out and "finished, exit code 0" in out
    run_id = run_id_of(out)
    metrics = [json.loads(x) for x in
               (state / "runs" / run_id / "metrics.jsonl").read_text().splitlines()]
    assert {m["rank"] for m in metrics if m["kind"] == "metric"} == {0, 1, 2, 3}
    assert marked_pids(run_id) == []


@pytest.mark.torchrun
def test_logs_lists_and_prints_a_past_run(demo: tuple[subprocess.CompletedProcess[str], Path]
                                          ) -> None:
    res, state = demo
    run_id = run_id_of(res.stdout)
    listing = ddptui("logs", state=state)
    assert listing.returncode == 0 and run_id in listing.stdout and "finished" in listing.stdout
    rank = ddptui("logs", run_id, "--rank", "2", state=state)
    assert rank.returncode == 0 and '@ddptui {"v": 1' in rank.stdout
    node = ddptui("logs", run_id, "--node", "local-b", state=state)
    assert node.returncode == 0 and re.search(r"^\[local-b r\d\] @ddptui", node.stdout, re.M)
    missing = ddptui("logs", "no-such-run", state=state)
    assert missing.returncode == 2 and "no run 'no-such-run'" in missing.stderr


def test_check_probes_without_starting(tmp_path: Path) -> None:
    res = ddptui("check", str(ROOT / "hosts.example.yaml"), state=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("node ") and "\nlocal-a " in res.stdout
    assert "torch 2." in res.stdout and "on every node checked" in res.stdout
    assert "2 node(s) ready" in res.stdout
    assert not (tmp_path / "runs").exists()


BAD = {
    "yaml_syntax": ("nodes:\n  - host: a\n    port: [22\n", ["hosts.yaml:", "YAML"]),
    "missing_nodes": ("defaults:\n  python: python3\n", ["nodes"]),
    "wrong_type": ("nodes:\n  - host: a\n    nproc_per_node: two\n",
                   ["hosts.yaml:3", "nproc_per_node"]),
    "unknown_key": ("nodes:\n  - host: a\n    nproc_per_nod: 2\n",
                    ["hosts.yaml:3", "nproc_per_node"]),
    "duplicate_node": ("nodes:\n  - host: a\n  - host: a\n", ["hosts.yaml:3", "a"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_hosts_file_is_one_clear_error_and_exit_2(tmp_path: Path, case: str) -> None:
    text, expect = BAD[case]
    path = tmp_path / "hosts.yaml"
    path.write_text(text)
    res = ddptui("run", str(path), "--headless", state=tmp_path / "state", timeout=60)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr and "nothing was started" in res.stderr
    for word in expect:
        assert word in res.stderr, res.stderr
    assert not (tmp_path / "state" / "runs").exists()


def local_hosts(tmp: Path, port: int, **env: str) -> dict[str, object]:
    import sys

    return {
        "defaults": {"python": sys.executable, "nproc_per_node": 1, "transport": "local",
                     "env": {"JOB_LINES": "100000", "JOB_DELAY": "0.05", **env}},
        "nodes": [{"name": "a", "workdir": str(tmp / "wa")},
                  {"name": "b", "workdir": str(tmp / "wb")}],
        "rendezvous": {"endpoint": "127.0.0.1", "port": port},
        "job": {"script": "job.py", "stop_grace": 3},
    }


def wait_for(path: Path, text: str, timeout: float) -> None:
    import time

    end = time.monotonic() + timeout
    while text not in path.read_text(errors="replace"):
        assert time.monotonic() < end, f"no {text!r} in {path} after {timeout} s"
        time.sleep(0.2)


@pytest.mark.torchrun
@pytest.mark.parametrize("how", ["ctrl_c", "stop_command"])
def test_stopping_a_headless_run(tmp_path: Path, how: str) -> None:
    import signal

    from jobs import spawn_ddptui, write_job

    port = 29720 if how == "ctrl_c" else 29721
    path = write_job(tmp_path, local_hosts(tmp_path, port))
    state = tmp_path / "state"
    out = tmp_path / "run.out"
    proc = spawn_ddptui("run", str(path), "--headless", state=state, out=out)
    try:
        wait_for(out, "[seq 3] rank 1", 180)
        run_id = run_id_of(out.read_text())
        assert marked_pids(run_id)
        if how == "ctrl_c":
            proc.send_signal(signal.SIGINT)
        else:
            res = ddptui("stop", run_id, state=state, timeout=60)
            assert res.returncode == 0, res.stdout + res.stderr
            assert "node a: clean" in res.stdout and "node b: clean" in res.stdout
            # the headless ddptui still follows: it alone writes the run's files and ending
            assert "followed by another ddptui" in res.stdout, res.stdout
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = out.read_text()
    assert code == 130, text[-3000:]
    assert "[a] ── stopped" in text and "[b] ── stopped" in text
    assert marked_pids(run_id) == []
    meta = json.loads((state / "runs" / run_id / "run.json").read_text())
    assert meta["status"] == "stopped"


def test_a_node_failing_mid_launch_leaves_no_half_started_cluster(tmp_path: Path) -> None:
    from jobs import write_job

    hosts = local_hosts(tmp_path, 29722)
    hosts["nodes"][1]["workdir"] = "/proc/ddptui-cannot-write-here"  # type: ignore[index]
    path = write_job(tmp_path, hosts)
    # the preflight would name the workdir before any node is touched: this is about later
    res = ddptui("run", str(path), "--headless", "--no-preflight", state=tmp_path / "state",
                 timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    # the project is synced before the run directory is made: that is where node b fails
    assert "node b: the project's code could not be written there" in res.stderr
    assert "/proc/ddptui-cannot-write-here" in res.stderr
    assert "Traceback" not in res.stderr and "File \"" not in res.stderr
    assert list((tmp_path / "wa").glob(".ddptui/runs/*")) == [], "node a kept a run directory"
    run_id = run_id_of(res.stdout)
    assert marked_pids(run_id) == []


@pytest.mark.torchrun
def test_a_rank_that_raises_is_the_summarys_first_line(tmp_path: Path) -> None:
    """The summary leads with ddptui's diagnosis (the exception, the rank, its node), and
    ``run.json`` keeps it; torch's launcher text is never that line."""
    from jobs import write_job

    hosts = local_hosts(tmp_path, 29723, JOB_LINES="20", JOB_FAIL_RANK="1")
    path = write_job(tmp_path, hosts)
    state = tmp_path / "state"
    res = ddptui("run", str(path), "--headless", state=state, timeout=300)
    out = res.stdout
    assert res.returncode == 1, out[-4000:] + res.stderr[-2000:]
    ranks = set(re.findall(r"^\[([ab]) r1\] \[seq", out, re.M))
    assert len(ranks) == 1, out[-4000:]
    node = ranks.pop()
    said = [ln for ln in out.splitlines()
            if ln.startswith("ddptui: ") and not ln.startswith("ddptui: run ")]
    assert said, out[-4000:]
    head = said[0]
    assert head.startswith(f"ddptui: rank 1 (node {node}) raised RuntimeError: rank 1 gave up "
                           "at line 10. What to do: "), out[-4000:]
    assert "To enable traceback" not in head and "errors.html" not in head
    summary = out[out.index(head):]
    assert "  last lines of rank 1:" in summary  # the per-rank report stays, below it
    assert re.search(r"^ddptui: run \S+ failed, exit code 1$", out, re.M)
    run_id = run_id_of(out)
    meta = json.loads((state / "runs" / run_id / "run.json").read_text())
    assert meta["status"] == "failed"
    d = meta["diagnosis"]
    assert (d["cause"], d["node"], d["rank"]) == ("rank_error", node, 1)
    assert d["headline"] == head.removeprefix("ddptui: ")
    assert marked_pids(run_id) == []
