"""Scrollback from disk, anchored by the store's sequence numbers, which the mirror's ``.seq``
indexes carry beside each log: a line whose text repeats cannot anchor in the wrong place."""

from __future__ import annotations

from pathlib import Path

import pytest
from replay import T0
from test_tui_app import make_app, settle, sync

from ddptui.events import Level, LineRun, LogLine, Metric, RunStatus, Source, in_all_view
from ddptui.store import rundir
from ddptui.store.logfile import SeqIndex
from ddptui.store.reader import page_before
from ddptui.store.store import Store
from ddptui.tui.views import ViewKind, ViewSpec

pytestmark = pytest.mark.timeout(60)

REPEATED = "progress 50%"


def texts(n: int, repeated_at: tuple[int, ...]) -> list[str]:
    return [REPEATED if i in repeated_at else f"line {i}" for i in range(n)]


def line(i: int, text: str, rank: int = 0) -> LogLine:
    return LogLine("local-a", text, T0 + i, rank=rank)


@pytest.mark.parametrize("view", ["rank", "all"])
@sync
async def test_scrollback_lands_on_the_first_line_shown_though_its_text_repeats(
        tmp_path: Path, view: str) -> None:
    """The first line on screen (line 950) was printed before (150) and is printed again
    below it (990): matched by its text, the page came from above the last copy, and lines
    950 to 979 were shown twice."""
    want = texts(1000, (150, 950, 990))
    rank = (lambda i: 0) if view == "rank" else (lambda i: i % 2)
    store = Store(tmp_path / "run", ring_lines=50, rank_lines=50)
    store.set_run(run_id="big", status=RunStatus.RUNNING, started_at=T0)
    store.add_node("local-a", 0)
    for b in range(10):
        store.apply([line(i, want[i], rank(i)) for i in range(b * 100, b * 100 + 100)])
    shown = want if view == "rank" else [f"[{rank(i)}] {t}" for i, t in enumerate(want)]
    app = make_app(store)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        if view == "rank":
            await pilot.press("right_square_bracket")
            await settle(pilot, app)
        log = app.log_view
        assert list(log.lines) == shown[950:]
        await pilot.press("home")
        await pilot.press("home")
        await settle(pilot, app)
        assert list(log.lines) == shown
        assert log.history == 950 and log.first_seq == 1


@sync
async def test_a_nodes_scrollback_holds_its_ranks_lines(tmp_path: Path) -> None:
    """A node's view reads the all-ranks log for its ranks' lines (and its own, tagged with
    its name there), in order."""
    store = Store(tmp_path / "run", ring_lines=40, rank_lines=40)
    store.set_run(run_id="two", status=RunStatus.RUNNING, started_at=T0)
    store.add_node("local-a", 0)
    store.add_node("local-b", 1)
    for b in range(6):
        store.apply([LogLine("local-a" if i % 3 else "local-b", f"line {i}", T0, rank=i % 3)
                     for i in range(b * 50, b * 50 + 50)])
    app = make_app(store)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        app.logs_pane.set_view(ViewSpec(ViewKind.NODE, node="local-a"))
        await settle(pilot, app)
        log = app.log_view
        on_a = [f"[{i % 3}] line {i}" for i in range(300) if i % 3]
        assert list(log.lines) == on_a[-len(log.lines):] and len(log.lines) < len(on_a)
        await pilot.press("home")
        await pilot.press("home")
        await settle(pilot, app)
        assert list(log.lines) == on_a


def mirrored(tmp_path: Path) -> Store:
    """Every kind of line the store counts: plain, a rank's run, a metric's, torch's DEBUG
    chatter (counted, not in the all-ranks log), ddptui's own (in no rank's log)."""
    s = Store(tmp_path)
    s.add_node("a", 0)
    s.apply([line(0, "hello"), line(1, "from one", rank=1),
             LogLine("a", "I1121 agent chatter", T0, Source.AGENT, Level.DEBUG)])
    s.apply([LineRun("a", 1, 1, 0, T0, "".join(f"run {i}\n" for i in range(5)), 5),
             Metric("a", 0, "metric", 3, {"loss": 0.5}, T0,
                    text='@ddptui {"kind": "metric", "step": 3, "loss": 0.5}'),
             LogLine("a", "connected", T0, Source.SSH), line(2, REPEATED), line(3, REPEATED)])
    return s


def test_the_mirror_numbers_each_line_as_the_store_does(tmp_path: Path) -> None:
    s = mirrored(tmp_path)
    s.close()
    for rank in (0, 1):
        log = rundir.rank_log(tmp_path, rank)
        index = SeqIndex(log.with_name(rundir.seq_index_name(log.name)))
        lines, seqs = s.numbered_tail(rank)
        assert log.read_text().splitlines() == [ln.text for ln in lines]
        assert index.read(0, 100) == seqs
    all_lines, all_seqs = s.numbered_tail()
    assert all_seqs == list(range(1, 13)) and all_lines[2].level is Level.DEBUG
    on_disk = SeqIndex(tmp_path / "lines.seq").read(0, 100)
    assert on_disk == [q for q, ln in zip(all_seqs, all_lines, strict=True)
                       if in_all_view(ln)] == [1, 2, *range(4, 13)]  # not the chatter
    assert len(on_disk) == len((tmp_path / "lines.log").read_text().splitlines())


def test_a_page_is_found_by_number_and_an_old_run_dir_by_text(tmp_path: Path) -> None:
    s = mirrored(tmp_path)
    s.close()
    # rank 0: hello 1, @ddptui 9, progress 11, progress 12
    page = page_before(tmp_path, 0, 12, REPEATED, 10)
    assert page.lines == ["hello", '@ddptui {"kind": "metric", "step": 3, "loss": 0.5}',
                          REPEATED] and page.seqs == [1, 9, 11]
    page = page_before(tmp_path, None, 11, f"[0] {REPEATED}", 3,
                       keep=lambda ln: ln.startswith("[0] "))
    assert page.lines == ["[0] hello", "[0] @metric step=3 loss=0.5"] and page.seqs == [1, 9]
    for index in tmp_path.glob("**/*.seq"):  # as an older ddptui left it: matched by text
        index.unlink()
    page = page_before(tmp_path, 0, 12, "hello", 10)
    assert page.lines == [] and page.seqs == []
    page = page_before(tmp_path, 0, 12, REPEATED, 10)
    assert page.lines[-1] == REPEATED and page.seqs == []


def test_a_log_begun_before_seq_indexes_gets_none_later(tmp_path: Path) -> None:
    """Attached by this ddptui, a run an older one mirrored: an index begun mid-log would
    number the wrong lines, so none is begun, and scrollback matches text there."""
    s = mirrored(tmp_path)
    s.close()
    for index in tmp_path.glob("**/*.seq"):
        index.unlink()
    again = Store(tmp_path)
    again.apply([line(9, "after attach")])
    again.close()
    assert not list(tmp_path.glob("**/*.seq"))


def test_a_replica_that_missed_lines_asks_for_the_originals_numbers(tmp_path: Path) -> None:
    original = Store(tmp_path)
    original.add_node("a", 0)
    original.apply([line(i, f"first {i}") for i in range(5)])
    replica = Store.replica(original.subscribe(lambda change: None))
    original.apply([line(i, f"missed {i}", rank=i % 2) for i in range(7)])
    replica.skip_lines(7)  # a dashboard far behind: the engine sent only the newest
    batch = [line(i, f"sent {i}", rank=i % 2) for i in range(4)]
    original.apply(batch)
    replica.apply(batch, mirror=False)
    for rank in (None, 0):
        lines, seqs = replica.numbered_tail(rank)
        want_lines, want_seqs = original.numbered_tail(rank)
        kept = [(q, ln.text) for q, ln in zip(want_seqs, want_lines, strict=True)
                if not ln.text.startswith("missed")]
        assert list(zip(replica.skips.disk_seqs(seqs), [ln.text for ln in lines],
                        strict=True)) == kept
    original.close()
