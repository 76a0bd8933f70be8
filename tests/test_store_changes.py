"""The store's changes are typed (:mod:`ddptui.store.changes`), and travel to the dashboard
as the bare tuples they were before the types: the same bytes, so no bigger and no slower."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from ddptui.engine.wire import (
    Backlog,
    Done,
    Message,
    _pack_events,
    apply_change,
    decode,
    encode,
    split_changes,
)
from ddptui.events import Level, LogLine, Metric, NodeState, NodeStatus, RunStatus, Source
from ddptui.outcome import RunResult
from ddptui.store.changes import Applied, Change, NodeAdded, RunSet, Skipped
from ddptui.store.store import Store


def _lines(n: int, node: str = "a") -> list[LogLine]:
    return [LogLine(node, f"step {i} loss {i / 7:.4f}", 100.0 + i, Source.WORKER, Level.INFO,
                    i % 4, i % 4) for i in range(n)]


def _store_changes(tmp_path: Path) -> list[Change]:
    """Every kind of change, as a real store hands them to its tap."""
    store = Store(tmp_path)
    seen: list[Change] = []
    store.subscribe(seen.append)
    store.add_node("a", 0)
    store.set_run(run_id="r1", status=RunStatus.RUNNING, started_at=100.0, world_size=4)
    store.apply([*_lines(300), NodeState("a", NodeStatus.RUNNING, 101.0, "pgid 7"),
                 Metric("a", 0, "metric", 3, {"loss": 0.5}, 101.5), *_lines(5)])
    store.set_run(status=RunStatus.FINISHED, exit_code=0, ended_at=200.0)
    store.close()
    return seen


def _bare(m: Message) -> tuple[object, ...]:
    """A message as the wire carried it before the types (``("apply", events)``, ...)."""
    if isinstance(m, Applied):
        return ("apply", _pack_events(m.events))
    if isinstance(m, RunSet):
        return ("run", m.changes)
    if isinstance(m, NodeAdded):
        return ("node", m.name, m.node_rank)
    if isinstance(m, Skipped):
        return ("skip", m.lines)
    return ("done", m.result)


def test_a_store_hands_its_tap_typed_changes(tmp_path: Path) -> None:
    seen = _store_changes(tmp_path)
    assert [type(c) for c in seen] == [NodeAdded, RunSet, Applied, RunSet]
    assert seen[0] == NodeAdded("a", 0)
    assert seen[1] == RunSet({"run_id": "r1", "status": RunStatus.RUNNING, "started_at": 100.0,
                              "world_size": 4})


def test_every_message_travels_as_the_bare_tuple_it_was(tmp_path: Path) -> None:
    messages: list[Message] = [Skipped(12), *_store_changes(tmp_path),
                               Done(RunResult(0, [], {"a": 0}, False))]
    data = encode(messages)
    old = pickle.dumps([_bare(m) for m in messages], protocol=pickle.HIGHEST_PROTOCOL)
    assert data == old  # byte for byte: no class name travels
    back = decode(data)
    assert [type(m) for m in back] == [type(m) for m in messages]
    assert back == messages


def test_a_replica_fed_typed_changes_ends_as_its_store(tmp_path: Path) -> None:
    store = Store(tmp_path)
    replica = Store.replica(store.subscribe(lambda _change: None))
    sent: list[Change] = []
    store.subscribe(sent.append)
    store.add_node("a", 0)
    store.set_run(run_id="r1", status=RunStatus.RUNNING)
    store.apply(_lines(50))
    store.set_run(status=RunStatus.FAILED, exit_code=3)
    for part in split_changes(list(sent), 16):
        assert sum(len(m.events) if isinstance(m, Applied) else 1 for m in part) <= 16
        for change in decode(encode(part)):
            assert not isinstance(change, Done)
            apply_change(replica, change)
    assert replica.run_info() == store.run_info()
    assert replica.recent_lines() == store.recent_lines()
    assert list(replica.nodes) == ["a"]
    store.close()


def test_the_backlog_counts_what_it_leaves_out_as_a_typed_skip() -> None:
    backlog = Backlog(max_lines=100, keep_lines=30)
    backlog.add(NodeAdded("a", 0))
    backlog.add(Applied(list(_lines(80))))
    backlog.add(Applied(list(_lines(40))))
    taken = backlog.take(0)
    assert taken[:2] == [Skipped(90), NodeAdded("a", 0)]
    assert sum(len(m.events) for m in taken if isinstance(m, Applied)) == 30


def test_a_run_field_the_store_lacks_is_refused() -> None:
    store = Store(mirrored=False)
    with pytest.raises(TypeError):
        store.set_run(**{"stauts": RunStatus.RUNNING})  # type: ignore[typeddict-unknown-key]
    assert store.run_info().status is RunStatus.IDLE
