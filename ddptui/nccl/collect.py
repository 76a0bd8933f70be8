"""The incremental parser: NCCL lines in, per-rank and per-node facts out.

Fed only lines :mod:`ddptui.events` already classed as NCCL, so the hot path of ordinary
worker lines pays nothing for it. Each line costs one substring search to find NCCL's token,
one dict lookup on the message's first word, and at most one precompiled regex; a line of no
known shape is counted in ``RankFacts.unknown`` and otherwise ignored, never raised on.
"""

from __future__ import annotations

from collections.abc import Callable

import ddptui.nccl.grammar as g
from ddptui.events import JSON, LogLine, Source
from ddptui.nccl.facts import (
    MAX_COMMS,
    MAX_WARNS,
    Communicator,
    Hca,
    Interface,
    NcclWarn,
    NodeFacts,
    RankFacts,
)

Handler = Callable[[RankFacts, str, str, float | None], bool]


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _version(r: RankFacts, body: str, text: str, time: float | None) -> bool:
    found = g.nccl_version(body)
    if found is None:
        return False
    r.nccl_version, r.cuda_runtime = found[0], found[1] or r.cuda_runtime
    r.evidence.setdefault("version", text)
    return True


def _driver(r: RankFacts, body: str, text: str, time: float | None) -> bool:
    r.cuda_driver = g.cuda_driver(body) or r.cuda_driver
    return r.cuda_driver is not None


def _add(into: list[Interface], found: list[tuple[str, str]], role: str) -> None:
    for name, addr in found:
        iface = Interface(name, addr, role)
        if iface not in into:
            into.append(iface)


def _bootstrap(r: RankFacts, body: str, text: str, time: float | None) -> bool:
    listing = g.bootstrap_listing(body)
    if listing is None:
        return body.startswith("Bootstrap timings")
    _add(r.bootstrap, g.interfaces(listing), "bootstrap")
    r.evidence.setdefault("bootstrap", text)
    return True


def _net(r: RankFacts, body: str, text: str, time: float | None) -> bool:
    word = g.first_word(body).rstrip(":")
    found = g.gdr(body) if "GPU Direct RDMA" in body else None
    if found is not None:
        r.gdr[found[1]] = found[0]
    elif word == "NET/IB" and "No device found" in body:
        r.note(body.strip())
        r.hcas = r.hcas or []
    elif word == "NET/IB" and ": Using" in body:
        devs = g.ib_devices(body)
        if devs is None:
            return False
        r.hcas = [Hca(*d) for d in devs[0]] or (r.hcas or [])
        _add(r.ib_oob, g.interfaces(devs[1]), "ib-oob")
        r.evidence.setdefault("ib", text)
    elif word == "NET/Socket" and ": Using" in body:
        _add(r.sockets, g.interfaces(body[body.find(": Using") + 7:]), "socket")
        r.evidence.setdefault("sockets", text)
    elif word == "NET/Plugin":
        r.note(body.strip())
        if "Loaded net plugin " in body:
            r.net_plugin = body.split("Loaded net plugin ", 1)[1].strip()
    elif word in ("NET/IB", "NET/Socket"):
        return False
    elif word[4:5].isdigit():  # GRAPH's topology path `NET/0-0 :GPU/0-60 (3/1.2/PHB) ...`
        return True
    else:  # a named plugin speaking for itself, e.g. `NET/OFI Using aws-ofi-nccl 1.7.4`
        r.net_plugin = r.net_plugin or word[4:]
        r.note(body.strip())
    return True


def _using(r: RankFacts, body: str, text: str, time: float | None) -> bool:
    if not body.startswith("Using network "):
        return False
    r.network = body[14:].strip() or r.network
    r.evidence["network"] = text
    return True


def _plugin_step(r: RankFacts, body: str, text: str, time: float | None) -> bool:
    """``Failed to initialize NET plugin IB``, ``Initialized``/``Assigned NET plugin Socket``
    (2.27+): the steps of IB -> Socket fallback, kept as notes to say why."""
    if "NET plugin " not in body:
        return False
    r.note(body.strip())
    if body.startswith("Assigned NET plugin ") and r.network is None:
        r.network = body[20:].removesuffix(" to comm").strip() or None
    return True


def _p2p(r: RankFacts, body: str, text: str, time: float | None) -> bool:
    if body.startswith("P2P plugin "):  # pre-2.12 name of the NET plugin in use
        r.net_plugin = body[11:].strip() or r.net_plugin
    return True


def _speed(r: RankFacts, body: str, text: str, time: float | None) -> bool:
    found = g.speed_fallback(body)
    if found is None:
        return False
    r.speed_fallbacks[found[0]] = found[1]
    r.evidence.setdefault("speed", text)
    return True


def _env(r: RankFacts, body: str, text: str, time: float | None) -> bool:
    found = g.env_setting(body)
    if found is None:
        return False
    r.env[found[0]] = found[1]
    if found[0] in ("NCCL_IB_DISABLE", "NCCL_NET"):
        r.note(body.strip())
    return True


def _comm(r: RankFacts, body: str, text: str, time: float | None) -> bool:
    fields = g.comm_fields(body)
    ptr = fields.get("comm")
    if ptr is None:
        return False
    starting = "Init START" in body
    c = r.comms.get(ptr)
    if c is None or (starting and c.done):  # a pointer freed and reused by a later comm
        if ptr not in r.comms and len(r.comms) >= MAX_COMMS:
            return True
        c = r.comms[ptr] = Communicator(ptr)
    word = g.first_word(body)
    if word.startswith("nccl"):
        c.func = word
    c.comm_id = fields.get("commid", c.comm_id)
    c.bus_id = fields.get("busid", c.bus_id)
    for attr, key in (("rank", "rank"), ("nranks", "nranks"), ("n_nodes", "nnodes"),
                      ("local_ranks", "localranks"), ("local_rank", "localrank"),
                      ("cuda_dev", "cudadev"), ("nvml_dev", "nvmldev")):
        value = _int(fields.get(key))
        if value is not None:
            setattr(c, attr, value)
    if r.rank is None and c.rank is not None and "Destroy" not in body:
        r.rank = c.rank
    if starting:
        c.started = time
    elif "Init COMPLETE" in body:
        c.completed = time
        c.evidence = c.evidence or text
    return True


def _init(r: RankFacts, body: str, text: str, time: float | None) -> bool:
    found = g.init_timings(body)
    if found is None:
        return False
    rank, total, phases = found
    for c in reversed(r.comms.values()):
        if c.nccl_total_s is None and c.rank in (rank, None):
            c.nccl_total_s, c.phases, c.evidence = total, phases, text
            break
    return True


def _channel(r: RankFacts, body: str, text: str, time: float | None) -> bool:
    if " via " in body:
        conn = g.connection(body)
        if conn is None:
            return False
        r.transports[conn[3]] = r.transports.get(conn[3], 0) + 1
        r.gdr_connections += conn[4]
        return True
    found = g.ring(body)
    if found is not None:
        r.ring_channels = max(r.ring_channels or 0, found[1])
        if found[0] == 0:
            r.ring_order = found[2][:1024]
        return True
    if body.startswith("Ring ") and " -> " in body:  # `Ring 00 : 0 -> 1 -> 2` (SUBSYS=ALL)
        index = _int(body[5:body.find(" ", 5)] if body.find(" ", 5) > 5 else None)
        if index is not None:
            r.ring_channels = max(r.ring_channels or 0, index + 1)
        return True
    return False


def _connected(r: RankFacts, body: str, text: str, time: float | None) -> bool:
    rings = g.rings_connected(body)
    if rings is not None:
        r.rings_connected = True
        r.ring_pxn, r.ring_gdr = rings
    elif body.startswith("Connected all trees"):
        r.trees_connected = True
    elif body.startswith("Connected NVLS"):
        r.nvls_tree = True
    return True


def _nvls(r: RankFacts, body: str, text: str, time: float | None) -> bool:
    if body.startswith("NVLS multicast support is "):
        r.nvls_multicast = "not available" not in body
    return True


def _note(r: RankFacts, body: str, text: str, time: float | None) -> bool:
    r.note(body.strip())  # `Plugin Path : /opt/hpcx/.../libnccl-net.so`
    return True


def _gdr(r: RankFacts, body: str, text: str, time: float | None) -> bool:
    found = g.gdr(body)
    if found is not None:
        r.gdr[found[1]] = found[0]
    return found is not None


def _known(r: RankFacts, body: str, text: str, time: float | None) -> bool:
    return True


_INFO: dict[str, Handler] = {
    "NCCL": _version,
    "cudaDriverVersion": _driver,
    "Bootstrap": _bootstrap,
    "Bootstrap:": _bootstrap,
    "Using": _using,
    "Failed": _plugin_step,
    "Initialized": _plugin_step,
    "Assigned": _plugin_step,
    "P2P": _p2p,
    "Plugin": _note,
    "Could": _speed,
    "comm": _comm,
    "Init": _init,
    "Channel": _channel,
    "Ring": _channel,
    "Connected": _connected,
    "NVLS": _nvls,
    "GPU": _gdr,
    "Trees": _known,
    "Tree": _known,
}


class NcclFacts:
    """Every node's NCCL facts, built up line by line as the run's lines arrive."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeFacts] = {}
        self.ignored = 0  # lines with no NCCL token at all

    def feed_line(self, line: LogLine) -> None:
        """Feed one event line if it is NCCL's (the event parser has classed it already, so
        the other lines of a flood cost one comparison here)."""
        if line.source is Source.NCCL:
            self.feed(line.node, line.rank, line.text, line.time)

    def feed(self, node: str, rank: int | None, text: str, time: float | None = None) -> None:
        """One NCCL line of ``node`` (``rank`` from torchrun's prefix, None when unprefixed)."""
        parts = g.split_line(text)
        if parts is None:
            self.ignored += 1
            return
        kind, head, body = parts
        r = self._rank(node, rank, head)
        r.lines += 1
        if kind == "WARN":
            self._warn(r, head, body, text)
            return
        if kind == "VERSION":
            ok = _version(r, body, text, time)
        else:
            body = body.rstrip()
            word = g.first_word(body)
            handler = _INFO.get(word)
            if handler is None:
                if word.startswith("NET/"):
                    handler = _net
                elif word.startswith("nccl"):
                    handler = _comm
                elif word.isdigit():
                    handler = _counts
                elif word.startswith("NCCL_"):
                    handler = _env
            ok = handler is not None and handler(r, body, text, time)
        if not ok:
            r.unknown += 1

    def _rank(self, node: str, rank: int | None, head: str) -> RankFacts:
        facts = self.nodes.get(node)
        if facts is None:
            facts = self.nodes[node] = NodeFacts(node)
        if rank is not None:
            r = facts.ranks.get(str(rank))
            if r is None:
                h = g.parse_head(head)
                r = facts.ranks[str(rank)] = RankFacts(str(rank), rank, h.host, h.pid)
            return r
        # Unprefixed lines (plain torchrun output) tell processes apart only by pid.
        h = g.parse_head(head) if head else g.Head()
        label = f"pid {h.pid}" if h.pid is not None else "-"
        r = facts.ranks.get(label)
        if r is None:
            r = facts.ranks[label] = RankFacts(label, None, h.host, h.pid)
        return r

    def _warn(self, r: RankFacts, head: str, body: str, text: str) -> None:
        h = g.parse_head(head)
        message = body.strip()
        if len(r.warns) < MAX_WARNS:
            r.warns.append(NcclWarn(message, h.position, h.func, h.stamp, h.host, text))
        if "no socket interface found" in message:
            r.no_socket_interface = True
        elif message.startswith("NET/IB : No device") or "libibverbs" in message:
            r.note(message)

    def to_dict(self) -> dict[str, JSON]:
        """Only JSON types: for ``run.json``."""
        return {"nodes": {n: f.to_dict() for n, f in self.nodes.items()},
                "ignored": self.ignored}


def _counts(r: RankFacts, body: str, text: str, time: float | None) -> bool:
    counts = g.channel_counts(body)
    r.channels.update(counts)
    return bool(counts)
