"""The rendezvous port, reserved on the node that hosts the store before any torchrun starts.

Two launches on the same nodes in the same second both find the port free (preflight looks
before either has bound it); the first torchrun binds it, and torch's c10d rendezvous lets
the second run's agents fall back to being clients of that store, so the second run lives
inside the first one's store and dies with it. A lock directory per host address and port
on the store's node settles who has the port: made aside with its owner already written in
it, then renamed into place in one atomic step, so a run that finds it taken can always name
the run that took it. Its owner is alive while the ``launch.sh`` that wrote its pid into the
lock lives and its node dir there holds no exit code (or, before it starts, while the lock
is young); a dead owner's lock is taken over. A port left to ddptui moves on to the next
free one; a port the hosts file fixes is refused.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from ddptui import nodeprog
from ddptui.events import ssh_line
from ddptui.launch.plan import expand_home, quote
from ddptui.launch.ports import Abort, LaunchContext
from ddptui.launch.precheck import endpoint_of
from ddptui.nodeprog import port_lock
from ddptui.run_state import NodeEvent
from ddptui.store import rundir
from ddptui.transport.base import PythonCommand, TransportError

#: Ports tried after the default when the hosts file leaves the port to ddptui.
TRIES = 16
#: A lock whose run has made no node dir or process yet counts as live this long.
YOUNG_S = 600.0

#: Run by the node's Python: takes the first port it can, or says who holds each one
#: (:mod:`ddptui.nodeprog.port_lock`).
NODE_SRC = nodeprog.source(port_lock)


@dataclass(frozen=True, slots=True)
class Reserved:
    """What the store's node answered: the port taken (None: none) and the runs holding
    the ports it could not take."""

    port: int | None
    lock: str | None
    held: tuple[tuple[int, str], ...]


def candidates(port: int, fixed: bool) -> list[int]:
    return [port] if fixed else [p for p in range(port, port + TRIES) if p < 65536]


def lock_key(host: str) -> str:
    """The store's address as a file name: a port is per address on hosts that share a
    ``/tmp`` (namespaces, containers), and per host everywhere else."""
    return "".join(c if c.isalnum() or c in ".-" else "_" for c in host) or "host"


def reserve_cmd(python: str, *, host: str, ports: list[int], run_id: str, ndir: str) -> str:
    args = {"dir": rundir.RDZV_LOCKS, "key": lock_key(host), "ports": ports, "run": run_id,
            "ndir": ndir, "young_s": YOUNG_S, "owner": rundir.LOCK_OWNER,
            "pid": rundir.LOCK_PID, "exit": rundir.EXIT_CODE}
    return PythonCommand(python, NODE_SRC, (json.dumps(args),), no_site=True)


def release_cmd(lock: str, run_id: str) -> str:
    """Removes the lock only while it is still this run's (a later run may own it now)."""
    owner = quote(f"{lock}/{rundir.LOCK_OWNER}")
    pid = quote(f"{lock}/{rundir.LOCK_PID}")
    return (f"[ \"$(head -n 1 {owner} 2>/dev/null)\" = {quote(run_id)} ] && "
            f"rm -f {owner} {pid} && rmdir {quote(lock)}; true")


def parse(stdout: str) -> Reserved:
    """The program's one JSON line; anything else is a node that could not say."""
    try:
        got = json.loads(stdout.strip().splitlines()[-1])
        held = tuple((int(p), str(r)) for p, r in got.get("held", []))
        port = got.get("port")
        return Reserved(int(port) if port is not None else None, got.get("lock"), held)
    except (ValueError, IndexError, TypeError, AttributeError):
        raise ValueError(f"unreadable answer: {stdout.strip()[:200]!r}") from None


def holders(got: Reserved) -> str:
    """The runs holding the ports tried, by name."""
    runs = sorted({r for _, r in got.held if r})
    return (f"run {runs[0]}" if len(runs) == 1 else
            "runs " + ", ".join(runs) if runs else "another ddptui run")


def refusal(node: str, host: str, fixed: bool, got: Reserved) -> str:
    """Why the launch stops, naming the run that holds the port and what to do."""
    runs = sorted({r for _, r in got.held if r})
    ports = ", ".join(str(p) for p, _ in got.held)
    stop = f"stop it (`ddptui stop {runs[0]}`)" if len(runs) == 1 else "stop one of them"
    if fixed:
        return (f"node {node}: the rendezvous port {ports} on {host} is held by "
                f"{holders(got)}, which is still running there; two runs on one port would "
                f"share one rendezvous store and end together. {stop.capitalize()}, or set "
                "`rendezvous.port` to another port (or leave it out and ddptui picks a free "
                "one).")
    return (f"node {node}: every rendezvous port ddptui tries on {host} ({ports}) is held "
            f"by {holders(got)}; {stop}, or set `rendezvous.port` to a free port.")


@dataclass(frozen=True, slots=True)
class RendezvousStore:
    """Where the rendezvous store lives: the node told it hosts it (c10d's ``is_host``;
    None for static), and the node and path of the port's lock."""

    host_node: str | None
    lock_node: str
    lock: str


def reserve_port(ctx: LaunchContext, homes: Mapping[str, str]) -> RendezvousStore | None:
    """The rendezvous port, reserved on the store's node before anything starts
    (:mod:`ddptui.launch.reserve`); the config takes the port reserved. None: the store is
    on no node of the run (an outside endpoint), whose port is not ddptui's to keep."""
    cfg = ctx.config
    addresses = {n.name: ctx.pool.get(n.name).address for n in cfg.nodes}
    endpoint = endpoint_of(cfg, addresses)
    if endpoint.node is None:
        return None
    node, fixed = cfg.node(endpoint.node), cfg.rendezvous.port is not None
    ports = candidates(cfg.rendezvous.effective_port, fixed)
    ndir = rundir.node_dir(expand_home(node.workdir, homes[node.name]), ctx.run_id,
                           cfg.node_rank(node))
    cmd = reserve_cmd(node.python, host=endpoint.host, ports=ports, run_id=ctx.run_id, ndir=ndir)
    try:
        res = ctx.pool.get(node.name).run(cmd, timeout=30)
        if res.exit_code != 0:
            raise ValueError(res.stderr.strip() or f"exit code {res.exit_code}")
        got = parse(res.stdout)
    except (TransportError, ValueError) as why:
        raise Abort([f"node {node.name}: could not reserve the rendezvous port there: "
                     f"{why}"], cleanup=False) from None
    if got.port is None or got.lock is None:
        ctx.node_update(node.name, NodeEvent.FAIL, "rendezvous port held by another run")
        raise Abort([refusal(node.name, endpoint.host, fixed, got)], cleanup=False)
    ctx.record.update(rendezvous={"node": node.name, "host": endpoint.host, "port": got.port,
                                  "lock": got.lock})
    if got.port != cfg.rendezvous.effective_port:
        ctx.config = replace(cfg, rendezvous=replace(cfg.rendezvous, port=got.port))
        ctx.publish(node.name, [ssh_line(node.name, f"rendezvous port {ports[0]} is held by "
                                         f"{holders(got)}; this run uses {got.port}",
                                         time.time())])
    return RendezvousStore(node.name if cfg.rendezvous.backend == "c10d" else None, node.name,
                           got.lock)
