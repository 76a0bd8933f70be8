"""Progress bars: which states the run keeps (BarKeeper), where the live one is shown
(BarRows), and the mark from node.log to a replica's store."""

from __future__ import annotations

import random

from ddptui.bars import BarKeeper, BarRows
from ddptui.engine import wire
from ddptui.events import Event, LineRun, LogLine, Metric, NodeState, NodeStatus
from ddptui.nodelog import NodeLogParser
from ddptui.store.changes import Applied


def state(text: str, t: float, rank: int = 0, node: str = "n1") -> LogLine:
    return LogLine(node, text, t, rank=rank, local_rank=rank % 2, bar=True)


def line(text: str, t: float, rank: int | None = 0, node: str = "n1") -> LogLine:
    return LogLine(node, text, t, rank=rank, local_rank=None if rank is None else rank % 2)


def texts(events: list[Event]) -> list[str]:
    return [e.text for e in events if isinstance(e, LogLine)]


def test_the_parser_reads_the_tees_mark_as_a_bar_state() -> None:
    p = NodeLogParser("n1")
    [bar] = p.feed("[ddptui 3 1] \r 45%|####5     | 45/100\n", 2.0)
    [plain] = p.feed("[ddptui 3 1]  45%|####5     | 45/100\n", 2.0)
    assert isinstance(bar, LogLine) and bar.bar and bar.text == " 45%|####5     | 45/100"
    assert isinstance(plain, LogLine) and not plain.bar and plain.text == bar.text
    assert (bar.rank, bar.local_rank) == (3, 1)


def test_a_state_survives_the_wire_to_the_dashboard() -> None:
    events = [state("50%", 1.0), line("a line", 1.0), state("60%", 2.0, rank=1)]
    [got] = wire.decode(wire.encode([Applied(events)]))
    assert isinstance(got, Applied) and got.events == events
    assert [e.bar for e in got.events if isinstance(e, LogLine)] == [True, False, True]


def test_at_most_a_state_a_second_and_the_last_before_a_line() -> None:
    keeper = BarKeeper()
    events: list[Event] = [state(f"{i}%", i * 0.01) for i in range(250)]  # 100 a second
    events.append(line("epoch done", 2.5))
    events += [state(f"b{i}", 2.5 + i * 0.01) for i in range(10)]
    out = keeper.take(events)
    assert texts(out) == ["0%", "100%", "200%", "249%", "epoch done"]
    assert keeper.holding  # b9: a second after 200% had not passed
    assert keeper.due(2.9) == [] and texts(keeper.due(3.0)) == ["b9"]
    assert not keeper.holding and keeper.drain() == []


def test_a_line_that_is_the_held_state_itself_is_kept_once() -> None:
    """The node sends a bar's final state as a line once the bar ends (its newline)."""
    keeper = BarKeeper()
    out = keeper.take([state("99%", 0.0), state("100%", 0.5), line("100%", 0.6)])
    assert texts(out) == ["99%", "100%"] and isinstance(out[-1], LogLine) and not out[-1].bar


def test_ranks_have_slots_of_their_own_and_a_nodes_state_releases_its_ranks() -> None:
    keeper = BarKeeper()
    out = keeper.take([state("a0", 0.0, 0), state("b0", 0.0, 1, "n2"), state("a1", 0.1, 0),
                       state("b1", 0.1, 1, "n2"), line("b says", 0.2, 1, "n2"),
                       line("agent", 0.2, None), state("a2", 0.3, 0),
                       NodeState("n1", NodeStatus.EXITED, 0.4), state("b2", 0.4, 1, "n2")])
    assert [getattr(e, "text", "exited") for e in out] == [
        "a0", "b0", "b1", "b says", "agent", "a2", "exited"]
    assert texts(keeper.drain()) == ["b2"]


def test_runs_and_printed_records_end_a_slot_and_a_bars_own_records_do_not() -> None:
    keeper = BarKeeper()
    run = LineRun("n1", 0, 0, 0, 0.5, "x\ny\n", 2)
    record = Metric("n1", 0, "metric", 1, {"loss": 1.0}, 0.6, text='@ddptui {"loss": 1}')
    recognized = Metric("n1", 0, "metric", 2, {"loss": 0.5}, 0.7)  # read off a bar's state
    out = keeper.take([state("s0", 0.0), state("s1", 0.4), run, state("s2", 0.55), record,
                       state("s3", 0.65), recognized, state("s4", 0.8)])
    assert out == [out[0], out[1], run, out[3], record, recognized]
    assert texts(out) == ["s0", "s1", "s2"] and texts(keeper.drain()) == ["s4"]


def test_a_batch_without_bars_passes_as_it_is() -> None:
    events: list[Event] = [line("a", 0.0), line("b", 0.0)]
    assert BarKeeper().take(events) is events


def test_a_bar_refreshed_for_hours_holds_one_state_per_rank() -> None:
    keeper = BarKeeper()
    kept = 0
    for second in range(3600):
        batch: list[Event] = [state(f"{second}.{i}", second + i / 100, rank) for i in range(100)
                              for rank in range(4)]
        kept += len(keeper.take(batch))
        assert keeper._held <= 4 and len(keeper._slots) == 4
    assert kept == 3600 * 4


def test_random_streams_lose_and_move_nothing_but_states() -> None:
    """Whatever the mix: every other event once and in order; the states kept are in order;
    at most one a second per rank besides those released by what followed them."""
    rnd = random.Random(5)
    for trial in range(300):
        t, events = 0.0, []
        for i in range(rnd.randint(0, 200)):
            t += rnd.choice((0.0, 0.01, 0.3, 1.5))
            rank = rnd.randint(0, 2)
            kind = rnd.random()
            if kind < 0.7:
                events.append(state(f"s{i}", t, rank, f"n{rank % 2}"))
            elif kind < 0.95:
                events.append(line(f"l{i}", t, rank if kind < 0.9 else None, f"n{rank % 2}"))
            else:
                events.append(NodeState(f"n{rank % 2}", NodeStatus.RUNNING, t))
        keeper = BarKeeper()
        out = keeper.take(events) + keeper.drain()
        others = [e for e in events if not getattr(e, "bar", False)]
        assert [e for e in out if not getattr(e, "bar", False)] == others, trial
        kept = [e for e in out if getattr(e, "bar", False)]
        assert len({id(e) for e in kept}) == len(kept)
        for rank in range(3):
            mine = [e for e in events if getattr(e, "bar", False) and e.rank == rank]
            got = [e for e in kept if e.rank == rank]
            assert [mine.index(e) for e in got] == sorted(mine.index(e) for e in got)
            # the last state of every stretch (up to the rank's next line, its node's next
            # state, or the end) is kept
            for i, e in enumerate(events):
                if getattr(e, "bar", False) and e.rank == rank:
                    later = events[i + 1:]
                    nxt = next((x for x in later if (isinstance(x, LogLine) and x.rank == rank)
                                or (isinstance(x, NodeState) and x.node == e.node)), None)
                    if nxt is None or not getattr(nxt, "bar", False):
                        assert e in kept, (trial, i)
        assert len(keeper._slots) <= 3 and not keeper.holding


def test_rows_a_state_replaces_the_ranks_live_line_in_place() -> None:
    rows = BarRows()
    new, changed = rows.place([("[0] 10%", 0, True), ("[1] hello", 1, False),
                               ("[0] 20%", 0, True), ("[1] 50%", 1, True)])
    assert new == ["[0] 20%", "[1] hello", "[1] 50%"] and changed == {}
    new, changed = rows.place([("[0] 30%", 0, True), ("[0] epoch 1 done", 0, False),
                               ("[0] 0%", 0, True), ("[1] 60%", 1, True)])
    assert new == ["[0] epoch 1 done", "[0] 0%"] and changed == {0: "[0] 30%", 2: "[1] 60%"}
    new, changed = rows.place([("[1] 100%", 1, True), ("[1] 100%", 1, False),
                               ("[1] next", 1, False), ("agent line", None, False)])
    assert new == ["[1] next", "agent line"] and changed == {2: "[1] 100%"}
    assert rows.count == 7
