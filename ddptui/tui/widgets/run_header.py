"""The one-line header: which run, in what state, for how long, how big, how many restarts."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from ddptui.events import RunStatus
from ddptui.store.views import RunInfo
from ddptui.tui.state import Busy

#: How a state is drawn; any other (attaching, unknown, a node's "restarting #2") is bold.
_STATE_STYLE: dict[RunStatus | Busy, str] = {
    RunStatus.RUNNING: "bold green",
    RunStatus.LAUNCHING: "bold yellow",
    Busy.LAUNCHING: "bold yellow",
    Busy.RESTARTING: "bold yellow",
    RunStatus.STOPPING: "bold yellow",
    Busy.STOPPING: "bold yellow",
    RunStatus.FAILED: "bold red",
    RunStatus.LOST: "bold red",
    RunStatus.FINISHED: "bold",
    RunStatus.STOPPED: "dim",
    RunStatus.IDLE: "dim",
}


def elapsed(seconds: float | None) -> str:
    if seconds is None:
        return "--:--:--"
    s = max(0, int(seconds))
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


class RunHeader(Static):
    """Rebuilt only when what it says changes (the elapsed clock ticks once a second)."""

    DEFAULT_CSS = """
    RunHeader {
        height: 1;
        background: $panel;
        padding: 0 1;
    }
    """

    summary: reactive[tuple[str, str, str, str, str, int, str]] = reactive(
        ("", "idle", "dim", "", "", 0, ""), layout=False
    )
    """What the line says: run id, state and its style, elapsed, world size, restarts,
    message."""

    def set_run(self, info: RunInfo, now: float, restarts: int, busy: Busy,
                nodes_restarting: bool) -> None:
        """The run as the store has it; what the app is ``busy`` doing, if anything, is
        shown in place of its status, and nodes restarting their workers after that."""
        if busy or not nodes_restarting:
            status = busy or info.status
            state, style = str(status), _STATE_STYLE.get(status, "bold")
        else:
            state, style = f"restarting #{restarts}", "bold"
        end = info.ended_at if info.ended_at is not None else now
        took = None if info.started_at is None else end - info.started_at
        world = "-" if info.world_size is None else str(info.world_size)
        said = "  ".join(x for x in (info.scheduler, info.message) if x)  # Slurm's job first
        self.summary = (info.run_id or "no run", str(state), style, elapsed(took), world,
                        restarts, said)

    def watch_summary(self, summary: tuple[str, str, str, str, str, int, str]) -> None:
        run_id, state, style, took, world, restarts, message = summary
        text = Text.assemble(
            ("ddptui ", "bold"), (run_id, ""), "  ",
            (f"● {state}", style), "  ",
            (took, ""), "  ", ("world ", "dim"), world, "  ",
            ("restarts ", "dim"), (str(restarts), "bold yellow" if restarts else ""),
        )
        if message:
            text.append("  " + message, "dim")
        text.truncate(max(10, self.size.width or 80), overflow="ellipsis")
        self.update(text, layout=False)  # one fixed line: no layout pass
