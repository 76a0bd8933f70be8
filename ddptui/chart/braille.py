"""A line chart in braille cells: pure and fast enough to redraw twice a second.

Each cell is 2x4 dots; a series is drawn as its points joined column to column. A fill (the
ranks' min-max band) is a half-tone: every other dot between its low and its high, so that
it reads as an area beside the lines, and a cell a line passes through shows the line's dots
only. The result is rows of (character, series index) pairs, so the widget colours them and
tests read them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

# dot bit for (x % 2, y % 4) in a braille cell, per the Unicode braille pattern block
_DOT = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
#: A cell a fill covers whole: its half-tone (dots where x + y is even).
HALF_TONE = chr(0x2800 | 0x01 | 0x04 | 0x10 | 0x80)
#: A fill: the style index its cells get, and its steps, lows and highs (one each a column).
Fill = tuple[int, Sequence[float], Sequence[float], Sequence[float]]


@dataclass(frozen=True, slots=True)
class Frame:
    rows: list[list[tuple[str, int]]]  # height x width cells: (char, series or -1)
    x_range: tuple[float, float]
    y_range: tuple[float, float]


def bounds(series: Sequence[tuple[Sequence[float], Sequence[float]]], log_y: bool,
           x_range: tuple[float, float] | None = None
           ) -> tuple[float, float, float, float] | None:
    """The plot's x and y bounds: ``x_range`` if given, else the points' steps (each series
    in step order, or a stretch of it), and their values."""
    xs = [x for s in series if s[0] for x in (min(s[0]), max(s[0]))]
    ys = [y for s in series for y in s[1] if not log_y or y > 0]
    if not xs or not ys:
        return None
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    if x_range is not None:
        x0, x1 = x_range
    if log_y:
        y0, y1 = math.log10(y0), math.log10(y1)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    return x0, x1, y0, y1


def plot(series: Sequence[tuple[Sequence[float], Sequence[float]]], width: int, height: int,
         *, log_y: bool = False, x_range: tuple[float, float] | None = None,
         fills: Sequence[Fill] = ()) -> Frame | None:
    """Draw each (xs, ys) series into ``width`` x ``height`` cells, over ``x_range`` (else
    the points' own), over ``fills``; None when nothing to draw."""
    edges = [(xs, ends) for _, xs, lows, highs in fills for ends in (lows, highs)]
    b = bounds([*series, *edges], log_y, x_range)
    if b is None or width <= 0 or height <= 0:
        return None
    x0, x1, y0, y1 = b
    pw, ph = width * 2, height * 4
    sx = (pw - 1) / (x1 - x0)
    sy = (ph - 1) / (y1 - y0)
    bits = [[0] * width for _ in range(height)]
    owner = [[-1] * width for _ in range(height)]
    for index, (xs, ys) in enumerate(series):
        prev: tuple[int, int] | None = None
        for x, y in zip(xs, ys, strict=False):
            if log_y:
                if y <= 0:
                    continue
                y = math.log10(y)
            px = round((x - x0) * sx)
            py = ph - 1 - round((y - y0) * sy)
            if prev is not None and prev[0] == px and prev[1] == py:
                continue
            if prev is not None and prev[0] != px:
                # join to the previous point: fill the columns between, then the rise
                ppx, ppy = prev
                for cx in range(ppx + 1, px):
                    cy = ppy + (py - ppy) * (cx - ppx) // (px - ppx)
                    _dot(bits, owner, cx, cy, index)
                lo, hi = sorted((ppy, py))
                mid = (lo + hi) // 2
                for cy in range(lo, hi + 1) if hi - lo > 1 else ():
                    _dot(bits, owner, px if cy >= mid else ppx, cy, index)
            _dot(bits, owner, px, py, index)
            prev = (px, py)
    if fills:
        _fill(bits, owner, fills, log_y, (x0, sx, y0, sy))
    rows = [[(chr(0x2800 + bits[r][c]) if bits[r][c] else " ", owner[r][c])
             for c in range(width)] for r in range(height)]
    return Frame(rows, (x0, x1), (y0, y1))


def _fill(bits: list[list[int]], owner: list[list[int]], fills: Sequence[Fill], log_y: bool,
          scale: tuple[float, float, float, float]) -> None:
    """The fills' half-tone, joined column to column as a line's points are, in the cells
    no line went through."""
    x0, sx, y0, sy = scale
    ph = len(bits) * 4
    shade = [[0] * len(bits[0]) for _ in bits]
    shade_owner = [[-1] * len(bits[0]) for _ in bits]
    for index, xs, lows, highs in fills:
        edges: list[tuple[int, float, float]] = []  # dot column, top and bottom dot rows
        for x, low, high in zip(xs, lows, highs, strict=False):
            if log_y:
                if low <= 0:
                    continue
                low, high = math.log10(low), math.log10(high)
            edges.append((round((x - x0) * sx), ph - 1 - (high - y0) * sy,
                          ph - 1 - (low - y0) * sy))
        if len(edges) == 1:  # one column: both its dot columns
            px, top, bottom = edges[0]
            edges = [(px & ~1, top, bottom), (px | 1, top, bottom)]
        for (pa, ta, ba), (pb, tb, bb) in pairwise(edges):
            for px in range(pa, pb + 1):
                t = (px - pa) / (pb - pa) if pb > pa else 0.0
                top, bottom = round(ta + (tb - ta) * t), round(ba + (bb - ba) * t)
                for py in range(max(0, top), min(ph - 1, bottom) + 1):
                    if (px + py) % 2 == 0:
                        _dot(shade, shade_owner, px, py, index)
    for r, row in enumerate(bits):
        for c, cell in enumerate(row):
            if not cell and shade[r][c]:
                row[c] = shade[r][c]
                owner[r][c] = shade_owner[r][c]


def _dot(bits: list[list[int]], owner: list[list[int]], px: int, py: int, index: int) -> None:
    r, c = py >> 2, px >> 1
    if r < 0 or c < 0 or r >= len(bits) or c >= len(bits[0]):
        return
    bits[r][c] |= _DOT[px & 1][py & 3]
    owner[r][c] = index


def tick_label(value: float, log_y: bool) -> str:
    v = 10 ** value if log_y else value
    text = f"{v:.3g}"
    return text if len(text) <= 7 else f"{v:.1e}"
