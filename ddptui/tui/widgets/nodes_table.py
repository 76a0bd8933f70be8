"""The nodes table: one row per node and one per rank under it, failed rows in red.

Drawn row by row from the rows' plain text, not with a ``DataTable``. A ``DataTable`` renders
every cell again through Rich whenever any cell changes. The ages and rates change twice a
second, so that cost 35-60 ms each time for 18 rows, and under a flood keys waited behind it.
Here a changed row costs one strip, and unchanged rows come from a cache.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Offset, Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ddptui.tui.node_rows import COLUMNS, Row
from ddptui.tui.widgets.scrollbar import WithQuietScrollbar

PAD = 1  # blank cells each side of a column
#: Tones in the terminal's own ANSI colours, which every terminal has (16 colours included).
TONE_STYLE = {"error": Style(color="red", bold=True), "warning": Style(color="yellow"),
              "dim": Style(dim=True), "success": Style(color="green")}


class _Paint(NamedTuple):
    base: Style
    header: Style
    cursor: Style
    width: int
    scroll: Offset


@lru_cache(maxsize=4096)
def _cell_meta(row: int, column: int) -> Style:
    return Style(meta={"row": row, "column": column})


class NodesTable(WithQuietScrollbar, ScrollView, can_focus=True):
    BINDINGS = [
        Binding("up", "cursor(-1)", "Row up", show=False),
        Binding("down", "cursor(1)", "Row down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "cursor_to(0)", "First row", show=False),
        Binding("end", "cursor_to(-1)", "Last row", show=False),
        Binding("enter", "select", "Open the row's log", show=False),
    ]
    COMPONENT_CLASSES = {"nodes-table--header", "nodes-table--cursor"}
    DEFAULT_CSS = """
    NodesTable {
        background: $surface;
        color: $foreground;
        height: auto;
        max-height: 100%;
        & > .nodes-table--header { text-style: bold; background: $panel; color: $foreground; }
        &:ansi > .nodes-table--header { background: ansi_bright_blue; color: ansi_default; }
        & > .nodes-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        &:focus {
            background-tint: $foreground 5%;
            & > .nodes-table--header { background-tint: $foreground 5%; }
            & > .nodes-table--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
        }
    }
    """

    cursor_row: reactive[int] = reactive(0, init=False)

    class RowSelected(Message):
        """Enter or a click on a row: ``key`` is ``n:<node>`` or ``r:<rank>``."""

        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._rows: list[Row] = []
        self._index: dict[str, int] = {}
        self._columns: tuple[str, ...] = COLUMNS
        self._widths = [cell_len(name) for name in COLUMNS]
        self._strips: dict[tuple[int, bool], Strip] = {}
        self._header: tuple[tuple[Style, int, int], Strip] | None = None
        self._paint: _Paint | None = None

    # -- content ---------------------------------------------------------------------------

    def show_rows(self, rows: list[Row], columns: tuple[str, ...] = COLUMNS) -> None:
        """``columns`` name the rows' cells (telemetry adds some once a node reports)."""
        if rows == self._rows and columns == self._columns:
            return
        if columns != self._columns:
            self._columns, self._rows = columns, []
        old = self._rows
        self._rows = list(rows)
        self._index = {r.key: i for i, r in enumerate(rows)}
        widths = [cell_len(name) for name in columns]
        for r in rows:
            widths = [max(w, cell_len(c)) for w, c in zip(widths, r.cells, strict=True)]
        if widths != self._widths or len(old) != len(rows):
            self._widths = widths
            self._strips.clear()
            self._header = None
        else:  # same shape: only the rows that changed are drawn again
            for i, (a, b) in enumerate(zip(old, rows, strict=True)):
                if a != b:
                    self._strips.pop((i, False), None)
                    self._strips.pop((i, True), None)
        size = Size(sum(widths) + 2 * PAD * len(widths), len(rows) + 1)
        was = self.virtual_size
        if size != was:
            if size.height == was.height and (
                    max(size.width, was.width) <= self.scrollable_content_region.width):
                # A column grew or shrank (an age from "9s" to "10s") inside the pane: nothing
                # else on screen moves, so no layout of the whole screen, which is Textual's
                # answer to a new virtual size (5-20 ms, under a flood, in the keys' way).
                self.set_reactive(NodesTable.virtual_size, size)
                self._scroll_update(size)
            else:
                self.virtual_size = size
                self.refresh(layout=True)
        if self.cursor_row >= len(rows):
            self.cursor_row = max(0, len(rows) - 1)
        self.refresh()

    @property
    def row_keys(self) -> list[str]:
        return [r.key for r in self._rows]

    def row(self, key: str) -> Row:
        return self._rows[self._index[key]]

    @property
    def cursor_key(self) -> str:
        """The key of the row under the cursor (``n:NODE``, ``r:RANK``); "" with no rows."""
        keys = self.row_keys
        return keys[self.cursor_row] if 0 <= self.cursor_row < len(keys) else ""

    # -- drawing ---------------------------------------------------------------------------

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()
        self._header = None

    def _line(self, cells: tuple[str, ...], style: Style, row: int) -> Strip:
        """One segment per cell, each with its own meta, so that the terminal's compositor
        keeps them apart. A screenshot's SVG then places every cell at its own column, even
        after a sparkline whose glyphs its font draws wider."""
        pad = " " * PAD
        segments = [Segment(pad + set_cell_size(c, w) + pad, style + _cell_meta(row, i))
                    for i, (c, w) in enumerate(zip(cells, self._widths, strict=True))]
        return Strip(segments, sum(self._widths) + 2 * PAD * len(self._widths))

    def _row_strip(self, index: int, cursor: bool, paint: _Paint) -> Strip:
        key = (index, cursor)
        strip = self._strips.get(key)
        if strip is None:
            row = self._rows[index]
            style = paint.base
            if row.tone:
                style += TONE_STYLE[row.tone]
            if cursor:
                style += paint.cursor
            strip = self._strips[key] = self._line(row.cells, style, index)
        return strip

    def render_lines(self, crop: Region) -> list[Strip]:
        """Styles, width and scroll read once per paint rather than once per row."""
        self._paint = self._read_paint()
        try:
            return super().render_lines(crop)
        finally:
            self._paint = None

    def _read_paint(self) -> _Paint:
        return _Paint(self.rich_style, self.get_component_rich_style("nodes-table--header"),
                      self.get_component_rich_style("nodes-table--cursor"),
                      self.scrollable_content_region.width, self.scroll_offset)

    def render_line(self, y: int) -> Strip:
        paint = self._paint or self._read_paint()
        scroll_x, scroll_y = paint.scroll
        base, width = paint.base, paint.width
        if y == 0:  # the header stays while the rows scroll under it
            header = base + paint.header
            if self._header is None or self._header[0] != (header, scroll_x, width):
                strip = self._line(self._columns, header, -1).crop_extend(
                    scroll_x, scroll_x + width, header)
                self._header = ((header, scroll_x, width), strip)
            return self._header[1]
        index = scroll_y + y - 1
        if index >= len(self._rows):
            return Strip.blank(width, base)
        cursor = index == self.cursor_row
        strip = self._row_strip(index, cursor, paint)
        return strip.crop_extend(scroll_x, scroll_x + width,
                                 base + paint.cursor if cursor else base)

    # -- the cursor ------------------------------------------------------------------------

    def watch_cursor_row(self, before: int, now: int) -> None:
        for i in (before, now):
            self._strips.pop((i, False), None)
            self._strips.pop((i, True), None)
        body = max(1, self.scrollable_content_region.height - 1)
        if now < self.scroll_y:
            self.scroll_to(y=now, animate=False, immediate=True)
        elif now >= self.scroll_y + body:
            self.scroll_to(y=now - body + 1, animate=False, immediate=True)
        self.refresh()

    def move_cursor(self, row: int) -> None:
        if self._rows:
            self.cursor_row = min(max(0, row), len(self._rows) - 1)

    def action_cursor(self, step: int) -> None:
        self.move_cursor(self.cursor_row + step)

    def action_page(self, step: int) -> None:
        self.move_cursor(self.cursor_row + step * max(1, self.scrollable_content_region.height
                                                      - 1))

    def action_cursor_to(self, row: int) -> None:
        self.move_cursor(row if row >= 0 else len(self._rows) - 1)

    def action_select(self) -> None:
        if 0 <= self.cursor_row < len(self._rows):
            self.post_message(self.RowSelected(self._rows[self.cursor_row].key))

    def on_click(self, event: events.Click) -> None:
        index = event.style.meta.get("row", -1)
        if 0 <= index < len(self._rows):
            self.move_cursor(index)
            self.action_select()
