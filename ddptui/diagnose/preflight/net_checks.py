"""The checks of a node's way to the others: its hostname, its route and socket interfaces,
the rendezvous port on the endpoint node, and every node's connect to it."""

from __future__ import annotations

import dataclasses

from ddptui.config import NodeConfig
from ddptui.diagnose.preflight import route as naming
from ddptui.diagnose.preflight.ifname import GLOO_VAR, ifname_problems
from ddptui.diagnose.preflight.report import NodeReport
from ddptui.diagnose.preflight.verdict import Context, Outcome, caution, fail, ok, skip


def check_hostname(c: Context, n: NodeConfig, r: NodeReport) -> Outcome:
    """A name that leads nowhere (see :mod:`ddptui.diagnose.preflight.route`) passes, said,
    when the route toward the rendezvous gives an address to use instead."""
    if (err := r.errors.get("names")) is not None:
        return fail("no answer", f"node {n.name}: looking up its own hostname failed ({err})"
                    ": torchrun and gloo do the same at start and would hang or fail there. "
                    "Fix its name service (/etc/hosts, DNS), or set `addr:` for this node.")
    if r.fqdn is None:
        return skip("not checked")
    if not c.multi_node:
        return ok(r.fqdn)
    troubles = naming.name_troubles(c.config.rendezvous.backend, n, r)
    if not troubles:
        return ok(f"{r.fqdn} → {', '.join(r.host_addrs or ())}")
    if (chosen := chosen_route(c, n, r)) is not None:
        return caution(f"{chosen.ifname} {chosen.addr} (chosen)", chosen.said())
    first = troubles[0]
    way = (f"; its route toward the rendezvous leaves from {r.route_src} ({r.route_dev})"
           if r.route_src else "; no route toward the rendezvous was found there")
    return fail(f"→ {first.loopback}" if first.loopback else "unresolved",
                f"node {n.name}: {'; '.join(t.said() for t in troubles)}{way}, so no address "
                "the other nodes reach is known for it. Map the name to the node's network "
                "address in /etc/hosts, or set `addr:` for this node and "
                f"{GLOO_VAR} in its `env:`.")


def chosen_route(c: Context, n: NodeConfig, r: NodeReport) -> naming.RouteChoice | None:
    """The address and interface a node is given instead of its name (None: none needed,
    or none found): what the hostname check says, and what the launch applies."""
    if r.errors.get("names") is not None or r.fqdn is None or not c.multi_node:
        return None
    return naming.choose(c.config.rendezvous.backend, n, r)


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
        naming.effective_env(n, r), r.interfaces, multi_node=c.multi_node)
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
    # the store's own node reaches its address over lo, which a firewall may filter too
    whom = (f"from node {n.name} itself (its connections to {ep.host} arrive over lo)"
            if ep.node == n.name else "from the other nodes")
    if conn.result == "ok":
        return ok(f"{conn.ms} ms" if conn.ms is not None else "ok")
    if conn.result == "timeout":
        return fail("dropped", f"node {n.name} cannot reach the rendezvous at {target}: "
                     f"connection attempts time out, so packets are dropped (a firewall on "
                     f"{by} or on the way). Allow TCP {ep.port} into {by} {whom}; torchrun's "
                     "c10d and NCCL also use random ports, so best allow all TCP between the "
                     "nodes.")
    if conn.result == "refused":
        if ep.node is None:  # the store's node is unknown here: it is not up yet
            return skip(f"no listener: {ep.host} is none of the nodes")
        return fail("refused", f"node {n.name}: connections to the rendezvous at {target} "
                     f"are refused while ddptui listened there: a firewall on {by} rejects "
                     f"them. Allow TCP {ep.port} into {by} {whom}.")
    if conn.result == "unresolved":
        return fail("unresolved", f"node {n.name}: the rendezvous endpoint {ep.host!r} does "
                     "not resolve there. Use an address, or a name every node resolves.")
    if conn.result == "foreign":
        return fail("wrong host", f"node {n.name}: something other than {by} answers at "
                     f"{target}: the address leads elsewhere from there. Use the node's "
                     "address as the endpoint.")
    return fail("error", f"node {n.name}: connecting to the rendezvous at {target} fails: "
                 f"{conn.error} (a firewall REJECT with an ICMP error, or a routing problem).")
