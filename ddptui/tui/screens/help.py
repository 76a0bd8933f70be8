"""The `?` screen, written from the bindings themselves so it cannot drift from them."""

from __future__ import annotations

from collections.abc import Iterable

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from ddptui.tui.screens.dialog import DialogScreen


def key_label(binding: Binding) -> str:
    names = {"question_mark": "?", "slash": "/", "left_square_bracket": "[",
             "right_square_bracket": "]", "escape": "esc", "minus": "-", "plus": "+",
             "equals_sign": "=", "less_than_sign": "<", "greater_than_sign": ">",
             "exclamation_mark": "!"}
    keys = [names.get(k.strip(), k.strip()) for k in binding.key.split(",")]
    return " ".join(keys)


def help_table(sections: Iterable[tuple[str, Iterable[Binding]]]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for title, bindings in sections:
        table.add_row("", "")
        table.add_row(f"[u]{title}[/u]", "")
        for b in bindings:
            if b.description:
                table.add_row(key_label(b), b.description)
    return table


class HelpScreen(DialogScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def __init__(self, sections: list[tuple[str, list[Binding]]]) -> None:
        super().__init__()
        self.sections = sections

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog help"):
            yield Static("[b]ddptui keys[/b]  (esc closes; ctrl+p finds any command)")
            yield Static(help_table(self.sections))
