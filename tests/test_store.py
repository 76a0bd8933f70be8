"""The store's bounded views and its exactly-once disk mirror."""

from __future__ import annotations

import json
from pathlib import Path

from ddptui.events import Failure, LogLine, Metric, NodeState, NodeStatus
from ddptui.store.store import Store


def line(rank: int, text: str, node: str = "a") -> LogLine:
    return LogLine(node, text, 0.0, rank=rank, local_rank=rank)


def test_rings_are_bounded_and_cursor_reports_skips() -> None:
    s = Store(ring_lines=10, rank_lines=3)
    s.apply([line(i % 2, f"l{i}") for i in range(25)])
    assert s.seq == 25
    got, cur, skipped = s.lines_since(0)
    assert cur == 25 and skipped == 15 and got[0].text == "l15"
    got, cur, skipped = s.lines_since(20, limit=2)
    assert [x.text for x in got] == ["l23", "l24"] and skipped == 3
    assert s.lines_since(25) == ([], 25, 0)
    assert [x.text for x in s.rank_tail(0)] == ["l20", "l22", "l24"]


def test_node_states_ranks_metrics_failures() -> None:
    s = Store()
    s.add_node("a", 0)
    s.apply([
        NodeState("a", NodeStatus.RUNNING, 1.0, pid=42),
        line(0, "x"),
        Metric("a", 0, "metric", 10, {"loss": 2.0, "step_time_s": 0.5}, 2.0),
        Metric("a", 0, "metric", 20, {"loss": 1.0, "step_time_s": 0.4}, 3.0),
        Metric("a", 0, "eval", 20, {"eval_loss": 1.5}, 3.0),
        Failure("a", 0, 1, None, "ValueError: x", 4.0),
        NodeState("a", NodeStatus.FAILED, 5.0, exit_code=1),
    ])
    (n,) = s.node_views()
    assert (n.status, n.pid, n.exit_code, n.ranks) == (NodeStatus.FAILED, 42, 1, {0})
    assert s.series(0, "loss") == ([10, 20], [2.0, 1.0])
    assert s.series(0, "eval_loss") == ([20], [1.5])
    (r,) = s.rank_views()
    assert (r.last_step, r.loss, r.step_time_s) == (20, 1.0, 0.4)
    assert s.failure_list()[0].root_cause == "ValueError: x"


def test_mirror_writes_rank_logs_and_recover_truncates_to_checkpoint(tmp_path: Path) -> None:
    s = Store(tmp_path)
    s.apply([line(0, "one"), line(1, "uno")], {"a": 100})
    s.apply([Metric("a", 0, "metric", 1, {"loss": 1.0}, 0.0, text='@ddptui {"loss": 1.0}')],
            {"a": 150})
    s.close()
    assert (tmp_path / "ranks" / "rank0.log").read_text() == 'one\n@ddptui {"loss": 1.0}\n'
    checkpointed = (tmp_path / "ranks" / "rank0.log").read_text()
    # a batch written after the last checkpoint (controller killed mid-way) is undone
    with open(tmp_path / "ranks" / "rank0.log", "a") as f:
        f.write("torn\n")
    (tmp_path / "ranks" / "rank9.log").write_text("orphan\n")
    assert Store.recover(tmp_path) == {"a": 150}
    assert (tmp_path / "ranks" / "rank0.log").read_text() == checkpointed
    assert not (tmp_path / "ranks" / "rank9.log").exists()
    rec = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert rec["loss"] == 1.0 and rec["rank"] == 0


def test_replay_without_mirror_writes_nothing(tmp_path: Path) -> None:
    s = Store(tmp_path)
    s.apply([line(0, "one")], mirror=False)
    assert not (tmp_path / "ranks" / "rank0.log").exists()
    assert s.rank_tail(0)[0].text == "one"


def test_lines_log_holds_what_the_all_ranks_view_shows(tmp_path: Path) -> None:
    from ddptui.events import Level, Source

    s = Store(tmp_path)
    s.apply([
        line(0, "hello"),
        LogLine("a", "I1121 agent chatter", 0.0, Source.AGENT, Level.DEBUG),
        LogLine("a", "W1121 agent warning", 0.0, Source.AGENT, Level.WARNING),
        Metric("a", 1, "metric", 3, {"loss": 0.5}, 0.0,
               text='@ddptui {"kind": "metric", "step": 3, "loss": 0.5}'),
    ])
    s.close()
    assert (tmp_path / "lines.log").read_text().splitlines() == [
        "[0] hello", "[a] W1121 agent warning", "[1] @metric step=3 loss=0.5"]


def test_recover_without_a_checkpoint_keeps_nothing(tmp_path: Path) -> None:
    (tmp_path / "ranks").mkdir()
    (tmp_path / "ranks" / "rank0.log").write_text("torn\n")
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    (tmp_path / "lines.log").write_text("[0] torn\n")
    assert Store.recover(tmp_path) == {}
    assert list((tmp_path / "ranks").iterdir()) == []
    assert not (tmp_path / "metrics.jsonl").exists() and not (tmp_path / "lines.log").exists()


def _random_batches(seed: int) -> list[list[object]]:
    """Lines of two nodes (a rank moving between them, agent lines, metric records, a bad
    record, DEBUG lines) with node states between them, cut into batches at random."""
    from random import Random

    from ddptui.events import Level, Source
    rnd = Random(seed)
    events: list[object] = []
    for i in range(3000):
        node = rnd.choice("ab")
        rank = rnd.choice([0, 1, 2, 3, None])
        r = rnd.random()
        if r < 0.03:
            events.append(NodeState(node, rnd.choice(list(NodeStatus)), float(i), attempt=i // 900))
        elif r < 0.08 and rank is not None:
            events.append(Metric(node, rank, "metric", i, {"loss": 1.0 / (i + 1)}, float(i),
                                 i // 900, {}, f'@ddptui {{"step": {i}}}'))
        else:
            text = rnd.choice(["step x", "@ddptui {bad", "Traceback", "w: UserWarning: u"])
            events.append(LogLine(node, f"{text} {i}", float(i), rnd.choice(list(Source)),
                                  rnd.choice(list(Level)), rank, rank, i // 900))
    cuts = sorted(rnd.sample(range(1, len(events)), 40))
    return [events[a:b] for a, b in zip([0, *cuts], [*cuts, len(events)], strict=True)]


def test_a_batch_applies_as_its_events_would_one_by_one(tmp_path: Path) -> None:
    """Store.apply and the mirror take rank lines a run at a time: the same end state, the
    same files, as the one-event-at-a-time way."""
    for seed in range(3):
        by_batch, by_event = Store(tmp_path / f"b{seed}"), Store(tmp_path / f"e{seed}")
        for s in (by_batch, by_event):
            s.add_node("a", 0)
            s.add_node("b", 1)
        for batch in _random_batches(seed):
            by_batch.apply(batch)  # type: ignore[arg-type]
            for ev in batch:
                by_event.apply([ev])  # type: ignore[list-item]
        assert by_batch.seq == by_event.seq
        assert by_batch.recent_lines() == by_event.recent_lines()
        assert by_batch.node_views() == by_event.node_views()
        assert by_batch.rank_views() == by_event.rank_views()
        for rank in range(4):
            assert by_batch.rank_tail(rank) == by_event.rank_tail(rank)
        by_batch.close()
        by_event.close()
        names = sorted(p.relative_to(tmp_path / f"b{seed}").as_posix()
                       for p in (tmp_path / f"b{seed}").rglob("*") if p.is_file())
        assert "lines.log" in " ".join(names) and len(names) > 4
        for name in names:
            if name.endswith(".json"):
                continue  # the checkpoint: offsets differ with the number of writes
            assert (tmp_path / f"b{seed}" / name).read_bytes() == \
                (tmp_path / f"e{seed}" / name).read_bytes(), name
