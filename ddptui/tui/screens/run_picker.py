"""Choosing a past or still-running run to attach to, newest first."""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from ddptui.store.runs import RunSummary
from ddptui.tui.screens.dialog import DialogScreen


def run_label(run: RunSummary) -> str:
    started = run.started_at
    when = "-" if not started else time.strftime("%Y-%m-%d %H:%M", time.localtime(started))
    nodes = ",".join(run.nodes)
    if len(nodes) > 24:
        nodes = nodes[:23] + "…"
    return f"{run.run_id}  {run.shown_status:<9} {when}  world {run.world_size}  {nodes}"


class RunPicker(DialogScreen[str | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, runs: Sequence[RunSummary]) -> None:
        super().__init__()
        self.runs = list(runs)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog picker"):
            yield Label("Attach to which run? (enter: attach, esc: cancel)", classes="question")
            if self.runs:
                yield OptionList(*(Option(Text(run_label(r)), id=r.run_id) for r in self.runs))
            else:
                yield Label("No runs recorded yet.")

    def on_mount(self) -> None:
        for options in self.query(OptionList):
            options.highlighted = 0
            options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)
