"""Quitting while a run is live: stop it, or leave it running on the nodes (detach)."""

from __future__ import annotations

from typing import Literal

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Label

from ddptui.tui.screens.dialog import DialogScreen

QuitChoice = Literal["stop", "leave", "cancel"]


class QuitScreen(DialogScreen[QuitChoice]):
    BINDINGS = [
        Binding("s", "choose('stop')", "Stop the run"),
        Binding("l", "choose('leave')", "Leave it running"),
        Binding("escape,c", "choose('cancel')", "Cancel"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question, classes="question", markup=False)
            with Horizontal(classes="buttons"):
                yield Button("Stop it (s)", variant="error", id="stop")
                yield Button("Leave running (l)", variant="primary", id="leave")
                yield Button("Cancel (esc)", id="cancel")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id)  # type: ignore[arg-type]

    def action_choose(self, choice: QuitChoice) -> None:
        self.dismiss(choice)
