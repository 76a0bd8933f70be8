"""The log pane: the log, its filter box and its status line, and what the log shows.

One composite widget, as toolong's ``LogView``: it owns the view (all ranks, a rank, a node,
NCCL, problems), the filter, the cursor into the store's lines, and writes what they select
into its :class:`LogView` in batches; older lines come from disk, the view is saved to a file.
The screen calls :meth:`LogPane.update` on its timer and forwards the keys.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input

from ddptui.bars import BarRows
from ddptui.events import Level, LogLine
from ddptui.store.reader import page_before
from ddptui.store.store import Store
from ddptui.tui.views import VIEW_ORDER, ViewKind, ViewSpec, compile_filter, format_line
from ddptui.tui.widgets.log_status import LogState, LogStatus
from ddptui.tui.widgets.log_view import MAX_LINES, LogView

#: Lines read from disk per ``home`` at the top.
OLDER_CHUNK = 1000
#: Lines written to the log per tick at most (6k/s at 15 Hz); a flood beyond that is more
#: than anyone reads: the newest are shown, the rest counted and kept in the rings and on disk.
TICK_LINES = 400
#: A drain that brings this many lines means a flood: then the log is written twice a
#: second, not 15 times (scrolling text that fast is unreadable, and each write repaints it all).
FLOOD_LINES = 200
FLOOD_EVERY_S = 0.5


class LogPane(Vertical):
    """The log of the run's lines as the current view and filter select them.

    Toasts go through the app, which shows them as plain text (they quote the nodes' lines
    and the user's regexes).
    """

    DEFAULT_CSS = """
    LogPane {
        width: 1fr;
        height: 1fr;

        #filter {
            height: 3;
            dock: bottom;
            margin-bottom: 1;
        }
    }
    """

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time,
                 id: str | None = None) -> None:
        super().__init__(id=id)
        self.store = store
        #: The clock that names saved views.
        self.clock = clock
        #: Which lines the log shows.
        self.view = ViewSpec()
        #: The filter: only lines it finds are shown, its matches marked.
        self.pattern: re.Pattern[str] | None = None
        #: Lines that a flood pushed past the log (they are on disk).
        self.skipped = 0
        #: The store's sequence number up to which its lines were read.
        self.cursor = 0
        #: Drains bring so many lines that the log is written less often.
        self.flooding = False
        self._last_drain = 0.0
        #: The log shows another view, run or filter than it should: rebuild it when shown.
        self._stale = True
        #: The newest line of a rebuild, which the next drain may bring again.
        self._rebuilt_through: LogLine | None = None
        #: Each rank's live progress bar line in the log: its next state is written there.
        self._bars = BarRows()

    def compose(self) -> ComposeResult:
        yield LogView(id="log")
        box = Input(placeholder="regex (smart case); enter: filter, esc: clear", id="filter")
        box.display = False  # until `/`
        yield box
        yield LogStatus(id="log-status")

    @property
    def log_view(self) -> LogView:
        return self.query_one("#log", LogView)

    @property
    def filter_box(self) -> Input:
        return self.query_one("#filter", Input)

    @property
    def log_status(self) -> LogStatus:
        return self.query_one("#log-status", LogStatus)

    def follow_store(self, store: Store) -> None:
        """Show another run's store, from its start; the view and filter stay."""
        self.store = store
        self.skipped = 0
        self.cursor = 0
        self.flooding = False
        self._last_drain = 0.0
        self._stale = True
        self._rebuilt_through = None

    def mark_stale(self) -> None:
        """Rebuild the log the next time it is updated while shown."""
        self._stale = True

    # -- reading the store -----------------------------------------------------------------

    def update(self, changed: bool = False) -> None:
        """Bring the log up to date with the store, in one batch; while hidden, only move
        the cursor (``changed``: the store did change) and rebuild once shown."""
        store = self.store
        if self.display:
            now = time.monotonic()
            if self._stale:
                self._rebuild()
            elif store.seq != self.cursor and (
                    not self.flooding or now - self._last_drain >= FLOOD_EVERY_S):
                self._last_drain = now
                self._drain()
        elif changed:
            self.cursor = store.seq
            self._stale = True
        self.refresh_status()

    def _drain(self) -> None:
        before = self.cursor
        lines, self.cursor, skipped = self.store.lines_since(self.cursor, TICK_LINES)
        seqs: Sequence[int] = range(self.cursor - len(lines) + 1, self.cursor + 1)
        self.flooding = self.cursor - before >= FLOOD_LINES
        self.skipped += skipped
        if self._rebuilt_through is not None:
            mark, self._rebuilt_through = self._rebuilt_through, None
            for i in range(len(lines) - 1, -1, -1):
                if lines[i] is mark:
                    lines, seqs = lines[i + 1:], seqs[i + 1:]
                    break
        if lines:
            new, numbers, changed = self._placed(lines, self.store.skips.disk_seqs(seqs))
            log = self.log_view
            log.append(new, numbers)
            if changed:
                log.rewrite_at(changed, self._bars.count)

    def _placed(self, lines: list[LogLine], seqs: Sequence[int]
                ) -> tuple[list[str], Sequence[int], dict[int, str]]:
        """The lines the view shows, a rank's progress bar states in its live line's place
        (see :class:`BarRows`): (lines to add, the sequence number of each as the mirror
        counts them, {an earlier line: its new text})."""
        lines, seqs = self._chosen(lines, seqs)
        view = self.view
        if self._bars.live or any(line.bar for line in lines):
            new, changed = self._bars.place([(format_line(line, view), line.rank, line.bar)
                                             for line in lines])
            return new, [seqs[i] for i in self._bars.made], changed
        self._bars.count += len(lines)
        return [format_line(line, view) for line in lines], seqs, {}

    def _chosen(self, lines: list[LogLine], seqs: Sequence[int]
                ) -> tuple[list[LogLine], Sequence[int]]:
        """The lines the view and the filter keep, and their sequence numbers."""
        accepts, pattern = self.view.accepts, self.pattern
        if pattern is None:
            kept = [i for i, line in enumerate(lines) if accepts(line)]
        else:
            search = pattern.search
            kept = [i for i, line in enumerate(lines) if accepts(line) and search(line.text)]
        if len(kept) == len(lines):
            return lines, seqs
        return [lines[i] for i in kept], [seqs[i] for i in kept]

    def _rebuild(self) -> None:
        """A fresh view: newest lines from the rings, then follow from the store's cursor."""
        store = self.store
        self._stale = False
        self.cursor = store.seq
        rank = self.view.rank if self.view.kind is ViewKind.RANK else None
        source, seqs = store.numbered_tail(rank)
        self._rebuilt_through = source[-1] if source else None
        log = self.log_view
        log.set_dim_nccl(self.view.kind is ViewKind.ALL)
        log.set_pattern(self.pattern)
        self._bars = BarRows()
        shown, numbers, _ = self._placed(source, store.skips.disk_seqs(seqs))
        log.set_lines(shown[-MAX_LINES:], numbers[-MAX_LINES:])
        self._drain()

    def refresh_status(self) -> None:
        log = self.log_view
        self.log_status.state = LogState(
            self.view.label, log.follow, log.pending, log.wrap,
            self.pattern.pattern if self.pattern else "", log.history,
            self.skipped + self.store.not_live,  # neither came to this view; both are on disk
        )

    # -- views -----------------------------------------------------------------------------

    def set_view(self, view: ViewSpec) -> None:
        self.view = view
        self._stale = True
        self.log_view.follow = True
        self.update()

    def targets(self, kind: ViewKind) -> list[ViewSpec]:
        """A view per rank, or per node, that the run has so far."""
        if kind is ViewKind.RANK:
            return [ViewSpec(kind, rank=r.rank) for r in self.store.rank_views()]
        if kind is ViewKind.NODE:
            return [ViewSpec(kind, node=n.name) for n in self.store.node_views()]
        return []

    def action_next_view(self) -> None:
        i = VIEW_ORDER.index(self.view.kind)
        for step in range(1, len(VIEW_ORDER) + 1):
            kind = VIEW_ORDER[(i + step) % len(VIEW_ORDER)]
            if kind in (ViewKind.RANK, ViewKind.NODE):
                targets = self.targets(kind)
                if not targets:
                    continue
                self.set_view(self.view if self.view in targets else targets[0])
            else:
                self.set_view(ViewSpec(kind))
            return

    def action_cycle_target(self, step: int) -> None:
        kind = self.view.kind
        if kind not in (ViewKind.RANK, ViewKind.NODE):
            kind = ViewKind.RANK
        targets = self.targets(kind)
        if not targets:
            return
        i = targets.index(self.view) + step if self.view in targets else 0
        self.set_view(targets[i % len(targets)])

    # -- the filter ------------------------------------------------------------------------

    def action_filter(self) -> None:
        box = self.filter_box
        box.display = True
        box.value = self.pattern.pattern if self.pattern else ""
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "filter":
            return
        self.set_filter(event.value)
        event.input.display = False
        self.log_view.focus()

    def set_filter(self, text: str) -> None:
        pattern, problem = compile_filter(text)
        if problem:
            self.app.notify(problem, severity="warning")
        self.pattern = pattern
        self.set_view(self.view)

    def action_clear_filter(self) -> None:
        box = self.filter_box
        if box.display:
            box.display = False
            self.log_view.focus()
            return
        if self.pattern is not None:
            self.set_filter("")

    def _jump(self, forward: bool, level: Level | None = None) -> None:
        log = self.log_view
        pattern = None if level else self.pattern
        if pattern is None and level is None:
            self.app.notify("No filter: press / first.", severity="warning")
            return
        if log.match_row is None:
            start = 0 if forward else len(log.lines) - 1
        else:
            start = log.match_row + (1 if forward else -1)
        row = log.find_row(start, forward, pattern, level)
        if row is None and log.match_row is not None and level is None:  # wrap around
            row = log.find_row(0 if forward else len(log.lines) - 1, forward, pattern)
        if row is None:
            self.app.notify("No error in this view." if level else "No more matches.")
            return
        log.jump_to(row)

    def action_next_match(self) -> None:
        self._jump(True)

    def action_previous_match(self) -> None:
        self._jump(False)

    def action_first_error(self) -> None:
        self.log_view.match_row = None
        self._jump(True, Level.ERROR)

    def show_step(self, rank: int, step: float, said: str) -> None:
        """Rank ``rank``'s lines, at the first that names step ``step`` (a spike or NaN the
        chart went to, ``said``); lines older than the view's are on disk only."""
        self.set_view(ViewSpec(ViewKind.RANK, rank=rank))
        number = re.escape(f"{step:.0f}" if step == int(step) else f"{step:g}")
        row = self.log_view.find_row(0, True, re.compile(rf"(?<![\w.]){number}(?![\w.])"))
        if row is None:
            self.app.notify(f"{said}; no line of rank {rank} in view names that step.")
            return
        self.log_view.jump_to(row)
        self.app.notify(said, timeout=4)

    # -- follow, wrap, older lines, save ---------------------------------------------------

    def action_toggle_follow(self) -> None:
        log = self.log_view
        log.follow = not log.follow
        self.refresh_status()

    def action_toggle_wrap(self) -> None:
        log = self.log_view
        log.wrap = not log.wrap
        self.refresh_status()

    def on_log_view_follow_changed(self, _: LogView.FollowChanged) -> None:
        self.refresh_status()  # at once: a key's effect should not wait a tick

    def on_log_view_older_wanted(self, _: LogView.OlderWanted) -> None:
        view, run_dir, log = self.view, self.store.run_dir, self.log_view
        if view.kind not in (ViewKind.RANK, ViewKind.NODE, ViewKind.ALL):
            self.app.notify("Older lines come from disk in the all-ranks, rank and node views: "
                            "pick one with v or [ ].")
            return
        if run_dir is None or not log.raw:
            return
        tags: tuple[str, ...] = ()  # a node's lines in the all-ranks log: their rank's or its
        if view.kind is ViewKind.NODE:
            node = next((n for n in self.store.node_views() if n.name == view.node), None)
            ranks = sorted(node.ranks) if node is not None else []
            tags = (*(f"[{r}] " for r in ranks), f"[{view.node}] ")
        rank = view.rank if view.kind is ViewKind.RANK else None
        self._read_older(run_dir, rank, log.first_seq, log.raw[0], tags, self.pattern)

    @work(thread=True, exclusive=True, group="scrollback")
    def _read_older(self, run_dir: Path, rank: int | None, seq: int | None, first: str,
                    tags: tuple[str, ...], pattern: re.Pattern[str] | None) -> None:
        """Off the loop: the ``OLDER_CHUNK`` lines on disk before the log's first one, found
        by its sequence number (by its text only in a run dir mirrored without them)."""
        keep = None
        if tags or pattern is not None:
            search = pattern.search if pattern is not None else None

            def keep(line: str) -> bool:
                return (not tags or line.startswith(tags)) and (
                    search is None or search(line) is not None)

        page = page_before(run_dir, rank, seq, first, OLDER_CHUNK, keep)
        if not page.lines:
            self.app.call_from_thread(self.app.notify, "No older lines on disk.")
            return
        self.app.call_from_thread(self.log_view.prepend, page.lines, page.seqs)

    def action_save_view(self) -> None:
        lines = list(self.log_view.raw)
        base = self.store.run_dir or Path.cwd()
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(self.clock()))
        name = re.sub(r"[^\w.-]+", "-", self.view.label)
        self._save(base / f"view-{name}-{stamp}.log", lines)

    @work(thread=True, group="save")
    def _save(self, path: Path, lines: list[str]) -> None:
        try:
            path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        except OSError as e:
            self.app.call_from_thread(self.app.notify, f"Cannot save: {e}", severity="error")
            return
        self.app.call_from_thread(self.app.notify, f"Saved {len(lines):,} lines to {path}",
                                  title="Saved")
