"""Restarts across nodes: one rank crashes, every node restarts, all resume from the snapshot.

torchrun counts a restart only on the node whose workers failed; the other node restarts
its healthy workers so that the failed one can rejoin ("Detected 1 new nodes"), and its
``TORCHELASTIC_RESTART_COUNT`` stays 0. ddptui counts both as the job's restart, and the
bundled worker agrees on its attempt through the agents' store (worker/generation.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist
import yaml
from cluster import Cluster
from jobs import ddptui, run_id_of
from test_ssh_run import hosts

from ddptui.events import NodeState, NodeStatus
from ddptui.nodelog import NodeLogParser
from worker.generation import agree

# Recorded from torch 2.13's agent (LOGLEVEL=INFO) on the namespace cluster.
FAILED = ("I1122 21:28:14.399000 29521 site-packages/torch/distributed/elastic/agent/server/"
          "api.py:942] [default] Worker group FAILED. 1/1 attempts left; will restart worker group")
# The same agent's words (api.py's format string) on a node whose workers were healthy.
FOLLOWER = ("I1122 21:28:14.512000 29522 site-packages/torch/distributed/elastic/agent/server/"
            "api.py:962] [default] Detected 1 new nodes from group_rank=0; will restart worker "
            "group")


def states(lines: list[str], node: str) -> list[NodeState]:
    p = NodeLogParser(node)
    return [e for ln in lines for e in p.feed(ln, 0.0) if isinstance(e, NodeState)]


def test_both_sides_of_a_restart_count_one_attempt() -> None:
    for line, why in [(FOLLOWER, "restart 1: another node restarted its workers"),
                      (FAILED, "restart 1 of 1")]:
        [s] = states([line], "n")
        assert (s.status, s.attempt, s.detail) == (NodeStatus.RESTARTING, 1, why)


def test_ranks_agree_on_the_attempt_whatever_each_node_counted() -> None:
    store = dist.HashStore()
    assert {agree(store, r) for r in range(4)} == {0}
    assert [agree(store, r) for r in (2, 3, 0, 1)] == [1, 1, 1, 1]  # either node first
    # rank 3 died before it took its seat in attempt 2; it must not stay behind
    assert [agree(store, r) for r in (0, 1, 2)] == [2, 2, 2]
    assert [agree(store, r) for r in (0, 1, 2, 3)] == [3, 3, 3, 3]


TINY = ["--d-model", "32", "--n-layers", "1", "--n-heads", "2", "--seq-len", "32",
        "--batch-size", "8", "--corpus-bytes", "100000", "--eval-batches", "1",
        "--eval-every", "1000", "--log-every", "5"]


@pytest.mark.cluster
@pytest.mark.torchrun
def test_a_crash_on_one_node_restarts_every_node_from_the_snapshot(cluster2: Cluster,
                                                                    tmp_path: Path) -> None:
    d: dict[str, Any] = hosts(cluster2, tmp_path)
    d["job"] = {"args": [*TINY, "--steps", "30", "--snapshot-every", "10", "--crash-rank", "3",
                         "--crash-step", "15"],
                "max_restarts": 1, "monitor_interval": 0.5}
    path = tmp_path / "hosts.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    res = ddptui("run", str(path), "--headless", state=tmp_path / "state", timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr
    out = res.stdout
    # the node whose rank crashed says "restart 1 of 1"; the other says the same when its
    # ranks failed too (a peer gone mid all-reduce), else that it restarted for the other
    assert "── restarting (restart 1 of 1)" in out, out[-4000:]
    for node in ("node1", "node2"):
        assert out.count(f"[{node}] ── restarting (restart 1") == 1, out[-4000:]
    run = tmp_path / "state" / "runs" / run_id_of(out)
    records = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    starts = [r for r in records if r["kind"] == "start" and r["attempt"] == 1]
    assert sorted(r["rank"] for r in starts) == [0, 1, 2, 3]
    # every rank from one snapshot: the last periodic one (10), or the one the ranks save at
    # torchrun's SIGTERM when it reaches them before their collective fails (14: the step
    # the crash interrupted had not reached its optimizer, so the model is still whole)
    begun = {r["start_step"] for r in starts}
    assert len(begun) == 1 and begun <= {10, 14}, [(r["rank"], r["start_step"]) for r in starts]
    done = [r for r in records if r["kind"] == "summary"]
    assert sorted(r["rank"] for r in done) == [0, 1, 2, 3]
    assert all(r["attempt"] == 1 and r["step"] == 30 for r in done)
    events = [json.loads(ln) for ln in (run / "events.jsonl").read_text().splitlines()]
    attempts = {e["node"]: e["attempt"] for e in events if e["type"] == "node_state"}
    assert attempts == {"node1": 1, "node2": 1}, attempts
