"""The `k` screen: each rank's Python stack, as py-spy read it on its node just now."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from ddptui.rank_stacks import Stacks, stacks_lines
from ddptui.tui.screens.dialog import DialogScreen


def stacks_text(stacks: Stacks, rank: int | None = None) -> Text:
    """What ddptui reads in the stacks first, then rank by rank; the ranks' heads bold."""
    text = Text()
    for line in stacks_lines(stacks, rank):
        style = "bold yellow" if line.startswith("ddptui: ") else (
            "bold" if line.startswith("rank ") else "")
        text.append(line + "\n", style=style)
    if stacks.saved:
        text.append(f"\nsaved to {stacks.saved}", style="dim")
    return text


class StacksScreen(DialogScreen[None]):
    """Shows one collection; ``k`` again takes a fresh one (the app's action)."""

    DEFAULT_CSS = """
    StacksScreen .dialog.stacks {
        width: 120;
    }
    """
    BINDINGS = [Binding("escape,q", "dismiss", "Close")]

    def __init__(self, stacks: Stacks, rank: int | None = None) -> None:
        super().__init__()
        self.stacks = stacks
        self.rank = rank

    def compose(self) -> ComposeResult:
        which = "all ranks" if self.rank is None else f"rank {self.rank}"
        with VerticalScroll(classes="dialog help stacks"):
            yield Static(f"[b]Python stacks of {which}[/b]  (py-spy; esc closes)")
            yield Static(stacks_text(self.stacks, self.rank), id="stacks-text")
