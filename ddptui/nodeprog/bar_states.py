"""A rank's output cut into lines and bar states, as a terminal shows it.

A carriage return (CR) on its own (a progress bar) ends a *bar state*, which a terminal writes
over; a newline ends an ordinary line, as on a terminal (a bar's final state, a tqdm.write
message). Blank states are dropped. A drawing that goes back up over the lines it drew before
(rich's live display, see :data:`ERASE`) is kept whole until the next one: its rows are the
bar states. Pure, and run on the node by the tee (``torchrun_tee.py``, which inlines it):
standard library only.
"""

from __future__ import annotations

import re

#: What ends a piece of a rank's output: a newline, or a carriage return on its own (a bar
#: state) that is not the last character, which may be the first half of a CR LF.
_END_RE = re.compile(r"\r\n|\n|\r(?=[\s\S])")
#: Cursor up: a nested bar (tqdm's ``position`` 1: Lightning's validation bar, the Trainer's
#: evaluation bar) goes down a line, draws, and comes back up, so the newline after it draws
#: nothing for good: such a piece is a bar state too, and the code itself is dropped.
UP = "\x1b[A"


def unraised(piece: str) -> str:
    """A piece without the cursor-ups a nested bar ends with."""
    while piece.endswith(UP):
        piece = piece[:-len(UP)]
    return piece


def cut(data: str, bar: bool) -> tuple[str, str, bool, bool]:
    """(the whole pieces of ``data``, each ending in a newline: a line as itself, a bar state
    after a CR, blank states left out; the rest; whether any piece ended; whether the rest
    follows a bare CR, given ``bar``, whether ``data`` does)."""
    if "\r" not in data and UP not in data and not (bar and data[:1] == "\x1b"):
        end = data.rfind("\n") + 1  # the common case: lines, as many as complete
        return data[:end], data[end:], end > 0, bar and not end
    lines, pos = [], 0
    while True:
        if bar and data.startswith("\x1b", pos):
            clear = _CLEAR_RE.match(data, pos)
            if (clear and clear.end() == len(data)) or _partial(
                    data[clear.end() if clear else pos:], (ERASE, *_UPS)):
                break  # a drawing's start, or a display cleared, maybe: decided by what comes
            if clear and not data.startswith(ERASE, pos):
                pos = clear.end()  # a display cleared (rich's transient one at its end)
                continue
            if data.startswith(ERASE, pos):
                closed = _drawing_end(data, pos)
                if closed is None:
                    break
                end, after, height = closed
                printed, rows = drawing(data[pos:end], height, final=not after)
                lines += [line + "\n" for line in printed]
                lines += [("\r" if after else "") + row + "\n" for row in rows]
                # past the CR that starts what follows, or the code that ends the display
                pos, bar = (end + 1, True) if after else (end + len(SHOW_CURSOR), False)
                continue
        m = _END_RE.search(data, pos)
        if m is None:
            break
        piece = data[pos:m.start()]
        bar = m.end() - m.start() == 1 and data[m.start()] == "\r"
        drawn = unraised(piece)
        up, piece = drawn != piece, drawn
        if not (bar or up):
            lines.append(piece + "\n")
        elif _visible(piece):
            lines.append(f"\r{piece}\n")
        pos = m.end()
    return "".join(lines), data[pos:], pos > 0, bar


#: A drawing that a terminal writes over whole (rich's ``Live``: Lightning's RichProgressBar,
#: pip's bars, ``rich.status``) starts with a CR and an erase of the line, then goes up and
#: erases as many lines as the drawing before it had (``LiveRender.position_cursor``). Then
#: come the lines printed meanwhile and the display itself, rows wrapped at the console's
#: width, its last line unended. So its newlines end no line: the drawing lasts until the CR
#: of the next one, whose ups say how many of its last lines were the display; or until the
#: display stops, showing the cursor again after a newline that leaves its last drawing for
#: good, as lines.
ERASE = "\x1b[2K"
_UPS = ("\x1b[1A", UP)
_GO_UP = tuple(up + ERASE for up in _UPS)
#: Ups and erases after a CR that draw nothing: a display cleared, the cursor back where it
#: began (``LiveRender.restore_cursor``).
_CLEAR_RE = re.compile(r"(?:\x1b\[1?A|\x1b\[2K)+")
_REDRAW_RE = re.compile(r"\x1b\[2K(?:\x1b\[1?A\x1b\[2K)*")
SHOW_CURSOR = "\x1b[?25h"
_CLOSE_RE = re.compile(r"\r(?!\n)|\x1b\[\?25h")
#: A control sequence: what a drawing's text holds besides what it shows.
_CSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def _partial(text: str, codes: tuple[str, ...]) -> bool:
    """Whether ``text`` may be the start of one of ``codes``, not yet all read."""
    return any(len(text) < len(c) and c.startswith(text) for c in codes)


def _visible(piece: str) -> bool:
    return bool(_CSI_RE.sub("", piece).strip()) if "\x1b" in piece else bool(piece.strip())


def _drawing_end(data: str, pos: int) -> tuple[int, bool, int | None] | None:
    """Where the drawing at ``pos`` ends, whether a CR (the next drawing, or a bar) follows
    rather than the display's end, and its display's height when the next drawing says it;
    None until that is read."""
    m = _CLOSE_RE.search(data, pos)
    if m is None or (m.end() == len(data) and m.group() == "\r"):
        return None  # no end yet, or a CR that may be half of a CR LF
    if m.group() != "\r":
        return m.start(), False, None
    tail = data[m.end():]
    up = _REDRAW_RE.match(tail)
    if up is None:
        return None if _partial(tail, (ERASE,)) else (m.start(), True, None)
    if _partial(tail[up.end():], _GO_UP):
        return None  # more ups may come
    return m.start(), True, up.group().count("A") + 1


def drawing(text: str, height: int | None, final: bool = False) -> tuple[list[str], list[str]]:
    """(the lines printed above the display, the display's rows) of one drawing's ``text``
    (from its erase on); ``height``: the display's lines, else as many as the drawing it
    erased (its own ups); ``final``: the display ended, its last line with a newline. A row
    is a line and the lines below it that start blank: its wrapped cells (a bar's postfix
    past the console's width), joined to it."""
    up = _REDRAW_RE.match(text)
    own = up.group().count("A") + 1 if up else 1
    lines = [line.removesuffix("\r") for line in text[up.end() if up else 0:].split("\n")]
    if final and lines[-1] == "":
        lines.pop()
    seen = [_CSI_RE.sub("", line) if "\x1b" in line else line for line in lines]
    top = max(0, len(lines) - (height or own))
    while height is None and top > 0 and seen[top][:1].isspace():
        top -= 1  # a guess that starts within a row: the display grew by a wrapped cell
    printed, rows = lines[:top], list[str]()
    for line, shows in zip(lines[top:], seen[top:], strict=True):
        if not shows.strip():
            continue
        if rows and shows[:1].isspace():
            rows[-1] += " " + line.strip()
        else:
            rows.append(line.rstrip())
    return printed, rows


def showing(rest: str, bar: bool) -> str:
    """What of the held ``rest`` to copy once the file stays quiet: the bar states it draws
    now, or nothing. A drawing's printed lines wait for its end."""
    if bar and rest.startswith(ERASE):
        end = _CLOSE_RE.search(rest)
        return "".join(f"\r{row}\n" for row in drawing(rest[:end.start() if end else None],
                                                        None)[1])
    state = unraised(rest.rstrip("\r"))
    return f"\r{state}\n" if (bar or state != rest) and _visible(state) else ""


def ending(rest: str, bar: bool) -> str:
    """The held ``rest`` as the last lines of a rank that ended: a drawing's rows stay as on
    a terminal, as lines."""
    if bar and rest.startswith(ERASE):
        end = _CLOSE_RE.search(rest)
        printed, rows = drawing(rest[:end.start() if end else None], None, final=True)
        return "".join(line + "\n" for line in printed + rows)
    return rest.rstrip("\r") + "\n" if rest.rstrip("\r") else ""
