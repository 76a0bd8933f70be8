"""A vertical scrollbar painted again only when its picture changes.

Textual repaints a widget's scrollbar whenever the widget's size or offset changes, through
Rich and its style pipeline: 1-3 ms for a bar of 40 rows, and 3-15 ms under a flood. The
log's size and offset change on every write, though its thumb, once the log holds a few
thousand lines, does not move by a cell; the nodes table repaints twice a second.
"""

from __future__ import annotations

from rich.color import Color
from rich.style import Style
from textual.geometry import Region
from textual.scrollbar import ScrollBar, ScrollBarRender
from textual.strip import Strip
from textual.widget import Widget


class QuietScrollBar(ScrollBar):
    _memo: tuple[object, list[Strip]] | None = None

    def render_lines(self, crop: Region) -> list[Strip]:
        key = self._picture(crop)
        if key is not None and self._memo is not None and self._memo[0] == key:
            return self._memo[1]
        strips = super().render_lines(crop)
        self._memo = None if key is None else (key, strips)
        return strips

    def _picture(self, crop: Region) -> object:
        """What the bar shows, as Textual's renderer computes it (cheap next to drawing it)."""
        bar = self.render()
        if not isinstance(bar, ScrollBarRender) or not isinstance(bar.style, Style):
            return None
        width, height = self.size
        picture = bar.render_bar(
            size=height if bar.vertical else width, window_size=bar.window_size,
            virtual_size=bar.virtual_size, position=bar.position, vertical=bar.vertical,
            thickness=width if bar.vertical else height,
            back_color=bar.style.bgcolor or Color.parse("#555555"),
            bar_color=bar.style.color or Color.parse("bright_magenta"))
        return crop, self.size, tuple(picture.segments)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._memo = None


def quiet_scrollbar(widget: Widget) -> ScrollBar:
    """Textual's ``Widget.vertical_scrollbar``, making a QuietScrollBar: a widget's own
    ``vertical_scrollbar`` property returns this."""
    if widget._vertical_scrollbar is None:
        widget._vertical_scrollbar = bar = QuietScrollBar(
            vertical=True, name="vertical", thickness=widget.scrollbar_size_vertical)
        bar.display = False
        widget.app._start_widget(widget, bar)
    return widget._vertical_scrollbar
