"""The time limit on a real Slurm cluster (tests/slurmcluster.py): allocations of Slurm's
shortest limit (1 minute) with the signal 30 s before it. The bundled worker gets SIGUSR2,
saves a snapshot, ddptui names its step, and with ``resubmit: 1`` a second allocation
resumes from it: together the attempts train every step once, recorded as one run. A script
that saves nothing is said to have saved nothing."""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from slurmcluster import SlurmCluster
from test_slurm_run import ddptui, exit_code, run_id_of, spawn, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.torchrun]

#: The lead: the signal 30 s before the end of a 1-minute allocation (Slurm's shortest).
LEAD_S = 30
#: The first attempt cannot end before its signal (200 steps of at least 200 ms: 40 s), and
#: the resumed one, at full speed, has only its start to make within the 30 s before its own
#: lead (its torchruns started warm as the allocation is granted, on a machine whose cores
#: CI's other tests share): the test does not race the limit.
STEPS = 200
WORKER = ["--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--seq-len", "16",
          "--batch-size", "2", "--corpus-bytes", "20000", "--steps", str(STEPS),
          "--warmup-steps", "0", "--eval-every", "100000", "--snapshot-every", "0",
          "--log-every", "100000", "--stop-check-every", "1", "--print-every-step",
          "--step-sleep-ms", "200", "--resumed-step-sleep-ms", "0"]
STEP_RE = re.compile(r"^\[(sn\d) r0\] step (\d+) loss ", re.M)


def hosts(tmp: Path, slurm: dict[str, Any], job: dict[str, Any], lead: int = 30) -> Path:
    asked = {} if "job" in slurm else {"nodes": 2, "time": "1"}
    d = {"defaults": {"python": sys.executable, "nproc_per_node": 1,
                      "workdir": str(tmp / "w"), "env": {"OMP_NUM_THREADS": 1}},
         "slurm": {**asked, "signal_before": lead, **slurm},
         "job": {"stop_grace": 3, **job}}
    path = tmp / "hosts.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def record(tmp: Path, run_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (tmp / "state" / "runs" / run_id / "run.json").read_text())
    return data


def test_the_worker_saves_at_the_signal_and_a_new_allocation_resumes_from_it(
        slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    c = slurm_cluster
    proc, out = spawn(c, tmp_path, "run", str(hosts(
        tmp_path, {"partition": c.partition, "resubmit": 1}, {"args": WORKER}, LEAD_S)),
        "--headless")
    assert exit_code(proc, out, 280) == 0, out.read_text()[-5000:]
    text = out.read_text()
    first = run_id_of(text)
    sent = re.search(r"the allocation ends in (\d+) s \(its time limit\): sent SIGUSR2 to 2 "
                     r"rank\(s\) on 2 node\(s\)", text)
    assert sent is not None and LEAD_S - 5 <= int(sent.group(1)) <= LEAD_S, text[-5000:]
    saved = re.search(r"checkpoint step (\d+) written ([\d.]+) s after the signal \(node sn\d: "
                      r"(\S+snapshot-(\d+)\.pt)\)", text)
    assert saved is not None, text[-5000:]
    step = int(saved.group(1))
    assert step == int(saved.group(4)) and 0 < step < STEPS
    assert f"attempt 2 of at most 2 of run {first}" in text
    assert f"attempt 2 of run {first} in Slurm job" in text
    assert f"resuming from checkpoint step {step}" in text
    # every step once, over the two attempts, rank 0's lines (each attempt on its own nodes)
    trained = Counter(int(s) for _node, s in STEP_RE.findall(text))
    assert sorted(trained) == list(range(1, STEPS + 1)), text[-5000:]
    assert set(trained.values()) == {1}, [s for s, n in trained.items() if n > 1]
    assert f"resumed from snapshot {saved.group(3)} at step {step}" in text
    # one run: the first names its attempts, each attempt names the first and its checkpoint
    head, second = record(tmp_path, first), record(tmp_path, f"{first}.2")
    assert head["attempts"] == [f"{first}.2"]
    assert head["attempt"]["number"] == 1
    assert head["time_limit"]["why"] == "time limit"
    assert head["time_limit"]["checkpoint"]["step"] == step
    assert second["attempt"]["first"] == first and second["attempt"]["number"] == 2
    assert second["attempt"]["resumed_from"]["step"] == step
    assert second["attempt"]["job"] != head["attempt"]["job"]
    assert second["status"] == "finished" and second.get("time_limit") is None, text[-5000:]
    assert c.squeue() == []  # both allocations given back
    # ddptui logs: the attempts as one run's log, and one row in the list
    logs = ddptui(c, tmp_path, "logs", first)
    assert logs.returncode == 0, logs.stderr
    assert (f"---- attempt 2: run {first}.2 in Slurm job {second['attempt']['job']}, resumed "
            f"from checkpoint step {step} ----") in logs.stdout
    assert Counter(int(s) for _n, s in STEP_RE.findall(logs.stdout)) == Counter(
        range(1, STEPS + 1))
    rows = [ln for ln in ddptui(c, tmp_path, "logs").stdout.splitlines() if first in ln]
    assert len(rows) == 1 and "finished" in rows[0] and "(2 attempts)" in rows[0], rows


def test_a_script_that_saves_nothing_is_said_to_have_saved_nothing(
        slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """Its ranks catch the signal only from step 150 (30 s after they start, past the lead):
    until then they are not sent it (it would kill them), and they get it once they catch it."""
    c = slurm_cluster
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "train.py").write_text(
        "import signal, sys, time\n"
        "for step in range(1, 1000):\n"
        "    if step == 150:  # late: it leaves, saving nothing\n"
        "        signal.signal(signal.SIGUSR2, lambda *_: sys.exit(0))\n"
        "    print(f'step {step}', flush=True)\n"
        "    time.sleep(0.2)\n")
    proc, out = spawn(c, tmp_path, "run", str(hosts(
        tmp_path, {"partition": c.partition}, {"script": "proj/train.py"})), "--headless")
    code = exit_code(proc, out, 150)
    text = out.read_text()
    deaf = text.find("no rank of the run catches SIGUSR2 yet (rank 0 on node sn1, rank 1 on "
                     "node sn2), so none was sent it")
    assert deaf != -1 and text.count("no rank of the run catches") == 1, text[-5000:]
    assert "sent SIGUSR2 to 2 rank(s) on 2 node(s)" in text[deaf:], text[-5000:]
    assert "no checkpoint path is set (`slurm.checkpoint`)" in text
    assert ("the run has ended, and nothing was saved that ddptui can see (no "
            "`slurm.checkpoint` is set): the work since the run's last checkpoint is lost"
            ) in text, text[-5000:]
    assert code == 3, text[-3000:]  # left at the time limit: an sbatch script can requeue
    assert "attempt 2" not in text
    meta = record(tmp_path, run_id_of(text))
    assert meta["time_limit"]["checkpoint"] is None and meta["time_limit"]["ranks"] == 2


def test_a_rehearsal_in_the_users_allocation_saves_and_says_how_to_requeue(
        slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """`ddptui rehearse RUN_ID` from another shell: the ranks save now; the run, in an
    allocation the user holds (10 minutes: no lead comes), ends with exit code 3 and the
    lines that requeue it."""
    c = slurm_cluster
    job = c.salloc(2, "--time=10")
    try:
        proc, out = spawn(c, tmp_path, "run", str(hosts(tmp_path, {"job": job},
                                                           {"args": WORKER})), "--headless")
        text = wait_for(out, r"^\[sn1 r0\] step 20 loss ", proc, 120)
        run_id = run_id_of(text)
        said = ddptui(c, tmp_path, "rehearse", run_id, "--wait", "60")
        assert said.returncode == 0, said.stdout + said.stderr
        assert said.stdout.startswith("ddptui: rehearsing the time limit: sent SIGUSR2 to 2 "
                                      "rank(s) on 2 node(s)"), said.stdout
        found = re.search(r"checkpoint step (\d+) written [\d.]+ s after the signal", said.stdout)
        assert found is not None, said.stdout
        assert exit_code(proc, out, 60) == 3, out.read_text()[-3000:]
        text = out.read_text()
        assert f"SIGUSR2 at step {found.group(1)}: snapshot " in text
        assert ("the ranks left at the time limit's signal, so the run is not complete (exit "
                "code 3). For an allocation you made") in text
        assert f"scontrol requeue {job}" in text
        assert c.state(job) == "RUNNING"  # the user's allocation is left alone
    finally:
        c.scancel(job)
