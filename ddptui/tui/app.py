"""The dashboard app: drains the store on a timer and drives the controller from keys.

Nothing here runs I/O on the event loop: launch, stop, attach and disk scrollback are thread
workers; the timer brings the store up to date (the controller runs in an engine process, see
``ddptui.engine.process``), reads it under a short lock and writes batches to the widgets that
are on screen.
"""

from __future__ import annotations

import contextlib
import gc
import re
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from textual import work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Input

from ddptui.chart.rows import store_chart
from ddptui.engine.process import EngineError, Spare, attach_run, new_run
from ddptui.events import Failure, Level, LogLine, NodeStatus
from ddptui.launch.outcome import LaunchError
from ddptui.store.store import NodeView, RunInfo, Store
from ddptui.tui.confirm_screen import ConfirmScreen
from ddptui.tui.health import STALL_AFTER_S, STRAGGLER_FRACTION, assess
from ddptui.tui.help_screen import HelpScreen
from ddptui.tui.log_status import LogState, LogStatus
from ddptui.tui.log_view import MAX_LINES, LogView
from ddptui.tui.metrics_pane import MetricsPane, metric_cycle, strips
from ddptui.tui.node_rows import Row, build_rows
from ddptui.tui.nodes_table import NodesTable
from ddptui.tui.quit_screen import QuitChoice, QuitScreen
from ddptui.tui.run_header import RunHeader
from ddptui.tui.run_picker import RunPicker
from ddptui.tui.scrollback import LineFile
from ddptui.tui.views import VIEW_ORDER, ViewKind, ViewSpec, compile_filter, format_line

DRAIN_HZ = 15
PUMP_HZ = 100
TABLE_EVERY_S = 0.5
CHART_EVERY_S = 0.5
#: Under a flood the chart is the costliest thing to redraw: a worker thread's 5-10 ms of
#: Python, which shares the interpreter with the keys, then 37 rows of dots to paint.
CHART_FLOOD_EVERY_S = 1.0
OLDER_CHUNK = 1000
#: Lines written to the log per tick at most (6k/s at 15 Hz); a flood beyond that is more
#: than anyone reads: the newest are shown, the rest counted and kept in the rings and on disk.
TICK_LINES = 400
#: A drain that brings this many lines means a flood: then the log is written twice a
#: second, not 15 times (scrolling text that fast is unreadable, and each write repaints it all).
FLOOD_LINES = 200
FLOOD_EVERY_S = 0.5


class ControllerLike(Protocol):
    """What the app needs of :class:`ddptui.launch.controller.Controller` (tests pass stand-ins).

    One in another process (:class:`ddptui.engine.process.EngineClient`) also builds the
    chart, with ``chart(metric, log_y, width, height)``; the app builds it for one without.
    """

    store: Store
    run_id: str

    @property
    def done(self) -> bool: ...
    @property
    def result(self) -> Any: ...
    def launch(self) -> None: ...
    def stop(self, grace: float | None = None) -> Any: ...
    def detach(self) -> None: ...
    def process_estimate(self) -> tuple[int, int]: ...
    def pump(self) -> None:
        """Bring ``store`` up to date, a few ms at most (the dashboard calls it 100 times a
        second)."""
    def close(self) -> None:
        """Let go of the controller; a run still going is left going."""


ControllerFactory = Callable[[Any, Path | None], ControllerLike]
Attacher = Callable[[str, Path | None], ControllerLike]
RunLister = Callable[[Path | None], list[Any]]


def _real_lister(state_root: Path | None) -> list[Any]:
    from ddptui.store.runs import list_runs

    return list_runs(state_root)


def _tune_runtime() -> tuple[float, tuple[int, int, int]]:
    """Tuned for a loop that must answer keys while a flood is applied beside it.

    A thread that decodes the engine's messages gives the GIL back within 1 ms, not 5. And
    the 100k log lines that the rings hold are not rescanned by a full garbage collection
    every couple of seconds; each such scan was a pause of over 100 ms. Startup's objects are
    frozen, and a full collection comes 100 times less often. The rings free their own lines
    by reference count; only cyclic garbage waits longer.
    """
    before = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(min(before[0], 0.001))
    gc.freeze()
    gen0, gen1, _ = before[1]
    gc.set_threshold(gen0, gen1, 1000)
    return before


def _restore_runtime(before: tuple[float, tuple[int, int, int]] | None) -> None:
    if before is not None:
        sys.setswitchinterval(before[0])
        gc.set_threshold(*before[1])
        gc.unfreeze()


class DashboardApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "ddptui"
    AUTO_FOCUS = "LogView"

    BINDINGS = [
        Binding("l", "launch", "Launch"),
        Binding("x", "stop", "Stop"),
        Binding("R", "restart", "Restart"),
        Binding("a", "attach", "Attach"),
        Binding("slash", "filter", "Filter"),
        Binding("v", "next_view", "View"),
        Binding("m", "toggle_metrics", "Charts"),
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit_dashboard", "Quit"),
        Binding("n", "next_match", "Next match", show=False),
        Binding("N", "previous_match", "Previous match", show=False),
        Binding("s", "toggle_follow", "Follow on/off", show=False),
        Binding("w", "toggle_wrap", "Wrap on/off", show=False),
        Binding("e", "first_error", "First error", show=False),
        Binding("o", "save_view", "Save view to a file", show=False),
        Binding("left_square_bracket", "cycle_target(-1)", "Previous rank/node", show=False),
        Binding("right_square_bracket", "cycle_target(1)", "Next rank/node", show=False),
        Binding("c", "next_metric", "Next chart metric", show=False),
        Binding("y", "toggle_log_scale", "Log scale on/off", show=False),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    def __init__(
        self,
        config: Any | None = None,
        *,
        attach: str | None = None,
        state_root: Path | None = None,
        controller_factory: ControllerFactory | None = None,
        attacher: Attacher | None = None,
        run_lister: RunLister | None = None,
        store: Store | None = None,
        clock: Callable[[], float] = time.time,
        drain_hz: float = DRAIN_HZ,
        straggler_fraction: float = STRAGGLER_FRACTION,
        stall_after: float = STALL_AFTER_S,
    ) -> None:
        super().__init__()
        self.config = config
        self.attach_to = attach
        self.state_root = state_root
        # Real controllers run in engine processes; with a hosts file to launch, one is
        # started at mount, ready for use.
        self.spare = Spare() if controller_factory is None or attacher is None else None
        self._warm_at_mount = controller_factory is None and config is not None
        self.controller_factory = controller_factory or self._new_engine_run
        self.attacher = attacher or self._attach_engine_run
        self.run_lister = run_lister or _real_lister
        self.clock = clock
        self.drain_hz = drain_hz
        self.straggler_fraction = straggler_fraction
        self.stall_after = stall_after
        self.controller: ControllerLike | None = None
        self.store = store if store is not None else Store()
        self.view = ViewSpec()
        self.pattern: re.Pattern[str] | None = None
        self.layout_mode = "auto"  # auto | logs | both | charts
        self.busy = ""  # launching, stopping, attaching, restarting
        self.skipped = 0
        self._w: dict[str | None, Any] = {}
        self._wide = False
        self._runtime: tuple[float, tuple[int, int, int]] | None = None
        self._reset_reading()

    def _reset_reading(self) -> None:
        self.cursor = 0
        self._skip_through: LogLine | None = None
        self._version = -1
        self._points = -1
        self._failures_seen = 0
        self._node_status: dict[str, NodeStatus] = {}
        self._last_table = 0.0
        self._last_chart = 0.0
        self._last_drain = 0.0
        self._flooding = False
        self._log_stale = True
        self._done_told = False

    # -- layout ----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield RunHeader(id="header")
        yield NodesTable(id="nodes")
        with Horizontal(id="body"):
            with Vertical(id="logs"):
                yield LogView(id="log")
                yield Input(placeholder="regex (smart case); enter: filter, esc: clear",
                            id="filter")
                yield LogStatus(id="log-status")
            yield MetricsPane(id="chart")
        # compact, and no palette hint: at 80 columns every main key still fits (ctrl+p is
        # listed under ?)
        yield Footer(compact=True, show_command_palette=False)

    def _new_engine_run(self, config: Any, state_root: Path | None) -> ControllerLike:
        assert self.spare is not None
        return self.spare.open(new_run, config, state_root)

    def _attach_engine_run(self, run_id: str, state_root: Path | None) -> ControllerLike:
        assert self.spare is not None
        return self.spare.open(attach_run, run_id, state_root)

    @work(thread=True, group="engine")
    def _warm_spare(self) -> None:
        if self.spare is not None:
            self.spare.warm()

    def on_unmount(self) -> None:
        """Engines end with the dashboard: one following a run detaches from it first."""
        _restore_runtime(self._runtime)
        if self.controller is not None:
            self.controller.close()
        if self.spare is not None:
            self.spare.close()

    def on_mount(self) -> None:
        self._runtime = _tune_runtime()
        # The main screen's widgets, kept: a query from the app searches the top screen,
        # which is a dialog while one is open.
        self._w = {w.id: w for w in self.screen.query("#header, #nodes, #logs, #log, #filter, "
                                                      "#log-status, #chart")}
        self.filter_box.display = False
        self._apply_layout()
        self.set_interval(1 / PUMP_HZ, self._pump)
        self.set_interval(1 / self.drain_hz, self.tick)
        self.tick()
        if self.attach_to:
            self._attach_run(self.attach_to)
        elif self._warm_at_mount:
            self._warm_spare()

    def on_resize(self) -> None:
        if self._w:
            self._apply_layout()

    def _apply_layout(self) -> None:
        mode = self.layout_mode
        self._wide = self.size.width >= 120
        if mode == "auto":
            mode = "both" if self._wide else "logs"
        logs, chart = self.logs_pane, self.chart
        was_hidden = not logs.display
        logs.display = mode in ("logs", "both")
        chart.display = mode in ("charts", "both")
        chart.set_class(mode == "charts", "-alone")
        chart.dirty = True
        if logs.display and was_hidden:
            self._log_stale = True

    @property
    def log_view(self) -> LogView:
        return self._w["log"]  # type: ignore[return-value]

    @property
    def chart(self) -> MetricsPane:
        return self._w["chart"]  # type: ignore[return-value]

    @property
    def logs_pane(self) -> Vertical:
        return self._w["logs"]  # type: ignore[return-value]

    @property
    def filter_box(self) -> Input:
        return self._w["filter"]  # type: ignore[return-value]

    @property
    def nodes_table(self) -> NodesTable:
        return self._w["nodes"]  # type: ignore[return-value]

    @property
    def header(self) -> RunHeader:
        return self._w["header"]  # type: ignore[return-value]

    @property
    def log_status(self) -> LogStatus:
        return self._w["log-status"]  # type: ignore[return-value]

    # -- the timers ------------------------------------------------------------------------

    def _pump(self) -> None:
        """Often and briefly: the engine's changes into the store, a few milliseconds' worth
        at a time, so a key never waits long behind a flood."""
        if self.controller is not None:
            self.controller.pump()

    def tick(self) -> None:
        """Runs at ``drain_hz``: a version check when nothing happened, batches when it did."""
        store = self.store
        now = self.clock()
        changed = store.version != self._version
        if changed:
            self._version = store.version
            if store.points != self._points:
                self._points = store.points
                self.chart.dirty = True
        if self.layout_mode == "auto" and (self.size.width >= 120) != self._wide:
            self._apply_layout()  # a resize seen before mount, or missed
        log = self.log_view
        mono = time.monotonic()
        if self.logs_pane.display:
            if self._log_stale:
                self._rebuild_log()
            elif store.seq != self.cursor and (
                    not self._flooding or mono - self._last_drain >= FLOOD_EVERY_S):
                self._last_drain = mono
                self._drain_lines(log)
        elif changed:  # hidden: keep the cursor moving, rebuild when shown
            self.cursor = store.seq
            self._log_stale = True
        if mono - self._last_table >= TABLE_EVERY_S:
            self._last_table = mono
            self._refresh_table(now)
        chart = self.chart
        every = CHART_FLOOD_EVERY_S if self._flooding else CHART_EVERY_S
        if chart.display and chart.dirty and mono - self._last_chart >= every:
            self._last_chart = mono
            chart.dirty = False
            self._draw_chart(store, chart.metric, chart.log_scale, *chart.content_size)
        self._refresh_status(log)

    @work(thread=True, exclusive=True, group="chart")
    def _draw_chart(self, store: Store, metric: str, log_y: bool, width: int, height: int
                    ) -> None:
        """Off the loop, and where the series are: building a chart of 16 ranks is 10-40 ms
        of Python, which in this process would be taken from the keys. An engine builds it
        (it has the series too); an in-process controller, or an engine that is gone or slow
        to answer, has it built here."""
        build = getattr(self.controller, "chart", None)
        built = None
        if build is not None:
            with contextlib.suppress(EngineError, TimeoutError):
                built = build(metric, log_y, width, height)
        if built is None:
            built = store_chart(store, metric, log_y, width, height)
        rows, plotted = built
        if store is self.store:
            with contextlib.suppress(RuntimeError):  # the app closed meanwhile
                self.call_from_thread(self.chart.show, strips(rows), plotted)

    def _drain_lines(self, log: LogView) -> None:
        before = self.cursor
        lines, self.cursor, skipped = self.store.lines_since(self.cursor, TICK_LINES)
        self._flooding = self.cursor - before >= FLOOD_LINES
        self.skipped += skipped
        if self._skip_through is not None:
            mark, self._skip_through = self._skip_through, None
            for i in range(len(lines) - 1, -1, -1):
                if lines[i] is mark:
                    lines = lines[i + 1:]
                    break
        if lines:
            log.append(self._shown(lines))

    def _shown(self, lines: Iterable[LogLine]) -> list[str]:
        view, pattern = self.view, self.pattern
        accepts = view.accepts
        if pattern is None:
            return [format_line(ln, view) for ln in lines if accepts(ln)]
        search = pattern.search
        return [format_line(ln, view) for ln in lines if accepts(ln) and search(ln.text)]

    def _rebuild_log(self) -> None:
        """A fresh view: newest lines from the rings, then follow from the store's cursor."""
        store = self.store
        self._log_stale = False
        self.cursor = store.seq
        if self.view.kind is ViewKind.RANK and self.view.rank is not None:
            source = store.rank_tail(self.view.rank)
        else:
            source = store.recent_lines()
        self._skip_through = source[-1] if source else None
        log = self.log_view
        log.set_dim_nccl(self.view.kind is ViewKind.ALL)
        log.set_pattern(self.pattern)
        log.set_lines(self._shown(source)[-MAX_LINES:])
        self._drain_lines(log)

    def _refresh_table(self, now: float) -> None:
        self._collect_table(self.store, now)

    @work(thread=True, exclusive=True, group="table")
    def _collect_table(self, store: Store, now: float) -> None:
        """Off the loop: a score of store reads, each of which may wait behind a batch."""
        info = store.run_info()
        nodes = store.node_views()
        ranks = store.rank_views()
        live = {n.name for n in nodes if n.status is NodeStatus.RUNNING}
        health = assess(ranks, now, live_nodes=live,
                        straggler_fraction=self.straggler_fraction,
                        stall_after=self.stall_after)
        rows = build_rows(nodes, ranks, health, lambda r: store.series(r, "loss")[1], now)
        failures = store.failure_list()
        with contextlib.suppress(RuntimeError):  # the app closed meanwhile
            self.call_from_thread(self._show_table, store, now, info, nodes, rows, failures)

    def _show_table(self, store: Store, now: float, info: RunInfo, nodes: list[NodeView],
                    rows: list[Row], failures: list[Failure]) -> None:
        if store is not self.store:
            return
        self._signal_failures(nodes, failures)
        self.nodes_table.show_rows(rows)
        restarts = max((n.attempt for n in nodes), default=0)
        state = self.busy or info.status
        if not self.busy and any(n.status is NodeStatus.RESTARTING for n in nodes):
            state = f"restarting #{restarts}"
        self.header.set_run(info, now, restarts, state)
        if self.controller is not None and not self._done_told and self.controller.done:
            self._done_told = True
            result = self.controller.result
            code = getattr(result, "exit_code", None)
            if code is not None:
                self.notify(f"Run {self.controller.run_id} finished with exit code {code}.",
                            severity="information" if code == 0 else "error")

    def _refresh_status(self, log: LogView) -> None:
        self.log_status.state = LogState(
            self.view.label, log.follow, log.pending, log.wrap,
            self.pattern.pattern if self.pattern else "", log.history,
            self.skipped + self.store.not_live,  # neither came to this view; both are on disk
        )

    def notify(self, message: str, *, markup: bool = False, **kwargs: Any) -> None:
        """Toasts carry what the nodes said (``[rank1]: ValueError: ...``), hosts-file text
        and regexes: never read as Textual markup, which would eat the ``[rank1]`` or fail
        on a stray ``[/]``."""
        super().notify(message, markup=markup, **kwargs)

    def _signal_failures(self, nodes: list[NodeView], failures: list[Failure]) -> None:
        failed_nodes = {f.node for f in failures}
        for f in failures[self._failures_seen:]:
            who = f"rank {f.rank}" if f.rank is not None else "a rank"
            how = f"exit code {f.exit_code}" if f.exit_code is not None else "failed"
            if f.signal:
                how += f" ({f.signal})"
            cause = f.root_cause or "no root cause reported"
            self.notify(f"{f.node}: {who} failed, {how}: {cause}", title="Node failed",
                        severity="error", timeout=15)
        self._failures_seen = len(failures)
        for n in nodes:
            before = self._node_status.get(n.name)
            self._node_status[n.name] = n.status
            if before == n.status:
                continue
            if n.status in (NodeStatus.FAILED, NodeStatus.LOST) and n.name not in failed_nodes:
                code = "" if n.exit_code is None else f" with exit code {n.exit_code}"
                detail = f": {n.detail}" if n.detail else ""
                self.notify(f"{n.name} {n.status}{code}{detail}", title="Node failed",
                            severity="error", timeout=15)
            elif n.status is NodeStatus.RESTARTING:
                self.notify(f"{n.name} restarting the workers (attempt {n.attempt}). {n.detail}",
                            title="Restart", severity="warning")

    # -- run life cycle --------------------------------------------------------------------

    @property
    def run_config(self) -> Any | None:
        """The hosts file to (re)launch: the one given, else the attached run's own."""
        return self.config or getattr(self.controller, "config", None)

    @property
    def live(self) -> bool:
        """A controller is following a run that has not finished."""
        c = self.controller
        return c is not None and not c.done and self.store.run_info().status.live

    def use_controller(self, controller: ControllerLike) -> None:
        old = self.controller
        if old is not None and old is not controller:
            self._close_controller(old)
        self.controller = controller
        self.store = controller.store
        self.skipped = 0
        self._reset_reading()
        self.tick()

    @work(thread=True, group="engine")
    def _close_controller(self, controller: ControllerLike) -> None:
        controller.close()

    def action_launch(self) -> None:
        if self.busy:
            self.notify(f"Busy {self.busy}; wait a moment.", severity="warning")
            return
        if self.run_config is None:
            self.notify("No hosts file: start ddptui with HOSTS to launch, or attach (a).",
                        severity="warning")
            return
        if self.live:
            self.notify("The run is still going: stop it (x) or restart it (R).",
                        severity="warning")
            return
        self._launch(stop_first=None)

    @work(thread=True, exclusive=True, group="lifecycle")
    def _launch(self, stop_first: ControllerLike | None) -> None:
        self.call_from_thread(self._set_busy, "restarting" if stop_first else "launching")
        try:
            if stop_first is not None:
                self._stop_blocking(stop_first)
            controller = self.controller_factory(self.run_config, self.state_root)
            self.call_from_thread(self.use_controller, controller)
            controller.launch()
        except Exception as e:  # LaunchError says what to fix; anything else is a bug report
            said = isinstance(e, LaunchError | EngineError)  # EngineError names its kind
            msg = str(e) if said else f"{type(e).__name__}: {e}"
            self.call_from_thread(self.notify, msg, title="Launch failed", severity="error",
                                  timeout=30)
        finally:
            self.call_from_thread(self._set_busy, "")

    def _set_busy(self, busy: str) -> None:
        self.busy = busy
        self._last_table = 0.0
        self.tick()

    def _stop_question(self, verb: str) -> str:
        assert self.controller is not None
        procs, nodes = self.controller.process_estimate()
        p = "process" if procs == 1 else "processes"
        n = "node" if nodes == 1 else "nodes"
        return f"{verb} run {self.controller.run_id}? This ends {procs} {p} on {nodes} {n}."

    def action_stop(self) -> None:
        if self.busy:
            self.notify(f"Busy {self.busy}; wait a moment.", severity="warning")
            return
        if not self.live:
            self.notify("No run is going.", severity="warning")
            return
        controller = self.controller
        assert controller is not None

        def answered(yes: bool | None) -> None:
            if yes:
                self._stop(controller)

        self.push_screen(ConfirmScreen(self._stop_question("Stop"), yes="Stop"), answered)

    @work(thread=True, exclusive=True, group="lifecycle")
    def _stop(self, controller: ControllerLike, then_exit: bool = False) -> None:
        self.call_from_thread(self._set_busy, "stopping")
        try:
            self._stop_blocking(controller)
        finally:
            self.call_from_thread(self._set_busy, "")
        if then_exit:
            self.call_from_thread(self._exit_with_result)

    def _stop_blocking(self, controller: ControllerLike) -> None:
        report = controller.stop()
        leftover = getattr(report, "leftover", {}) or {}
        left = {n: pids for n, pids in leftover.items() if pids}
        if left:
            where = "; ".join(f"{n}: {', '.join(map(str, p))}" for n, p in left.items())
            self.call_from_thread(self.notify, f"Processes still alive after stop: {where}",
                                  title="Stop incomplete", severity="error", timeout=30)
        else:
            self.call_from_thread(self.notify, f"Run {controller.run_id} stopped; no process "
                                  "of it is left.", title="Stopped")

    def action_restart(self) -> None:
        if self.busy or self.run_config is None:
            self.notify("Nothing to restart." if self.run_config is None
                        else f"Busy {self.busy}.", severity="warning")
            return
        if not self.live:
            self._launch(stop_first=None)
            return
        controller = self.controller

        def answered(yes: bool | None) -> None:
            if yes:
                self._launch(stop_first=controller)

        self.push_screen(ConfirmScreen(self._stop_question("Restart") +
                                       " Then the same hosts file is launched again.",
                                       yes="Restart"), answered)

    def action_attach(self) -> None:
        if self.busy:
            self.notify(f"Busy {self.busy}; wait a moment.", severity="warning")
            return
        self._pick_run()

    @work(thread=True, exclusive=True, group="lifecycle")
    def _pick_run(self) -> None:
        try:
            runs = self.run_lister(self.state_root)
        except Exception as e:
            self.call_from_thread(self.notify, f"Cannot list runs: {e}", severity="error")
            return
        self.call_from_thread(self._show_picker, runs)

    def _show_picker(self, runs: list[Any]) -> None:
        def chosen(run_id: str | None) -> None:
            if run_id:
                self._attach_run(run_id)

        self.push_screen(RunPicker(runs), chosen)

    @work(thread=True, exclusive=True, group="lifecycle")
    def _attach_run(self, run_id: str) -> None:
        self.call_from_thread(self._set_busy, "attaching")
        try:
            current = self.controller
            if current is not None and not current.done:
                current.detach()
            controller = self.attacher(run_id, self.state_root)
            self.call_from_thread(self.use_controller, controller)
        except Exception as e:
            self.call_from_thread(self.notify, f"Cannot attach to {run_id}: {e}",
                                  title="Attach failed", severity="error", timeout=20)
        finally:
            self.call_from_thread(self._set_busy, "")

    def action_quit_dashboard(self) -> None:
        if not self.live or self.controller is None:
            self._exit_with_result()
            return
        controller = self.controller

        def chosen(choice: QuitChoice | None) -> None:
            if choice == "stop":
                self._stop(controller, then_exit=True)
            elif choice == "leave":
                self._leave(controller)

        procs, nodes = controller.process_estimate()
        self.push_screen(QuitScreen(
            f"Run {controller.run_id} is still going ({procs} processes on {nodes} nodes). "
            f"Stop it, or leave it running and reattach later with `ddptui attach "
            f"{controller.run_id}`?"), chosen)

    @work(thread=True, exclusive=True, group="lifecycle")
    def _leave(self, controller: ControllerLike) -> None:
        controller.detach()
        self.call_from_thread(self.exit, 0)

    def _exit_with_result(self) -> None:
        result = self.controller.result if self.controller is not None else None
        code = getattr(result, "exit_code", None)
        self.exit(code if isinstance(code, int) else 0)

    # -- log inspection --------------------------------------------------------------------

    def set_view(self, view: ViewSpec) -> None:
        self.view = view
        self._log_stale = True
        self.log_view.follow = True
        self.tick()

    def _targets(self, kind: ViewKind) -> list[ViewSpec]:
        """A view per rank, or per node, that the run has so far."""
        if kind is ViewKind.RANK:
            return [ViewSpec(kind, rank=r.rank) for r in self.store.rank_views()]
        if kind is ViewKind.NODE:
            return [ViewSpec(kind, node=n.name) for n in self.store.node_views()]
        return []

    def action_next_view(self) -> None:
        i = VIEW_ORDER.index(self.view.kind)
        for step in range(1, len(VIEW_ORDER) + 1):
            kind = VIEW_ORDER[(i + step) % len(VIEW_ORDER)]
            if kind in (ViewKind.RANK, ViewKind.NODE):
                targets = self._targets(kind)
                if not targets:
                    continue
                self.set_view(self.view if self.view in targets else targets[0])
            else:
                self.set_view(ViewSpec(kind))
            return

    def action_cycle_target(self, step: int) -> None:
        kind = self.view.kind
        if kind not in (ViewKind.RANK, ViewKind.NODE):
            kind = ViewKind.RANK
        targets = self._targets(kind)
        if not targets:
            return
        i = targets.index(self.view) + step if self.view in targets else 0
        self.set_view(targets[i % len(targets)])

    def on_nodes_table_row_selected(self, event: NodesTable.RowSelected) -> None:
        key = event.key
        if key.startswith("r:"):
            self.set_view(ViewSpec(ViewKind.RANK, rank=int(key[2:])))
        elif key.startswith("n:"):
            self.set_view(ViewSpec(ViewKind.NODE, node=key[2:]))

    def action_filter(self) -> None:
        box = self.filter_box
        box.display = True
        box.value = self.pattern.pattern if self.pattern else ""
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "filter":
            return
        self.set_filter(event.value)
        event.input.display = False
        self.log_view.focus()

    def set_filter(self, text: str) -> None:
        pattern, problem = compile_filter(text)
        if problem:
            self.notify(problem, severity="warning")
        self.pattern = pattern
        self.set_view(self.view)

    def action_clear_filter(self) -> None:
        box = self.filter_box
        if box.display:
            box.display = False
            self.log_view.focus()
            return
        if self.pattern is not None:
            self.set_filter("")

    def _jump(self, forward: bool, level: Level | None = None) -> None:
        log = self.log_view
        pattern = None if level else self.pattern
        if pattern is None and level is None:
            self.notify("No filter: press / first.", severity="warning")
            return
        if log.match_row is None:
            start = 0 if forward else len(log.lines) - 1
        else:
            start = log.match_row + (1 if forward else -1)
        row = log.find_row(start, forward, pattern, level)
        if row is None and log.match_row is not None and level is None:  # wrap around
            row = log.find_row(0 if forward else len(log.lines) - 1, forward, pattern)
        if row is None:
            self.notify("No error in this view." if level else "No more matches.")
            return
        log.jump_to(row)

    def action_next_match(self) -> None:
        self._jump(True)

    def action_previous_match(self) -> None:
        self._jump(False)

    def action_first_error(self) -> None:
        self.log_view.match_row = None
        self._jump(True, Level.ERROR)

    def action_toggle_follow(self) -> None:
        log = self.log_view
        log.follow = not log.follow
        self._refresh_status(log)

    def action_toggle_wrap(self) -> None:
        log = self.log_view
        log.wrap = not log.wrap
        self._refresh_status(log)

    def on_log_view_follow_changed(self, _: LogView.FollowChanged) -> None:
        self._refresh_status(self.log_view)  # at once: a key's effect should not wait a tick

    def on_log_view_older_wanted(self, _: LogView.OlderWanted) -> None:
        view = self.view
        if view.kind is ViewKind.RANK and view.rank is not None:
            path = self.store.rank_log_path(view.rank)
        elif view.kind is ViewKind.NODE and view.node is not None:
            path = self.store.node_log_path(view.node)
        elif view.kind is ViewKind.ALL:
            path = self.store.all_log_path()
        else:
            self.notify("Older lines come from disk in the all-ranks, rank and node views: "
                        "pick one with v or [ ].")
            return
        log = self.log_view
        first = log.raw[0] if log.raw else ""
        if view.kind is ViewKind.NODE:
            first = re.sub(r"^\[[^\]]*\] ", "", first)
        if path is None or not first:
            return
        self._read_older(path, first, log.history, view.kind is ViewKind.NODE, self.pattern)

    @work(thread=True, exclusive=True, group="scrollback")
    def _read_older(self, path: Path, first: str, already: int, raw_node_log: bool,
                    pattern: re.Pattern[str] | None) -> None:
        lf = LineFile(path)
        total = lf.refresh()
        if raw_node_log:
            # the raw node log carries torchrun's rank prefix: match on the line's end
            lines = lf.read(max(0, total - 20_000), total)
            at = next((max(0, total - 20_000) + i for i in range(len(lines) - 1, -1, -1)
                       if lines[i].endswith(first)), None)
        else:
            at = lf.find_before(first, total, window=20_000 + already)
        if at is None or at == 0:
            self.call_from_thread(self.notify, "No older lines on disk.")
            return
        older = lf.read(max(0, at - OLDER_CHUNK), at)
        if pattern is not None:
            older = [ln for ln in older if pattern.search(ln)]
        self.call_from_thread(self.log_view.prepend, older)

    def action_save_view(self) -> None:
        lines = list(self.log_view.raw)
        base = self.store.run_dir or Path.cwd()
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(self.clock()))
        name = re.sub(r"[^\w.-]+", "-", self.view.label)
        path = base / f"view-{name}-{stamp}.log"
        self._save(path, lines)

    @work(thread=True, group="save")
    def _save(self, path: Path, lines: list[str]) -> None:
        try:
            path.write_text("".join(ln + "\n" for ln in lines), encoding="utf-8")
        except OSError as e:
            self.call_from_thread(self.notify, f"Cannot save: {e}", severity="error")
            return
        self.call_from_thread(self.notify, f"Saved {len(lines):,} lines to {path}",
                              title="Saved")

    # -- charts, help, palette -------------------------------------------------------------

    def action_toggle_metrics(self) -> None:
        wide = self.size.width >= 120
        order = ["both", "logs", "charts"] if wide else ["logs", "charts", "both"]
        current = self.layout_mode
        if current == "auto":
            current = "both" if wide else "logs"
        self.layout_mode = order[(order.index(current) + 1) % len(order)]
        self._apply_layout()
        self.tick()

    def action_next_metric(self) -> None:
        names = metric_cycle(self.store.metric_names())
        chart = self.chart
        i = names.index(chart.metric) + 1 if chart.metric in names else 0
        chart.metric = names[i % len(names)]
        self._last_chart = 0.0

    def action_toggle_log_scale(self) -> None:
        self.chart.log_scale = not self.chart.log_scale
        self._last_chart = 0.0

    def help_sections(self) -> list[tuple[str, list[Binding]]]:
        run = [b for b in self.BINDINGS if isinstance(b, Binding)]
        return [
            ("Run and views", run),
            ("Log pane", [b for b in LogView.BINDINGS if isinstance(b, Binding)]),
            ("Dialogs", [Binding("y", "", "Confirm"), Binding("n,escape", "", "Cancel"),
                         Binding("ctrl+p", "", "Command palette: every action by name")]),
        ]

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.help_sections()))

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for b in self.BINDINGS:
            if isinstance(b, Binding) and b.description and "(" not in b.action:
                action = b.action
                yield SystemCommand(b.description, f"key: {b.key}",
                                    lambda a=action: self.run_action(a))
        yield SystemCommand("Load older lines from disk", "home at the top of the log",
                            self.log_view.action_older)
        for kind in (ViewKind.ALL, ViewKind.NCCL, ViewKind.PROBLEMS):
            spec = ViewSpec(kind)
            yield SystemCommand(f"View: {spec.label}", "log view",
                                lambda s=spec: self.set_view(s))
        for spec in self._targets(ViewKind.RANK) + self._targets(ViewKind.NODE):
            yield SystemCommand(f"View: {spec.label}", "log view",
                                lambda s=spec: self.set_view(s))


def run_dashboard(
    config: Any | None, *, attach: str | None = None, state_root: Path | None = None
) -> int:
    """The CLI's entry: run the dashboard until quit; the exit code is the run's, else 0."""
    app = DashboardApp(config, attach=attach, state_root=state_root)
    code = app.run()
    return code if isinstance(code, int) else 0
