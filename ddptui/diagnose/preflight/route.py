"""The address a node's run uses when its own name does not lead to it.

torchrun's c10d rendezvous advertises a node as ``socket.getfqdn()`` (unless
``--local-addr``), and gloo binds to what ``gethostname()`` resolves to (unless
``GLOO_SOCKET_IFNAME``). On a node whose name resolves to loopback (Debian's
``127.0.1.1 <hostname>``) or to nothing, both lead nowhere the other nodes can reach; editing
``/etc/hosts`` needs root on every node. The probe already knows the way that works: the
route toward the rendezvous node (``ip route get``), out of an interface that holds its
source address. So a node whose name fails is given that address and interface, each only
where the hosts file and the node's environment leave it unset; the rendezvous node's own
store is hosted by ``is_host`` (``launch.plan.torchrun_flags``), never by its name.

NCCL does not bind by the name, but left alone it may pick another interface than the one
known to reach (``ib*`` first, then any but ``lo`` and ``docker*``), so it is told the same
one, by exact name; an ``NCCL_SOCKET_IFNAME`` of the user's wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ddptui.config import NodeConfig
from ddptui.diagnose.preflight.ifname import GLOO_VAR, NCCL_VAR, is_loopback
from ddptui.diagnose.preflight.report import NodeReport
from ddptui.run_notes import RouteNote

_LOOPBACK = ("127.", "::1")


@dataclass(frozen=True)
class NameTrouble:
    """One use of the node's name that fails: who uses it, the name, what it gave."""

    who: str
    name: str | None
    loopback: str | None
    """The loopback address it resolves to; None: it did not resolve (``error``)."""
    error: str | None

    @property
    def found(self) -> str:
        if self.loopback is not None:
            return f"resolves to {self.loopback} (loopback)"
        return f"does not resolve ({self.error})"

    def said(self) -> str:
        return f"{self.who} {self.name!r}, which {self.found} there"


@dataclass(frozen=True)
class RouteChoice:
    """What a node whose name fails is given, and why."""

    node: str
    ifname: str
    addr: str
    troubles: tuple[NameTrouble, ...]
    local_addr: str | None
    """torchrun's ``--local-addr``: set where c10d would advertise the name."""
    env: Mapping[str, str]
    """The socket-interface variables set for the ranks (those the node leaves unset)."""

    def said(self) -> str:
        what = "; ".join(f"its name {t.name} {t.found}" for t in _distinct(self.troubles))
        given = [*(["torchrun --local-addr"] if self.local_addr else []), *self.env]
        return (f"node {self.node}: using {self.ifname} {self.addr} toward the rendezvous; "
                f"{what} ({', '.join(given)} set for this run; set `addr:` and "
                f"{GLOO_VAR} in its `env:` to choose otherwise)")

    def as_note(self) -> RouteNote:
        return {"ifname": self.ifname, "addr": self.addr,
                "why": "; ".join(t.said() for t in self.troubles),
                "local_addr": self.local_addr, "env": dict(self.env)}


def _distinct(troubles: tuple[NameTrouble, ...]) -> list[NameTrouble]:
    seen: dict[tuple[str | None, str], NameTrouble] = {}
    for t in troubles:
        seen.setdefault((t.name, t.found), t)
    return list(seen.values())


def effective_env(n: NodeConfig, r: NodeReport) -> dict[str, str | None]:
    """What the job will see: the hosts file's env over the node's login environment."""
    return {k: n.env.get(k, r.login_env.get(k)) for k in (NCCL_VAR, GLOO_VAR)}


def name_troubles(backend: str, n: NodeConfig, r: NodeReport) -> list[NameTrouble]:
    """Each use of the node's name that leads nowhere the other nodes reach, as the
    hosts file and the node's environment stand."""
    asks: list[tuple[str, str | None, tuple[str, ...] | None, str | None]] = []
    if backend == "c10d" and n.addr is None:
        asks.append(("c10d advertises the node as", r.fqdn, r.host_addrs, r.host_error))
    if not effective_env(n, r).get(GLOO_VAR):
        told = r.short_addrs is not None or r.short_error is not None
        short, err = (r.short_addrs, r.short_error) if told else (r.host_addrs, r.host_error)
        asks.append(("gloo binds to the address of", r.hostname, short, err))
    out = []
    for who, name, addrs, err in asks:
        if addrs is None:
            out.append(NameTrouble(who, name, None, err))
        elif loop := [a for a in addrs if a.startswith(_LOOPBACK)]:
            out.append(NameTrouble(who, name, loop[0], None))
    return out


def route_interface(r: NodeReport) -> str | None:
    """The interface that holds the route's source address, when it is not loopback: the
    rendezvous node reaches its own address over ``lo``, yet binds on the one holding it."""
    src = r.route_src
    if src is None or src.startswith(_LOOPBACK):
        return None
    for name, addrs in r.interfaces.items():
        if src in addrs and not is_loopback(name, addrs):
            return name
    return None


def choose(backend: str, n: NodeConfig, r: NodeReport) -> RouteChoice | None:
    """The route's interface and address for a node whose name fails; None where its name
    does not fail, or where no routable address was found (then it is refused)."""
    troubles = name_troubles(backend, n, r)
    ifname = route_interface(r)
    if not troubles or ifname is None or r.route_src is None:
        return None
    env: dict[str, str] = {}
    have = effective_env(n, r)
    if any(t.who.startswith("gloo") for t in troubles):
        env[GLOO_VAR] = ifname
        if not have.get(NCCL_VAR):
            env[NCCL_VAR] = f"={ifname}"
    local = r.route_src if any(t.who.startswith("c10d") for t in troubles) else None
    return RouteChoice(n.name, ifname, r.route_src, tuple(troubles), local, env)
