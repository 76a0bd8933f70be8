"""A vertical scrollbar painted again only when its picture changes.

Textual repaints a widget's scrollbar whenever the widget's size or offset changes, through
Rich and its style pipeline: 1-3 ms for a bar of 40 rows, and 3-15 ms under a flood. The
log's size and offset change on every write, though its thumb, once the log holds a few
thousand lines, does not move by a cell; the nodes table repaints twice a second.

A widget takes the quiet bar with :class:`WithQuietScrollbar` among its bases.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.color import Color
from rich.style import Style
from textual.geometry import Region
from textual.scrollbar import ScrollBar, ScrollBarRender
from textual.strip import Strip
from textual.widget import Widget


class QuietScrollBar(ScrollBar):
    """Draws its lines again only when its picture changes; else returns the last ones."""

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

    def start(self, parent: Widget) -> None:
        """Run as a scrollbar of ``parent``: attached to it but not among its children (so
        never laid out), and pruned with it. Textual starts the bars it makes the same way,
        and also lists them in the app's registry, which only answers ``App.is_mounted`` and
        closes, at exit, what nothing closed: a bar is closed with its widget."""
        self._attach(parent)
        self._start_messages()


if TYPE_CHECKING:
    _Scrolling = Widget
else:
    # A plain mixin at run time: Textual inherits CSS along a widget's first base that is a
    # widget, which must stay the widget's own (Log, ScrollView).
    _Scrolling = object


class WithQuietScrollbar(_Scrolling):
    """A widget's vertical scrollbar is a :class:`QuietScrollBar`, made when first asked for,
    as Textual makes its own."""

    @property
    def vertical_scrollbar(self) -> ScrollBar:
        if self._vertical_scrollbar is None:
            self._vertical_scrollbar = bar = QuietScrollBar(
                vertical=True, name="vertical", thickness=self.scrollbar_size_vertical)
            bar.display = False
            bar.start(self)
        return self._vertical_scrollbar
