"""What the curves tell, on a real run: 2 hosts x 2 ranks over SSH, torchrun on gloo, every
rank printing its loss each step before the all_reduce. The faulty run's diverging rank,
straggler, NaN and spike are named by the headless output and by ``ddptui logs RUN`` alike;
the clean run of the same script has nothing said of it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from cluster import Cluster
from jobs import ddptui, run_id_of
from test_ssh_run import hosts

from ddptui.faces.logs import curves_report

pytestmark = [pytest.mark.cluster, pytest.mark.torchrun]
JOB = Path(__file__).resolve().parent / "data" / "curves_job.py"
SAID = re.compile(r"diverges|straggler|not a finite|spikes|fell behind|what the curves tell")


def run_curves(c: Cluster, tmp: Path, faults: bool) -> tuple[str, str, Path]:
    """The headless output and ``ddptui logs RUN``'s, of one run of the script; its run dir."""
    shutil.copy(JOB, tmp / "job.py")
    d = hosts(c, tmp, env={"CURVES_FAULTS": "1" if faults else "0"})
    path = tmp / "hosts.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    state = tmp / "state"
    res = ddptui("run", str(path), "--headless", "--no-metrics", state=state)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    logs = ddptui("logs", run_id_of(res.stdout), state=state, timeout=60)
    assert logs.returncode == 0, logs.stderr
    return res.stdout, logs.stdout, state / "runs" / run_id_of(res.stdout)


def summary(out: str) -> list[str]:
    lines = out.splitlines()
    start = lines.index("ddptui: what the curves tell:")
    return [ln for ln in lines[start:] if (ln.startswith("ddptui: ") and SAID.search(ln))
            or ln == lines[start]]


def test_a_faulty_run_names_each_fault_live_and_afterwards(cluster2: Cluster, tmp_path: Path
                                                           ) -> None:
    a, b = (h.name for h in cluster2.hosts)
    out, logs, run = run_curves(cluster2, tmp_path, faults=True)
    want = [f"rank 3 (node {b}) diverges from the other ranks since step 40 (loss ",
            f"rank 1 (node {a}) is a straggler: the others waited for it at ",
            f"rank 0 (node {a}): loss is nan at step 50, not a finite number",
            f"rank 0 (node {a}): loss spikes at step 70: "]
    live = [ln for ln in out.splitlines() if " ddptui] ⚠ " in ln and SAID.search(ln)]
    told = summary(out)
    for w in want:  # each said once as found, and once in the summary
        assert sum(w in ln for ln in live) == 1, (w, live)
        assert sum(w in ln for ln in told) == 1, (w, told)
    assert len(live) == len(want) and len(told) == len(want) + 1, (live, told)
    assert "when each rank's line of a step arrives" in next(ln for ln in told
                                                             if "straggler" in ln)
    assert summary(logs) == told  # as run.json recorded it at the end
    meta = json.loads((run / "run.json").read_text())
    assert ["ddptui: what the curves tell:", *(f"ddptui: {t}" for t in meta["curves"])] == told
    assert summary(curves_report(run)) == told  # the same judge, again, from metrics.jsonl


def test_the_clean_run_has_nothing_said(cluster2: Cluster, tmp_path: Path) -> None:
    out, logs, run = run_curves(cluster2, tmp_path, faults=False)
    assert [ln for ln in out.splitlines() if SAID.search(ln)] == []
    assert [ln for ln in logs.splitlines() if SAID.search(ln)] == []
    assert json.loads((run / "run.json").read_text())["curves"] == []
    assert curves_report(run) == ""
    assert out.count(" loss ") >= 4 * 90  # every rank's every step was there to judge


def test_the_bundled_workers_own_timing_names_its_straggler(cluster2: Cluster, tmp_path: Path
                                                            ) -> None:
    """The bundled worker prints after each step's collectives, so arrival tells nothing; its
    ranks' compute_ms and wait_ms name the rank slowed by --slow-rank."""
    a = cluster2.hosts[0].name
    d = hosts(cluster2, tmp_path)
    d["job"] = {"args": ["--d-model", "32", "--n-layers", "1", "--n-heads", "2", "--seq-len",
                         "32", "--batch-size", "8", "--corpus-bytes", "100000",
                         "--eval-batches", "1", "--eval-every", "1000", "--log-every", "1",
                         "--steps", "40", "--slow-rank", "1", "--slow-ms", "60"]}
    path = tmp_path / "hosts.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    res = ddptui("run", str(path), "--headless", "--no-metrics", state=tmp_path / "state")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    told = summary(res.stdout)
    assert len(told) == 2, told
    assert told[1].startswith(f"ddptui: rank 1 (node {a}) is a straggler: the others waited "
                              "for it at "), told
    assert "its compute_ms against the others'" in told[1]
