"""Preflight's rules: every node's report -> one mark per node and check, and for each
failure one line in ddptui's words saying what is wrong, where, and what to do.

Pure: the reports carry everything the nodes said (and the session measured), the hosts
file says what was asked for; the same reports give the same verdict, whether live or
recorded. A check that could not be made on a node is marked ``-`` with the reason, never
guessed at, so that one broken node does not produce a column of consequences.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ddptui.config import HostsConfig, NodeConfig
from ddptui.diagnose.preflight import net_checks as net
from ddptui.diagnose.preflight import node_checks as node
from ddptui.diagnose.preflight.report import NodeReport
from ddptui.diagnose.preflight.verdict import (
    CHECKS,
    Context,
    Endpoint,
    Mark,
    Outcome,
    Result,
    Verdict,
)

__all__ = ["CHECKS", "Endpoint", "Mark", "Result", "Verdict", "judge"]

_RULES: dict[str, Callable[[Context, NodeConfig, NodeReport], Outcome]] = {
    "ssh": node.check_ssh, "python": node.check_python, "torch": node.check_torch,
    "gpus": node.check_gpus, "gpu use": node.check_gpu_use, "cpus": node.check_cpus,
    "hostname": net.check_hostname,
    "network": net.check_network, "workdir": node.check_workdir, "clock": node.check_clock,
    "port": net.check_port, "reach": net.check_reach,
}


def judge(config: HostsConfig, reports: Mapping[str, NodeReport],
          endpoint: Endpoint) -> Verdict:
    """Every check on every node, in table order (nodes by node rank)."""
    ctx = Context(config, reports, endpoint, node.torch_reference(config, reports))
    out = []
    for n in config.ordered_nodes:
        r = reports.get(n.name) or NodeReport(n.name, unreachable="not checked")
        ran = r.python is not None
        for check in CHECKS:
            if not ran and check not in ("ssh", "python"):
                out.append(Result(n.name, check, Mark.SKIP, ""))
                continue
            if check == "python" and node.check_ssh(ctx, n, r)[0] == Mark.FAIL:
                out.append(Result(n.name, check, Mark.SKIP, ""))
                continue
            mark, detail, problem = _RULES[check](ctx, n, r)
            out.append(Result(n.name, check, mark, detail, problem))
    routes = tuple(chosen for n in config.ordered_nodes
                   if (rep := reports.get(n.name)) is not None and rep.python is not None
                   and (chosen := net.chosen_route(ctx, n, rep)) is not None)
    return Verdict(tuple(out), routes)
