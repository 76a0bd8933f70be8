"""Choosing a past or still-running run: to attach to, or to compare the chart with.

The same list serves both: ``a`` opens it to attach (``enter``), ``C`` to compare, and ``c``
compares from either, so a run seen while looking for one to attach to can be laid under
the chart without going back.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Footer, Label, OptionList
from textual.widgets.option_list import Option

from ddptui.store.runs import RunSummary
from ddptui.tui.screens.dialog import DialogScreen

#: Marks the run the chart is compared with now.
COMPARED = "◆ "


#: The run list's keys, as the ``?`` screen explains them.
HELP = [
    Binding("enter", "", "Attach to the run (in the list that C opens: compare with it)"),
    Binding("c", "", "Compare: draw the run's series dimmed under the chart's, by name "
            "(on the run compared now: stop comparing)"),
    Binding("delete", "", "Stop comparing: nothing drawn under the chart (or backspace)"),
    Binding("escape", "", "Close the list"),
]


@dataclass(frozen=True, slots=True)
class Pick:
    """What was chosen: a run to attach to, a run to compare with (``compare``), or, with no
    run and ``compare``, no comparison any more."""

    run_id: str | None
    compare: bool = False


def run_label(run: RunSummary, compared: bool = False) -> str:
    started = run.started_at
    when = "-" if not started else time.strftime("%Y-%m-%d %H:%M", time.localtime(started))
    nodes = run.where
    if len(nodes) > 24:
        nodes = nodes[:23] + "…"
    mark = COMPARED if compared else ""
    return f"{mark}{run.run_id}  {run.shown_status:<9} {when}  world {run.world_size}  {nodes}"


def picker_question(compare: bool, compared: str | None) -> str:
    """The line over the list: what ``enter`` does here, and what is compared now."""
    if compare:
        text = "Compare the chart with which run? (enter/c: compare, again: remove"
    else:
        text = "Attach to which run? (enter: attach, c: compare on the chart"
    text += ", esc: cancel)"
    if compared:
        text += f"\n{COMPARED}{compared} is drawn under the chart now (delete: remove it)."
    return text


class RunPicker(DialogScreen[Pick | None]):
    """The recorded runs, newest first; dismissed with a :class:`Pick`, or None."""

    DEFAULT_CSS = """
    RunPicker OptionList {
        max-height: 20;
    }
    """

    #: Short, for the footer; the help says more (:data:`HELP`).
    BINDINGS = [
        Binding("c", "compare", "Compare"),
        Binding("delete,backspace", "clear", "Clear compare"),
        Binding("escape", "dismiss(None)", "Cancel"),
    ]

    def __init__(self, runs: Sequence[RunSummary], *, compare: bool = False,
                 compared: str | None = None) -> None:
        super().__init__()
        self.runs = list(runs)
        #: ``enter`` compares (opened with ``C``) rather than attaches (opened with ``a``).
        self.compare = compare
        self.compared = compared

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog picker"):
            yield Label(picker_question(self.compare, self.compared), classes="question")
            if self.runs:
                yield OptionList(*(Option(Text(run_label(r, r.run_id == self.compared)),
                                          id=r.run_id) for r in self.runs))
            else:
                yield Label("No runs recorded yet.")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        for options in self.query(OptionList):
            options.highlighted = 0
            options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(Pick(event.option.id, self.compare))

    def action_compare(self) -> None:
        for options in self.query(OptionList):
            index = options.highlighted
            if index is not None:
                self.dismiss(Pick(options.get_option_at_index(index).id, compare=True))

    def action_clear(self) -> None:
        self.dismiss(Pick(None, compare=True))
