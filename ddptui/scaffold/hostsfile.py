"""The hosts file ``ddptui init`` writes: plain YAML, with what each host said as comments.

Text, not ``yaml.safe_dump`` of a dict: the comments are the point (why this python, why
this many processes), and they sit beside the values they explain, as in
``hosts.example.yaml``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ddptui.scaffold.probe import Found


@dataclass(frozen=True)
class HostFacts:
    """One host as given on the command line, what it answered, and its route to the first."""

    host: str
    found: Found
    toward: str | None  # the host the route was asked toward, for the comment


@dataclass(frozen=True)
class UserWide:
    """What the user-wide config gave the hosts (``config.user.supplied``) and its path.

    Named in the file and not copied into it: copied, a value would win over the user-wide
    one, and a key or login changed there would no longer reach this file.
    """

    path: Path | None = None
    values: Mapping[str, object] = field(default_factory=dict)

    def shown(self) -> list[str]:
        if not self.values:
            return []
        lines = ["# From the user-wide config, which lies under every hosts file; not repeated",
                 f"# here (a value set here would win over it): {self.path}"]
        for key, value in self.values.items():
            if isinstance(value, tuple):  # env: its names; the values stay in that file
                lines.append(f"#   {key}: {', '.join(map(str, value))} (names only)")
            else:
                lines.append(f"#   {key}: {scalar(value)}")
        return lines


def scalar(value: object) -> str:
    """A YAML scalar, quoted only where YAML needs it."""
    return yaml.safe_dump(value, default_flow_style=True, allow_unicode=True).split("\n")[0]


def render(hosts: Sequence[HostFacts], *, command: str, ssh_config: str | None,
           known_hosts: str | None, user: UserWide | None = None) -> str:
    user = user or UserWide()
    lines = [
        f"# ddptui hosts file, written by `{command}`.",
        "# Each host was asked which python imports torch and how many GPUs it has; the",
        "# comments say what it answered. `ddptui check THIS_FILE` checks it again, `ddptui",
        "# THIS_FILE` opens the dashboard. Every field is described in docs/hosts-file.md.",
        *user.shown(),
        "",
        "nodes:",
    ]
    for h in hosts:
        f = h.found
        assert f.python is not None, "only hosts with a python are written"
        lines.append(f"  - host: {scalar(h.host)}")
        if "defaults.python" in user.values:
            lines.append(f"    # python: {scalar(user.values['defaults.python'])} from the "
                         f"user-wide config; found: {f.summary()}")
        else:
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
