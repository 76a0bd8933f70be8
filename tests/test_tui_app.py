"""Pilot tests of the dashboard: every binding and every node state, on recorded runs.

The controller here is a stand-in with the real one's methods; the end-to-end test
(test_tui_e2e.py) drives the real one.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeController
from replay import T0, scenario
from textual.command import CommandPalette
from textual.worker import WorkerCancelled

from ddptui.config import HostsConfig
from ddptui.events import LogLine, NodeState, NodeStatus, RunStatus
from ddptui.outcome import RunResult
from ddptui.store.store import Store
from ddptui.tui.app import DashboardApp
from ddptui.tui.screens.confirm import ConfirmScreen
from ddptui.tui.screens.help import HelpScreen
from ddptui.tui.screens.quit import QuitScreen
from ddptui.tui.screens.run_picker import RunPicker
from ddptui.tui.views import ViewKind, ViewSpec
from ddptui.tui.widgets.log_pane import LogPane
from ddptui.tui.widgets.log_status import LogStatus
from ddptui.tui.widgets.log_view import LogView
from ddptui.tui.widgets.metrics_pane import MetricsPane
from ddptui.tui.widgets.nodes_table import NodesTable
from ddptui.tui.widgets.run_header import RunHeader

pytestmark = pytest.mark.timeout(60)


def sync(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test without an async pytest plugin (the project needs none)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))

    return run


class DashboardUnderTest(DashboardApp):
    """The dashboard with its main screen's parts at hand, as the tests read them."""

    @property
    def header(self) -> RunHeader:
        return self.dashboard.header

    @property
    def nodes_table(self) -> NodesTable:
        return self.dashboard.nodes_table

    @property
    def logs_pane(self) -> LogPane:
        return self.dashboard.log_pane

    @property
    def log_view(self) -> LogView:
        return self.dashboard.log_view

    @property
    def log_status(self) -> LogStatus:
        return self.dashboard.log_status

    @property
    def chart(self) -> MetricsPane:
        return self.dashboard.chart

    @property
    def view(self) -> ViewSpec:
        return self.dashboard.log_pane.view

    @property
    def pattern(self) -> re.Pattern[str] | None:
        return self.dashboard.log_pane.pattern


def make_app(store: Store | None = None, **kw: Any) -> DashboardUnderTest:
    FakeController.instances.clear()
    kw.setdefault("session_factory", lambda config, root: FakeController())
    kw.setdefault("clock", lambda: T0 + 10)
    config = kw.pop("config", HostsConfig(Path("hosts.yaml"), ()))
    return DashboardUnderTest(config, store=store, **kw)


async def until(pilot: Any, cond: Callable[[], bool], what: str, within: float = 15.0) -> None:
    """Lets the app run until ``cond()`` holds (its timers and workers act meanwhile)."""
    end = asyncio.get_running_loop().time() + within
    while not cond():
        assert asyncio.get_running_loop().time() < end, f"waited {within} s for {what}"
        await pilot.pause(0.1)


async def workers_done(app: DashboardApp) -> None:
    """Every worker ended; one that a newer one of its group cancelled (the table's and the
    chart's are exclusive, and a loaded machine lets a tick come between) is no failure."""
    for _ in range(100):
        try:
            await app.workers.wait_for_complete()
            return
        except WorkerCancelled:
            continue
    raise AssertionError("the workers went on being cancelled")


async def settle(pilot: Any, app: DashboardApp) -> None:
    await pilot.pause()
    await workers_done(app)
    await pilot.pause()
    app.dashboard.redraw_chart()
    app.dashboard.refresh_run()  # a tick that builds the table and the chart now
    await pilot.pause()
    await workers_done(app)  # the chart is drawn by a thread worker
    await pilot.pause()


def toasts(app: DashboardApp) -> str:
    return "\n".join(str(n.message) for n in app._notifications)


def table_text(app: DashboardApp) -> dict[str, list[str]]:
    table = app.nodes_table
    return {k: list(table.row(k).cells) for k in table.row_keys}


def drawn_colours(app: DashboardApp, key: str) -> set[str]:
    """The colours that the table draws a row in, as they go to the terminal."""
    table = app.nodes_table
    y = table.row_keys.index(key) + 1 - int(table.scroll_y)
    return {seg.style.color.name for seg in table.render_line(y)
            if seg.style is not None and seg.style.color is not None}


async def launched(pilot: Any, app: DashboardApp) -> FakeController:
    await pilot.press("l")
    await settle(pilot, app)
    return FakeController.instances[-1]


@sync
async def test_launch_fills_header_table_log_and_chart() -> None:
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        c = await launched(pilot, app)
        assert c.launched == 1 and app.store is c.store
        rows = table_text(app)
        assert rows["n:local-a"][3] == "running" and rows["n:local-b"][2] == "2,3"
        assert set(app.chart.plotted) == {0, 1, 2, 3}
        assert "fake-run" in str(app.header.render())
        assert "node_rank is only used" in "\n".join(app.log_view.lines)
        c.store.set_run(scheduler="slurm 77 RUNNING 01:59:58 left")  # the job watch's word
        # the header follows the store at the table's pace
        await until(pilot, lambda: "slurm 77" in str(app.header.render()),
                    "the header to show the job watch's word")
        assert "slurm 77 RUNNING 01:59:58 left" in str(app.header.render())


@sync
async def test_launch_error_is_shown_and_nothing_runs() -> None:
    app = make_app(session_factory=lambda config, root: FakeController(
        fail="node local-b: python3 cannot import torch"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("l")
        await settle(pilot, app)
        assert "cannot import torch" in toasts(app)
        assert not app.live and app.busy == ""


@sync
async def test_launch_without_hosts_file_says_so() -> None:
    app = make_app(config=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("l")
        await settle(pilot, app)
        assert "No hosts file" in toasts(app)


@sync
async def test_stop_asks_with_process_count_then_stops() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        c = await launched(pilot, app)
        await pilot.press("x")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert "4 processes on 2 nodes" in app.screen.question
        await pilot.press("n")
        await pilot.pause()
        assert c.stopped == 0
        await pilot.press("x")
        await pilot.pause()
        await pilot.press("y")
        await settle(pilot, app)
        assert c.stopped == 1
        assert "no process of it is left" in toasts(app)
        assert table_text(app)["n:local-a"][3] == "stopped"


@sync
async def test_rehearsing_the_time_limit_asks_then_signals_the_ranks() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        c = await launched(pilot, app)
        await pilot.press("P")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert "saves a checkpoint and leaves" in app.screen.question
        await pilot.press("n")
        await pilot.pause()
        assert getattr(c, "rehearsed", 0) == 0
        await pilot.press("P")
        await pilot.pause()
        await pilot.press("y")
        await settle(pilot, app)
        assert c.rehearsed == 1
        assert "Sent SIGUSR2 to 0 rank(s), as the time limit would." in toasts(app)


@sync
async def test_a_run_its_time_limit_ended_is_followed_by_its_next_attempt() -> None:
    """slurm.resubmit in the dashboard: once the run ends and its handle says why it is to be
    tried again, the next attempt's handle is made (a new allocation, in the engine) and
    followed; a run that ends for any other reason is not."""
    asked: list[tuple[str, str]] = []

    def next_attempt(config: HostsConfig, root: Path | None, previous: str) -> FakeController:
        asked.append((str(config.path), previous))
        return FakeController(run_id=f"{previous}.2")

    app = make_app(attempt_factory=next_attempt)
    async with app.run_test(size=(80, 24)) as pilot:
        first = await launched(pilot, app)
        first.config = HostsConfig(Path("hosts.yaml"), ())
        first.again_because = "the ranks left at Slurm job 7's time limit"
        first.result = RunResult(exit_code=0, failures=[], node_exit_codes={}, stopped=False)
        first._done = True
        await until(pilot, lambda: app.session is not first and app.session is not None
                    and app.session.done is False and FakeController.instances[-1].launched == 1,
                    "the next attempt to be launched")
        assert asked == [("hosts.yaml", "fake-run")]
        assert app.session.run_id == "fake-run.2"
        assert "the ranks left at Slurm job 7's time limit: asking Slurm for a new allocation" \
            in toasts(app)
        second = FakeController.instances[-1]
        second.result = RunResult(exit_code=0, failures=[], node_exit_codes={}, stopped=False)
        second._done = True  # no reason given: the end stands
        await settle(pilot, app)
        await pilot.pause(0.5)
        assert asked == [("hosts.yaml", "fake-run")] and app.session is second


@sync
async def test_restart_stops_then_launches_a_fresh_run() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        first = await launched(pilot, app)
        await pilot.press("R")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot, app)
        assert first.stopped == 1
        assert len(FakeController.instances) == 2
        second = FakeController.instances[1]
        assert app.session is second
        assert second.launched == 1
        # the dashboard pumps the controller it shows, and lets go of the one it replaced
        pumped = second.pumped
        await until(pilot, lambda: second.pumped > pumped, "the new controller to be pumped")
        assert first.closed == 1 and second.closed == 0
    assert second.closed == 1, "the dashboard's exit lets go of its controller"


@sync
async def test_attach_picks_a_run() -> None:
    from ddptui.store.runs import RunSummary

    runs = [RunSummary(run_id="old-run", status=RunStatus.FINISHED, started_at=T0, nodes=["a"],
                       world_size=2, hosts_file="h.yaml")]
    attached: list[str] = []

    def attacher(run_id: str, root: Path | None) -> FakeController:
        attached.append(run_id)
        c = FakeController("failed", run_id=run_id)
        scenario("failed", c.store)
        return c

    app = make_app(run_lister=lambda root: runs, attacher=attacher)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("a")
        await settle(pilot, app)
        assert isinstance(app.screen, RunPicker)
        await pilot.press("enter")
        await settle(pilot, app)
        assert attached == ["old-run"]
        assert table_text(app)["n:local-a"][3] == "failed"


@sync
async def test_attach_on_start() -> None:
    app = make_app(attach="old-run", attacher=lambda run_id, root: FakeController(
        run_id=run_id))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        assert app.session is not None and app.session.run_id == "old-run"


@sync
async def test_quit_when_idle_exits() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0


@sync
async def test_quit_leave_running_detaches() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        c = await launched(pilot, app)
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, QuitScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, QuitScreen)
        await pilot.press("q")
        await pilot.pause()
        await pilot.press("l")
        await settle(pilot, app)
    assert c.detached == 1 and c.stopped == 0


@sync
async def test_quit_and_stop() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        c = await launched(pilot, app)
        await pilot.press("q")
        await pilot.pause()
        await pilot.press("s")
        await settle(pilot, app)
    assert c.stopped == 1 and c.detached == 0


@sync
async def test_every_node_state_shows_with_its_tone() -> None:
    store = scenario("train")
    app = make_app(store)
    async with app.run_test(size=(160, 48)) as pilot:
        for status in NodeStatus:
            store.apply([NodeState("local-b", status, T0 + 3, attempt=2, exit_code=3)])
            await settle(pilot, app)
            row = app.nodes_table.row("n:local-b")
            want = "restart #2" if status is NodeStatus.RESTARTING else str(status)
            assert row.cells[3] == want
            if status in (NodeStatus.FAILED, NodeStatus.LOST):
                assert row.tone == "error"
                assert "red" in drawn_colours(app, "n:local-b")
                assert "local-b" in toasts(app)


@sync
async def test_failure_toast_names_rank_and_root_cause() -> None:
    app = make_app(scenario("failed"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        said = toasts(app)
        assert "rank 1" in said and "ValueError: boom on rank 1" in said
        assert "failed" in str(app.header.render())


@sync
async def test_restarting_state_with_attempt() -> None:
    app = make_app(scenario("restart"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        assert table_text(app)["n:local-a"][3] == "restart #1"
        header = str(app.header.render())
        assert "restarting #1" in header and "restarts 1" in header


@sync
async def test_straggler_and_stall_marks() -> None:
    from ddptui.events import Stall
    from ddptui.store.health import last_heard

    store = scenario("train")
    app = make_app(store, clock=lambda: T0 + 10)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, app)
        # quiet for 10 s, but the run's watch said nothing: the table judges no stall
        assert {table_text(app)[f"r:{r}"][3] for r in range(4)} == {""}
        store.apply([Stall(r.node, r.rank, T0 + 9, True, T0 + 9 - (last_heard(r) or T0), True)
                     for r in store.rank_views()])
        await settle(pilot, app)
        assert {table_text(app)[f"r:{r}"][3] for r in range(4)} == {"stalled"}
    store = scenario("train")
    store.apply([NodeState("local-b", NodeStatus.RUNNING, T0)])
    from ddptui.events import Metric

    store.apply([Metric(f"local-{'ab'[r // 2]}", r, "metric", 1000 + step,  # rank 3 slow
                        {"compute_ms": 30.0 if r == 3 else 10.0}, T0 + 9)
                 for step in range(30) for r in range(4)])
    app = make_app(store, clock=lambda: T0 + 10)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, app)
        assert table_text(app)["r:3"][3] == "straggler"
        assert table_text(app)["r:0"][3] == ""


@sync
async def test_views_cycle_and_filter() -> None:
    app = make_app(scenario("nccl"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        kinds = []
        for _ in range(5):
            await pilot.press("v")
            await settle(pilot, app)
            kinds.append(app.view.kind)
        assert kinds == [ViewKind.RANK, ViewKind.NODE, ViewKind.NCCL, ViewKind.PROBLEMS,
                         ViewKind.ALL]
        await pilot.press("v", "v", "v")  # NCCL only
        await settle(pilot, app)
        lines = app.log_view.lines
        assert lines and all("NCCL" in ln for ln in lines)
        await pilot.press("v")  # warnings and errors
        await settle(pilot, app)
        assert any("out of memory" in ln for ln in app.log_view.lines)
        assert any("Unable to resolve hostname" in ln for ln in app.log_view.lines)
        assert not any("Bootstrap" in ln for ln in app.log_view.lines)


@sync
async def test_rank_and_node_targets_cycle_with_brackets() -> None:
    app = make_app(scenario("nccl"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        await pilot.press("right_square_bracket")
        await settle(pilot, app)
        assert (app.view.kind, app.view.rank) == (ViewKind.RANK, 0)
        await pilot.press("right_square_bracket", "right_square_bracket")
        await settle(pilot, app)
        assert app.view.rank == 2
        assert app.log_view.lines and not any(ln.startswith("[") for ln in app.log_view.lines)
        await pilot.press("left_square_bracket")
        await settle(pilot, app)
        assert app.view.rank == 1


@sync
async def test_filter_highlights_and_n_moves_between_matches() -> None:
    app = make_app(scenario("nccl"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        await pilot.press("slash")
        await pilot.pause()
        assert app.focused is not None and app.focused.id == "filter"
        await pilot.press(*"init", "enter")
        await settle(pilot, app)
        lines = app.log_view.lines
        assert len(lines) == 2 and all("Init COMPLETE" in ln for ln in lines)
        assert app.pattern is not None and app.pattern.flags & re.IGNORECASE
        await pilot.press("n")
        assert app.log_view.match_row == 0 and not app.log_view.follow
        await pilot.press("n")
        assert app.log_view.match_row == 1
        await pilot.press("N")
        assert app.log_view.match_row == 0
        await pilot.press("escape")
        await settle(pilot, app)
        assert app.pattern is None and len(app.log_view.lines) > 2


@sync
async def test_bad_regex_is_searched_as_text() -> None:
    app = make_app(scenario("nccl"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        app.dashboard.log_pane.set_filter("[0")
        await settle(pilot, app)
        assert "not a regex" in toasts(app)
        assert all("[0" in ln for ln in app.log_view.lines)


@sync
async def test_follow_pauses_counts_new_lines_and_end_resumes() -> None:
    store = scenario("failed")
    app = make_app(store)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        log = app.log_view
        await pilot.press("pageup")
        assert not log.follow
        store.apply([LogLine("local-a", f"late line {i}", T0 + 20, rank=0) for i in range(7)])
        await settle(pilot, app)
        assert log.pending == 7
        assert "7 new" in str(app.log_status.render())
        await pilot.press("end")
        await settle(pilot, app)
        assert log.follow and log.pending == 0
        assert log.lines[-1].endswith("late line 6")
        await pilot.press("s")
        assert not log.follow
        await pilot.press("s")
        assert log.follow


@sync
async def test_wrap_toggle_splits_long_lines() -> None:
    app = make_app(scenario("failed"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        log = app.log_view
        before = len(log.lines)
        await pilot.press("w")
        await pilot.pause()
        assert log.wrap and len(log.lines) > before
        assert max(len(ln) for ln in log.lines) <= log.size.width
        await pilot.press("w")
        await pilot.pause()
        assert len(log.lines) == before


@sync
async def test_jump_to_first_error() -> None:
    app = make_app(scenario("failed"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        await pilot.press("e")
        log = app.log_view
        assert log.match_row is not None
        assert "Traceback" in log.lines[log.match_row]


@sync
async def test_save_view_writes_a_file(tmp_path: Path) -> None:
    store = scenario("failed", Store(tmp_path / "run"))
    app = make_app(store)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        await pilot.press("o")
        await settle(pilot, app)
        saved = list((tmp_path / "run").glob("view-*.log"))
        assert len(saved) == 1
        assert "boom on rank 1" in saved[0].read_text()
        assert "Saved" in toasts(app)


@sync
async def test_home_at_top_reads_older_lines_from_disk(tmp_path: Path) -> None:
    store = Store(tmp_path / "run", ring_lines=50, rank_lines=50)
    store.set_run(run_id="big", status=RunStatus.RUNNING, started_at=T0)
    store.add_node("local-a", 0)
    for b in range(10):
        store.apply([LogLine("local-a", f"line {b * 100 + i}", T0, rank=0)
                     for i in range(100)])
    app = make_app(store)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        await pilot.press("right_square_bracket")
        await settle(pilot, app)
        log = app.log_view
        assert log.lines[0] == "line 950"
        await pilot.press("home")
        await pilot.press("home")
        await settle(pilot, app)
        assert log.lines[0] == "line 0" and log.lines[949] == "line 949"
        assert log.history == 950 and not log.follow
        assert "from disk" in str(app.log_status.render())
        await pilot.press("end")
        await settle(pilot, app)
        assert log.history == 0 and log.follow


@sync
async def test_metrics_layout_metric_cycle_and_log_scale() -> None:
    app = make_app(scenario("train"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        chart = app.chart
        assert not chart.display  # narrow: logs only, the chart does not draw
        assert chart.plotted == {}
        await pilot.press("m")
        await settle(pilot, app)
        assert chart.display and not app.logs_pane.display
        assert set(chart.plotted) == {0, 1, 2, 3}
        await pilot.press("c")
        await settle(pilot, app)
        assert chart.metric == "eval_loss"
        await pilot.press("y")
        await settle(pilot, app)
        assert chart.log_scale
        await pilot.press("m")
        await settle(pilot, app)
        assert chart.display and app.logs_pane.display


@sync
async def test_help_lists_every_binding() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        titles = [b.description for _, bs in app.screen.sections for b in bs]
        for b in DashboardApp.BINDINGS:
            assert b.description in titles  # type: ignore[union-attr]
        for b in LogView.BINDINGS:
            assert b.description in titles  # type: ignore[union-attr]
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)


@sync
async def test_command_palette_runs_launch() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+p")
        await pilot.pause()
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"Launch")
        await asyncio.wait_for(app.workers.wait_for_complete(), 30)  # the palette's search
        await pilot.press("enter")
        await settle(pilot, app)
        assert FakeController.instances and FakeController.instances[-1].launched == 1


@sync
async def test_row_enter_opens_that_rank() -> None:
    app = make_app(scenario("train"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        table = app.nodes_table
        table.focus()
        table.move_cursor(1)
        await pilot.press("enter")
        await settle(pilot, app)
        assert (app.view.kind, app.view.rank) == (ViewKind.RANK, 0)


@sync
async def test_restart_after_attach_uses_the_runs_own_hosts_file() -> None:
    seen: list[Any] = []

    def factory(config: Any, root: Path | None) -> FakeController:
        seen.append(config)
        return FakeController()

    def attacher(run_id: str, root: Path | None) -> FakeController:
        c = FakeController(run_id=run_id)
        c.config = HostsConfig(Path("old-hosts.yaml"), ())
        c._done = True
        return c

    app = make_app(config=None, attach="old", attacher=attacher, session_factory=factory)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        await pilot.press("R")
        await settle(pilot, app)
        assert seen == [HostsConfig(Path("old-hosts.yaml"), ())]


@sync
async def test_home_at_top_of_all_ranks_reads_older_lines_from_disk(tmp_path: Path) -> None:
    store = Store(tmp_path / "run", ring_lines=50, rank_lines=50)
    store.set_run(run_id="big", status=RunStatus.RUNNING, started_at=T0)
    store.add_node("local-a", 0)
    for b in range(10):
        store.apply([LogLine("local-a", f"line {b * 100 + i}", T0, rank=i % 2)
                     for i in range(100)])
    app = make_app(store)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        log = app.log_view
        assert log.lines[0] == "[0] line 950"
        await pilot.press("home")
        await pilot.press("home")
        await settle(pilot, app)
        assert log.lines[0] == "[0] line 0" and log.lines[949] == "[1] line 949"
        assert log.history == 950 and not log.follow


@sync
async def test_log_scrollbar_repaints_only_when_its_thumb_moves() -> None:
    from textual.app import App, ComposeResult
    from textual.geometry import Region

    from ddptui.tui.widgets.nodes_table import NodesTable
    from ddptui.tui.widgets.scrollbar import QuietScrollBar

    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield LogView()
            yield NodesTable()

    app = One()
    async with app.run_test(size=(60, 12)) as pilot:
        log = app.query_one(LogView)
        log.append([f"line {i}" for i in range(2000)])
        await pilot.pause()
        bar = log.vertical_scrollbar
        assert isinstance(bar, QuietScrollBar) and bar.display
        assert isinstance(app.query_one(NodesTable).vertical_scrollbar, QuietScrollBar)
        whole = Region(0, 0, *bar.size)
        first = bar.render_lines(whole)
        log.append(["one more"])  # the thumb is one cell already; the end does not move
        await pilot.pause()
        assert bar.render_lines(whole) is first
        log.follow = False
        log.scroll_home(animate=False, immediate=True)
        await pilot.pause()
        top = bar.render_lines(whole)
        assert top is not first and [list(s) for s in top] != [list(s) for s in first]


@sync
async def test_a_longer_log_or_a_wider_column_lays_out_nothing_else() -> None:
    """Textual lays out the whole screen for any new virtual size: 15-40 ms under a flood.
    A write that only lengthens a log whose scrollbar shows, or a column that widens inside
    the pane, changes nothing else on screen and must not; the scrollbar still follows."""
    from textual.app import App, ComposeResult

    from ddptui.tui.node_rows import COLUMNS, Row
    from ddptui.tui.widgets.nodes_table import NodesTable

    class Two(App[None]):
        def compose(self) -> ComposeResult:
            yield NodesTable()
            yield LogView()

    def rows(age: str) -> list[Row]:
        return [Row(f"n{i}", (f"node{i}", str(i), "0-1", "running", "4242", "0", "-", age,
                              "1.2k", "0.5"), "") for i in range(2)]

    app = Two()
    async with app.run_test(size=(100, 20)) as pilot:
        log, table = app.query_one(LogView), app.query_one(NodesTable)
        table.show_rows(rows("9s"))
        log.append([f"line {i}" for i in range(100)])
        await pilot.pause()
        log.scroll_end(animate=False, immediate=True)  # the table's rows took two lines
        await pilot.pause()
        assert log.is_vertical_scroll_end and log.max_scroll_y > 0
        layouts: list[int] = []
        screen = app.screen
        real = screen._refresh_layout

        def counted(*args: Any, **kwargs: Any) -> Any:
            layouts.append(1)
            return real(*args, **kwargs)

        screen._refresh_layout = counted  # type: ignore[method-assign]
        narrow = table.virtual_size.width
        log.append([f"more {i}" for i in range(50)])
        table.show_rows(rows("10m 9s"))  # "Last" widens from its header (4 cells) to 6
        await pilot.pause()
        assert layouts == []
        assert log.virtual_size.height == 150
        assert log.vertical_scrollbar.window_virtual_size == 150
        assert log.scroll_y == log.max_scroll_y  # still following, at the new end
        assert table.virtual_size.width == narrow + 2
        header = "".join(seg.text for seg in table.render_line(0))
        assert header.split() == list(COLUMNS)
        assert "10m 9s" in "".join(seg.text for seg in table.render_line(1))
        log.set_lines(["just one"])  # shorter than the pane: laid out as before
        await pilot.pause()
        assert layouts and log.max_scroll_y == 0 and log.scroll_y == 0


@sync
async def test_toasts_show_what_the_nodes_said_as_written() -> None:
    from textual.widgets._toast import Toast

    app = make_app(scenario("train"))
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        said = "[rank1]: ValueError: bad [/] value [bold]x"
        app.notify(said, title="Node failed", severity="error")
        await pilot.pause(0.2)
        shown = [str(t.render()) for t in app.screen.query(Toast)]
        assert any(said in text for text in shown), shown


@sync
async def test_chart_is_drawn_again_only_when_points_arrive() -> None:
    from ddptui.events import Metric

    app = make_app(scenario("train"))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, app)
        drawn: list[str] = []
        screen = app.dashboard
        screen._draw_chart = lambda store, view, *a: drawn.append(view.metric)  # type: ignore
        store = app.store
        store.apply([LogLine("node0", "NCCL INFO chatter", T0 + 11, rank=0)] * 50)
        screen.redraw_chart()
        screen.tick()
        assert drawn == []
        store.apply([Metric("node0", 0, "metric", 10_000, {"loss": 0.5}, T0 + 12)])
        screen.redraw_chart()
        screen.tick()
        assert drawn == ["loss"]


@sync
async def test_d_shows_the_whole_diagnosis_of_a_failed_run() -> None:
    from ddptui.diagnose import Cause, Diagnosis
    from ddptui.tui.screens.diagnosis import DiagnosisScreen

    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        ctl = await launched(pilot, app)
        await pilot.press("d")
        await pilot.pause()
        assert not isinstance(app.screen, DiagnosisScreen)
        assert "No failed run to explain" in toasts(app)
        d = Diagnosis(Cause.RANK_ERROR, "rank 1 (node b) raised ValueError: boom. What to do: "
                      "fix the script.", "rank 1 raised", "fix the script", node="b", rank=1,
                      evidence=["[b r1] ValueError: boom"],
                      details={"a": ["rank 0 stopped by torchrun after rank 1 failed"]})
        ctl.result = RunResult(1, [], {"a": 1, "b": 1}, False, diagnosis=d)
        ctl._done = True
        await pilot.press("d")
        await pilot.pause()
        assert isinstance(app.screen, DiagnosisScreen)
        shown = str(app.screen.query_one("#report").render())
        assert shown.splitlines() == d.report()
        assert "node a: rank 0 stopped by torchrun" in shown and "[b r1] ValueError" in shown
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, DiagnosisScreen)


@sync
async def test_a_progress_bar_is_one_line_per_rank_written_over_in_place() -> None:
    """Each rank's bar states take its live line's place, wherever the other rank's lines
    went meanwhile; an ordinary line ends the bar (its last state stays, the line goes below);
    a view built again shows the same; wrapped and paused, too."""
    store = Store()

    def bar(rank: int, text: str) -> LogLine:
        return LogLine("local-a", text, T0, rank=rank, local_rank=rank, bar=True)

    def said(rank: int, text: str) -> LogLine:
        return LogLine("local-a", text, T0, rank=rank, local_rank=rank)

    app = make_app(store)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app)
        log = app.log_view
        store.apply([said(0, "start 0"), bar(0, " 10%|#"), said(1, "start 1"), bar(1, "1: 5%")])
        await settle(pilot, app)
        assert list(log.lines) == ["[0] start 0", "[0]  10%|#", "[1] start 1", "[1] 1: 5%"]
        for i in range(2, 10):
            store.apply([bar(0, f" {i}0%|{'#' * i}"), bar(1, f"1: {i * 5}%")])
            await settle(pilot, app)
        assert list(log.lines) == ["[0] start 0", "[0]  90%|#########", "[1] start 1",
                                   "[1] 1: 45%"]
        store.apply([said(0, "{'loss': 0.5}"), bar(0, " 95%|##########"), bar(1, "1: 50%")])
        await settle(pilot, app)
        want = ["[0] start 0", "[0]  90%|#########", "[1] start 1", "[1] 1: 50%",
                "[0] {'loss': 0.5}", "[0]  95%|##########"]
        assert list(log.lines) == want and list(log.raw) == want
        await pilot.press("w")  # wrapped: rows written again
        await settle(pilot, app)
        store.apply([bar(1, "1: 55%")])
        await settle(pilot, app)
        want[3] = "[1] 1: 55%"
        assert list(log.lines) == want
        await pilot.press("w")
        await pilot.press("s")  # paused: the held lines' bar is written over too
        assert not log.follow
        store.apply([said(1, "late"), bar(1, "1: 60%")])
        await settle(pilot, app)
        store.apply([bar(1, "1: 65%")])
        await settle(pilot, app)
        await pilot.press("end")
        await settle(pilot, app)
        assert list(log.lines) == [*want, "[1] late", "[1] 1: 65%"]
        app.logs_pane.set_view(ViewSpec(ViewKind.RANK, rank=0))  # built again from the ring
        await settle(pilot, app)
        assert list(log.lines) == ["start 0", " 90%|#########", "{'loss': 0.5}",
                                   " 95%|##########"]
