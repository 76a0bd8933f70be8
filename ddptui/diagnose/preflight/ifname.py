"""Which interfaces ``NCCL_SOCKET_IFNAME`` and ``GLOO_SOCKET_IFNAME`` select on a node.

NCCL reads a comma list of name *prefixes*; a leading ``^`` turns it into a list to exclude,
a leading ``=`` (after any ``^``) into exact names, and an item may carry a ``:port``
(NCCL's ``parseStringList``/``matchIfList``). It uses only interfaces that have an address,
and with a list of exclusions loopback is not left out for you: ``^docker0`` can pick ``lo``.
Gloo reads exact names, comma separated, and fails on any it cannot find an address for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

NCCL_VAR = "NCCL_SOCKET_IFNAME"
GLOO_VAR = "GLOO_SOCKET_IFNAME"


@dataclass(frozen=True)
class NcclSpec:
    exclude: bool
    exact: bool
    names: tuple[str, ...]

    def matches(self, interface: str) -> bool:
        hit = any(interface == n if self.exact else interface.startswith(n) for n in self.names)
        return hit != self.exclude


def parse_nccl(value: str) -> NcclSpec:
    v = value.strip()
    exclude = v.startswith("^")
    v = v[1:] if exclude else v
    exact = v.startswith("=")
    v = v[1:] if exact else v
    names = tuple(item.strip().split(":")[0] for item in v.split(",") if item.strip())
    return NcclSpec(exclude, exact, names)


def is_loopback(interface: str, addrs: tuple[str, ...]) -> bool:
    return interface == "lo" or (bool(addrs) and all(
        a.startswith("127.") or a == "::1" for a in addrs))


def nccl_picks(value: str, interfaces: Mapping[str, tuple[str, ...]]) -> list[str]:
    """The interfaces NCCL would consider, in the node's order."""
    spec = parse_nccl(value)
    return [i for i, addrs in interfaces.items() if addrs and spec.matches(i)]


def ifname_problems(env: Mapping[str, str | None], interfaces: Mapping[str, tuple[str, ...]],
                    *, multi_node: bool) -> list[str]:
    """What is wrong with the configured values on this node, each as a clause that names
    the variable; empty when nothing is configured or all is well."""
    have = ", ".join(f"{i}" for i, a in interfaces.items() if a) or "none with an address"
    out = []
    nccl = env.get(NCCL_VAR)
    if nccl is not None and nccl.strip():
        picks = nccl_picks(nccl, interfaces)
        if not picks:
            out.append(f"{NCCL_VAR}={nccl} selects no interface with an address (it has "
                       f"{have}), so NCCL stops with 'Bootstrap : no socket interface found'")
        elif multi_node and all(is_loopback(i, interfaces[i]) for i in picks):
            out.append(f"{NCCL_VAR}={nccl} leaves only loopback ({', '.join(picks)}), which "
                       "the other nodes cannot reach")
    gloo = env.get(GLOO_VAR)
    if gloo is not None and gloo.strip():
        names = [n.strip() for n in gloo.split(",") if n.strip()]
        missing = [n for n in names if n not in interfaces]
        bare = [n for n in names if n in interfaces and not interfaces[n]]
        if missing:
            out.append(f"{GLOO_VAR}={gloo} names {', '.join(missing)}, which this node does "
                       f"not have (it has {have}), so gloo cannot create its device")
        elif bare:
            out.append(f"{GLOO_VAR}={gloo}: {', '.join(bare)} has no address")
        elif multi_node and all(is_loopback(n, interfaces[n]) for n in names):
            out.append(f"{GLOO_VAR}={gloo} is loopback, which the other nodes cannot reach")
    return out
