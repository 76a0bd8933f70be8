"""The one-line header: which run, in what state, for how long, how big, how many restarts."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from ddptui.store.store import RunInfo

_STATE_STYLE = {
    "running": "bold green",
    "launching": "bold yellow",
    "restarting": "bold yellow",
    "stopping": "bold yellow",
    "failed": "bold red",
    "lost": "bold red",
    "finished": "bold",
    "stopped": "dim",
    "idle": "dim",
}


def elapsed(seconds: float | None) -> str:
    if seconds is None:
        return "--:--:--"
    s = max(0, int(seconds))
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


class RunHeader(Static):
    """Rebuilt only when what it says changes (the elapsed clock ticks once a second)."""

    summary: reactive[tuple[str, str, str, str, int, str]] = reactive(
        ("", "idle", "", "", 0, ""), layout=False
    )

    def set_run(self, info: RunInfo, now: float, restarts: int, state: str) -> None:
        end = info.ended_at if info.ended_at is not None else now
        took = None if info.started_at is None else end - info.started_at
        world = "-" if info.world_size is None else str(info.world_size)
        self.summary = (info.run_id or "no run", state, elapsed(took), world, restarts,
                        info.message)

    def watch_summary(self, summary: tuple[str, str, str, str, int, str]) -> None:
        run_id, state, took, world, restarts, message = summary
        text = Text.assemble(
            ("ddptui ", "bold"), (run_id, ""), "  ",
            (f"● {state}", _STATE_STYLE.get(state, "bold")), "  ",
            (took, ""), "  ", ("world ", "dim"), world, "  ",
            ("restarts ", "dim"), (str(restarts), "bold yellow" if restarts else ""),
        )
        if message:
            text.append("  " + message, "dim")
        text.truncate(max(10, self.size.width or 80), overflow="ellipsis")
        self.update(text, layout=False)  # one fixed line: no layout pass
