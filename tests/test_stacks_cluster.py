"""The straggler named from sampled stacks, on a real run: 2 hosts x 2 ranks over SSH,
torchrun on gloo, every rank printing its loss AFTER the all_reduce (their lines arrive
together: arrival names nobody) and no timing of its own. Rank 1 working three times as long
is named, with its node, by the headless output and ``ddptui logs RUN``; the clean run of
the same script has no straggler named, and says what its samples showed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from cluster import Cluster
from jobs import ddptui, run_id_of
from test_insight_cluster import summary
from test_ssh_run import hosts

from ddptui.faces.logs import curves_report

pytestmark = [pytest.mark.cluster, pytest.mark.torchrun]
JOB = Path(__file__).resolve().parent / "data" / "stacks_job.py"


def run_sampled(c: Cluster, tmp: Path, slow: bool) -> tuple[str, str, Path]:
    """The headless output and ``ddptui logs RUN``'s of one run sampled every 2 s."""
    shutil.copy(JOB, tmp / "job.py")
    d = hosts(c, tmp, env={"STACKS_SLOW": "1" if slow else "0"},
              health={"stack_sample_every": 2})
    path = tmp / "hosts.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    state = tmp / "state"
    res = ddptui("run", str(path), "--headless", "--no-metrics", state=state, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    logs = ddptui("logs", run_id_of(res.stdout), state=state, timeout=60)
    assert logs.returncode == 0, logs.stderr
    return res.stdout, logs.stdout, state / "runs" / run_id_of(res.stdout)


def test_sampled_stacks_name_the_rank_the_others_wait_for(cluster2: Cluster, tmp_path: Path
                                                          ) -> None:
    a = cluster2.hosts[0].name
    out, logs, run = run_sampled(cluster2, tmp_path, slow=True)
    named = f"rank 1 (node {a}) is a straggler: from "
    live = [ln for ln in out.splitlines() if " ddptui] ⚠ " in ln and "straggler" in ln]
    assert len(live) == 1 and named in live[0], out[-4000:]
    told = summary(out)
    said = [ln for ln in told if "straggler" in ln]
    assert len(said) == 1 and named in said[0], told
    assert "sampled stacks" in said[0] and "py-spy samples a rank every 2 s" in said[0]
    assert summary(logs) == told  # as run.json recorded it at the end
    meta = json.loads((run / "run.json").read_text())
    assert any(named in t for t in meta["curves"])
    assert [ln for ln in summary(curves_report(run)) if "straggler" in ln] == said  # again,
    # from metrics.jsonl and the counts in events.jsonl


def test_the_clean_run_names_no_straggler_from_its_stacks(cluster2: Cluster, tmp_path: Path
                                                          ) -> None:
    out, logs, _ = run_sampled(cluster2, tmp_path, slow=False)
    assert [ln for ln in out.splitlines() if "is a straggler" in ln or "fell behind" in ln] == []
    assert [ln for ln in logs.splitlines() if "is a straggler" in ln or "fell behind" in ln] == []
    said = out[out.index("ddptui: what the curves tell:"):]
    assert "ddptui: sampled stacks name no straggler: each rank was inside a collective" in said
