"""ddptui's advice from all nodes' NCCL facts: what looks wrong, where, and what to do.

Most NCCL trouble in a multi-node job is visible in the first init lines, long before a
hang or a timeout: a node that fell back to TCP, a bootstrap bound to ``lo`` or ``docker0``,
nodes on different NCCL builds. Each rule here names the node(s) and the fix, and carries one
line of NCCL's own output as evidence, so a person can check the claim in the log.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from ddptui.events import JSON, Level
from ddptui.nccl.collect import NcclFacts
from ddptui.nccl.facts import Communicator, Interface, NodeFacts, RankFacts

#: A communicator's init is "far longer" when it took more than SLOW_INIT_FACTOR times the
#: median of the other ranks of the same communicator, and at least SLOW_INIT_MARGIN_S more:
#: the factor ignores noise among fast inits, the margin ignores 0.2 s against 0.05 s.
SLOW_INIT_FACTOR = 3.0
SLOW_INIT_MARGIN_S = 5.0

_BRIDGES = ("docker", "veth", "virbr", "br-", "cni", "flannel", "cali")
_ORDER = {Level.ERROR: 0, Level.WARNING: 1, Level.INFO: 2, Level.DEBUG: 3}


@dataclass(frozen=True, slots=True)
class NcclWarning:
    """One piece of advice: how bad, which nodes, what to do, and the NCCL line behind it."""

    severity: Level
    nodes: tuple[str, ...]
    text: str
    evidence: str
    rule: str

    def to_dict(self) -> dict[str, JSON]:
        return {"severity": str(self.severity), "nodes": list(self.nodes), "text": self.text,
                "evidence": self.evidence, "rule": self.rule}


def _names(nodes: list[str] | tuple[str, ...]) -> str:
    return ("node " if len(nodes) == 1 else "nodes ") + ", ".join(nodes)


def _evidence(node: NodeFacts, *keys: str) -> str:
    for key in keys:
        for r in node.ranks.values():
            if key in r.evidence:
                return r.evidence[key]
    return ""


def is_multi_node(nodes: dict[str, NodeFacts]) -> bool:
    """More than one node fed lines, or NCCL itself counted ``nNodes`` > 1."""
    return len(nodes) > 1 or any((n.n_nodes or 1) > 1 for n in nodes.values())


def _socket_with_ib(nodes: dict[str, NodeFacts], multi: bool) -> list[NcclWarning]:
    if not multi:
        return []
    on_socket = [n for n in nodes.values() if "Socket" in n.networks]
    with_ib = [n for n in nodes.values() if n.has_ib]
    if not on_socket or not with_ib:
        return []
    hcas = ", ".join(f"{n.node}: " + " ".join(h.label for h in n.hcas) for n in with_ib)
    why = "; ".join(dict.fromkeys(r for n in on_socket for r in n.fallback_reasons))
    names = [n.node for n in on_socket]
    text = (f"{_names(names)}: this multi-node job talks over TCP sockets (NCCL chose "
            f"'Socket') although InfiniBand/RoCE is there ({hcas})"
            + (f"; NCCL said: {why}" if why else "")
            + f". Sockets are many times slower: check NCCL_IB_DISABLE, NCCL_NET and "
            f"NCCL_IB_HCA, and that {', '.join(names)} can see the HCAs and libibverbs "
            f"(in a container: --device=/dev/infiniband).")
    return [NcclWarning(Level.WARNING, tuple(names), text,
                        _evidence(on_socket[0], "network", "sockets"), "socket-with-ib")]


def _disagreement(nodes: dict[str, NodeFacts], values: Callable[[NodeFacts], list[str]],
                  what: str, advice: str, severity: Level, rule: str,
                  evidence_key: str) -> list[NcclWarning]:
    seen = {n.node: tuple(values(n)) for n in nodes.values() if values(n)}
    if len(set(seen.values())) < 2:
        return []
    listing = ", ".join(f"{node}: {'/'.join(v)}" for node, v in seen.items())
    odd = min(seen.values(), key=lambda v: sum(1 for w in seen.values() if w == v))
    first_odd = next(node for node, v in seen.items() if v == odd)
    return [NcclWarning(severity, tuple(seen), f"{_names(list(seen))} {what} ({listing}); "
                        + advice, _evidence(nodes[first_odd], evidence_key), rule)]


def _interface_problem(iface: Interface) -> tuple[Level, str] | None:
    name, addr = iface.name, iface.address.lower()
    if name == "lo" or addr.startswith("127.") or addr == "::1":
        return Level.ERROR, "loopback"
    if name.startswith(_BRIDGES):
        return Level.WARNING, "a container/VM bridge"
    if addr.startswith(("169.254.", "fe80:")):
        return Level.WARNING, "link-local"
    return None


def _bad_interfaces(nodes: dict[str, NodeFacts], multi: bool) -> list[NcclWarning]:
    if not multi:
        return []
    out: list[NcclWarning] = []
    for n in nodes.values():
        found = [(i, p) for i in n.interfaces if (p := _interface_problem(i)) is not None]
        if not found:
            continue
        level = min((p[0] for _, p in found), key=_ORDER.__getitem__)
        listing = ", ".join(f"{i.role} {i.label} ({p[1]})" for i, p in found)
        text = (f"node {n.node}: NCCL uses {listing} in a multi-node job; the other nodes "
                f"cannot reach it there. Set NCCL_SOCKET_IFNAME to the interface the nodes "
                f"share (e.g. NCCL_SOCKET_IFNAME=eth0, or =^lo,docker,veth,virbr to leave "
                f"those out).")
        out.append(NcclWarning(level, (n.node,), text,
                               _evidence(n, "bootstrap", "sockets", "ib"), "bad-interface"))
    return out


def _speed_fallbacks(nodes: dict[str, NodeFacts], multi: bool) -> list[NcclWarning]:
    out: list[NcclWarning] = []
    for n in nodes.values():
        guesses = {k: v for r in n.ranks.values() for k, v in r.speed_fallbacks.items()}
        if not guesses:
            continue
        listing = ", ".join(f"{k} as {v}" for k, v in guesses.items())
        text = (f"node {n.node}: NCCL could not read the link speed and assumes {listing} "
                f"(usual with virtio NICs on VMs); "
                + ("its algorithm and channel choice across nodes may be off; check the "
                   "real speed with `ethtool`." if multi else
                   "harmless while the job stays on one node."))
        out.append(NcclWarning(Level.WARNING if multi else Level.INFO, (n.node,), text,
                               _evidence(n, "speed"), "speed-fallback"))
    return out


_PHASE_HINT = {
    "bootstrap": "waiting in bootstrap for the other ranks to join (look at what started late)",
    "topo": "topology detection (slow sysfs/PCI reads on this node)",
    "connections": "connecting transports (slow or retried IB/socket connects)",
    "kernels": "loading CUDA kernels (a cold or busy GPU)",
    "graphs": "searching ring/tree graphs",
    "allgathers": "exchanging peer info across ranks",
}


def _slow_inits(nodes: dict[str, NodeFacts]) -> list[NcclWarning]:
    groups: dict[str, list[tuple[NodeFacts, RankFacts, Communicator, float]]] = {}
    for n in nodes.values():
        for r, c in n.comms:
            t = c.init_seconds
            if t is not None:
                key = c.comm_id or f"nranks={c.nranks}"
                groups.setdefault(key, []).append((n, r, c, t))
    out: list[NcclWarning] = []
    for members in groups.values():
        for i, (n, r, c, t) in enumerate(members):
            others = [m[3] for j, m in enumerate(members) if j != i]
            if not others:
                continue
            median = statistics.median(others)
            if t <= SLOW_INIT_FACTOR * median or t - median < SLOW_INIT_MARGIN_S:
                continue
            who = f"rank {r.rank}" if r.rank is not None else r.label
            text = (f"node {n.node} {who}: NCCL communicator init took {t:.1f} s, against "
                    f"{median:.1f} s for the other ranks (median)")
            phase = c.slowest_phase
            if phase is not None:
                text += f"; most of it {phase[1]:.1f} s in {_PHASE_HINT.get(phase[0], phase[0])}"
            out.append(NcclWarning(Level.WARNING, (n.node,), text + ".", c.evidence,
                                   "slow-init"))
    return out


_ADDR_RE = re.compile(r"(\S+<\d+>)")
Explain = Callable[[str, RankFacts], str]


def _no_iface(message: str, r: RankFacts) -> str:
    ifname = r.env.get("NCCL_SOCKET_IFNAME")
    if ifname:
        return (f"NCCL found no socket interface matching NCCL_SOCKET_IFNAME={ifname}; list "
                f"the node's interfaces (`ip -br addr`) and set NCCL_SOCKET_IFNAME to one that "
                f"exists, or unset it")
    return ("NCCL found no usable socket interface; check `ip -br addr` and set "
            "NCCL_SOCKET_IFNAME to the interface the nodes share")


def _connect(message: str, r: RankFacts) -> str:
    m = _ADDR_RE.search(message)
    peer = m.group(1) if m else "a peer"
    return (f"NCCL could not connect to {peer}: a firewall, the wrong interface "
            f"(NCCL_SOCKET_IFNAME) or a peer that already died; check that the nodes reach "
            f"each other on that address")


_KNOWN: tuple[tuple[tuple[str, ...], Level, Explain], ...] = (
    (("no socket interface found",), Level.ERROR, _no_iface),
    (("libibverbs",), Level.WARNING, lambda m, r: (
        "NCCL could not load libibverbs, so it cannot use InfiniBand/RoCE and falls back to "
        "TCP sockets; install rdma-core (libibverbs1) if the node has an RDMA NIC")),
    (("Duplicate GPU detected", "same GPU"), Level.ERROR, lambda m, r: (
        "two ranks use the same GPU: nproc_per_node is larger than the node's GPU count, or "
        "CUDA_VISIBLE_DEVICES / torch.cuda.set_device(local_rank) is wrong")),
    (("/dev/shm",), Level.ERROR, lambda m, r: (
        "NCCL ran out of shared memory in /dev/shm; in a container give it more "
        "(--shm-size=1g or --ipc=host)")),
    (("Got completion",), Level.ERROR, lambda m, r: (
        "an InfiniBand transfer failed: usually a peer died or the fabric dropped the link; "
        "look at the other ranks' errors first, then `ibstat` on the node")),
    (("already checked in",), Level.ERROR, lambda m, r: (
        "two processes joined NCCL's bootstrap as the same rank: a leftover process of an "
        "earlier run, or the job launched twice; stop stray processes on the nodes")),
    (("Connection closed by remote peer", "closed by remote"), Level.WARNING, lambda m, r: (
        "a peer closed its NCCL connection: usually another rank failed or was killed "
        "first; look at the earliest failure")),
    (("onnect to", "connect returned", "Call to connect", "PollConnect"), Level.ERROR,
     _connect),
    (("wrong magic",), Level.WARNING, lambda m, r: (
        "something other than this job's NCCL connected to its port (another job, a port "
        "scanner, or a rank on a different NCCL version)")),
    (("message truncated", "Message truncated", "Mismatched collective"), Level.ERROR,
     lambda m, r: ("ranks disagree on a collective (different calls, sizes or order, or "
                   "different NCCL versions); compare the ranks' code paths")),
)


def _explain(message: str, r: RankFacts) -> tuple[Level, str]:
    for keys, level, explain in _KNOWN:
        if any(k in message for k in keys):
            return level, explain(message, r)
    return Level.WARNING, f"NCCL warned: {message}"


def _warn_lines(nodes: dict[str, NodeFacts]) -> list[NcclWarning]:
    seen: dict[tuple[Level, str], tuple[list[str], str]] = {}
    for n in nodes.values():
        for r, w in n.warns:
            level, text = _explain(w.message, r)
            if w.position:
                text += f" [NCCL WARN at {w.position}]"
            where, _ = seen.setdefault((level, text), ([], w.text))
            if n.node not in where:
                where.append(n.node)
    return [NcclWarning(level, tuple(where), f"{_names(where)}: {text}", evidence, "nccl-warn")
            for (level, text), (where, evidence) in seen.items()]


def nccl_warnings(facts: NcclFacts) -> list[NcclWarning]:
    """Every rule over all nodes' facts, errors first; empty when all looks right."""
    nodes = facts.nodes
    multi = is_multi_node(nodes)
    out = [
        *_warn_lines(nodes),
        *_socket_with_ib(nodes, multi),
        *_disagreement(nodes, lambda n: n.networks, "chose different NCCL networks",
                       "a collective runs at the pace of the slowest link and mixed plugins "
                       "may not connect; give every node the same NCCL_NET/NCCL_IB_* settings "
                       "and the same net plugin.", Level.WARNING, "network-mismatch",
                       "network"),
        *_disagreement(nodes, lambda n: n.nccl_versions, "run different NCCL versions",
                       "NCCL needs the same version on every rank; install the same "
                       "torch/NCCL build on every node.", Level.ERROR, "version-mismatch",
                       "version"),
        *_bad_interfaces(nodes, multi),
        *_speed_fallbacks(nodes, multi),
        *_slow_inits(nodes),
    ]
    return sorted(out, key=lambda w: _ORDER[w.severity])
