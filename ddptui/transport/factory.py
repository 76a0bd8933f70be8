"""Which transport a node gets: the only place that knows both kinds exist."""

from __future__ import annotations

from ddptui.config import NodeConfig, SSHOptions
from ddptui.transport.base import Transport
from ddptui.transport.local import LocalTransport
from ddptui.transport.ssh import SSHTransport


def make_transport(node: NodeConfig, options: SSHOptions | None = None) -> Transport:
    """``transport: local`` runs here via subprocess; everything else goes over SSH."""
    if node.is_local:
        return LocalTransport(node)
    return SSHTransport(node, options or SSHOptions())
