"""Progress bars over real SSH (2 hosts x 2 processes): a tqdm bar refreshed 10,000 times a
rank, with the lines tqdm.write prints over it (what HF Trainer does), is a few dozen states
in the headless output and the stored logs, and no other line is lost, doubled or moved."""

from __future__ import annotations

import itertools
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import Cluster
from jobs import ddptui, run_id_of

pytestmark = [pytest.mark.cluster, pytest.mark.torchrun]
_ports = itertools.count(29780)

REFRESHES = 10_000
LINES = 40  # ordinary lines a rank prints among its bar's states
BAR = f'''
import os, sys, time
from tqdm import tqdm
rank = int(os.environ["RANK"])
print(f"rank {{rank}} begins", flush=True)
bar = tqdm(total={REFRESHES}, file=sys.stdout, mininterval=0, miniters=1, ascii=True)
for i in range({REFRESHES}):
    bar.update(1)  # every update draws the bar again: 10,000 refreshes
    if i % {REFRESHES // LINES} == 0:
        bar.write(f"line {{rank}} {{i // {REFRESHES // LINES}}}")  # clears the bar, prints
    time.sleep(0.0003)
bar.close()
print(f"rank {{rank}} ends", flush=True)
'''


def hosts(c: Cluster, tmp: Path, job: dict[str, Any]) -> Path:
    d: dict[str, Any] = {
        "defaults": {"python": sys.executable, "nproc_per_node": 2},
        "nodes": [{"host": h.name, "workdir": str(tmp / f"work-{h.name}")} for h in c.hosts],
        "rendezvous": {"port": next(_ports)},
        "job": job,
        "ssh": {"config_file": str(c.ssh_config), "known_hosts": str(c.known_hosts),
                "connect_timeout": 5},
    }
    path = tmp / "hosts.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def check_rank(texts: list[str], rank: int, where: str) -> None:
    """A rank's lines as one face or file shows them (its tag cut off)."""
    ordinary = [t for t in texts if not re.search(r"\d+/\d+ \[", t)]
    want = [f"rank {rank} begins", *(f"line {rank} {k}" for k in range(LINES)),
            f"rank {rank} ends"]
    assert ordinary == want, (where, ordinary[:50])
    states = [t for t in texts if re.search(r"\d+/\d+ \[", t)]
    assert 1 <= len(states) <= 3 * LINES + 60, (where, len(states))
    assert f"{REFRESHES}/{REFRESHES} [" in states[-1], (where, states[-3:])
    assert texts[-2] == states[-1]  # the bar's final state, just before the rank's last line
    done = [int(m.group(1)) for t in states if (m := re.search(r"(\d+)/\d+ \[", t))]
    assert done == sorted(done), where  # no state moved


def test_a_bar_refreshed_10000_times_a_rank_keeps_a_few_dozen_states_and_every_line(
        cluster2: Cluster, tmp_path: Path) -> None:
    pytest.importorskip("tqdm")
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "bar.py").write_text(BAR)
    path = hosts(cluster2, tmp_path, {"script": "proj/bar.py"})
    res = ddptui("run", str(path), "--headless", "--no-preflight", state=tmp_path / "state",
                 timeout=120)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr
    run_id = run_id_of(res.stdout)
    assert "\r" not in res.stdout
    for rank, node in [(0, "node1"), (1, "node1"), (2, "node2"), (3, "node2")]:
        tag = f"[{node} r{rank}] "
        check_rank([ln[len(tag):] for ln in res.stdout.splitlines() if ln.startswith(tag)],
                   rank, "headless")
        logs = ddptui("logs", run_id, "--rank", str(rank), state=tmp_path / "state")
        assert logs.returncode == 0, logs.stderr
        check_rank(logs.stdout.splitlines(), rank, "ddptui logs --rank")
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("state/runs/*/nodes/*.log"))
    assert raw.count(b"] \r") > 4 * REFRESHES * 0.9  # node.log: every state, marked
