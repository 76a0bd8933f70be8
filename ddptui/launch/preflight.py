"""Preflight on the nodes: the check program on every node at once, one command each.

``ddptui check`` opens its own connections and asks everything, torch included; before a
launch the connections that ``reach`` opened are reused and torch's versions come from its
probe, so the check adds one round trip and no second ``import torch`` (about a second on a
real node). The endpoint node listens on the rendezvous port while every node, itself
included, connects to it: the program (see :mod:`ddptui.diagnose.preflight.probe`) runs on
all nodes at the same time, so no step waits for another.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ddptui.config import HostsConfig, NodeConfig
from ddptui.diagnose.preflight import Endpoint, NodeReport, Verdict, judge, parse_report
from ddptui.diagnose.preflight.probe import NODE_SRC
from ddptui.diagnose.preflight.report import TorchInfo
from ddptui.launch import nodeops
from ddptui.launch.plan import quote
from ddptui.launch.reach import connect, map_at_once
from ddptui.transport.base import Transport, TransportError

#: The endpoint listens this long at most (it stops once every node has connected).
LISTEN_S = 4.0
#: Each node connects within this, retrying while refused (the listener may start later).
CONNECT_S = 2.5
#: One connect attempt: past it, packets are being dropped.
ATTEMPT_S = 1.0


@dataclass(frozen=True)
class Outcome:
    verdict: Verdict
    reports: dict[str, NodeReport]
    endpoint: Endpoint
    seconds: float


def resolve(host: str) -> set[str]:
    """Addresses of ``host`` as this machine sees them; none when it does not resolve."""
    try:
        return {str(i[4][0]) for i in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
    except OSError:
        return set()


def endpoint_of(config: HostsConfig, addresses: Mapping[str, str],
                lookup: Callable[[str], set[str]] = resolve) -> Endpoint:
    """The address every node connects to (as the plan computes it) and the node that hosts
    the store there (by name, else by address); ``addresses`` are the nodes' ssh addresses."""
    rd = config.rendezvous
    first = config.rendezvous_node
    if rd.endpoint is None:
        return Endpoint(first.addr or addresses.get(first.name, first.host),
                        rd.effective_port, first.name)
    for n in config.ordered_nodes:
        if rd.endpoint in (n.addr, n.host, addresses.get(n.name)):
            return Endpoint(rd.endpoint, rd.effective_port, n.name)
    wanted = lookup(rd.endpoint)
    for n in config.ordered_nodes:
        names = {x for x in (n.addr, n.host, addresses.get(n.name)) if x}
        if wanted and any(wanted & lookup(x) for x in names):
            return Endpoint(rd.endpoint, rd.effective_port, n.name)
    return Endpoint(rd.endpoint, rd.effective_port, None)


def check_cmd(python: str, args: Mapping[str, Any]) -> str:
    """The one command a node runs; exit 127 (and a line saying so) without the interpreter.

    Without torch to import the program needs no site-packages, so ``-S`` skips ``site``:
    with a few ``.pth`` files (editable installs, certifi) that is most of its start-up.
    """
    q = quote(python)
    bare = "" if args.get("torch") else " -S"
    return (f"command -v {q} >/dev/null 2>&1 || "
            f"{{ echo 'ddptui: no such interpreter: '{q} >&2; exit 127; }}; "
            f"exec {q}{bare} -c {quote(NODE_SRC)} {quote(json.dumps(args))}")


def node_args(node: NodeConfig, endpoint: Endpoint, *, nonce: str, expect: int,
              with_torch: bool) -> dict[str, Any]:
    return {
        "workdir": node.workdir, "endpoint": endpoint.host, "port": endpoint.port,
        "listen": endpoint.node == node.name, "expect": expect, "connect": True,
        "nonce": nonce, "torch": with_torch, "listen_s": LISTEN_S, "connect_s": CONNECT_S,
        "attempt_s": ATTEMPT_S, "budget_s": 30.0 if with_torch else 8.0,
    }


def gather(config: HostsConfig, transports: Mapping[str, Transport], endpoint: Endpoint, *,
           full: bool) -> dict[str, NodeReport]:
    """Run the program on every node of ``transports`` at once; a report per node."""
    nonce = secrets.token_hex(8)
    nodes = [n for n in config.nodes if n.name in transports]

    def ask(node: NodeConfig) -> NodeReport:
        cmd = check_cmd(node.python, node_args(node, endpoint, nonce=nonce, expect=len(nodes),
                                               with_torch=full))
        res = transports[node.name].run(cmd, timeout=90 if full else 30)
        return parse_report(node.name, res.stdout, exit_code=res.exit_code, stderr=res.stderr,
                            received_at=time.time() if full else None)

    reports = {}
    for node, res in zip(nodes, map_at_once(nodes, ask), strict=True):
        if isinstance(res, NodeReport):
            reports[node.name] = res
        else:
            reports[node.name] = NodeReport(node.name, not_run=f"{type(res).__name__}: {res}")
    return reports


def check(config: HostsConfig) -> Outcome:
    """``ddptui check``: connect to every node, ask everything, judge; start nothing."""
    t0 = time.monotonic()
    nodes = list(config.nodes)
    opened = map_at_once(nodes, lambda n: connect(n, config))
    transports: dict[str, Transport] = {}
    reports: dict[str, NodeReport] = {}
    for node, res in zip(nodes, opened, strict=True):
        if isinstance(res, Exception):
            why = str(res) if isinstance(res, TransportError) else f"{type(res).__name__}: {res}"
            reports[node.name] = NodeReport(node.name, unreachable=why)
        else:
            transports[node.name] = res
    try:
        endpoint = endpoint_of(config, {k: t.address for k, t in transports.items()})
        reports.update(gather(config, transports, endpoint, full=True))
    finally:
        for t in transports.values():
            t.close()
    return Outcome(judge(config, reports, endpoint), reports, endpoint,
                   time.monotonic() - t0)


def before_launch(config: HostsConfig, transports: Mapping[str, Transport],
                  probes: Mapping[str, nodeops.Probe]) -> Outcome:
    """The automatic subset: the same program without torch (``reach``'s probe knows its
    versions) over the launch's open connections; no clock (it decides nothing about a run)."""
    t0 = time.monotonic()
    endpoint = endpoint_of(config, {k: t.address for k, t in transports.items()})
    reports = gather(config, transports, endpoint, full=False)
    for name, probe in probes.items():
        if name in reports and reports[name].python is not None:
            reports[name] = dataclasses.replace(reports[name], torch=torch_of(probe))
    return Outcome(judge(config, reports, endpoint), reports, endpoint,
                   time.monotonic() - t0)


def torch_of(probe: nodeops.Probe) -> TorchInfo:
    if probe.torch is None:
        return TorchInfo(error=probe.torch_error)
    return TorchInfo(probe.torch, probe.cuda_version, probe.nccl, probe.cuda, probe.devices)
