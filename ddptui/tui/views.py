"""Which log lines a view shows and how each is written: pure, so it is tested without Textual.

The log widget holds plain strings; colour comes back at paint time from
:func:`line_style`, which looks only at the few lines on screen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from ddptui.events import (
    METRIC_MARK,
    Level,
    LogLine,
    Source,
    all_view_text,
    classify_level,
    in_all_view,
    is_nccl,
)


class ViewKind(StrEnum):
    ALL = "all"
    RANK = "rank"
    NODE = "node"
    NCCL = "nccl"
    PROBLEMS = "problems"


VIEW_ORDER = (ViewKind.ALL, ViewKind.RANK, ViewKind.NODE, ViewKind.NCCL, ViewKind.PROBLEMS)


@dataclass(frozen=True, slots=True)
class ViewSpec:
    kind: ViewKind = ViewKind.ALL
    rank: int | None = None
    node: str | None = None

    def accepts(self, line: LogLine) -> bool:
        kind = self.kind
        if kind is ViewKind.ALL:
            return in_all_view(line)
        if kind is ViewKind.RANK:
            return line.rank == self.rank
        if kind is ViewKind.NODE:
            return line.node == self.node
        if kind is ViewKind.NCCL:
            return line.source is Source.NCCL
        return line.level is Level.WARNING or line.level is Level.ERROR

    @property
    def label(self) -> str:
        if self.kind is ViewKind.RANK:
            return f"rank {self.rank}"
        if self.kind is ViewKind.NODE:
            return f"node {self.node}"
        return {ViewKind.ALL: "all ranks", ViewKind.NCCL: "NCCL only",
                ViewKind.PROBLEMS: "warnings and errors"}[self.kind]


def format_line(line: LogLine, view: ViewSpec) -> str:
    """One log line as shown: a rank (or node) tag unless the view already says whose it is.

    Metric records are shown compact (``@metric step=… loss=…``) except in a rank's own view,
    which shows exactly what the rank printed.
    """
    if view.kind is ViewKind.RANK:
        return line.text
    if view.kind is ViewKind.NODE and line.rank is None:
        return f"[{line.source}] {line.text}"
    return all_view_text(line)


_TAG_RE = re.compile(r"^\[[^\]]*\] ")
_COMPACT_METRIC_RE = re.compile(r"^@\w+ \w+=")  # what compact_metric_line makes


def line_style(shown: str) -> Level | None:
    """Level of a shown line for colouring; None for NCCL lines (dimmed) — they are chatty."""
    m = _TAG_RE.match(shown)
    body = shown[m.end():] if m else shown
    if is_nccl(body):
        return None
    if body.startswith(METRIC_MARK) or _COMPACT_METRIC_RE.match(body):
        return Level.DEBUG
    return classify_level(body)


def compile_filter(pattern: str) -> tuple[re.Pattern[str] | None, str]:
    """A search regex with less's smart case; a broken regex is searched as plain text.

    Returns the pattern and a message for the user ("" when the regex was fine).
    """
    if not pattern:
        return None, ""
    flags = 0 if any(c.isupper() for c in pattern) else re.IGNORECASE
    try:
        return re.compile(pattern, flags), ""
    except re.error as e:
        return re.compile(re.escape(pattern), flags), f"not a regex ({e}); searching the text"


_ESCAPE_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def printable(text: str) -> str:
    """What a terminal would show of a line from a program that writes for one: colour
    codes dropped, the last overwrite after a carriage return kept (progress bars), tabs
    expanded. No control byte from a training script reaches the user's terminal."""
    if text.isprintable():
        return text
    if "\r" in text:
        text = text.rstrip("\r").rsplit("\r", 1)[-1]
    return _CONTROL_RE.sub("\ufffd", _ESCAPE_RE.sub("", text).expandtabs())


def wrap_line(shown: str, width: int) -> list[str]:
    """Split a line into rows of ``width`` cells; continuation rows are indented by two."""
    if width <= 4 or len(shown) <= width:
        return [shown]
    rows = [shown[:width]]
    rest = shown[width:]
    step = width - 2
    while rest:
        rows.append("  " + rest[:step])
        rest = rest[step:]
    return rows
