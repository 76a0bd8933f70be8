"""The checks of a node's way to the others: its hostname, its route and socket interfaces,
the rendezvous port on the endpoint node, and every node's connect to it."""

from __future__ import annotations

import dataclasses

from ddptui.config import NodeConfig
from ddptui.diagnose.preflight.ifname import GLOO_VAR, NCCL_VAR, ifname_problems
from ddptui.diagnose.preflight.report import NodeReport
from ddptui.diagnose.preflight.verdict import Context, Outcome, fail, ok, skip

_LOOPBACK = ("127.", "::1")


def check_hostname(c: Context, n: NodeConfig, r: NodeReport) -> Outcome:
    """Two traps: torchrun's c10d rendezvous advertises a node as ``socket.getfqdn()``
    (unless ``--local-addr``, our ``addr:``), and gloo binds to what ``gethostname()``
    resolves to, falling back to loopback when it does not (unless GLOO_SOCKET_IFNAME)."""
    if (err := r.errors.get("names")) is not None:
        return fail("no answer", f"node {n.name}: looking up its own hostname failed ({err})"
                    ": torchrun and gloo do the same at start and would hang or fail there. "
                    "Fix its name service (/etc/hosts, DNS), or set `addr:` for this node.")
    if r.fqdn is None:
        return skip("not checked")
    if not c.multi_node:
        return ok(r.fqdn)
    said: list[str] = []
    first: str | None = None
    # (who uses the name, the name, what it resolves to, why it did not)
    asks: list[tuple[str, str | None, tuple[str, ...] | None, str | None]] = []
    if c.config.rendezvous.backend == "c10d" and n.addr is None:
        asks.append(("c10d advertises the node as", r.fqdn, r.host_addrs, r.host_error))
    if not _effective_env(n, r).get(GLOO_VAR):
        told = r.short_addrs is not None or r.short_error is not None
        short, err = (r.short_addrs, r.short_error) if told else (r.host_addrs, r.host_error)
        asks.append(("gloo binds to the address of", r.hostname, short, err))
    for who, name, addrs, err in asks:
        if addrs is None:
            said.append(f"{who} {name!r}, which does not resolve there ({err})")
            first = first or "unresolved"
        elif loop := [a for a in addrs if a.startswith(_LOOPBACK)]:
            said.append(f"{who} {name!r}, which resolves to {loop[0]} (loopback) there")
            first = first or f"→ {loop[0]}"
    if said:
        return fail(first or "?", f"node {n.name}: {'; '.join(said)}, so the other nodes "
                    "would connect to themselves or not at all. Map the name to the node's "
                    "network address in /etc/hosts, or set `addr:` for this node and "
                    f"{GLOO_VAR} in its `env:`.")
    return ok(f"{r.fqdn} → {', '.join(r.host_addrs or ())}")


def _effective_env(n: NodeConfig, r: NodeReport) -> dict[str, str | None]:
    """What the job will see: the hosts file's env over the node's login environment."""
    return {k: n.env.get(k, r.login_env.get(k)) for k in (NCCL_VAR, GLOO_VAR)}


def check_network(c: Context, n: NodeConfig, r: NodeReport) -> Outcome:
    if r.route_error is None and (err := r.errors.get("route")) is not None:
        r = dataclasses.replace(r, route_error=err)
    if not r.interfaces and r.route_dest is None and r.route_error is None:
        return skip("not checked")
    ep = c.endpoint
    if r.route_error is not None:
        return fail("no route", f"node {n.name} cannot reach the rendezvous endpoint "
                     f"{ep.host} ({r.route_error}). Check the endpoint (`rendezvous.endpoint` "
                     "or node rank 0's `addr:`) resolves and routes from every node.")
    problems = [] if "interfaces" in r.errors else ifname_problems(
        _effective_env(n, r), r.interfaces, multi_node=c.multi_node)
    route = f"{r.route_dev or '?'} → {r.route_dest}" if r.route_dest else "?"
    if problems:
        # the endpoint's own node reaches itself over lo, which is no hint for NCCL
        hint = f"; {r.route_dev} routes to the rendezvous" if r.route_dev not in (
            None, "lo") else ""
        return fail("bad ifname", f"node {n.name}: {'; '.join(problems)}. Name an "
                     f"interface it has in `env:` for this node{hint}.")
    return ok(route)


def _holders(r: NodeReport) -> str:
    if r.listen is None or not r.listen.holders:
        return ""
    h = r.listen.holders[0]
    tail = f", ddptui run {h.run.split('/')[0]}" if h.run else ""
    return f" by pid {h.pid} ({h.command or '?'}{tail})"


def check_port(c: Context, n: NodeConfig, r: NodeReport) -> Outcome:
    ep = c.endpoint
    if ep.node != n.name:
        return skip("")
    li = r.listen
    if li is None:
        return skip("not checked")
    if li.in_use:
        held = r.listen.holders[0] if r.listen and r.listen.holders else None
        todo = (f"`ddptui stop {held.run.split('/')[0]}`" if held and held.run else
                "stop it (a leftover torchrun?)")
        return fail("in use", f"node {n.name}: the rendezvous port {ep.port} is already "
                     f"in use there{_holders(r)}, so torchrun cannot start its store: "
                     f"{todo}, or set `rendezvous.port` to a free port.")
    if not li.bound:
        return fail("cannot bind", f"node {n.name}: cannot bind the rendezvous port "
                     f"{ep.port} ({li.error}). Set `rendezvous.port` to a port above 1024.")
    return ok(f"{ep.port} free")


def check_reach(c: Context, n: NodeConfig, r: NodeReport) -> Outcome:
    ep = c.endpoint
    conn = r.connect
    if conn is None:
        return skip("not checked")
    target = f"{ep.host}:{ep.port}"
    host_rep = c.reports.get(ep.node) if ep.node else None
    if ep.node is not None and (host_rep is None or host_rep.listen is None):
        return skip(f"not tested: node {ep.node} did not listen")
    if host_rep is not None and host_rep.listen is not None and not host_rep.listen.bound:
        return skip("port taken")
    by = f"node {ep.node}" if ep.node else ep.host
    if conn.result == "ok":
        return ok(f"{conn.ms} ms" if conn.ms is not None else "ok")
    if conn.result == "timeout":
        return fail("dropped", f"node {n.name} cannot reach the rendezvous at {target}: "
                     f"connection attempts time out, so packets are dropped (a firewall on "
                     f"{by} or on the way). Allow TCP {ep.port} into {by} from the other "
                     "nodes; torchrun's c10d and NCCL also use random ports, so best allow "
                     "all TCP between the nodes.")
    if conn.result == "refused":
        if ep.node is None:  # the store's node is unknown here: it is not up yet
            return skip(f"no listener: {ep.host} is none of the nodes")
        return fail("refused", f"node {n.name}: connections to the rendezvous at {target} "
                     f"are refused while ddptui listened there: a firewall on {by} rejects "
                     f"them. Allow TCP {ep.port} into {by} from the other nodes.")
    if conn.result == "unresolved":
        return fail("unresolved", f"node {n.name}: the rendezvous endpoint {ep.host!r} does "
                     "not resolve there. Use an address, or a name every node resolves.")
    if conn.result == "foreign":
        return fail("wrong host", f"node {n.name}: something other than {by} answers at "
                     f"{target}: the address leads elsewhere from there. Use the node's "
                     "address as the endpoint.")
    return fail("error", f"node {n.name}: connecting to the rendezvous at {target} fails: "
                 f"{conn.error} (a firewall REJECT with an ICMP error, or a routing problem).")
