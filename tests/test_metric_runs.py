"""A run of metric lines as one MetricRun ends exactly where the same lines one by one do:
the same points, series, rank views, ``metrics.jsonl`` points and printed lines."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddptui.engine.wire import decode, encode
from ddptui.events import Event, Metric, MetricRun
from ddptui.faces.headless import Printer
from ddptui.ingest import parse_chunk
from ddptui.live.follow import Batch
from ddptui.metrics.bulk import fits, made
from ddptui.metrics.points import points
from ddptui.metrics.recognizers import BUILT_IN
from ddptui.metrics.scan import Scanner
from ddptui.nodelog import NodeLogParser
from ddptui.store import rundir
from ddptui.store.changes import Applied, Change
from ddptui.store.store import Store

NANO = {r.name: r for r in BUILT_IN}["nanogpt"]


def _line(kind: int, step: int, v: int) -> str:
    if kind == 0:
        return f"iter {step}: loss {v / 977:.4f}, time {10 + v % 7}.25ms, mfu {v % 89 - 3:.2f}%"
    if kind == 1:
        return f"iter {step}: loss {v / 977:.4f}, time {v % 200}.{v % 10}ms"
    if kind == 2:
        return f"step {step}: train loss {v / 10:.4f}, val loss {v / 9:.4f}"
    if kind == 3:
        return f"epoch {v} loss={v / 7:.3f}"
    if kind == 4:
        return f"i{v}ter {step}: loss 1.5, time 2.5ms"  # a digit where none reads
    if kind == 5:
        return f"plain line {v} without a metric"
    return f'@ddptui {{"v": 1, "kind": "metric", "step": {step}, "acc": {v}}}'


# a block: one rank's lines in a row (the tee writes blocks); kinds weighted to the flood's
_block = st.tuples(
    st.integers(0, 3),  # rank
    st.lists(st.tuples(st.sampled_from([0, 0, 0, 0, 1, 1, 2, 3, 4, 5, 6]),
                       st.integers(0, 3), st.integers(0, 5000)), min_size=1, max_size=60),
    st.integers(0, 40),  # lines of that block with the previous kind, to make long runs
)


def _log(blocks: list) -> list[str]:
    out, steps = [], {}
    for rank, lines, repeat in blocks:
        for kind, gap, v in lines + [lines[-1]] * repeat:
            steps[rank] = steps.get(rank, 0) + gap  # gap 0: the same step again
            out.append(f"[ddptui {rank} {rank}] {_line(kind, steps[rank], v)}\n")
    return out


def _events(lines: list[str], cuts: list[int], bulk: bool) -> list[list[Event]]:
    parser, scanner = NodeLogParser("n1"), Scanner("n1", bulk=bulk)
    bounds = sorted({0, len(lines), *(c % (len(lines) + 1) for c in cuts)})
    return [scanner.scan(parse_chunk(parser, "".join(lines[a:b]).encode(), 5.0))
            for a, b in itertools.pairwise(bounds)]


def _flat(batches: list[list[Event]]) -> list[Event]:
    out: list[Event] = []
    for batch in batches:
        for ev in batch:
            out.extend(made(ev) if type(ev) is MetricRun else [ev])
    return out


def _store(batches: list[list[Event]], work: Path, name: str, points_max: int) -> Store:
    store = Store(work / name, series_points=points_max)
    store.add_node("n1", 0)
    for batch in batches:
        store.apply(batch)
    return store


def _state(store: Store) -> tuple:
    names = store.metric_names()
    return (names, {(r, n): store.series(r, n) for r in range(4) for n in names},
            dict(store.series_source), [vars(r) for r in store.rank_views()], store.latest)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(blocks=st.lists(_block, min_size=1, max_size=12),
       cuts=st.lists(st.integers(0, 10_000), max_size=4), points_max=st.sampled_from([5, 20_000]))
def test_metric_runs_end_where_the_lines_one_by_one_do(tmp_path: Path, blocks: list,
                                                       cuts: list[int], points_max: int) -> None:
    lines = _log(blocks)
    one, bulk = _events(lines, cuts, False), _events(lines, cuts, True)
    assert _flat(bulk) == _flat(one)
    work = tmp_path / str(len(list(tmp_path.iterdir())))
    a, b = _store(one, work, "one", 20_000), _store(bulk, work, "bulk", 20_000)
    assert _state(b) == _state(a)
    with open(work / "one" / rundir.METRICS) if (work / "one" / rundir.METRICS).exists() \
            else io.StringIO() as f1:
        want = list(points(f1))
    path = work / "bulk" / rundir.METRICS
    with open(path) if path.exists() else io.StringIO() as f2:
        assert list(points(f2)) == want
    for rank in range(4):
        p1, p2 = rundir.rank_log(work / "one", rank), rundir.rank_log(work / "bulk", rank)
        assert (p1.read_bytes() if p1.exists() else b"") == (p2.read_bytes() if p2.exists()
                                                               else b"")
    if points_max == 5:  # a small window: the oldest runs are dropped, not made
        increasing = all(gap > 0 for _, ls, rep in blocks for _, gap, _ in ls) and not any(
            rep for *_, rep in blocks)
        if increasing:
            a, b = _store(one, work, "one5", 5), _store(bulk, work, "bulk5", 5)
            assert _state(b) == _state(a)
    a.close()
    b.close()


def test_a_flood_of_nanogpt_lines_is_one_metric_run_per_read() -> None:
    lines = [f"[ddptui 0 0] iter {n}: loss {1 / (1 + n):.4f}, time 10.{n % 90:02d}ms, "
             f"mfu 31.{n % 89:02d}%\n" for n in range(3000)]
    batches = _events(lines, [1000, 2000], True)
    kinds = [type(e).__name__ for batch in batches for e in batch]
    assert kinds == ["LineRun", "Metric", "MetricRun", "LineRun", "MetricRun",
                     "LineRun", "MetricRun"]
    run = batches[1][1]
    assert isinstance(run, MetricRun) and run.count == 1000 and run.names == ("loss", "time",
                                                                              "mfu")
    assert run.last.step == 1999 and made(run)[-1] == run.last


def test_a_line_that_would_not_read_keeps_its_run_line_by_line() -> None:
    good = "".join(f"iter {n}: loss 1.5, time 2.5ms\n" for n in range(20))
    assert fits(NANO, good, 20, ("oss",)) == (("loss", "time"), "step")
    for bad in ("i5ter 3: loss 1.5, time 2.5ms\n", "iter 3: loss ., time 2.5ms\n",
                "iter : loss 1.5, time 2.5ms\n", "iter 3: 7loss 1.5, time 2.5ms\n",
                "iter 3: loss 1,5, time 2.5ms\n"):
        assert fits(NANO, good + bad, 21, ("oss",)) is None, bad


def test_a_metric_run_crosses_the_wire_and_a_replica_charts_it(tmp_path: Path) -> None:
    lines = [f"[ddptui 1 1] iter {n}: loss {n / 7:.4f}, time 1.25ms\n" for n in range(200)]
    batches = _events(lines, [100], True)
    store = Store(tmp_path / "run")
    snapshot_taken: list[Change] = []
    store.subscribe(snapshot_taken.append)
    for batch in batches:
        store.apply(batch)
    replica = Store(None, mirrored=False)
    for change in decode(encode(list(snapshot_taken))):
        assert type(change) is Applied
        replica.apply(change.events, mirror=False)
    assert replica.series(1, "loss") == store.series(1, "loss")
    assert len(store.series(1, "loss")[0]) == 200
    out, want = io.StringIO(), io.StringIO()
    Printer(out)(Batch("n1", [e for b in batches for e in b], {}))
    Printer(want)(Batch("n1", _flat(batches), {}))
    assert out.getvalue() == want.getvalue()
    assert any(type(e) is Metric for e in _flat(batches))
    store.close()


def test_a_rare_eval_series_outlives_a_flood_of_train_runs(tmp_path: Path) -> None:
    """Waiting runs are dropped only when newer ones fill every series they hold: an eval
    line amid thousands of train lines keeps its point in a 5-point window."""
    flood = [f"[ddptui 0 0] iter {n}: loss {1 / n:.4f}, time 10.00ms, mfu 31.00%\n"
             for n in range(1, 3001)]
    lines = [*flood[:1000], "[ddptui 0 0] step 1000: train loss 4.2000, val loss 4.3000\n",
             *flood[1000:]]
    for bulk in (False, True):
        store = _store(_events(lines, [1000, 1001, 2001], bulk), tmp_path, f"b{bulk}", 5)
        assert store.series(0, "val loss") == ([1000], [4.3]), bulk
        assert store.series(0, "loss")[0] == [2996, 2997, 2998, 2999, 3000], bulk
        store.close()
