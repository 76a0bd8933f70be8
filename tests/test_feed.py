"""The store's changes on the wire, and the replica that the dashboard builds from them."""

from __future__ import annotations

import time
from typing import Any

from ddptui.engine.wire import (
    Backlog,
    Done,
    Message,
    apply_change,
    decode,
    encode,
    pack_snapshot,
    split_changes,
    unpack_snapshot,
)
from ddptui.events import Failure, Level, LogLine, Metric, NodeState, NodeStatus, RunStatus, Source
from ddptui.ingest import parse_chunk
from ddptui.nodelog import NodeLogParser
from ddptui.store.changes import Applied, NodeAdded, RunSet, Skipped
from ddptui.store.store import Store

T0 = 1_700_000_000.0


def mixed_events() -> list[Any]:
    return [
        NodeState("a", NodeStatus.RUNNING, T0, "pgid 7", 7),
        LogLine("a", "hello", T0 + 1, Source.WORKER, Level.INFO, 0, 0, 0),
        LogLine("a", "warn: x\twith tab", T0 + 2, Source.WORKER, Level.WARNING, 1, 1, 2),
        LogLine("a", "ssh said", T0 + 3, Source.SSH, Level.ERROR),
        Metric("a", 0, "metric", 5, {"loss": 1.5}, T0 + 4, 1, {"tag": "x"}, "@ddptui {}"),
        LogLine("b", "ünïcödé ✓", T0 + 5, Source.AGENT, Level.DEBUG, None, None, 3),
        Failure("b", 1, 1, None, "ValueError: boom", T0 + 6, 1, "hostb", None, "tb"),
        LogLine("b", "", T0 + 7, Source.WORKER, Level.INFO, 2, 0, 0),
    ]


def test_a_batch_travels_whole_and_in_order() -> None:
    changes: list[Message] = [NodeAdded("a", 0), Applied(mixed_events()),
                              RunSet({"status": RunStatus.RUNNING, "world_size": 4}),
                              Skipped(3), Applied([]), Done(None)]
    back = decode(encode(changes))
    assert back == changes and [type(m) for m in back] == [type(m) for m in changes]


def test_lines_travel_as_columns_not_objects() -> None:
    lines = [LogLine("a", f"line {i}", T0 + i, rank=i % 4) for i in range(1000)]
    assert len(encode([Applied(lines)])) < 40 * len(lines)
    assert decode(encode([Applied(lines)])) == [Applied(lines)]


def test_split_keeps_order_and_bounds_each_part() -> None:
    events = mixed_events() * 5  # 40 events
    changes: list[Message] = [RunSet({"message": "x"}), Applied(events), NodeAdded("c", 2),
                              Applied(events[:3])]
    parts = split_changes(changes, 7)
    for part in parts:
        assert sum(len(ch.events) if type(ch) is Applied else 1 for ch in part) <= 7
    flat = [e for part in parts for ch in part
            for e in (ch.events if type(ch) is Applied else [ch])]
    assert flat == [changes[0], *events, changes[2], *events[:3]]
    assert split_changes([], 5) == []


def test_backlog_hands_over_everything_when_read_in_time() -> None:
    b = Backlog(max_lines=100, keep_lines=10)
    b.add(Applied(mixed_events()))
    b.add(RunSet({"status": RunStatus.RUNNING}))
    assert b.take(0) == [Applied(mixed_events()), RunSet({"status": RunStatus.RUNNING})]
    started = time.monotonic()
    assert b.take(0.05) == []
    assert time.monotonic() - started < 2


def test_backlog_far_behind_keeps_the_newest_lines_and_every_other_event() -> None:
    b = Backlog(max_lines=50, keep_lines=20)
    sent: list[Any] = []
    for i in range(30):
        batch = [LogLine("a", f"{i}.{j}", T0, rank=0) for j in range(2)]
        batch.append(NodeState("a", NodeStatus.RUNNING, T0 + i))
        batch.append(Metric("a", 0, "metric", i, {"loss": 1.0}, T0, text="@ddptui"))
        sent.extend(batch)
        b.add(Applied(batch))
    changes = b.take(0)
    skipped = changes[0]
    assert type(skipped) is Skipped
    got = [e for ch in changes[1:] if type(ch) is Applied for e in ch.events]
    lines = [e.text for e in got if type(e) is LogLine]
    others = [e for e in sent if type(e) is not LogLine]
    assert [e for e in got if type(e) is not LogLine] == others
    # a metric is a line too: what is left stays under the bound, newest lines last
    assert len(lines) + len(others) // 2 <= 50
    assert lines == [e.text for e in sent if type(e) is LogLine][-len(lines):]
    assert skipped.lines == 60 - len(lines)


def run_into(store: Store, n: int, start: int = 0) -> None:
    parser = NodeLogParser("a")
    text = "".join(
        f"[ddptui {i % 3} {i % 3}] step {i} loss 0.{i}\n"
        if i % 5 else
        f'[ddptui {i % 3} {i % 3}] @ddptui {{"v": 1, "kind": "metric", "rank": {i % 3}, '
        f'"step": {i}, "loss": {1 / (i + 1)}}}\n'
        for i in range(start, start + n))
    store.apply(parse_chunk(parser, text.encode(), T0 + start))


def same_views(a: Store, b: Store) -> None:
    assert a.seq == b.seq
    assert a.recent_lines() == b.recent_lines()
    assert a.lines_since(a.seq - 10) == b.lines_since(b.seq - 10)
    for r in range(3):
        assert a.rank_tail(r) == b.rank_tail(r)
        assert a.series(r, "loss") == b.series(r, "loss")
    assert a.metric_names() == b.metric_names()
    assert a.node_views() == b.node_views()
    assert a.rank_views() == b.rank_views()
    assert a.failure_list() == b.failure_list()
    assert a.run_info() == b.run_info()
    assert a.latest == b.latest


def test_a_replica_is_the_snapshot_plus_every_later_change() -> None:
    original = Store(ring_lines=50, rank_lines=20, series_points=30)
    original.add_node("a", 0)
    original.set_run(run_id="r", status=RunStatus.RUNNING)
    run_into(original, 120)  # rings already full: the snapshot is what they hold now
    stream: list[Message] = []
    snapshot = unpack_snapshot(pack_snapshot(original.subscribe(stream.append)))
    replica = Store.replica(snapshot)
    assert replica.recent_lines()[-1] is replica.rank_tail(
        replica.recent_lines()[-1].rank)[-1], "the rings share their lines, as the original's do"
    run_into(original, 70, start=120)
    original.apply([NodeState("a", NodeStatus.FAILED, T0 + 9, "exit code 1", 7, 1),
                    Failure("a", 2, 1, None, "boom", T0 + 9)])
    original.add_node("b", 1)
    original.set_run(status=RunStatus.FAILED, exit_code=1)
    for part in split_changes(stream, 16):
        for change in decode(encode(part)):
            assert not isinstance(change, Done)
            apply_change(replica, change)
    same_views(original, replica)


def test_lines_a_replica_was_not_sent_are_counted_not_invented() -> None:
    replica = Store()
    replica.apply([LogLine("a", "one", T0, rank=0)])
    apply_change(replica, Skipped(500))
    replica.apply([LogLine("a", "two", T0, rank=0)])
    assert replica.not_live == 500
    assert [ln.text for ln in replica.recent_lines()] == ["one", "two"]
    assert replica.lines_since(1)[0][0].text == "two"
