"""The log pane: a Textual ``Log`` fed in batches, with follow, wrap, search and scrollback.

It stays a plain ``Log`` of strings (cheap to append thousands a second); colours, matches
and the current-match bar are painted per visible row, so they cost nothing off screen.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Sequence
from functools import lru_cache

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.events import MouseScrollUp
from textual.geometry import Offset, Region, Size
from textual.message import Message
from textual.reactive import Reactive, reactive, var
from textual.strip import Strip
from textual.widgets import Log

from ddptui.events import Level
from ddptui.tui.views import line_style, printable, wrap_line
from ddptui.tui.widgets.scrollbar import WithQuietScrollbar

#: Lines kept in the widget; older ones come back from the in-memory rings or from disk.
MAX_LINES = 4000
_WRAP_FACTOR = 4


_LEVEL_STYLE = {Level.ERROR: Style(color="red", bold=True), Level.WARNING: Style(color="yellow"),
                Level.DEBUG: Style(dim=True)}
_NCCL_DIM = Style(dim=True)
_MATCH = Style(color="black", bgcolor="yellow", bold=True)
_CURRENT = Style(reverse=True)
_CACHE_ROWS = 1000


class LineStyler:
    """Colours a shown line by its level, dims NCCL chatter, marks search matches.

    Under a flood nearly every painted row is a line never painted before, so the row is
    built in one step at the pane's width: a plain printable line is sliced, not cropped
    through intermediate strips (each ``Strip`` carries seven caches of its own). The cut
    segments are kept per distinct line, so a repaint of unchanged rows is a lookup.
    """

    def __init__(self) -> None:
        self.pattern: re.Pattern[str] | None = None
        self.dim_nccl = True
        self._cache: dict[tuple[str, Style, bool, int, int], list[tuple[str, Style]]] = {}

    def forget(self) -> None:
        self._cache.clear()

    def row(self, text: str, base: Style, current: bool, x: int, width: int, y: int
            ) -> Strip:
        """Row ``y`` of the log, columns ``x`` to ``x + width``, with the offsets that mouse
        selection reads."""
        key = (text, base, current, x, width)
        parts = self._cache.get(key)
        if parts is None:
            parts = self._cut(printable(text), base, current, x, width)
            if len(self._cache) >= _CACHE_ROWS:
                self._cache.clear()
            self._cache[key] = parts
        segments = []
        for part, style in parts:
            segments.append(Segment(part, style + _offset(x, y)))
            x += len(part)
        return Strip(segments, width)

    def _style(self, text: str, base: Style, current: bool) -> Style:
        level = line_style(text)
        style = base
        if level is None:
            if self.dim_nccl:
                style = base + _NCCL_DIM
        elif level in _LEVEL_STYLE:
            style = base + _LEVEL_STYLE[level]
        return style + _CURRENT if current else style

    def _cut(self, text: str, base: Style, current: bool, x: int, width: int
             ) -> list[tuple[str, Style]]:
        style = self._style(text, base, current)
        if self.pattern is None and text.isascii() and text.isprintable():  # one cell a char
            cut = text[x:x + width]
            parts = [(cut, style)] if cut else []
            if len(cut) < width:
                parts.append((" " * (width - len(cut)), base))
            return parts
        segments: list[Segment] = []
        pos = 0
        if self.pattern is not None:
            hit = style + _MATCH
            for m in self.pattern.finditer(text):
                if m.end() <= m.start():
                    continue
                if m.start() > pos:
                    segments.append(Segment(text[pos:m.start()], style))
                segments.append(Segment(text[m.start():m.end()], hit))
                pos = m.end()
        if pos < len(text):
            segments.append(Segment(text[pos:], style))
        strip = Strip(segments, cell_len(text)).crop_extend(x, x + width, base)
        return [(seg.text, seg.style or base) for seg in strip]


def _numbers(seqs: Sequence[int | None], n: int) -> Sequence[int | None]:
    """``seqs`` for ``n`` lines, or None for each when they were not given."""
    return seqs if len(seqs) == n else [None] * n


@lru_cache(maxsize=8192)
def _offset(x: int, y: int) -> Style:
    """The meta that Textual's text selection reads; a following log paints the same rows
    at the same offsets, so it is built once per cell position, not once per paint."""
    return Style.from_meta({"offset": (x, y)})


class LogView(WithQuietScrollbar, Log):
    """The log itself: lines as strings, painted per visible row (see :class:`LineStyler`)."""

    #: overflow-x hidden: :meth:`_update_size` never measures the lines' width.
    DEFAULT_CSS = """
    LogView {
        height: 1fr;
        scrollbar-size-vertical: 1;
        overflow-x: hidden;  /* long lines: `w` wraps them */
    }
    """

    BINDINGS = [
        Binding("end", "resume", "Follow again", show=False),
        Binding("home", "older", "Top / older lines", show=False),
    ]

    #: Textual lays out the whole screen whenever a widget's virtual size changes, so each
    #: write did so until the log was full: 15-40 ms under a flood, twice a second, just when
    #: a run starts. Yet a write only makes it longer, and once it is longer than the pane
    #: nothing else on screen moves (see :meth:`watch_virtual_size`).
    virtual_size: Reactive[Size] = Reactive(Size(0, 0), layout=False)
    follow: reactive[bool] = reactive(True, init=False, repaint=False)  # the status line shows it
    wrap: reactive[bool] = reactive(False, init=False)
    pending: var[int] = var(0)  # lines that arrived while paused
    match_row: var[int | None] = var(None)

    class OlderWanted(Message):
        """The user is at the top and asks for more: the app reads them from disk."""

    class FollowChanged(Message):
        def __init__(self, follow: bool) -> None:
            super().__init__()
            self.follow = follow

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(highlight=False, max_lines=MAX_LINES, auto_scroll=True, id=id)
        self.styler = LineStyler()
        self.raw: deque[str] = deque(maxlen=MAX_LINES)  # unwrapped lines, what `save` writes
        #: The store's sequence number of each raw line (None: unknown, from an old run dir):
        #: the first one is where scrollback from disk goes on.
        self.seqs: deque[int | None] = deque(maxlen=MAX_LINES)
        self._held: deque[str] = deque(maxlen=MAX_LINES)
        self._held_seqs: deque[int | None] = deque(maxlen=MAX_LINES)
        self.history = 0  # lines above the rings, read from disk
        self._paint: tuple[Style, int, Offset, bool] | None = None

    def watch_virtual_size(self, old: Size, new: Size) -> None:
        """Lengthened past the pane before and after: only the scrollbar's window and the
        scroll range change. Anything else (the first lines, a clear, a resize) is laid out,
        as Textual would."""
        height = self.container_size.height
        if 0 < height < min(old.height, new.height) and old.width == new.width:
            self._scroll_update(new)
        else:
            self.refresh(layout=True)

    @classmethod
    def _process_line(cls, line: str) -> str:
        """Log's own clean-up for the rows it draws itself (during a mouse selection)."""
        return printable(line)

    def _update_size(self, updates: int, lines: list[str]) -> None:  # type: ignore[override]
        """Skip ``Log``'s per-write width scan (a thread measuring every line): long lines
        are cut (overflow-x is hidden) or wrapped with `w`, so the width is never needed,
        and under a flood that scan competes with the event loop for the GIL."""

    # -- content ---------------------------------------------------------------------------

    def set_lines(self, lines: Sequence[str], seqs: Sequence[int | None] = ()) -> None:
        """Replace everything (a new view, filter, wrap): one clear and one batched write.
        ``seqs``: each line's sequence number, where known."""
        self.raw.clear()
        self.raw.extend(lines)
        self.seqs.clear()
        self.seqs.extend(_numbers(seqs, len(lines)))
        self._held.clear()
        self._held_seqs.clear()
        self.pending = 0
        self.history = 0
        self.match_row = None
        self._rewrite(scroll_end=self.follow)

    def append(self, lines: list[str], seqs: Sequence[int | None] = ()) -> None:
        if not lines:
            return
        if not self.follow:
            self._held.extend(lines)
            self._held_seqs.extend(_numbers(seqs, len(lines)))
            self.pending += len(lines)
            return
        self.raw.extend(lines)
        self.seqs.extend(_numbers(seqs, len(lines)))
        self.write_lines(self._rows(lines), scroll_end=True)

    @property
    def first_seq(self) -> int | None:
        """The sequence number of the first line held, where known."""
        return self.seqs[0] if self.seqs else None

    def rewrite_at(self, changed: dict[int, str], count: int) -> None:
        """Lines written over in place (a rank's live progress bar): ``changed`` maps a line,
        counted from the first of ``count`` lines appended since :meth:`set_lines`, to its
        new text. Counted from the end, a place survives both trimming and older lines read
        from disk above; one trimmed away already is left alone."""
        held, raw = self._held, self.raw
        rows = None if self.wrap else self._lines
        for where, text in changed.items():
            back = count - 1 - where  # lines after it
            if back < len(held):
                held[-1 - back] = text
                continue
            back -= len(held)
            if back >= len(raw):
                continue
            raw[-1 - back] = text
            if rows is not None and back < len(rows):
                rows[-1 - back] = text
                self.refresh_lines(len(rows) - 1 - back)
        if rows is None:  # wrapped: a line is rows of its own length
            self._rewrite(scroll_end=self.follow)

    def prepend(self, lines: list[str], seqs: Sequence[int | None] = ()) -> None:
        """Older lines above the current first one; the viewport stays on what it showed."""
        if not lines:
            return
        self.follow = False
        keep = list(self.raw)
        self.raw = deque(lines + keep, maxlen=len(lines) + len(keep))
        self.seqs = deque([*_numbers(seqs, len(lines)), *self.seqs], maxlen=len(self.raw))
        self.history += len(lines)
        added = len(self._rows(lines))
        self.max_lines = None
        self._rewrite(scroll_end=False)
        self.scroll_to(y=max(0, added - 1), animate=False, immediate=True)

    def _rows(self, lines: Iterable[str]) -> list[str]:
        if not self.wrap:
            return list(lines)
        width = max(20, self.scrollable_content_region.width - 1)
        rows: list[str] = []
        for line in lines:
            rows.extend(wrap_line(printable(line), width))
        return rows

    def _rewrite(self, *, scroll_end: bool) -> None:
        if self.history == 0:
            self.max_lines = MAX_LINES * (_WRAP_FACTOR if self.wrap else 1)
        self.clear()
        self.write_lines(self._rows(self.raw), scroll_end=scroll_end)
        if not scroll_end:
            self.refresh()

    def watch_wrap(self) -> None:
        self._rewrite(scroll_end=self.follow)

    def on_resize(self) -> None:
        """A following log stays at its end when the pane's height changes (the nodes
        table above it grows as nodes and ranks arrive)."""
        if self.follow:
            self.scroll_end(animate=False, immediate=True)

    def watch_follow(self, follow: bool) -> None:
        if follow:
            if self.history:  # lines read from disk are on top: back to the newest only
                self.history = 0
                self.raw.extend(self._held)
                self.seqs.extend(self._held_seqs)
                self._held.clear()
                self._held_seqs.clear()
                self.raw = deque(list(self.raw)[-MAX_LINES:], maxlen=MAX_LINES)
                self.seqs = deque(list(self.seqs)[-MAX_LINES:], maxlen=MAX_LINES)
                self._rewrite(scroll_end=True)
            elif self._held:  # only what arrived while paused is written, not all again
                held = list(self._held)
                self._held.clear()
                self.raw.extend(held)
                self.seqs.extend(self._held_seqs)
                self._held_seqs.clear()
                self.write_lines(self._rows(held), scroll_end=True)
            self.pending = 0
            self.match_row = None
            self.scroll_end(animate=False, immediate=True)
        self.post_message(self.FollowChanged(follow))

    def set_pattern(self, pattern: re.Pattern[str] | None) -> None:
        self.styler.pattern = pattern
        self.styler.forget()
        self.refresh()

    def set_dim_nccl(self, dim: bool) -> None:
        self.styler.dim_nccl = dim
        self.styler.forget()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self.styler.forget()

    # -- moving around ---------------------------------------------------------------------

    def jump_to(self, row: int) -> None:
        """Put ``row`` in view and mark it; following stops so it stays there."""
        self.follow = False
        self.match_row = row
        self.scroll_to(y=max(0, row - self.scrollable_content_region.height // 3),
                       animate=False, immediate=True)
        self.refresh()

    def find_row(self, start: int, forward: bool, pattern: re.Pattern[str] | None,
                 level: Level | None = None) -> int | None:
        lines = self.lines
        n = len(lines)
        rng = range(start, n) if forward else range(min(start, n - 1), -1, -1)
        for y in rng:
            text = lines[y]
            if pattern is not None and pattern.search(text):
                return y
            if level is not None and line_style(text) is level:
                return y
        return None

    def watch_match_row(self) -> None:
        self.refresh()

    def render_lines(self, crop: Region) -> list[Strip]:
        """Reads the style, width and scroll once per paint; per row they cost more than
        the row itself."""
        self._paint = self._read_paint()
        try:
            return super().render_lines(crop)
        finally:
            self._paint = None

    def _read_paint(self) -> tuple[Style, int, Offset, bool]:
        return (self.rich_style, self.scrollable_content_region.width, self.scroll_offset,
                self.text_selection is not None)

    def render_line(self, y: int) -> Strip:
        base, width, (scroll_x, scroll_y), selecting = self._paint or self._read_paint()
        if selecting:  # mouse selection: Log's own path draws it
            return super().render_line(y)
        index = scroll_y + y
        lines = self.lines
        if index >= len(lines):
            return Strip.blank(width, base)
        return self.styler.row(lines[index], base, index == self.match_row, scroll_x, width,
                               index)

    def _pause(self) -> None:
        if self.follow and self.max_scroll_y > 0:
            self.follow = False

    def action_scroll_up(self) -> None:
        self._pause()
        super().action_scroll_up()

    def action_page_up(self) -> None:
        self._pause()
        super().action_page_up()

    def on_mouse_scroll_up(self, event: MouseScrollUp) -> None:
        self._pause()

    def action_resume(self) -> None:
        self.follow = True

    def action_older(self) -> None:
        self._pause()
        if self.scroll_y <= 0:
            self.post_message(self.OlderWanted())
        self.scroll_home(animate=False, immediate=True)
