"""The NCCL view (``i``): what NCCL chose on every node, what looks wrong, and each rank's
detail; ``l`` goes to the raw NCCL lines in the log.

The facts are the run's own, gathered once where the run is (``ddptui.live.nccl_watch``,
fed every NCCL line) and put in its store, whose replica here has them
(:attr:`ddptui.store.views.RunInfo.nccl`): the view gathers none itself, so it shows what
``ddptui nccl`` and the headless summary say. An engine that is gone leaves the last ones.

``l`` picks the log's NCCL view, and the screen returns it (``dismiss``): the caller shows it
where it shows logs, as it does with the other dialogs' answers.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, OptionList, Static
from textual.widgets.option_list import Option

from ddptui.events import Level
from ddptui.nccl import NO_LINES, NcclFacts, NcclWarning, nccl_warnings, rank_detail, table_rows
from ddptui.nccl.facts import RankFacts
from ddptui.tui.ports import NcclOwner
from ddptui.tui.views import ViewKind, ViewSpec

#: While the run is live, the store's facts are looked at again this often (NCCL prints most
#: of them at init, but a job may create communicators at any time).
REFRESH_S = 2.0
_STYLE = {Level.ERROR: "bold red", Level.WARNING: "yellow", Level.INFO: "", Level.DEBUG: "dim"}
_MARK = {Level.ERROR: "✖ ", Level.WARNING: "▲ ", Level.INFO: "• ", Level.DEBUG: "• "}


def warnings_text(facts: NcclFacts, warnings: list[NcclWarning]) -> Text:
    """The warnings as the view's top shows them: the advice, then NCCL's line, dimmed."""
    if not facts.nodes:
        return Text(NO_LINES, style="dim")
    if not warnings:
        return Text("Nothing looks wrong in what NCCL said about its setup.", style="green")
    out = Text()
    for i, w in enumerate(warnings):
        if i:
            out.append("\n")
        out.append(_MARK[w.severity] + w.text, style=_STYLE[w.severity])
        if w.evidence:
            out.append("\n    NCCL said: " + w.evidence.strip(), style="dim")
    return out


def rank_label(node: str, r: RankFacts) -> str:
    who = f"rank {r.rank}" if r.rank is not None else r.label
    return f"{who} ({node})"


class NcclScreen(ModalScreen[ViewSpec | None]):
    """Modal, so that the run keys (launch, stop) do nothing while it is up; the dashboard
    goes on following the run beneath it. Its result is the log view to show, if any."""

    DEFAULT_CSS = """
    NcclScreen {
        background: $background;
    }

    NcclScreen #nccl-title {
        height: 1;
        background: $panel;
        padding: 0 1;
    }

    NcclScreen #nccl-warnings {
        height: auto;
        max-height: 40%;
        padding: 0 1;
        border-bottom: solid $panel;
    }

    NcclScreen #nccl-table {
        height: 1fr;
    }

    NcclScreen #nccl-ranks {
        height: 1fr;
        border-top: solid $panel;
    }

    NcclScreen #nccl-rank-list {
        width: 28;
        height: 100%;
    }

    NcclScreen #nccl-rank-detail {
        width: 1fr;
        padding: 0 1;
    }
    """

    AUTO_FOCUS = "#nccl-rank-list"
    BINDINGS = [
        Binding("escape,i,q", "close", "Back"),
        Binding("l", "nccl_lines", "NCCL log lines"),
        Binding("r", "reload", "Refresh"),
        Binding("tab", "app.focus_next", "Next pane", show=False),
    ]

    def __init__(self, owner: NcclOwner) -> None:
        super().__init__()
        #: The run's owner (the app): the store and handle the facts come from.
        self.owner = owner
        self.facts = NcclFacts()
        self.warnings: list[NcclWarning] = []
        self._ranks: list[tuple[str, RankFacts]] = []
        self._seen: object = None

    def compose(self) -> ComposeResult:
        yield Static("NCCL", id="nccl-title")
        with VerticalScroll(id="nccl-warnings"):
            yield Static(id="nccl-warning-text")
        yield DataTable(id="nccl-table", zebra_stripes=True, cursor_type="row")
        with Horizontal(id="nccl-ranks"):
            yield OptionList(id="nccl-rank-list")
            with VerticalScroll(id="nccl-rank-detail"):
                yield Static(id="nccl-rank-text")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.action_reload()
        self.set_interval(REFRESH_S, self._tick)

    def _tick(self) -> None:
        if self.owner.live:
            self.action_reload()

    def action_reload(self) -> None:
        self.show(self.owner.store.run_info().nccl or NcclFacts())

    def show(self, facts: NcclFacts) -> None:
        """Draw ``facts``, the store's (shared with it: read, never changed), nodes in the
        run's order."""
        order = {v.name: i for i, v in enumerate(self.owner.store.node_views())}
        ordered = NcclFacts()
        ordered.nodes = dict(sorted(facts.nodes.items(), key=lambda kv: order.get(kv[0], 1 << 30)))
        facts = ordered
        seen = [(n.node, r.label, r.lines) for n in facts.nodes.values()
                for r in n.ranks.values()]
        if seen == self._seen:
            return
        self._seen = seen
        self.facts, self.warnings = facts, nccl_warnings(facts)
        run_id = self.owner.store.run_info().run_id or "no run"
        self._ranks = sorted(((n.node, r) for n in facts.nodes.values()
                              for r in n.ranks.values()),
                             key=lambda nr: (nr[1].rank is None, nr[1].rank or 0))
        self.query_one("#nccl-title", Static).update(Text(
            f"NCCL · {run_id} · {len(facts.nodes)} node(s), {len(self._ranks)} process(es) "
            f"with NCCL lines · {len(self.warnings)} warning(s)", style="bold"))
        self.query_one("#nccl-warning-text", Static).update(
            warnings_text(facts, self.warnings))
        self._fill_table(facts)
        self._fill_ranks()

    def _fill_table(self, facts: NcclFacts) -> None:
        table = self.query_one("#nccl-table", DataTable)
        table.clear(columns=True)
        if not facts.nodes:
            return
        header, *rows = table_rows(facts)
        table.add_columns("fact", *header[1:])
        for row in rows:
            table.add_row(Text(row[0], style="bold"), *row[1:])

    def _fill_ranks(self) -> None:
        options = self.query_one("#nccl-rank-list", OptionList)
        keep = options.highlighted
        options.clear_options()
        options.add_options([Option(rank_label(node, r)) for node, r in self._ranks])
        if self._ranks:
            options.highlighted = min(keep or 0, len(self._ranks) - 1)
            self._show_rank(options.highlighted)
        else:
            self.query_one("#nccl-rank-text", Static).update("")

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self._show_rank(event.option_index)

    def _show_rank(self, index: int | None) -> None:
        if index is None or not 0 <= index < len(self._ranks):
            return
        node, r = self._ranks[index]
        pairs = [("node", node), *rank_detail(r)]
        width = max(len(label) for label, _ in pairs)
        out = Text()
        for i, (label, text) in enumerate(pairs):
            out.append(("\n" if i else "") + label.ljust(width + 2), style="bold")
            out.append(text, style="yellow" if label == "NCCL WARN" else "")
        self.query_one("#nccl-rank-text", Static).update(out)

    def action_close(self) -> None:
        self.dismiss(None)

    def action_nccl_lines(self) -> None:
        """The raw lines behind the facts: the log pane's NCCL view."""
        self.dismiss(ViewSpec(ViewKind.NCCL))
