"""The frame every dialog shares: a bordered box in the middle of the screen."""

from __future__ import annotations

from textual.screen import ModalScreen, ScreenResultType


class DialogScreen(ModalScreen[ScreenResultType]):
    """A modal whose content sits in a ``.dialog`` box, centred; ``.question`` is its text,
    ``.buttons`` its row of buttons, right-aligned."""

    DEFAULT_CSS = """
    DialogScreen {
        align: center middle;
    }

    DialogScreen .dialog {
        width: 72;
        max-width: 95%;
        height: auto;
        max-height: 90%;
        border: thick $primary;
        background: $surface;
        padding: 1 2;
    }

    DialogScreen .dialog.help {
        height: 90%;
    }

    DialogScreen .dialog .question {
        width: 100%;
        margin-bottom: 1;
    }

    DialogScreen .dialog .buttons {
        height: auto;
        align-horizontal: right;
    }

    DialogScreen .dialog Button {
        margin-left: 1;
    }
    """
