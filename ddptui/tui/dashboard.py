"""The dashboard's main screen: the header, the nodes table, the log pane and the charts.

Two timers drive it. The pump (100 Hz) brings the app's store up to date from the engine, a
few milliseconds at a time. The tick (15 Hz) checks the store's version and writes what
changed to the widgets on screen: the log pane drains new lines, and, each at most twice a
second, the table and the chart are rebuilt in thread workers and shown when ready.
"""

from __future__ import annotations

import contextlib
import time
from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal
from textual.css.query import NoMatches
from textual.events import Resize
from textual.reactive import reactive, var
from textual.screen import Screen
from textual.strip import Strip
from textual.widgets import Footer

from ddptui.chart.memo import ChartMemo
from ddptui.chart.rows import store_chart
from ddptui.chart.view import ChartView, Drawn
from ddptui.engine.calls import EngineError
from ddptui.events import Failure, NodeStatus
from ddptui.store.health import shown_health
from ddptui.store.store import Store
from ddptui.store.views import NodeView, RunInfo
from ddptui.tui import sample_cells
from ddptui.tui.compare import Change, changed, compare_chart
from ddptui.tui.node_rows import Row, build_rows, columns
from ddptui.tui.notices import (
    failure_notice,
    finished_notice,
    node_change_notices,
    stall_notices,
)
from ddptui.tui.overlay import Overlay
from ddptui.tui.ports import DashboardOwner
from ddptui.tui.state import LayoutMode
from ddptui.tui.views import ViewKind, ViewSpec
from ddptui.tui.widgets.log_pane import LogPane
from ddptui.tui.widgets.log_status import LogStatus
from ddptui.tui.widgets.log_view import LogView
from ddptui.tui.widgets.metrics_pane import (
    CHART_KEYS,
    COMPARE_KEYS,
    ChartKeys,
    MetricsPane,
    strips,
)
from ddptui.tui.widgets.nodes_table import NodesTable
from ddptui.tui.widgets.run_header import RunHeader

PUMP_HZ = 100
TABLE_EVERY_S = 0.5
CHART_EVERY_S = 0.5
#: Under a flood the chart is the costliest thing to redraw: a worker thread's 5-10 ms of
#: Python, which shares the interpreter with the keys, then 37 rows of dots to paint.
CHART_FLOOD_EVERY_S = 1.0
#: From this many columns on, ``auto`` shows the log and the charts side by side.
WIDE_COLUMNS = 120
_LAYOUT_ORDER = {
    True: (LayoutMode.BOTH, LayoutMode.LOGS, LayoutMode.CHARTS),
    False: (LayoutMode.LOGS, LayoutMode.CHARTS, LayoutMode.BOTH),
}


class DashboardScreen(ChartKeys, Screen[None]):
    """The run the app follows, on one screen; its keys are the app's, and the chart's."""

    BINDINGS: ClassVar[list[BindingType]] = [*CHART_KEYS, *COMPARE_KEYS]

    layout_mode: reactive[LayoutMode] = reactive(LayoutMode.AUTO, init=False)
    """What the body shows; ``m`` steps through it."""
    wide: var[bool] = var(False, init=False)
    """The terminal is wide enough for the log and the charts side by side."""

    def __init__(self, owner: DashboardOwner) -> None:
        super().__init__()
        #: Who owns the run this screen shows (the app): its store, handle and busy state.
        self.owner = owner
        self._version = -1
        self._points = -1
        self._failures_seen = 0
        self._stalls_seen = 0
        self._node_status: dict[str, NodeStatus] = {}
        self._last_table = 0.0
        self._last_chart = 0.0
        self._done_told = False

    def compose(self) -> ComposeResult:
        owner = self.owner
        yield RunHeader(id="header")
        yield NodesTable(id="nodes")
        with Horizontal(id="body"):
            yield LogPane(owner.store, clock=owner.clock, id="logs")
            yield MetricsPane(id="chart")
        # compact, and no palette hint: at 80 columns every main key still fits (ctrl+p is
        # listed under ?)
        yield Footer(compact=True, show_command_palette=False)

    @property
    def header(self) -> RunHeader:
        return self.query_one("#header", RunHeader)

    @property
    def nodes_table(self) -> NodesTable:
        return self.query_one("#nodes", NodesTable)

    @property
    def log_pane(self) -> LogPane:
        return self.query_one("#logs", LogPane)

    @property
    def log_view(self) -> LogView:
        return self.log_pane.log_view

    @property
    def log_status(self) -> LogStatus:
        return self.log_pane.log_status

    @property
    def chart(self) -> MetricsPane:
        return self.query_one("#chart", MetricsPane)

    def on_mount(self) -> None:
        self.set_reactive(DashboardScreen.wide, self.size.width >= WIDE_COLUMNS)
        self._apply_layout()
        self.set_interval(1 / PUMP_HZ, self._pump)
        self.set_interval(1 / self.owner.drain_hz, self.tick)
        self.tick()

    # -- layout ----------------------------------------------------------------------------

    def on_resize(self, event: Resize) -> None:
        self.wide = event.size.width >= WIDE_COLUMNS

    def watch_wide(self) -> None:
        self._apply_layout()

    def watch_layout_mode(self) -> None:
        self._apply_layout()

    def _apply_layout(self) -> None:
        mode = self.layout_mode
        if mode is LayoutMode.AUTO:
            mode = LayoutMode.BOTH if self.wide else LayoutMode.LOGS
        logs, chart = self.log_pane, self.chart
        was_hidden = not logs.display
        logs.display = mode in (LayoutMode.LOGS, LayoutMode.BOTH)
        chart.display = mode in (LayoutMode.CHARTS, LayoutMode.BOTH)
        chart.set_class(mode is LayoutMode.CHARTS, "-alone")
        chart.dirty = True
        if logs.display and was_hidden:
            logs.mark_stale()

    def action_toggle_metrics(self) -> None:
        current = self.layout_mode
        if current is LayoutMode.AUTO:
            current = LayoutMode.BOTH if self.wide else LayoutMode.LOGS
        order = _LAYOUT_ORDER[self.wide]
        self.layout_mode = order[(order.index(current) + 1) % len(order)]
        self.tick()

    # -- the timers ------------------------------------------------------------------------

    def follow_store(self, store: Store) -> None:
        """Show another run, from its start, at once."""
        self.log_pane.follow_store(store)
        self._version = -1
        self._points = -1
        self._failures_seen = 0
        self._stalls_seen = 0
        self._node_status = {}
        self._last_table = 0.0
        self._last_chart = 0.0
        self._done_told = False
        self.tick()

    def refresh_run(self) -> None:
        """The header and table now, not at their next turn (the app's busy state changed)."""
        self._last_table = 0.0
        self.tick()

    def _pump(self) -> None:
        """Often and briefly: the engine's changes into the store, a few milliseconds' worth
        at a time, so a key never waits long behind a flood."""
        handle = self.owner.session
        if handle is not None:
            handle.pump()

    def tick(self) -> None:
        """Runs at the app's ``drain_hz``: a version check when nothing happened, batches
        when it did."""
        owner = self.owner
        store = owner.store
        now = owner.clock()
        changed = store.version != self._version
        if changed:
            self._version = store.version
            if store.points != self._points:
                self._points = store.points
                self.chart.dirty = True
        self.wide = self.size.width >= WIDE_COLUMNS  # a resize seen before mount, or missed
        pane = self.log_pane
        pane.update(changed)
        mono = time.monotonic()
        if mono - self._last_table >= TABLE_EVERY_S:
            self._last_table = mono
            self._collect_table(store, now)
        chart = self.chart
        every = CHART_FLOOD_EVERY_S if pane.flooding else CHART_EVERY_S
        if chart.display and chart.dirty and mono - self._last_chart >= every:
            self._last_chart = mono
            chart.dirty = False
            self._draw_chart(store, chart.view, *chart.content_size, chart.overlay, chart.memo)

    # -- the chart -------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="chart")
    def _draw_chart(self, store: Store, view: ChartView, width: int, height: int,
                    overlay: Overlay | None = None, memo: ChartMemo | None = None) -> None:
        """Off the loop, and where the series are: building a chart of 16 ranks is 10-40 ms
        of Python, which in this process would be taken from the keys. The run's handle
        builds it, once, where the run is; a slow answer leaves the last drawing and is
        asked for again at the next turn (a gone engine sends no new points either), never
        built a second way here. Only without a handle (a store shown alone) or with a past
        run to compare is it built here, by the same builder: the engine's call takes no past
        series yet (the overlay's are cut to a few thousand points a rank)."""
        handle = self.owner.session
        if handle is not None and overlay is None:
            try:
                drawn = handle.chart(view, width, height)
            except TimeoutError:
                with contextlib.suppress(RuntimeError):  # the app closed meanwhile
                    self.app.call_from_thread(self._chart_late)
                return
            except EngineError:
                return
        else:
            drawn = store_chart(store, view, width, height, memo=memo) \
                if overlay is None else compare_chart(store, overlay, view, width, height)
        if store is self.owner.store:
            with contextlib.suppress(RuntimeError):  # the app closed meanwhile
                self.app.call_from_thread(self._show_chart, strips(drawn.rows), drawn)

    # On the loop: the screen may have closed while the chart was built, and a closed screen
    # has no #chart to find (the query is made here, never in the worker's thread).
    # While the app exits, a screen still attached may have lost its widgets already.
    def _show_chart(self, lines: list[Strip], drawn: Drawn) -> None:
        if self.is_attached:
            with contextlib.suppress(NoMatches):
                self.chart.show(lines, drawn)

    def _chart_late(self) -> None:
        if self.is_attached:
            with contextlib.suppress(NoMatches):
                self.chart.dirty = True

    def redraw_chart(self) -> None:
        """At the next tick, whenever the last drawing was."""
        self._last_chart = 0.0

    def on_metrics_pane_view_changed(self) -> None:
        self.redraw_chart()

    def action_next_metric(self) -> None:
        self.chart.next_metric(self.owner.store.metric_names())

    def action_next_mark(self) -> None:
        mark = self.chart.next_mark()
        if mark is not None:
            self.log_pane.show_step(mark.rank, mark.step, mark.text)

    def action_compare_view(self, change: Change) -> None:
        overlay, said = changed(self.chart.overlay, change)
        if overlay is not None:
            self.chart.overlay = overlay
            self.redraw_chart()
        self.app.notify(said, title="Compare", timeout=4)

    # -- the table and the header ----------------------------------------------------------

    @work(thread=True, exclusive=True, group="table")
    def _collect_table(self, store: Store, now: float) -> None:
        """Off the loop: a score of store reads, each of which may wait behind a batch."""
        owner = self.owner
        info = store.run_info()
        nodes = store.node_views()
        ranks = store.rank_views()
        # stalls as the run's watch told them: the table never judges one again
        health = shown_health(ranks, nodes, store.stall_list(), now, owner.health_config)
        telemetry = sample_cells.build(store.node_samples(), nodes, ranks, now,
                                          owner.visible_devices)
        rows = build_rows(nodes, ranks, health, lambda r: store.series(r, "loss")[1], now,
                          telemetry)
        failures = store.failure_list()
        with contextlib.suppress(RuntimeError):  # the app closed meanwhile
            self.app.call_from_thread(self._show_table, store, now, info, nodes, rows, failures,
                                      columns(telemetry))

    def _show_table(self, store: Store, now: float, info: RunInfo, nodes: list[NodeView],
                    rows: list[Row], failures: list[Failure],
                    table_columns: tuple[str, ...] = columns(None)) -> None:
        owner = self.owner
        if store is not owner.store or not self.is_attached:
            return
        try:
            table, header = self.nodes_table, self.header
        except NoMatches:  # the screen is closing (the app exits): its widgets are gone
            return
        self._tell_failures(nodes, failures)
        table.show_rows(rows, table_columns)
        restarts = max((n.attempt for n in nodes), default=0)
        restarting = any(n.status is NodeStatus.RESTARTING for n in nodes)
        header.set_run(info, now, restarts, owner.busy, restarting)
        handle = owner.session
        if handle is not None and not self._done_told and handle.done:
            self._done_told = True
            notice = finished_notice(handle.run_id, handle.result)
            if notice is not None:
                owner.show_notice(notice)
            owner.after_end(handle)

    def _tell_failures(self, nodes: list[NodeView], failures: list[Failure]) -> None:
        """Toasts for the failures, node changes and stalls not told yet."""
        owner = self.owner
        for failure in failures[self._failures_seen:]:
            owner.show_notice(failure_notice(failure))
        self._failures_seen = len(failures)
        failed_nodes = {f.node for f in failures}
        for notice in node_change_notices(nodes, self._node_status, failed_nodes):
            owner.show_notice(notice)
        self._node_status.update((n.name, n.status) for n in nodes)
        stalls = owner.store.stall_list()
        for notice in stall_notices(stalls[self._stalls_seen:]):
            owner.show_notice(notice)
        self._stalls_seen = len(stalls)

    def action_node_detail(self) -> None:
        """Every GPU of the node under the table's cursor (a rank's row: its node)."""
        from ddptui.tui.screens.node_detail import NodeDetailScreen

        store, key = self.owner.store, self.nodes_table.cursor_key
        rank = store.ranks.get(int(key[2:])) if key.startswith("r:") else None
        node = rank.node if rank is not None else key[2:] if key.startswith("n:") else ""
        node = node or next((n.name for n in store.node_views()), "")
        if node:
            self.app.push_screen(NodeDetailScreen(node, store.node_samples, self.owner.clock))

    def on_nodes_table_row_selected(self, event: NodesTable.RowSelected) -> None:
        key = event.key
        if key.startswith("r:"):
            self.log_pane.set_view(ViewSpec(ViewKind.RANK, rank=int(key[2:])))
        elif key.startswith("n:"):
            self.log_pane.set_view(ViewSpec(ViewKind.NODE, node=key[2:]))

    # -- the log pane's keys (bound on the app, as ``screen.<action>``) --------------------

    def action_filter(self) -> None:
        self.log_pane.action_filter()

    def action_clear_filter(self) -> None:
        self.log_pane.action_clear_filter()

    def action_next_view(self) -> None:
        self.log_pane.action_next_view()

    def action_cycle_target(self, step: int) -> None:
        self.log_pane.action_cycle_target(step)

    def action_next_match(self) -> None:
        self.log_pane.action_next_match()

    def action_previous_match(self) -> None:
        self.log_pane.action_previous_match()

    def action_first_error(self) -> None:
        self.log_pane.action_first_error()

    def action_toggle_follow(self) -> None:
        self.log_pane.action_toggle_follow()

    def action_toggle_wrap(self) -> None:
        self.log_pane.action_toggle_wrap()

    def action_save_view(self) -> None:
        self.log_pane.action_save_view()
