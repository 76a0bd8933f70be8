"""A rank's plain lines in a row travel as one LineRun: every consumer (parser, store and its
mirror, rings, the diagnosis's evidence, the dashboard's backlog, the headless printer) ends
exactly where the same lines one by one take it."""

from __future__ import annotations

import io
import random
from collections import deque
from pathlib import Path

from ddptui.engine.wire import Backlog, Done, apply_change, decode, encode
from ddptui.events import Event, LineRun, LogLine, Source
from ddptui.faces.headless import Printer
from ddptui.ingest import MIN_RUN, parse_chunk
from ddptui.live.evidence import RANK_HEAD, RANK_TAIL, Evidence
from ddptui.live.follow import Batch
from ddptui.nodelog import NodeLogParser
from ddptui.store.changes import Applied, Change, Skipped
from ddptui.store.ring import LineRing
from ddptui.store.store import Store

#: What a flood's node.log holds, and what may come amid it.
PLAIN = ["step {i} loss 0.25 tokens/s 51234", "", "a line with ] inside] {i}", "x" * 300,
         "Epoch {i}: lr 3e-4, Elapsed 1.2 s, Tokens 5, Norm 1.0, Fwd 2 ms"]
ODD = ["[ddptui 1 1] Traceback (most recent call last):", "[ddptui 0 0] UserWarning: careful",
       '[ddptui 1 1] @ddptui {"v": 1, "kind": "metric", "step": 3, "loss": 1.5}',
       "[ddptui 0 0] node1:1:1 [0] NCCL INFO Bootstrap", "plain agent line",
       "[WARNING] Worker group FAILED. 2/3 attempts left; will restart worker group",
       "[ddptui 2 0] I1122 20:16:43.507000 123 api.py:1] glog info", "[ddptui 01 1] zero",
       "[ddptui 0 0] warning: low memory", "[ddptui 1 1] RuntimeWarning: overflow",
       "[ddptui 2 0] model.Error: bad", "[ddptui 0 0] a WARN here",
       "[ddptui 1 1] Warnings: 3 (not a warning)"]


def expand(events: list[Event]) -> list[Event]:
    return [e for ev in events for e in (ev.lines() if type(ev) is LineRun else [ev])]


def node_log(rnd: random.Random, blocks: int) -> str:
    """Blocks of one rank's lines, as ddptui's tee writes them, with odd lines between."""
    out = []
    for _ in range(blocks):
        if rnd.random() < 0.3:
            out.append(rnd.choice(ODD))
            continue
        rank = rnd.randrange(3)
        out += [f"[ddptui {rank} {rank % 2}] " + rnd.choice(PLAIN).format(i=j)
                for j in range(rnd.choice([1, 5, MIN_RUN - 1, MIN_RUN, 40, 700]))]
    return "\n".join(out) + "\n"


def test_reads_become_runs_and_make_exactly_the_events_feed_makes() -> None:
    runs = 0
    for seed in range(150):
        rnd = random.Random(seed)
        text = node_log(rnd, rnd.randint(1, 25))
        by_feed, by_chunk = NodeLogParser("n1", attempt=seed % 3), \
            NodeLogParser("n1", attempt=seed % 3)
        want = [e for line in text.split("\n") if line for e in by_feed.feed(line, 2.0)]
        got = parse_chunk(by_chunk, text.encode(), 2.0)
        assert expand(got) == want, seed
        assert by_chunk.attempt == by_feed.attempt
        runs += sum(type(e) is LineRun for e in got)
        assert all(e.count >= MIN_RUN for e in got if type(e) is LineRun)
    assert runs > 100


def test_a_block_with_a_record_every_hundred_lines_is_cut_around_the_records() -> None:
    """The worker's flood: plain lines with a metric record between every hundred."""
    text = "".join(
        f'[ddptui 5 1] @ddptui {{"v": 1, "kind": "metric", "step": {i}, "loss": 0.5}}\n'
        if i % 100 == 99 else f"[ddptui 5 1] step {i} loss 0.5 tokens/s 51234\n"
        for i in range(1000))
    by_feed, by_chunk = NodeLogParser("n"), NodeLogParser("n")
    got = parse_chunk(by_chunk, text.encode(), 1.0)
    assert expand(got) == [e for line in text.split("\n") if line
                           for e in by_feed.feed(line, 1.0)]
    assert [e.count for e in got if type(e) is LineRun] == [99] * 10
    records = "".join(f"[ddptui 5 1] warning at {i}\n" for i in range(200))  # every line
    assert not any(type(e) is LineRun
                   for e in parse_chunk(NodeLogParser("n"), records.encode(), 1.0))


def test_a_restart_between_runs_moves_the_next_runs_attempt() -> None:
    text = ("".join(f"[ddptui 0 0] before {i}\n" for i in range(50))
            + "[WARNING] Worker group FAILED. 2/3 attempts left; will restart worker group\n"
            + "".join(f"[ddptui 0 0] after {i}\n" for i in range(50)))
    got = [e for e in parse_chunk(NodeLogParser("n"), text.encode(), 1.0) if type(e) is LineRun]
    assert [(r.count, r.attempt) for r in got] == [(50, 0), (50, 1)]


def test_a_run_as_lines_head_tail_and_after() -> None:
    run = LineRun("n", 3, 1, 2, 5.0, "".join(f"l{i}\n" for i in range(10)), 10)
    texts = [ln.text for ln in run.lines()]
    assert texts == [f"l{i}" for i in range(10)]
    assert [ln.text for ln in run.tail(3)] == texts[-3:]
    assert [ln.text for ln in run.head(4)] == texts[:4]
    assert run.tail(50) == run.lines() == run.head(50)
    rest = run.after(7)
    assert (rest.count, [ln.text for ln in rest.lines()]) == (3, texts[7:])
    assert run.lines()[0] == LogLine("n", "l0", 5.0, Source.WORKER, rank=3, local_rank=1,
                                     attempt=2)


def test_the_ring_holds_what_a_deque_of_lines_would() -> None:
    rnd = random.Random(5)
    for maxlen in (1, 7, 100, 1000):
        ring, ref = LineRing(maxlen), deque(maxlen=maxlen)
        n = 0
        for _ in range(300):
            if rnd.random() < 0.5:
                count = rnd.randint(1, 300)
                run = LineRun("n", 0, 0, 0, 1.0, "".join(f"{n + i}\n" for i in range(count)),
                              count)
                n += count
                ring.add_run(run)
                ref.extend(run.lines())
            else:
                lines = [LogLine("n", str(n + i), 1.0) for i in range(rnd.randint(1, 30))]
                n += len(lines)
                ring.extend(lines)
                ref.extend(lines)
            assert len(ring) == len(ref)
            k = rnd.randint(0, maxlen + 5)
            assert ring.tail(k) == list(ref)[max(0, len(ref) - k):]
        assert ring.tail() == list(ref)


def batches(seed: int) -> list[list[Event]]:
    rnd = random.Random(seed)
    out = []
    for _ in range(30):
        parser = NodeLogParser(rnd.choice(["a", "b"]))
        out.append(parse_chunk(parser, node_log(rnd, 6).encode(), float(len(out))))
    return out


def test_the_store_and_its_mirror_end_as_with_the_lines_one_by_one(tmp_path: Path) -> None:
    for seed in range(3):
        runs, lines = Store(tmp_path / f"r{seed}", ring_lines=500, rank_lines=120), \
            Store(tmp_path / f"l{seed}", ring_lines=500, rank_lines=120)
        for s in (runs, lines):
            s.add_node("a", 0)
            s.add_node("b", 1)
        cursors = [0, 0]
        for i, batch in enumerate(batches(seed)):
            runs.apply(batch, {"a": i})
            lines.apply(expand(batch), {"a": i})
            got, cursors[0], skipped = runs.lines_since(cursors[0], limit=50)
            want, cursors[1], want_skipped = lines.lines_since(cursors[1], limit=50)
            assert (got, skipped) == (want, want_skipped)
        assert runs.seq == lines.seq
        assert runs.recent_lines() == lines.recent_lines()
        assert runs.node_views() == lines.node_views()
        assert runs.rank_views() == lines.rank_views()
        for rank in range(3):
            assert runs.rank_tail(rank) == lines.rank_tail(rank)
            assert runs.rank_tail(rank, 7) == lines.rank_tail(rank, 7)
        snap = Store.replica(runs.subscribe(lambda _change: None))
        assert snap.recent_lines() == lines.recent_lines()
        runs.close()
        lines.close()
        for path in (tmp_path / f"l{seed}").rglob("*"):
            if path.is_file() and path.suffix != ".json":
                mine = tmp_path / f"r{seed}" / path.relative_to(tmp_path / f"l{seed}")
                assert mine.read_bytes() == path.read_bytes(), path.name


def test_evidence_keeps_both_ends_of_a_run_as_of_its_lines() -> None:
    text = "".join(f"[ddptui 4 0] line {i}\n" for i in range(RANK_HEAD + RANK_TAIL + 500))
    events = parse_chunk(NodeLogParser("n"), text.encode(), 1.0)
    assert [type(e) for e in events] == [LineRun]
    by_run, by_line = Evidence(), Evidence()
    by_run.add([LogLine("n", "before", 0.5, rank=4, local_rank=0), *events])
    by_line.add([LogLine("n", "before", 0.5, rank=4, local_rank=0), *expand(events)])
    assert by_run.events() == by_line.events()
    assert len(by_run) == RANK_HEAD + RANK_TAIL


def test_the_dashboard_backlog_leaves_out_part_of_a_run() -> None:
    text = "".join(f"[ddptui 0 0] line {i}\n" for i in range(100))
    (run,) = parse_chunk(NodeLogParser("n"), text.encode(), 1.0)
    backlog = Backlog(max_lines=150, keep_lines=40)
    backlog.add(Applied([run]))
    backlog.add(Applied([run]))
    changes = backlog.take(0)
    assert changes[0] == Skipped(160)
    kept = [ln.text for ch in changes[1:] if type(ch) is Applied for ln in expand(ch.events)]
    assert kept == [f"line {i}" for i in range(60, 100)]


def test_a_replica_over_the_wire_ends_as_the_store_it_follows(tmp_path: Path) -> None:
    """The dashboard's side: changes are pickled with runs whole, applied to a replica."""
    store = Store(tmp_path / "run")
    store.add_node("a", 0)
    replica = Store.replica(store.subscribe(lambda _change: None))
    sent: list[Change] = []
    store.subscribe(sent.append)
    for batch in batches(4):
        store.apply(batch, {})
    for change in decode(encode(list(sent))):
        assert not isinstance(change, Done)
        apply_change(replica, change)
    assert any(type(e) is LineRun for ch in sent if type(ch) is Applied for e in ch.events)
    assert replica.seq == store.seq
    assert replica.recent_lines() == store.recent_lines()
    assert replica.rank_views() == store.rank_views()
    store.close()


def test_the_headless_printer_prints_a_run_as_its_lines() -> None:
    text = "".join(f"[ddptui 2 1] line {i}\n" for i in range(40))
    events = parse_chunk(NodeLogParser("node1"), text.encode(), 1.0)
    by_run, by_line = io.StringIO(), io.StringIO()
    Printer(by_run)(Batch("node1", events, {}))
    Printer(by_line)(Batch("node1", expand(events), {}))
    assert by_run.getvalue() == by_line.getvalue()
    assert by_run.getvalue().startswith("[node1 r2] line 0\n")
