"""The `d` screen: why the run failed, whole, after the toast that told its first line is gone.

The toast carries ddptui's sentence and one line of evidence for thirty seconds; this keeps
the rest (every line the diagnosis rests on, what happened on each node) one key away, in the
same words as the headless summary and ``run.json``.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from ddptui.diagnose import Diagnosis
from ddptui.tui.screens.dialog import DialogScreen


class DiagnosisScreen(DialogScreen[None]):
    DEFAULT_CSS = """
    DiagnosisScreen .dialog.diagnosis {
        width: 110;
        max-height: 90%;
    }

    DiagnosisScreen .advice {
        margin-top: 1;
        color: $text-muted;
    }
    """

    BINDINGS = [Binding("escape,q,d,enter", "dismiss", "Close")]

    def __init__(self, run_id: str, exit_code: int, diagnosis: Diagnosis) -> None:
        super().__init__()
        self.run_id = run_id
        self.exit_code = exit_code
        self.diagnosis = diagnosis

    def compose(self) -> ComposeResult:
        d = self.diagnosis
        with VerticalScroll(classes="dialog diagnosis"):
            yield Static(Text(f"Run {self.run_id} failed (exit code {self.exit_code})",
                              style="bold"))
            yield Static(Text("\n".join(d.report())), id="report")
            yield Static(Text(f"{d.cause.value}: esc closes", style="italic"),
                         classes="advice")
