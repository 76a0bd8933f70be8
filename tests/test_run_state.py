"""The run's and nodes' state tables, whole: every allowed move, every refused one; and
``run.json``'s typed record."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from ddptui.events import NodeStatus, RunStatus
from ddptui.run_state import (
    END_EVENT,
    NODE_TABLE,
    RUN_TABLE,
    SCHEMA,
    NodeEvent,
    NodeRecord,
    RunEvent,
    RunRecord,
    node_next,
    run_next,
)
from ddptui.store.record import Recorder

R, E = RunStatus, RunEvent
#: The run's life as the issue and docs/architecture.md draw it, written out by hand.
RUN_MOVES = {
    (R.IDLE, E.LAUNCH): R.LAUNCHING,
    (R.LAUNCHING, E.RELEASE): R.RUNNING,
    (R.LAUNCHING, E.ABORT): R.FAILED,
    (R.LAUNCHING, E.STOP): R.STOPPING,
    (R.LAUNCHING, E.ATTACH): R.RUNNING,
    (R.RUNNING, E.ATTACH): R.RUNNING,
    (R.RUNNING, E.STOP): R.STOPPING,
    (R.RUNNING, E.FINISH): R.FINISHED,
    (R.RUNNING, E.FAIL): R.FAILED,
    (R.RUNNING, E.END_STOPPED): R.STOPPED,
    (R.STOPPING, E.ATTACH): R.STOPPING,
    (R.STOPPING, E.STOP): R.STOPPING,
    (R.STOPPING, E.ABORT): R.FAILED,
    (R.STOPPING, E.END_STOPPED): R.STOPPED,
}

N, NE = NodeStatus, NodeEvent
_LIVE = [N.PENDING, N.CONNECTING, N.UPLOADING, N.STARTING, N.RUNNING, N.RESTARTING, N.STOPPING]
NODE_MOVES = {
    (N.PENDING, NE.CONNECT): N.CONNECTING,
    (N.CONNECTING, NE.UPLOAD): N.UPLOADING,
    (N.UPLOADING, NE.UPLOAD): N.UPLOADING,
    (N.CONNECTING, NE.START): N.STARTING,
    (N.UPLOADING, NE.START): N.STARTING,
    (N.STARTING, NE.START): N.STARTING,
    (N.STARTING, NE.RUN): N.RUNNING,
    (N.RUNNING, NE.RUN): N.RUNNING,
    (N.RESTARTING, NE.RUN): N.RUNNING,
    (N.RUNNING, NE.RESTART): N.RESTARTING,
    (N.RESTARTING, NE.RESTART): N.RESTARTING,
    **{(s, NE.FAIL): N.FAILED for s in _LIVE},
    **{(s, NE.LOSE): N.LOST for s in _LIVE},
    **{(s, NE.STOP): N.STOPPING for s in _LIVE if s is not N.PENDING},
    **{(s, NE.STOPPED): N.STOPPED for s in _LIVE if s is not N.PENDING},
    **{(s, NE.EXIT): N.EXITED for s in (N.RUNNING, N.RESTARTING, N.STOPPING)},
}


@pytest.mark.parametrize(("state", "event"), list(itertools.product(RunStatus, RunEvent)))
def test_every_run_move_is_the_drawn_one_or_refused(state: RunStatus, event: RunEvent) -> None:
    assert run_next(state, event) == RUN_MOVES.get((state, event))


@pytest.mark.parametrize(("state", "event"), list(itertools.product(NodeStatus, NodeEvent)))
def test_every_node_move_is_the_drawn_one_or_refused(state: NodeStatus,
                                                      event: NodeEvent) -> None:
    assert node_next(state, event) == NODE_MOVES.get((state, event))


def test_the_tables_hold_nothing_else() -> None:
    assert RUN_TABLE == RUN_MOVES and NODE_TABLE == NODE_MOVES


def test_an_ended_run_or_node_never_moves_again() -> None:
    """A stop after the end, a late conclusion, a late 'running': all refused, so how a run
    ended is never rewritten."""
    for state in (R.FINISHED, R.FAILED, R.STOPPED, R.LOST, R.UNKNOWN):
        assert all(run_next(state, e) is None for e in RunEvent)
    for node in (N.EXITED, N.FAILED, N.STOPPED, N.LOST):
        assert all(node_next(node, e) is None for e in NodeEvent)


def test_each_end_has_its_event_and_every_report_has_one() -> None:
    for status, event in END_EVENT.items():
        assert run_next(R.RUNNING, event) is status
    assert NodeEvent.reporting(N.PENDING) is None
    for status in NodeStatus:
        event = NodeEvent.reporting(status)
        if event is not None:  # the report of a state leads to that state where allowed
            assert {to for (_, e), to in NODE_TABLE.items() if e is event} == {status}


def test_the_record_round_trips_and_keeps_what_others_wrote() -> None:
    data = {"run_id": "r1", "config": {"path": "h.yaml"}, "status": "running",
            "nodes": [{"name": "a", "node_rank": 0, "run_dir": "/w/a", "pgid": 12}],
            "world_size": 2, "controller": {"host": "h", "boot": "b", "pid": 7, "start": "9"},
            "reconciled": {"at": 1.0, "by": "ddptui logs --check", "alive": {}},
            "node_files_removed": {"at": 2.0, "by": "ddptui clean"},
            "from_a_newer_ddptui": {"kept": [1, 2]}}
    rec = RunRecord.from_json(data)
    assert rec.status is R.RUNNING and rec.nodes["a"] == NodeRecord("a", 0, "/w/a", 12)
    assert rec.reconciled == data["reconciled"] and rec.extra == {
        "from_a_newer_ddptui": {"kept": [1, 2]}}
    out = rec.to_json()
    assert out["schema"] == SCHEMA
    assert {k: v for k, v in out.items() if k != "schema"} == {
        **data, "nodes": [{"name": "a", "node_rank": 0, "run_dir": "/w/a", "pgid": 12,
                           "cleanup": None}]}


def test_an_old_run_json_without_schema_or_nodes_reads() -> None:
    """What ddptui wrote before the typed record (no ``schema``; a launch that failed before
    its plan: no ``nodes``) reads, and is written back with every key it had."""
    old = {"run_id": "r0", "config": {"path": "h.yaml", "nodes": []}, "status": "failed",
           "error": ["node a: unreachable"], "started_at": 5.0, "ended_at": 6.0}
    rec = RunRecord.from_json(old)
    assert rec.nodes == {} and rec.error == ["node a: unreachable"] and rec.ended_at == 6.0
    assert rec.to_json() == {"schema": SCHEMA, **old, "nodes": []}


def test_a_field_set_to_none_is_written_and_a_change_makes_a_new_record() -> None:
    rec = RunRecord("r1")
    assert "diagnosis" not in rec.to_json()  # never looked: not written
    after = rec.changed(diagnosis=None, status=R.FAILED)
    assert after.to_json()["diagnosis"] is None and after.to_json()["status"] == "failed"
    assert rec.status is R.IDLE and "diagnosis" not in rec.to_json()  # the old one as it was
    with pytest.raises(TypeError):
        rec.changed(**{"diagnosys": {}})  # type: ignore[arg-type]  # what mypy refuses


def test_the_type_checker_refuses_a_misspelt_or_mistyped_change(tmp_path: Path) -> None:
    """The record's changes are typed: a field that does not exist, a status given as a
    string, a node's pgid as text, are mypy's errors (the run's own code is checked so)."""
    import subprocess
    import sys

    src = tmp_path / "changes.py"
    src.write_text(
        "from pathlib import Path\n"
        "from ddptui.events import RunStatus\n"
        "from ddptui.run_state import RunRecord\n"
        "from ddptui.store.record import Recorder\n"
        "rec = Recorder(Path('.'), RunRecord('r1'))\n"
        "rec.update(status=RunStatus.FAILED, exit_code=1, sync=None)\n"  # fine
        "rec.update(diagnosys=None)\n"
        "rec.update(status='failed')\n"
        "rec.node('a', pgid='12')\n")
    res = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                          "--follow-imports=silent", str(src)],
                         capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).resolve().parents[1])
    errors = [ln for ln in res.stdout.splitlines() if ": error:" in ln]
    assert [ln.split(":")[1] for ln in errors] == ["7", "8", "9"], res.stdout


def test_the_recorder_writes_whole_files_from_many_threads(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    rec = Recorder(tmp_path, RunRecord("r1"))
    rec.set_nodes([NodeRecord(f"n{i}", i, f"/w/{i}") for i in range(8)])
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: rec.node(f"n{i}", pgid=100 + i), range(8)))
        list(pool.map(lambda i: rec.update(world_size=i), range(50)))
    saved = json.loads((tmp_path / "run.json").read_text())
    assert [n["pgid"] for n in saved["nodes"]] == [100 + i for i in range(8)]
    assert rec.pgid("n3") == 103 and rec.node_dir("n5") == "/w/5"
    with pytest.raises(TypeError):
        rec.node("n1", **{"pid": 1})  # type: ignore[arg-type]  # what mypy refuses
