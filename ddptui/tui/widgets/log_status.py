"""The line under the log: which view, follow or paused (with the count of new lines), filter."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static


@dataclass(frozen=True, slots=True)
class LogState:
    view: str = "all ranks"
    follow: bool = True
    pending: int = 0
    wrap: bool = False
    pattern: str = ""
    history: int = 0
    skipped: int = 0


class LogStatus(Static):
    """One line: the view's name, following or paused, wrap, the filter, disk-only lines."""

    DEFAULT_CSS = """
    LogStatus {
        height: 1;
        background: $panel;
        padding: 0 1;
    }
    """

    state: reactive[LogState] = reactive(LogState, layout=False)
    """What the line says; set whole, it is drawn once."""

    def watch_state(self, s: LogState) -> None:
        text = Text.assemble(("view ", "dim"), (s.view, "bold"), "  ")
        if s.follow:
            text.append("following", "green")
        else:
            text.append("paused", "bold yellow")
            if s.pending:
                text.append(f" · {s.pending:,} new (end: follow)", "yellow")
        if s.wrap:
            text.append("  wrap", "dim")
        if s.pattern:
            text.append("  /", "dim")
            text.append(s.pattern, "bold")
        if s.history:
            text.append(f"  +{s.history:,} from disk", "dim")
        if s.skipped:
            text.append(f"  {s.skipped:,} lines only on disk", "dim")
        self.update(text, layout=False)  # one fixed line: no layout pass
