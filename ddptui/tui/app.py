"""The dashboard app: it owns the run's engine, and shows the run on its main screen.

Nothing here runs I/O on the event loop: launch, stop and attach are thread workers
(:mod:`ddptui.tui.lifecycle`), the session runs in an engine process
(:mod:`ddptui.engine.process`), and the main screen (:mod:`ddptui.tui.dashboard`) brings
the replica store up to date and writes batches to the widgets on its timers.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from textual import work
from textual.app import SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from ddptui.config import HostsConfig
from ddptui.config.model import HealthConfig
from ddptui.engine.client import EngineClient, Spare
from ddptui.engine.process import attach_run, new_run, next_attempt
from ddptui.run_port import RunHandle
from ddptui.store.runs import RunSummary
from ddptui.store.store import Store
from ddptui.tui.dashboard import DashboardScreen
from ddptui.tui.handle import Attacher, AttemptFactory, RunFactory, RunLister
from ddptui.tui.lifecycle import Lifecycle
from ddptui.tui.overlay import Overlay, overlay_notice, read_overlay
from ddptui.tui.screens.confirm import ConfirmScreen
from ddptui.tui.screens.diagnosis import DiagnosisScreen
from ddptui.tui.screens.help import HelpScreen
from ddptui.tui.screens.nccl import NcclScreen
from ddptui.tui.screens.run_picker import HELP as RUN_LIST_HELP
from ddptui.tui.screens.stacks import StacksScreen
from ddptui.tui.views import ViewKind, ViewSpec
from ddptui.tui.widgets.log_view import LogView
from ddptui.tui.widgets.metrics_pane import CHART_KEYS, COMPARE_KEYS

DRAIN_HZ = 15

Runtime = tuple[float, tuple[int, int, int]]


def _list_runs(state_root: Path | None) -> list[RunSummary]:
    """Read only: the dashboard never writes ``run.json`` (see ``ddptui.store.reader``)."""
    from ddptui.store.reader import run_list

    return run_list(state_root)


def _tune_runtime() -> Runtime:
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


def _restore_runtime(before: Runtime | None) -> None:
    if before is not None:
        sys.setswitchinterval(before[0])
        gc.set_threshold(*before[1])
        gc.unfreeze()


class DashboardApp(Lifecycle):
    """Launches, follows and stops one run at a time; the exit code is the run's, else 0.

    Args:
        config: The hosts file to launch, if any.
        attach: A run id to follow from the start.
        state_root: Where runs are recorded (None: the default).
        session_factory: Makes a new run's handle; by default in an engine process.
        attacher: Makes a handle following a recorded run; by default in an engine process.
        attempt_factory: Makes the handle of a run's next attempt in a new allocation (its
            time limit ended it); by default in an engine process, with the default factory.
        run_lister: The recorded runs, for the attach picker.
        store: A store to show before any run (tests and snapshots replay into one).
        clock: The wall clock for ages, the elapsed time and saved views' names.
        drain_hz: How often the screen reads the store.
        preflight: Run the fast preflight before each launch (``--no-preflight``: False).
    """

    CSS_PATH = Path(__file__).with_name("app.tcss")  # absolute: subclasses live elsewhere
    TITLE = "ddptui"
    #: For every screen: the dialogs, which have no log, focus nothing until asked.
    AUTO_FOCUS = "LogView"

    #: Run keys act on the app; the rest on the main screen (``screen.``), whose log pane
    #: does the log's. Their order is the footer's and the help's.
    BINDINGS = [
        Binding("l", "launch", "Launch"),
        Binding("x", "stop", "Stop"),
        Binding("R", "restart", "Restart"),
        Binding("a", "attach", "Attach"),
        Binding("C", "compare", "Compare the chart with a past run", show=False),
        Binding("slash", "screen.filter", "Filter"),
        Binding("v", "screen.next_view", "View"),
        Binding("m", "screen.toggle_metrics", "Charts"),
        Binding("k", "stacks", "Python stacks of the ranks", show=False),
        Binding("P", "rehearse", "Time limit rehearsal: ranks save and leave", show=False),
        Binding("i", "nccl", "NCCL facts and warnings", show=False),
        Binding("d", "diagnosis", "Why the run failed: ddptui's whole diagnosis", show=False),
        Binding("g", "screen.node_detail", "Node detail: GPUs, CPU, memory, network", show=False),
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit_dashboard", "Quit"),
        Binding("n", "screen.next_match", "Next match", show=False),
        Binding("N", "screen.previous_match", "Previous match", show=False),
        Binding("s", "screen.toggle_follow", "Follow on/off", show=False),
        Binding("w", "screen.toggle_wrap", "Wrap on/off", show=False),
        Binding("e", "screen.first_error", "First error", show=False),
        Binding("o", "screen.save_view", "Save view to a file", show=False),
        Binding("left_square_bracket", "screen.cycle_target(-1)", "Previous rank/node",
                show=False),
        Binding("right_square_bracket", "screen.cycle_target(1)", "Next rank/node",
                show=False),
        Binding("c", "screen.next_metric", "Next chart metric", show=False),
        Binding("y", "screen.toggle_log_scale", "Log scale on/off", show=False),
        Binding("escape", "screen.clear_filter", "Clear filter", show=False),
    ]

    def __init__(
        self,
        config: HostsConfig | None = None,
        *,
        attach: str | None = None,
        state_root: Path | None = None,
        session_factory: RunFactory | None = None,
        attacher: Attacher | None = None,
        attempt_factory: AttemptFactory | None = None,
        run_lister: RunLister | None = None,
        store: Store | None = None,
        clock: Callable[[], float] = time.time,
        drain_hz: float = DRAIN_HZ,
        preflight: bool = True,
    ) -> None:
        super().__init__(config, state_root=state_root,
                         run_factory=session_factory or self._new_engine_run,
                         attacher=attacher or self._attach_engine_run,
                         run_lister=run_lister or _list_runs, store=store,
                         attempt_factory=attempt_factory or (
                             self._next_engine_attempt if session_factory is None else None))
        #: Real runs go to engine processes; with a hosts file to launch, one is started
        #: at mount, ready for use.
        self.spare = Spare() if session_factory is None or attacher is None else None
        self._warm_at_mount = session_factory is None and config is not None
        self.attach_to = attach
        self.preflight = preflight
        self.clock = clock
        self.drain_hz = drain_hz
        self._runtime: Runtime | None = None

    @property
    def _followed_config(self) -> HostsConfig | None:
        """The followed run's hosts file, as the engine has it, else the one to launch."""
        handle = self.session
        return handle.config if handle is not None and handle.config is not None \
            else self.config

    @property
    def visible_devices(self) -> dict[str, str | None]:
        """Each node's ``CUDA_VISIBLE_DEVICES`` from its ``env:``: which GPU a rank uses."""
        config = self._followed_config
        nodes = config.nodes if config is not None else ()
        return {n.name: n.env.get("CUDA_VISIBLE_DEVICES") for n in nodes}

    @property
    def health_config(self) -> HealthConfig:
        """When the nodes table calls a rank a straggler: the followed run's hosts file (then
        the one to launch, then the defaults). Stalls are the run's own verdicts: no
        threshold here judges one."""
        config = self._followed_config
        return config.health if config is not None else HealthConfig()

    def get_default_screen(self) -> Screen[Any]:
        self.dashboard = DashboardScreen(self)
        return self.dashboard

    def on_mount(self) -> None:
        self._runtime = _tune_runtime()
        if self.attach_to:
            self.attach_run(self.attach_to)
        elif self._warm_at_mount:
            self._warm_spare()

    def on_unmount(self) -> None:
        """Engines end with the dashboard: one following a run detaches from it first."""
        _restore_runtime(self._runtime)
        if self.session is not None:
            self.session.close()
        if self.spare is not None:
            self.spare.close()

    # -- the engine ------------------------------------------------------------------------

    def _new_engine_run(self, config: HostsConfig, state_root: Path | None) -> EngineClient:
        assert self.spare is not None
        return self.spare.open(new_run, config, state_root, self.preflight)

    def _next_engine_attempt(self, config: HostsConfig, state_root: Path | None,
                             previous: str) -> EngineClient:
        assert self.spare is not None
        return self.spare.open(next_attempt, config, state_root, previous, self.preflight)

    def _attach_engine_run(self, run_id: str, state_root: Path | None) -> EngineClient:
        assert self.spare is not None
        return self.spare.open(attach_run, run_id, state_root)

    @work(thread=True, group="engine")
    def _warm_spare(self) -> None:
        if self.spare is not None:
            self.spare.warm()

    # -- toasts, help, palette -------------------------------------------------------------

    def notify(self, message: str, *, markup: bool = False, **kwargs: Any) -> None:
        """Toasts carry what the nodes said (``[rank1]: ValueError: ...``), hosts-file text
        and regexes: never read as Textual markup, which would eat the ``[rank1]`` or fail
        on a stray ``[/]``."""
        super().notify(message, markup=markup, **kwargs)

    def help_sections(self) -> list[tuple[str, list[Binding]]]:
        run = [b for b in self.BINDINGS if isinstance(b, Binding)]
        return [
            ("Run and views", run),
            ("Log pane", [b for b in LogView.BINDINGS if isinstance(b, Binding)]),
            ("Chart", CHART_KEYS),
            ("Run list (a, C)", RUN_LIST_HELP),
            ("A compared chart", COMPARE_KEYS),
            ("Dialogs", [Binding("y", "", "Confirm"), Binding("n,escape", "", "Cancel"),
                         Binding("ctrl+p", "", "Command palette: every action by name")]),
        ]

    def action_nccl(self) -> None:
        self.push_screen(NcclScreen(self), self._show_view)

    def _show_view(self, view: ViewSpec | None) -> None:
        """A view a screen picked (``dismiss``), shown in the main screen's log pane."""
        if view is not None:
            self.dashboard.log_pane.set_view(view)

    def action_diagnosis(self) -> None:
        handle = self.session
        result = handle.result if handle is not None and handle.done else None
        if handle is None or result is None or result.diagnosis is None:
            self.notify("No failed run to explain: the diagnosis comes when a run fails.",
                        severity="information")
            return
        self.push_screen(DiagnosisScreen(handle.run_id, result.exit_code, result.diagnosis))

    def action_stacks(self) -> None:
        """The Python stacks of the rank in view (of every rank in other views), taken now."""
        handle = self.session
        if handle is None or handle.done:
            self.notify("No run is going: stacks are taken from running ranks.",
                        severity="warning")
            return
        view = self.dashboard.log_pane.view
        rank = view.rank if view.kind is ViewKind.RANK else None
        self.notify(f"Taking the stacks of {'every rank' if rank is None else f'rank {rank}'} "
                    "with py-spy", timeout=3)
        self._take_stacks(handle, rank)

    @work(thread=True, exclusive=True, group="stacks")
    def _take_stacks(self, handle: RunHandle, rank: int | None) -> None:
        try:
            stacks = handle.stacks(rank)
        except Exception as e:  # a node or the engine failed: said, never raised in the app
            self.call_from_thread(self.notify, f"Could not take the stacks: {e}",
                                  title="Stacks", severity="error")
            return
        self.call_from_thread(self.push_screen, StacksScreen(stacks, rank))

    def action_rehearse(self) -> None:
        """The time limit's signal to every rank now (``slurm.signal``): a preemption tried
        before one comes, asked first, since the run saves and leaves."""
        handle = self.session
        if handle is None or handle.done:
            self.notify("No run is going: the signal goes to running ranks.",
                        severity="warning")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._rehearse(handle)

        self.push_screen(ConfirmScreen(
            "Send every rank the time limit's signal now? The run saves a checkpoint and "
            "leaves, as it would at the allocation's time limit.", yes="Send"), answered)

    @work(thread=True, exclusive=True, group="rehearse")
    def _rehearse(self, handle: RunHandle) -> None:
        try:
            said = handle.rehearse()
        except Exception as e:  # a node or the engine failed: said, never raised in the app
            self.call_from_thread(self.notify, f"Could not send the signal: {e}",
                                  title="Time limit", severity="error")
            return
        self.call_from_thread(self.notify, said[:1].upper() + said[1:] + ".", title="Time limit")

    # -- compare with a past run -----------------------------------------------------------

    def action_compare(self) -> None:
        """The run list, where ``enter`` lays the chosen run's series under the chart."""
        self._list_to_compare()

    @work(thread=True, exclusive=True, group="compare")
    def _list_to_compare(self) -> None:
        try:
            runs = self.run_lister(self.state_root)
        except Exception as e:
            self.call_from_thread(self.notify, f"Cannot list runs: {e}", severity="error")
            return
        self.call_from_thread(self._show_picker, runs, True)

    def compare_with(self, run_id: str | None) -> None:
        chart = self.dashboard.chart
        if run_id is None or run_id == chart.compared:
            if chart.compared is not None:
                self.notify(f"{chart.compared} is no longer drawn under the chart.", timeout=4)
            chart.overlay = None
            self.dashboard.redraw_chart()
            return
        self._load_overlay(run_id)

    @work(thread=True, exclusive=True, group="compare")
    def _load_overlay(self, run_id: str) -> None:
        """Off the loop: a long run's ``metrics.jsonl`` is hundreds of MB (only windows of
        a big one are read, but on a slow disk that still takes a while)."""
        try:
            overlay = read_overlay(self.state_root, run_id)
        except OSError as e:
            self.call_from_thread(self.notify, f"Cannot read the metrics of {run_id}: {e}",
                                  title="Compare", severity="error")
            return
        self.call_from_thread(self._show_overlay, overlay)

    def _show_overlay(self, overlay: Overlay) -> None:
        if not overlay.series:
            self.notify(f"{overlay.run_id} recorded no metrics: there is nothing of it to "
                        "draw under the chart.", title="Compare", severity="warning")
            return
        chart = self.dashboard.chart
        chart.overlay = overlay
        self.dashboard.redraw_chart()
        hint = "" if chart.display else " (m shows the chart)"
        self.notify(overlay_notice(overlay, chart.metric) + hint, title="Compare", timeout=6)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.help_sections()))

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for b in self.BINDINGS:
            if isinstance(b, Binding) and b.description and "(" not in b.action:
                action = b.action
                yield SystemCommand(b.description, f"key: {b.key}",
                                    lambda a=action: self.run_action(a))
        pane = self.dashboard.log_pane
        yield SystemCommand("Load older lines from disk", "home at the top of the log",
                            pane.log_view.action_older)
        for kind in (ViewKind.ALL, ViewKind.NCCL, ViewKind.PROBLEMS):
            spec = ViewSpec(kind)
            yield SystemCommand(f"View: {spec.label}", "log view",
                                lambda s=spec: pane.set_view(s))
        for spec in pane.targets(ViewKind.RANK) + pane.targets(ViewKind.NODE):
            yield SystemCommand(f"View: {spec.label}", "log view",
                                lambda s=spec: pane.set_view(s))


def run_dashboard(
    config: HostsConfig | None, *, attach: str | None = None, state_root: Path | None = None,
    preflight: bool = True,
) -> int:
    """The CLI's entry: run the dashboard until quit; the exit code is the run's, else 0."""
    app = DashboardApp(config, attach=attach, state_root=state_root, preflight=preflight)
    code = app.run()
    return code if isinstance(code, int) else 0
