"""``ddptui logs RUN_ID`` (and ``--check``) end with a failed run's diagnosis in the headless
face's words: the one ``run.json`` holds, or one made again from the run's stored logs.

The run dir is left the way a real run leaves it, from a recorded early exit (no torchrun
runs here): the raw node copy the follower writes, the store's mirror fed by the bus, and
``run.json`` written by the session's conclusion.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from jobs import ddptui, write_job
from replay import DATA, T0

from ddptui.config import load_config
from ddptui.diagnose import Diagnosis
from ddptui.events import NodeState, NodeStatus
from ddptui.faces.headless import diagnosis_report
from ddptui.faces.logs import show_logs
from ddptui.ingest import parse_chunk
from ddptui.live.follow import Batch, Finished
from ddptui.live.session import Session
from ddptui.nodelog import NodeLogParser
from ddptui.outcome import node_end
from ddptui.run_state import NodeRecord, RunEvent
from ddptui.store import rundir

HEADLINE = ("ddptui: rank 1 (node a) left the run first: it ended with exit code 0 at step 3 "
            "while the other ranks still trained")


def ended_run(tmp: Path, log: str = "diagnose/gloo-early-exit.log",
              end: NodeStatus = NodeStatus.FAILED, code: int = 1) -> tuple[Path, str]:
    """A one-node run of three ranks that ended as ``log`` shows; its state dir and id."""
    tmp.mkdir(parents=True, exist_ok=True)
    hosts = {"defaults": {"python": sys.executable, "nproc_per_node": 3, "transport": "local"},
             "nodes": [{"name": "a", "workdir": str(tmp / "wa")}],
             "rendezvous": {"endpoint": "127.0.0.1", "port": 29798},
             "job": {"script": "job.py"}}
    ctl = Session(load_config(write_job(tmp, hosts)), state_root=tmp / "state")
    ctl.advance(RunEvent.LAUNCH)
    ctl.recorder.set_nodes([NodeRecord("a", 0, str(tmp / "wa" / "run"))])  # as the plan does
    ctl.recorder.update(world_size=3)
    ctl.advance(RunEvent.RELEASE)
    raw = (DATA / log).read_bytes()
    path = rundir.node_log(ctl.local_dir, "a")  # the follower's raw copy
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw)
    events = ctl.scanner["a"].scan(parse_chunk(NodeLogParser("a"), raw, T0))
    status, detail = node_end(code, end is NodeStatus.STOPPED, False)
    assert status is end
    ctl.bus.apply([Batch("a", [NodeState("a", NodeStatus.RUNNING, T0), *events], {"a": len(raw)}),
                   Batch("a", [NodeState("a", end, T0 + 9, detail, exit_code=code)], {}),
                   Finished("a", end, code)])  # as the follower ends a node
    ctl.conclude()
    return tmp / "state", ctl.run_id


def logs(capsys: pytest.CaptureFixture[str], state: Path, run_id: str, *flags: str
         ) -> tuple[int, str, str]:
    """What ``ddptui logs RUN_ID [--check]`` prints, in this process."""
    out = io.StringIO()
    code = show_logs(state, run_id, check="--check" in flags, out=out)
    return code, out.getvalue(), capsys.readouterr().err


def run_json(state: Path, run_id: str) -> dict[str, object]:
    return json.loads((state / "runs" / run_id / "run.json").read_text())


def test_logs_ends_with_the_diagnosis_run_json_holds(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    state, run_id = ended_run(tmp_path)
    stored = run_json(state, run_id)["diagnosis"]
    assert isinstance(stored, dict) and stored["cause"] == "early_exit"
    said = "\n".join(diagnosis_report(Diagnosis.from_dict(stored)))  # the headless words
    for args in ((run_id,), (run_id, "--check")):
        code, out, err = logs(capsys, state, *args)
        assert code == 0, err
        assert out.startswith("[a agent] ")  # the run's lines first, as before
        assert out.endswith(said + "\n"), out[-3000:]
        assert HEADLINE in out and "DistributedSampler(drop_last=True)" in out
        assert "  node a: rank 0 (node a) lost its connection" in out
    assert run_json(state, run_id)["diagnosis"] == stored  # --check leaves a stored one be
    for args in ((run_id,), (run_id, "--check")):  # the command itself, once each
        res = ddptui("logs", *args, state=state, timeout=60)
        assert res.returncode == 0 and res.stdout.endswith(said + "\n"), res.stderr


@pytest.mark.parametrize("gone", ["removed", "null", "unreadable"])
def test_a_run_without_a_stored_diagnosis_is_diagnosed_again(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], gone: str) -> None:
    """An older run (no key), one whose rules failed (null), a cause this ddptui lacks."""
    state, run_id = ended_run(tmp_path)
    path = state / "runs" / run_id / "run.json"
    meta = json.loads(path.read_text())
    live = meta.pop("diagnosis")
    if gone == "null":
        meta.update(diagnosis=None, diagnosis_error="KeyError: 'x'")
    elif gone == "unreadable":
        meta["diagnosis"] = {**live, "cause": "a_cause_of_later_ddptui"}
    path.write_text(json.dumps(meta))
    said = "\n".join(diagnosis_report(Diagnosis.from_dict(live))) + "\n"
    code, out, err = logs(capsys, state, run_id)
    assert code == 0 and err == ""
    again = out[out.index(HEADLINE):]
    assert HEADLINE in again and "last line of rank 1: [a r1] rank 1: epoch done" in again
    assert "  node a: ended failed (exit code 1)" in again
    # the same words as live but the times (the raw copies hold none): compare the reports
    assert again == said, (again, said)
    assert json.loads(path.read_text()).get("diagnosis") == meta.get("diagnosis")  # untouched
    code, out, _ = logs(capsys, state, run_id, "--check")
    assert code == 0 and out.endswith(said)
    kept = json.loads(path.read_text())
    assert kept["diagnosis"]["cause"] == "early_exit" and kept["diagnosis"]["rank"] == 1
    assert kept["diagnosis_error"] is None and "stored logs" in kept["diagnosed"]["by"]


def test_a_run_settled_from_its_nodes_is_diagnosed_from_run_json_codes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``logs --check`` recorded the end of a run whose controller died: no node end in
    events.jsonl, the exit codes in run.json; the early exit is named all the same."""
    state, run_id = ended_run(tmp_path)
    d = state / "runs" / run_id
    meta = json.loads((d / "run.json").read_text())
    del meta["diagnosis"]
    meta["reconciled"] = {"by": "ddptui logs --check: nothing of the run was left"}
    (d / "run.json").write_text(json.dumps(meta))
    (d / "events.jsonl").write_text("")
    code, out, _ = logs(capsys, state, run_id)
    assert code == 0 and HEADLINE in out and "  node a: ended failed (exit code 1)" in out


def test_a_run_that_succeeded_or_was_stopped_shows_no_diagnosis(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state, run_id = ended_run(tmp_path / "ok", "train-node0.log", NodeStatus.EXITED, 0)
    assert run_json(state, run_id)["status"] == "finished"
    code, out, _ = logs(capsys, state, run_id, "--check")
    assert code == 0 and "ddptui:" not in out.replace("[a agent] ddptui:", "")
    state, run_id = ended_run(tmp_path / "stop", end=NodeStatus.STOPPED, code=-15)
    meta = run_json(state, run_id)
    assert meta["status"] == "stopped"
    code, out, _ = logs(capsys, state, run_id, "--check")
    assert code == 0 and "left the run first" not in out
    assert "diagnosis" not in run_json(state, run_id) or run_json(state, run_id) == meta


def test_a_launch_that_failed_is_not_diagnosed_again(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its run.json's ``error`` says why; no rank ran to have a cause."""
    state, run_id = ended_run(tmp_path)
    path = state / "runs" / run_id / "run.json"
    meta = json.loads(path.read_text())
    del meta["diagnosis"], meta["exit_code"]
    meta["error"] = ["node a: cannot connect"]
    path.write_text(json.dumps(meta))
    code, out, _ = logs(capsys, state, run_id, "--check")
    assert code == 0 and "left the run first" not in out and "diagnosis" not in run_json(
        state, run_id)


def test_a_stale_run_is_checked_on_its_node_then_diagnosed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its controller died before the end: ``logs RUN_ID --check`` asks the node (local
    transport), records the end from the exit code launch.sh left, then diagnoses the run
    from its stored logs and records that too."""
    from test_reconcile import dead_controller

    state, run_id = ended_run(tmp_path)
    d = state / "runs" / run_id
    meta = json.loads((d / "run.json").read_text())
    for key in ("diagnosis", "diagnosis_error", "exit_code", "node_exit_codes", "ended_at"):
        meta.pop(key, None)
    meta.update(status="running", controller=dead_controller())
    (d / "run.json").write_text(json.dumps(meta))
    events = [ln for ln in (d / "events.jsonl").read_text().splitlines()
              if '"status": "failed"' not in ln]  # the end its follower never saw
    (d / "events.jsonl").write_text("".join(ln + "\n" for ln in events))
    node_dir = Path(meta["nodes"][0]["run_dir"])
    node_dir.mkdir(parents=True)
    (node_dir / rundir.EXIT_CODE).write_text("1\n")
    code, plain, _ = logs(capsys, state, run_id)
    assert code == 0 and HEADLINE not in plain  # running, as far as run.json knows
    code, out, err = logs(capsys, state, run_id, "--check")
    assert code == 0, err
    assert out.startswith(f"ddptui: run {run_id}: nothing of it runs on its nodes; recorded "
                          "as failed")
    assert HEADLINE in out and "  node a: ended failed (exit code 1)" in out
    kept = run_json(state, run_id)
    assert kept["status"] == "failed" and kept["node_exit_codes"] == {"a": 1}
    assert isinstance(kept["diagnosis"], dict) and kept["diagnosis"]["cause"] == "early_exit"
