"""The facts as a plain-text table, a row per fact and a column per node.

Node-wise columns because the question is almost always "which node differs": a person
reads across a row. Pure (returns the string) so that ``ddptui nccl RUN_ID`` and a test
print the same thing.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from ddptui.nccl.collect import NcclFacts
from ddptui.nccl.facts import Communicator, NodeFacts, RankFacts

MAX_CELL = 56


def _join(values: list[str]) -> str:
    return ", ".join(values) if values else "-"


def _ifaces(n: NodeFacts, role: str) -> str:
    return _join([i.label for i in n.interfaces if i.role == role])


def _hcas(n: NodeFacts) -> str:
    if n.hcas:
        return " ".join(h.label + ("/SHARP" if h.sharp else "") for h in n.hcas)
    said = any(r.ib_found is False for r in n.ranks.values())
    return "none" if said else "-"


def _network(n: NodeFacts) -> str:
    plugins = list(dict.fromkeys(r.net_plugin for r in n.ranks.values() if r.net_plugin))
    text = _join(n.networks)
    return f"{text} (plugin {', '.join(plugins)})" if plugins else text


def _gdr(n: NodeFacts) -> str:
    states = {k: v for r in n.ranks.values() for k, v in r.gdr.items()}
    conns = sum(r.gdr_connections for r in n.ranks.values())
    if not states and not conns:
        return "-"
    on = [k for k, v in states.items() if v]
    text = ("on " + ", ".join(on)) if on else "off"
    return f"{text}; {conns} GDRDMA conns" if conns else text


def _shape(n: NodeFacts) -> str:
    shapes = list(dict.fromkeys(f"{c.nranks} ranks/{c.n_nodes} nodes/{c.local_ranks} local"
                                for _, c in n.comms if c.n_nodes is not None))
    return _join(shapes)


def _counts(channels: dict[str, int]) -> str:
    text = " ".join(f"{k} {v}" for k, v in channels.items() if not k.endswith("_per_peer"))
    per_peer = channels.get("p2p_per_peer")
    return f"{text} ({per_peer}/peer)" if per_peer is not None else text


def _channels(n: NodeFacts) -> str:
    seen = list(dict.fromkeys(_counts(r.channels) for r in n.ranks.values() if r.channels))
    rings = [r.ring_channels for r in n.ranks.values() if r.ring_channels]
    text = " | ".join(seen) if seen else "-"
    return f"{text}; rings {max(rings)}" if rings else text


def _transports(n: NodeFacts) -> str:
    total: dict[str, int] = {}
    for r in n.ranks.values():
        for k, v in r.transports.items():
            total[k] = total.get(k, 0) + v
    return _join([f"{k} x{v}" for k, v in total.items()])


def _connected(n: NodeFacts) -> str:
    ranks = list(n.ranks.values())
    parts = [name for name, flag in (("rings", any(r.rings_connected for r in ranks)),
                                     ("trees", any(r.trees_connected for r in ranks)),
                                     ("NVLS tree", any(r.nvls_tree for r in ranks))) if flag]
    multicast = [r.nvls_multicast for r in ranks if r.nvls_multicast is not None]
    if multicast:
        parts.append("NVLS multicast " + ("on" if any(multicast) else "off"))
    return _join(parts)


def _init(n: NodeFacts) -> str:
    times = [t for _, c in n.comms if (t := c.init_seconds) is not None]
    if not times:
        return "-"
    if len(times) == 1:
        return f"{times[0]:.2f} s"
    return f"median {statistics.median(times):.2f} s, max {max(times):.2f} s"


_ROWS: tuple[tuple[str, Callable[[NodeFacts], str]], ...] = (
    ("processes", lambda n: str(len(n.ranks))),
    ("NCCL", lambda n: _join(n.nccl_versions)),
    ("CUDA driver", lambda n: _join(n.cuda_drivers)),
    ("CUDA (NCCL build)", lambda n: _join(n.cuda_runtimes)),
    ("network", _network),
    ("why not IB", lambda n: _join(n.fallback_reasons)),
    ("bootstrap", lambda n: _ifaces(n, "bootstrap")),
    ("socket ifaces", lambda n: _ifaces(n, "socket")),
    ("IB HCAs", _hcas),
    ("GPU Direct RDMA", _gdr),
    ("communicators", lambda n: str(len(n.comms))),
    ("shape", _shape),
    ("channels", _channels),
    ("transports", _transports),
    ("connected", _connected),
    ("init time", _init),
    ("NCCL WARNs", lambda n: str(len(n.warns))),
    ("unparsed lines", lambda n: f"{sum(r.unknown for r in n.ranks.values())} of "
                                 f"{sum(r.lines for r in n.ranks.values())}"),
)


def _cell(text: str) -> str:
    return text if len(text) <= MAX_CELL else text[:MAX_CELL - 1] + "…"


#: What the table says of a run without a single NCCL line.
NO_LINES = "no NCCL lines (run with NCCL_DEBUG=INFO to see what NCCL chose)"


def table_rows(facts: NcclFacts) -> list[list[str]]:
    """The header row (a blank, then the nodes), then one row per fact: the text table's
    cells and the dashboard's, so the two never say different things."""
    nodes = list(facts.nodes.values())
    rows = [["", *(n.node for n in nodes)]]
    rows += [[label, *(_cell(fn(n)) for n in nodes)] for label, fn in _ROWS]
    return rows


def render_table(facts: NcclFacts) -> str:
    """Rows of facts, columns of nodes, padded with spaces; "-" where NCCL never said."""
    if not facts.nodes:
        return NO_LINES
    rows = table_rows(facts)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _comm_line(c: Communicator) -> str:
    shape = f"rank {c.rank} of {c.nranks}"
    if c.n_nodes is not None:
        shape += f", {c.n_nodes} node(s), {c.local_ranks} local"
    parts = [c.func or "comm", shape]
    if c.cuda_dev is not None:
        parts.append(f"cudaDev {c.cuda_dev}" + (f" busId {c.bus_id}" if c.bus_id else ""))
    t = c.init_seconds
    if t is not None:
        slow = c.slowest_phase
        parts.append(f"init {t:.2f} s" + (f" (most in {slow[0]}, {slow[1]:.2f} s)" if slow
                                          else ""))
    elif c.started is not None:
        parts.append("init not complete")
    if c.comm_id:
        parts.append(f"commId {c.comm_id}")
    return "; ".join(parts)


def rank_detail(r: RankFacts) -> list[tuple[str, str]]:
    """One process's facts as (label, text) pairs, every communicator and WARN on a pair of
    its own: what ``ddptui nccl --rank N`` prints and the dashboard shows for a selected
    rank."""
    one = NodeFacts("", {r.label: r})
    who = f"rank {r.rank}" if r.rank is not None else r.label
    host = f" on host {r.host}" if r.host else ""
    out = [("process", f"{who}{host}" + (f", pid {r.pid}" if r.pid is not None else ""))]
    version = r.nccl_version or "-"
    if r.cuda_runtime:
        version += f" (built for CUDA {r.cuda_runtime})"
    out += [("NCCL", version), ("CUDA driver", r.cuda_driver or "-"),
            ("network", _network(one)), ("why not IB", r.fallback_reason or "-"),
            ("bootstrap", _join([i.label for i in r.bootstrap])),
            ("socket ifaces", _join([i.label for i in r.sockets])),
            ("IB OOB", _join([i.label for i in r.ib_oob])),
            ("IB HCAs", _hcas(one)), ("GPU Direct RDMA", _gdr(one)),
            ("NCCL_* set", _join([f"{k}={v}" for k, v in r.env.items()])),
            ("channels", _channels(one)), ("transports", _transports(one)),
            ("connected", _connected(one))]
    out += [(f"comm {c.comm}", _comm_line(c)) for c in r.comms.values()]
    out += [("NCCL WARN", (f"{w.position}: " if w.position else "") + w.message)
            for w in r.warns]
    out += [("note", n) for n in r.net_notes]
    out.append(("lines", f"{r.lines} NCCL lines, {r.unknown} of no known shape"))
    return out


def render_rank(r: RankFacts, node: str) -> str:
    """:func:`rank_detail` as text, labels padded to one width."""
    pairs = [("node", node), *rank_detail(r)]
    width = max(len(label) for label, _ in pairs)
    return "\n".join(f"{label.ljust(width)}  {text}" for label, text in pairs)
