"""Hugging Face's Trainer and PyTorch Lightning, unchanged, under ddptui over real SSH (2 hosts
x 2 processes, CPU, gloo): the series ddptui recorded hold what the libraries printed, step for
step, and ``ddptui logs RUN --metrics --json`` prints them."""

from __future__ import annotations

import ast
import csv
import itertools
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import Cluster
from jobs import ddptui, run_id_of

pytestmark = [pytest.mark.cluster, pytest.mark.torchrun]
JOBS = Path(__file__).parent / "data" / "metrics" / "jobs"
_ports = itertools.count(29860)
_TQDM = re.compile(r"Epoch (\d+):.*?(\d+)/(\d+) \[.*train_loss=([0-9.e-]+)\]")


def run_job(c: Cluster, tmp: Path, script: str, **env: str) -> tuple[Path, list[dict[str, Any]]]:
    proj = tmp / "proj"
    proj.mkdir()
    shutil.copy(JOBS / script, proj / script)
    hosts = {
        "defaults": {"python": sys.executable, "nproc_per_node": 2,
                     "env": {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
                             "HF_HUB_OFFLINE": "1", "JOB_OUT": str(tmp / "out"), **env}},
        "nodes": [{"host": h.name, "workdir": str(tmp / f"work-{h.name}")} for h in c.hosts],
        "rendezvous": {"port": next(_ports)},
        "job": {"script": f"proj/{script}"},
        "ssh": {"config_file": str(c.ssh_config), "known_hosts": str(c.known_hosts),
                "connect_timeout": 5},
    }
    path = tmp / "hosts.yaml"
    path.write_text(yaml.safe_dump(hosts, sort_keys=False))
    res = ddptui("run", str(path), "--headless", "--no-preflight", state=tmp / "state",
                 timeout=240)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr
    run_id = run_id_of(res.stdout)
    shown = ddptui("logs", run_id, "--metrics", "--json", state=tmp / "state", timeout=60)
    assert shown.returncode == 0, shown.stderr
    d = tmp / "state" / "runs" / run_id
    return d, [json.loads(line) for line in shown.stdout.splitlines()]


def test_hugging_face_trainer_loss_step_for_step(cluster2: Cluster, tmp_path: Path) -> None:
    d, points = run_job(cluster2, tmp_path, "hf_trainer_job.py", JOB_STEPS="20")
    printed = [ast.literal_eval(t[t.index("{'"):])
               for t in (d / "ranks" / "rank0.log").read_text().splitlines() if "{'" in t]
    assert len(printed) == 10 + 2 + 1  # every 2 steps, two evaluations, the final summary
    for name in ("loss", "grad_norm", "learning_rate", "eval_loss", "train_loss"):
        want = [(float(p["epoch"]), float(p[name])) for p in printed if name in p]
        got = [(p["step"], p["value"]) for p in points if p["name"] == name]
        assert got == want, name
    assert {(p["rank"], p["recognizer"], p["step_kind"]) for p in points} == {
        (0, "hf_trainer", "epoch")}  # the Trainer logs on the first rank only


def test_lightning_loss_step_for_step(cluster2: Cluster, tmp_path: Path) -> None:
    d, points = run_job(cluster2, tmp_path, "lightning_job.py", JOB_EPOCHS="2")
    last: dict[int, float] = {}
    # what rank 0 wrote, every bar state: torchrun's own copy on the node (ddptui's logs keep
    # one state a second of a bar)
    wrote = next(tmp_path.glob(f"work-node1/.ddptui/runs/{d.name}/*/torchelastic/**/0/"
                               "stdout.log")).read_text()
    for t in re.split(r"[\r\n]", wrote):
        m = _TQDM.search(t)
        if m:  # tqdm draws a step twice (new n, then the new postfix): the last is its loss
            last[int(m[1]) * int(m[3]) + int(m[2])] = float(m[4])
    last.pop(0, None)
    got = [(p["step"], p["value"]) for p in points if p["name"] == "train_loss"]
    assert dict(got) == last and len(got) == len(last) > 0
    assert {(p["rank"], p["recognizer"]) for p in points} == {(0, "lightning")}


def test_lightning_rich_bar_loss_step_for_step(cluster2: Cluster, tmp_path: Path) -> None:
    """RichProgressBar, which draws into a pipe only at the end: ddptui's ranks tell rich it
    writes to a terminal, so it redraws each refresh, its postfix wrapped at 80 columns."""
    _, points = run_job(cluster2, tmp_path, "lightning_job.py", JOB_EPOCHS="2", JOB_BAR="rich",
                        JOB_BATCH="4", JOB_STEP_S="0.05")
    # What Lightning logged, rank 0's loss at each step (CSVLogger, log_every_n_steps=1): the
    # bar shows the same value to 3 decimals, at the step after (it counts batches done).
    rows = list(csv.DictReader(next((tmp_path / "out").glob("**/metrics.csv")).open()))
    logged = {int(r["step"]) + 1: float(r["train_loss"]) for r in rows if r.get("train_loss")}
    assert sorted(logged) == list(range(1, 33))  # 256 samples, 4 ranks, batches of 4, 2 epochs
    got: dict[int, float] = {}
    for p in points:
        if p["name"] == "train_loss":  # a step drawn twice: first, maybe, with the loss before
            got[int(p["step"])] = p["value"]
    right = [s for s, v in logged.items() if s in got and abs(got[s] - v) <= 0.0005 + 1e-9]
    assert len(right) >= 0.9 * len(logged), {s: (got.get(s), v) for s, v in logged.items()}
    assert {(p["rank"], p["recognizer"]) for p in points} == {(0, "lightning")}
