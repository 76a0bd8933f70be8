"""The run's life cycle in the dashboard: launch, stop, restart, attach and quit.

Each key checks what it can do on the event loop and asks first where it ends processes; the
slow part (a launch connects to every node, a stop waits for them) runs in a thread worker
while :attr:`Lifecycle.busy` says so, and hands the new run's handle back to the loop.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from textual import work
from textual.app import App
from textual.reactive import reactive

from ddptui.config import HostsConfig
from ddptui.engine.calls import EngineError
from ddptui.outcome import LaunchError
from ddptui.run_port import RunHandle
from ddptui.store.runs import RunSummary
from ddptui.store.store import Store
from ddptui.tui.handle import Attacher, AttemptFactory, RunFactory, RunLister
from ddptui.tui.notices import Notice, quit_question, stop_question, stop_report_notice
from ddptui.tui.screens.confirm import ConfirmScreen
from ddptui.tui.screens.quit import QuitChoice, QuitScreen
from ddptui.tui.screens.run_picker import Pick, RunPicker
from ddptui.tui.state import Busy

if TYPE_CHECKING:
    from ddptui.tui.dashboard import DashboardScreen


class Lifecycle(App[int]):
    """The half of the app that owns the run: its handle and store, what the app is busy
    doing, and the actions that replace or end the run. The exit code is the run's."""

    busy: reactive[Busy] = reactive(Busy.IDLE, init=False)
    """A launch, stop, attach or restart under way; the other run keys wait for it."""

    #: The main screen, made by ``get_default_screen``.
    dashboard: DashboardScreen

    def __init__(self, config: HostsConfig | None, *, state_root: Path | None,
                 run_factory: RunFactory, attacher: Attacher, run_lister: RunLister,
                 store: Store | None, attempt_factory: AttemptFactory | None = None) -> None:
        super().__init__()
        #: The hosts file given on the command line, if any.
        self.config = config
        self.state_root = state_root
        self.run_factory = run_factory
        self.attacher = attacher
        self.run_lister = run_lister
        self.attempt_factory = attempt_factory
        #: The run followed, if any.
        self.session: RunHandle | None = None
        #: What the screen shows: the handle's store, or one given (tests, snapshots).
        self.store = store if store is not None else Store()

    def watch_busy(self) -> None:
        self.dashboard.refresh_run()

    def show_notice(self, notice: Notice) -> None:
        self.notify(notice.message, title=notice.title, severity=notice.severity,
                    timeout=notice.timeout)

    @property
    def run_config(self) -> HostsConfig | None:
        """The hosts file to (re)launch: the one given, else the attached run's own."""
        if self.config is not None:
            return self.config
        return self.session.config if self.session is not None else None

    @property
    def live(self) -> bool:
        """A handle is following a run that has not finished."""
        handle = self.session
        return handle is not None and not handle.done and self.store.run_info().status.live

    def use_session(self, session: RunHandle) -> None:
        """Follow ``session``'s run from now on; the one followed before is let go."""
        old = self.session
        if old is not None and old is not session:
            self._close_session(old)
        self.session = session
        self.store = session.store
        self.dashboard.follow_store(session.store)

    @work(thread=True, group="engine")
    def _close_session(self, session: RunHandle) -> None:
        session.close()

    def _set_busy(self, busy: Busy) -> None:
        self.busy = busy

    def _refuse_when_busy(self) -> bool:
        if self.busy:
            self.notify(f"Busy {self.busy}; wait a moment.", severity="warning")
        return bool(self.busy)

    # -- launch and restart ----------------------------------------------------------------

    def action_launch(self) -> None:
        if self._refuse_when_busy():
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

    def action_restart(self) -> None:
        if self.busy or self.run_config is None:
            self.notify("Nothing to restart." if self.run_config is None
                        else f"Busy {self.busy}.", severity="warning")
            return
        if not self.live:
            self._launch(stop_first=None)
            return
        session = self.session

        def answered(yes: bool | None) -> None:
            if yes:
                self._launch(stop_first=session)

        question = self._stop_question("Restart") + " Then the same hosts file is launched again."
        self.push_screen(ConfirmScreen(question, yes="Restart"), answered)

    @work(thread=True, exclusive=True, group="lifecycle")
    def _launch(self, stop_first: RunHandle | None) -> None:
        self.call_from_thread(self._set_busy, Busy.RESTARTING if stop_first else Busy.LAUNCHING)
        try:
            if stop_first is not None:
                self._stop_blocking(stop_first)
            config = self.run_config
            assert config is not None  # checked by the action
            session = self.run_factory(config, self.state_root)
            self.call_from_thread(self.use_session, session)
            session.launch()
        except Exception as e:  # LaunchError says what to fix; anything else is a bug report
            said = isinstance(e, LaunchError | EngineError)  # EngineError names its kind
            message = str(e) if said else f"{type(e).__name__}: {e}"
            self.call_from_thread(self.notify, message, title="Launch failed",
                                  severity="error", timeout=30)
        finally:
            self.call_from_thread(self._set_busy, Busy.IDLE)

    # -- a new allocation after the time limit (slurm.resubmit) ----------------------------

    def after_end(self, handle: RunHandle) -> None:
        if self.attempt_factory is not None:
            self._again(handle, self.attempt_factory)

    @work(thread=True, exclusive=True, group="attempt")
    def _again(self, handle: RunHandle, factory: AttemptFactory) -> None:
        try:
            why = handle.again()
        except Exception:  # the engine is gone: nothing here to bring back
            return
        config = handle.config
        if why is None or config is None or handle is not self.session or self.busy:
            return
        self.call_from_thread(self.notify, f"{why}: asking Slurm for a new allocation of the "
                              "same shape, to resume from the checkpoint", title="Resubmitting",
                              timeout=15)
        self.call_from_thread(self._set_busy, Busy.LAUNCHING)
        try:
            session = factory(config, self.state_root, handle.run_id)
            self.call_from_thread(self.use_session, session)
            session.launch()
        except Exception as e:  # LaunchError says what to fix; anything else is a bug report
            said = isinstance(e, LaunchError | EngineError)
            self.call_from_thread(self.notify, str(e) if said else f"{type(e).__name__}: {e}",
                                  title="Resubmission failed", severity="error", timeout=30)
        finally:
            self.call_from_thread(self._set_busy, Busy.IDLE)

    # -- stop ------------------------------------------------------------------------------

    def _stop_question(self, verb: str) -> str:
        assert self.session is not None
        processes, nodes = self.session.process_estimate()
        return stop_question(verb, self.session.run_id, processes, nodes)

    def action_stop(self) -> None:
        if self._refuse_when_busy():
            return
        if not self.live:
            self.notify("No run is going.", severity="warning")
            return
        session = self.session
        assert session is not None

        def answered(yes: bool | None) -> None:
            if yes:
                self._stop(session)

        self.push_screen(ConfirmScreen(self._stop_question("Stop"), yes="Stop"), answered)

    @work(thread=True, exclusive=True, group="lifecycle")
    def _stop(self, session: RunHandle, then_exit: bool = False) -> None:
        self.call_from_thread(self._set_busy, Busy.STOPPING)
        try:
            self._stop_blocking(session)
        finally:
            self.call_from_thread(self._set_busy, Busy.IDLE)
        if then_exit:
            self.call_from_thread(self._exit_with_result)

    def _stop_blocking(self, session: RunHandle) -> None:
        report = session.stop()
        self.call_from_thread(self.show_notice, stop_report_notice(session.run_id, report))

    # -- attach ----------------------------------------------------------------------------

    def action_attach(self) -> None:
        if self._refuse_when_busy():
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

    def _show_picker(self, runs: list[RunSummary], compare: bool = False) -> None:
        """The run list: ``enter`` attaches (``compare``: compares); ``c`` compares."""
        def chosen(pick: Pick | None) -> None:
            if pick is None:
                return
            if pick.compare:
                self.compare_with(pick.run_id)
            elif pick.run_id:
                self.attach_run(pick.run_id)

        compared = self.dashboard.chart.compared
        self.push_screen(RunPicker(runs, compare=compare, compared=compared), chosen)

    def compare_with(self, run_id: str | None) -> None:
        """Draw run ``run_id``'s series under the chart (None, or the run compared now: stop
        comparing); the app does it (:class:`ddptui.tui.app.DashboardApp`)."""
        raise NotImplementedError

    @work(thread=True, exclusive=True, group="lifecycle")
    def attach_run(self, run_id: str) -> None:
        """Follow the run ``run_id`` (detaching from one followed now)."""
        self.call_from_thread(self._set_busy, Busy.ATTACHING)
        try:
            current = self.session
            if current is not None and not current.done:
                current.detach()
            session = self.attacher(run_id, self.state_root)
            self.call_from_thread(self.use_session, session)
        except Exception as e:
            self.call_from_thread(self.notify, f"Cannot attach to {run_id}: {e}",
                                  title="Attach failed", severity="error", timeout=20)
        finally:
            self.call_from_thread(self._set_busy, Busy.IDLE)

    # -- quit ------------------------------------------------------------------------------

    def action_quit_dashboard(self) -> None:
        if not self.live or self.session is None:
            self._exit_with_result()
            return
        session = self.session

        def chosen(choice: QuitChoice | None) -> None:
            if choice == "stop":
                self._stop(session, then_exit=True)
            elif choice == "leave":
                self._leave(session)

        processes, nodes = session.process_estimate()
        self.push_screen(QuitScreen(quit_question(session.run_id, processes, nodes)),
                         chosen)

    @work(thread=True, exclusive=True, group="lifecycle")
    def _leave(self, session: RunHandle) -> None:
        session.detach()
        self.call_from_thread(self.exit, 0)

    def _exit_with_result(self) -> None:
        result = self.session.result if self.session is not None else None
        self.exit(result.exit_code if result is not None else 0)
