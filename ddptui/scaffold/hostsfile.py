"""The hosts file ``ddptui init`` writes: plain YAML, with what each host said as comments.

Text, not ``yaml.safe_dump`` of a dict: the comments are the point (why this python, why
this many processes), and they sit beside the values they explain, as in
``hosts.example.yaml``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import yaml

from ddptui.scaffold.probe import Found


@dataclass(frozen=True)
class HostFacts:
    """One host as given on the command line, what it answered, and its route to the first."""

    host: str
    found: Found
    toward: str | None  # the host the route was asked toward, for the comment


def scalar(value: str | int) -> str:
    """A YAML scalar, quoted only where YAML needs it."""
    return yaml.safe_dump(value, default_flow_style=True, allow_unicode=True).split("\n")[0]


def render(hosts: Sequence[HostFacts], *, command: str, ssh_config: str | None,
           known_hosts: str | None) -> str:
    lines = [
        f"# ddptui hosts file, written by `{command}`.",
        "# Each host was asked which python imports torch and how many GPUs it has; the",
        "# comments say what it answered. `ddptui check THIS_FILE` checks it again, `ddptui",
        "# THIS_FILE` opens the dashboard. Every field is described in docs/hosts-file.md.",
        "",
        "nodes:",
    ]
    for h in hosts:
        f = h.found
        assert f.python is not None, "only hosts with a python are written"
        lines.append(f"  - host: {scalar(h.host)}")
        lines.append(f"    python: {scalar(f.python)}   # found: {f.summary()}")
        why = ("one process per GPU" if f.nproc == f.devices
               else "no usable GPU: one process on the CPU")
        lines.append(f"    nproc_per_node: {f.nproc}   # {why}")
        if h.toward:
            route = f.route or "no route found (`ip route get` said nothing usable)"
            lines.append(f"    # toward {h.toward}: {route}")
    lines += [
        "",
        "rendezvous:",
        "  backend: c10d",
        "  # port: 29400         # on the first node, which every other node must reach; left",
        "  #                     # out, ddptui takes the next free one when another run has it",
        "",
        "job:",
        "  # No `script:`: the bundled worker (a small DDP training loop) runs. Your own:",
        "  # script: train.py    # relative to this file; its folder is synced to every node",
        "  args: []",
    ]
    if ssh_config or known_hosts:
        lines += ["", "ssh:"]
        if ssh_config:
            lines.append(f"  config_file: {scalar(ssh_config)}")
        if known_hosts:
            lines.append(f"  known_hosts: {scalar(known_hosts)}")
    return "\n".join(lines) + "\n"
