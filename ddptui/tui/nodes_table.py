"""The nodes table: one row per node and one per rank under it, failed rows in red."""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import DataTable

from ddptui.tui.node_rows import COLUMNS, Row

_TONE_STYLE = {"error": "bold red", "warning": "yellow", "dim": "dim", "success": "green"}


class NodesTable(DataTable[Text]):
    """Updated in place: cells are rewritten only when their text or tone changed."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=False, cell_padding=1)
        self._shown: dict[str, Row] = {}

    def on_mount(self) -> None:
        for name in COLUMNS:
            self.add_column(name, key=name)

    def show_rows(self, rows: list[Row]) -> None:
        keys = [r.key for r in rows]
        if keys != list(self._shown):
            self.clear()
            self._shown = {}
            for row in rows:
                self.add_row(*self._cells(row), key=row.key)
                self._shown[row.key] = row
            return
        for row in rows:
            old = self._shown[row.key]
            if old == row:
                continue
            for name, cell, old_cell in zip(COLUMNS, row.cells, old.cells, strict=True):
                if cell != old_cell or row.tone != old.tone:
                    # re-measuring columns costs a layout: only when this cell is wider
                    wider = cell_len(cell) > self.columns[name].content_width
                    self.update_cell(row.key, name, Text(cell, _TONE_STYLE.get(row.tone, "")),
                                     update_width=wider)
            self._shown[row.key] = row

    @staticmethod
    def _cells(row: Row) -> list[Text]:
        style = _TONE_STYLE.get(row.tone, "")
        return [Text(c, style) for c in row.cells]
