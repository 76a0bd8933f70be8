"""A step of ddptui's on one node: the ``srun`` line that places it, and a step let go.

Kept apart from the connection (:mod:`.transport`), whose agent, link and Slurm client a
launch's first moment does not need: torchrun's warm start (``ddptui.launch.warm``) lets its
steps go before ddptui has imported the rest of itself.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping

from ddptui.transport.srun import stepenv


def step_argv(job: str, host: str, name: str, *argv: str) -> list[str]:
    """A step of ``job`` on node ``host`` alone, beside the steps already there, with every
    CPU the job holds there: ``--whole`` gives the step the node's whole allocation, and
    ``--cpu-bind=none`` keeps Slurm from binding its one task (all of torchrun's ranks) to
    the one CPU a task is given by default. ``srun`` runs without what it would read as
    options from this environment (:mod:`.stepenv`)."""
    return [*stepenv.unset_argv(os.environ), "srun", "--overlap", "--whole", "--cpu-bind=none",
            f"--jobid={job}", f"--nodelist={host}", "--nodes=1", "--ntasks=1", "--quiet",
            "--unbuffered", f"--job-name={name}", *argv]


def let_go(job: str, host: str, shell: str, name: str, timeout: float,
           env: Mapping[str, str] | None = None) -> None:
    """``shell`` as a step of its own named ``name``, its ``srun`` let go here (a new
    session, reparented: it lives on when ddptui ends), given ``env`` (default: this
    process's; srun passes it on to the step, never on a command line), of which the step
    keeps Slurm's variables as :func:`.stepenv.ranks_unset` leaves them. Raises OSError or
    SubprocessError when srun could not be started."""
    argv = step_argv(job, host, name, "sh", "-c", stepenv.ranks_unset() + shell)
    subprocess.run(["setsid", "-f", *argv], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=timeout, check=True,
                   env=None if env is None else dict(env))
