"""Nodes of a Slurm allocation reached through ``srun`` job steps (``transport: srun``):
the connection is :class:`ddptui.transport.srun.transport.SrunTransport`; a step let go
alone (:mod:`.steps`) needs none of it, which a launch's first moment relies on."""
