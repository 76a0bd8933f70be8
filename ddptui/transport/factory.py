"""Which transport a node gets: the only place that knows both kinds exist."""

from __future__ import annotations

from ddptui.config import NodeConfig, SSHOptions
from ddptui.transport.base import Transport
from ddptui.transport.local import LocalTransport


def make_transport(node: NodeConfig, options: SSHOptions | None = None) -> Transport:
    """``transport: local`` runs here via subprocess; everything else goes over SSH.

    paramiko is imported at the first SSH node, not before: a tenth of a second of every
    start that a local run (the demo, a single machine) never needs."""
    if node.is_local:
        return LocalTransport(node)
    from ddptui.transport.ssh import SSHTransport

    return SSHTransport(node, options or SSHOptions())
