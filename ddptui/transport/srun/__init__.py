"""Nodes of a Slurm allocation reached through ``srun`` job steps (``transport: srun``)."""

from ddptui.transport.srun.transport import SrunTransport

__all__ = ["SrunTransport"]
