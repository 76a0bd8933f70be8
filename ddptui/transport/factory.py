"""Which transport a node gets: the only place that knows every kind exists."""

from __future__ import annotations

from ddptui.config import HostsConfig, NodeConfig
from ddptui.transport.base import Transport
from ddptui.transport.local import LocalTransport


def make_transport(node: NodeConfig, config: HostsConfig) -> Transport:
    """``transport: local`` runs here via subprocess, ``srun`` through steps of the
    config's Slurm allocation; everything else goes over SSH.

    paramiko is imported at the first SSH node, not before: a tenth of a second of every
    start that a local run (the demo, a single machine) never needs."""
    if node.is_local:
        return LocalTransport(node)
    if node.transport == "srun":
        from ddptui.transport.srun.transport import SrunTransport

        if config.slurm is None or config.slurm.job is None:
            raise ValueError(f"node {node.name}: transport srun without an allocation")
        return SrunTransport(node, config.slurm.job)
    from ddptui.transport.ssh import SSHTransport

    return SSHTransport(node, config.ssh)
