"""The node's half of a ``transport: srun`` connection: one long-lived job step per node that
runs many commands, so that each costs a message instead of a new step (``srun`` takes about
a tenth of a second to place one; a launch runs a dozen commands per node).

:data:`SOURCE` (:mod:`ddptui.nodeprog.srun_agent`) is run on the node as ``python3 -u -c
SOURCE`` inside the step, so every process it starts belongs to the job (its accounting, its
``scancel``). It speaks :mod:`ddptui.transport.srun.frames` on stdin and stdout, and ends,
taking its commands with it, when its stdin closes: ddptui closed the connection or
died.
"""

from __future__ import annotations

from ddptui import nodeprog
from ddptui.nodeprog import srun_agent

#: Kept to the standard library and to Python 3.6, the oldest interpreter a node may offer.
SOURCE = nodeprog.source(srun_agent)
