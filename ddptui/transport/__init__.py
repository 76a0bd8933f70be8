"""Transports: the only code that touches a node. Blocking by design; one per node, per thread."""

from ddptui.transport.base import CommandResult, Transport, TransportError

__all__ = ["CommandResult", "Transport", "TransportError"]
