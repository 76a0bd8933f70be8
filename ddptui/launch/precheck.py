"""Preflight on the nodes: the check program on every node at once, one command each.

``ddptui check`` opens its own connections and asks everything, torch included; before a
launch the connections that ``reach`` opened are reused and torch's versions come from its
probe, so the check adds no second ``import torch`` (about a second on a real node), and its
round trip is made while the probe's is (:func:`gather_for_launch`). The endpoint node
listens on the rendezvous port while every node, itself included, connects to it: the
program (see :mod:`ddptui.diagnose.preflight.probe`) runs on all nodes at the same time, so
no step waits for another.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import secrets
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ddptui.config import HostsConfig, NodeConfig
from ddptui.diagnose.preflight import Endpoint, Mark, NodeReport, Verdict, judge, parse_report
from ddptui.diagnose.preflight.envdiff import env_changes_torch
from ddptui.diagnose.preflight.probe import NODE_SRC
from ddptui.diagnose.preflight.report import TorchInfo
from ddptui.launch import rank_env
from ddptui.launch.plan import expand_home
from ddptui.launch.project import project_dirs
from ddptui.launch.rank_env import torch_of
from ddptui.remote import nodeops
from ddptui.remote.reach import Done, Failed, connect, map_at_once
from ddptui.sync.walk import walk
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


def node_args(node: NodeConfig, endpoint: Endpoint, *, nonce: str, expect: int,
              with_torch: bool) -> dict[str, Any]:
    return {
        "workdir": node.workdir, "endpoint": endpoint.host, "port": endpoint.port,
        "listen": endpoint.node == node.name, "expect": expect, "connect": True,
        "nonce": nonce, "torch": with_torch, "listen_s": LISTEN_S, "connect_s": CONNECT_S,
        "attempt_s": ATTEMPT_S, "budget_s": 30.0 if with_torch else 8.0,
    }


def gather(config: HostsConfig, transports: Mapping[str, Transport], endpoint: Endpoint, *,
           full: bool, envs: Mapping[str, rank_env.RankEnv] | None = None,
           ) -> dict[str, NodeReport]:
    """Run the program on every node of ``transports`` at once, in its ranks' environment
    (``envs``; by default the config's, without a project); a report per node. The full
    check asks a bare login's torch in the same round trip (the launch's probe did)."""
    nonce = secrets.token_hex(8)
    nodes = [n for n in config.nodes if n.name in transports]

    def ask(node: NodeConfig) -> NodeReport:
        env = (envs or {}).get(node.name) or rank_env.for_node(config, node)
        args = node_args(node, endpoint, nonce=nonce, expect=len(nodes), with_torch=full)
        res = rank_env.run(transports[node.name], env, NODE_SRC, json.dumps(args),
                           timeout=90 if full else 30, no_site=not full, bare=full)
        bare, stdout = rank_env.split_bare(res.stdout)
        report = parse_report(node.name, stdout, exit_code=res.exit_code, stderr=res.stderr,
                              received_at=time.time() if full else None)
        return dataclasses.replace(report, bare_torch=bare)

    return {res.item.name: res.value if isinstance(res, Done) else
            NodeReport(res.item.name, not_run=f"{type(res.error).__name__}: {res.error}")
            for res in map_at_once(nodes, ask)}


def explained(config: HostsConfig, transports: Mapping[str, Transport],
              envs: Mapping[str, rank_env.RankEnv], reports: dict[str, NodeReport],
              endpoint: Endpoint) -> Verdict:
    """The verdict; where a node's torch fails and its ranks' environment changes that torch,
    the node is asked (once more) which `env:` name does it, so the failure can say."""
    verdict = judge(config, reports, endpoint)
    asked = [n for n in config.nodes if n.name in transports
             and (r := verdict.get(n.name, "torch")) is not None and r.mark == Mark.FAIL
             and env_changes_torch(reports[n.name])]
    if not asked:
        return verdict

    def ask(node: NodeConfig) -> tuple[str, ...]:
        env = envs.get(node.name) or rank_env.for_node(config, node)
        return rank_env.ask_causes(transports[node.name], env, reports[node.name].bare_torch)

    for found in map_at_once(asked, ask):
        if isinstance(found, Done):
            name = found.item.name
            reports[name] = dataclasses.replace(reports[name], torch_causes=found.value)
    return judge(config, reports, endpoint)


def check_envs(config: HostsConfig, transports: Mapping[str, Transport]
               ) -> dict[str, rank_env.RankEnv]:
    """``ddptui check``'s idea of each node's ranks' environment: the project's path there is
    the one a launch would use (the synced tree of today's content, or the in-place path)."""
    job = config.job
    dirs: Mapping[str, str] | None = None
    if job.script is not None and job.project is not None:
        with contextlib.suppress(Exception):  # a project that cannot ship: `run` says why
            walked = walk(job.project, job.exclude, max_mb=job.max_sync_mb) if job.sync \
                else None
            homes = {k: t.home() for k, t in transports.items()}
            workdirs = {n.name: expand_home(n.workdir, homes[n.name])
                        for n in config.nodes if n.name in homes}
            dirs = project_dirs(job, workdirs, homes, walked)
    return {n.name: rank_env.for_node(config, n, (dirs or {}).get(n.name))
            for n in config.nodes}


def check(config: HostsConfig) -> Outcome:
    """``ddptui check``: connect to every node, ask everything, judge; start nothing."""
    t0 = time.monotonic()
    nodes = list(config.nodes)
    opened = map_at_once(nodes, lambda n: connect(n, config))
    transports: dict[str, Transport] = {}
    reports: dict[str, NodeReport] = {}
    for res in opened:
        if isinstance(res, Failed):
            e = res.error
            why = str(e) if isinstance(e, TransportError) else f"{type(e).__name__}: {e}"
            reports[res.item.name] = NodeReport(res.item.name, unreachable=why)
        else:
            transports[res.item.name] = res.value
    try:
        endpoint = endpoint_of(config, {k: t.address for k, t in transports.items()})
        envs = check_envs(config, transports)
        reports.update(gather(config, transports, endpoint, full=True, envs=envs))
        verdict = explained(config, transports, envs, reports, endpoint)
    finally:
        for t in transports.values():
            t.close()
    return Outcome(verdict, reports, endpoint, time.monotonic() - t0)


@dataclass(frozen=True)
class Gathered:
    """The launch's preflight program answered on every node, not yet judged."""

    endpoint: Endpoint
    reports: dict[str, NodeReport]
    started: float


def gather_for_launch(config: HostsConfig, transports: Mapping[str, Transport],
                      envs: Mapping[str, rank_env.RankEnv] | None = None) -> Gathered:
    """The program without torch on every node, in the ranks' ``envs``: it needs nothing of
    the launch's probe, so a launch runs the two at once (:func:`before_launch` judges)."""
    t0 = time.monotonic()
    endpoint = endpoint_of(config, {k: t.address for k, t in transports.items()})
    return Gathered(endpoint, gather(config, transports, endpoint, full=False, envs=envs or {}),
                    t0)


def before_launch(config: HostsConfig, transports: Mapping[str, Transport],
                  probes: Mapping[str, nodeops.Probe],
                  envs: Mapping[str, rank_env.RankEnv] | None = None,
                  bare: Mapping[str, TorchInfo | None] | None = None,
                  gathered: Gathered | None = None) -> Outcome:
    """The automatic subset: the same program without torch (``reach``'s probe, made in the
    same ``envs``, knows its versions and ``bare`` a bare login's) over the launch's open
    connections; no clock (it decides nothing about a run). ``gathered``: its answers, when
    asked already (:func:`gather_for_launch`)."""
    envs = envs or {}
    gathered = gathered or gather_for_launch(config, transports, envs)
    reports, endpoint = dict(gathered.reports), gathered.endpoint
    for name, probe in probes.items():
        if name in reports and reports[name].python is not None:
            reports[name] = dataclasses.replace(reports[name], torch=torch_of(probe),
                                                bare_torch=(bare or {}).get(name))
    verdict = explained(config, transports, envs, reports, endpoint)
    return Outcome(verdict, reports, endpoint, time.monotonic() - gathered.started)
