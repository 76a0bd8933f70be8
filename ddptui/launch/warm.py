"""torchrun started as ddptui starts, on the nodes of a Slurm allocation it is told.

A launch's cost is torchrun's import of torch (1-2 s of CPU) and whatever comes before it.
The early start (:func:`ddptui.launch.phases.start_early`) already overlaps that import with
the probe, preflight and sync, but it can start torchrun only once the node is reached, its
rendezvous port locked and its files written: 0.3-0.5 s after the command, where the
``srun torchrun`` line a user types has torchrun importing after 0.05 s. What torchrun needs
to *import* is known before any of that, from the hosts file and the job alone: the node's
Python and the ranks' environment. So each node's run step is started here, before ddptui
imports the rest of its launch: a *warm* torchrun (:mod:`ddptui.nodeprog.warm_start`)
imports torch while ddptui reaches the node, and takes the rest (its arguments, the port's
lock, its log) from a spec written with the node's other files, then holds as an early
start does. A node whose warm torchrun never takes its spec (it died, or the step did not
start) is given up and started the ordinary way (:func:`ddptui.launch.staging.take_warm`);
a launch undone before then cancels the steps (:func:`cancel`), and each one that is never
told anything ends by itself (:data:`~ddptui.nodeprog.warm_start.WARM_WAIT_S`).

Only where every node is a step of a job known before the launch, and no setup command must
run before torchrun (it holds then, and is started after the setup).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import subprocess
from datetime import datetime

from ddptui import nodeprog
from ddptui.config import HostsConfig
from ddptui.launch.plan import job_env, new_run_id, node_env
from ddptui.nodeprog import torchrun_tee, warm_start
from ddptui.store import rundir
from ddptui.transport.srun import stepenv, steps
from ddptui.transport.srun.names import step_name

#: In the node dir: what a warm torchrun runs (``staging.warm_spec``), written with the node's
#: files; it holds the secret env, so only its owner may read it.
SPEC = "warm.json"
#: Seconds to let srun go for one node's step.
LET_GO_S = 10.0


def spec_path(node_dir: str) -> str:
    return rundir.in_node_dir(node_dir, SPEC)


def wanted(config: HostsConfig) -> bool:
    """Every node a step of a known job, each workdir absolute or under ``~/`` (the node
    expands it as the agent's ``$HOME`` does), and no setup command first."""
    slurm = config.slurm
    return (slurm is not None and slurm.job is not None and not config.job.setup
            and all(n.transport == "srun" and not n.is_local for n in config.nodes)
            and all(n.workdir.startswith("/") or n.workdir == "~" or n.workdir.startswith("~/")
                    for n in config.nodes))


def fresh_run_id() -> str:
    """A new run's name: now, and four random hex digits (``plan.new_run_id``, which is pure)."""
    return new_run_id(datetime.now(), secrets.token_hex(2))


def new_run(config: HostsConfig) -> tuple[str, frozenset[str]]:
    """A new run's name, and :func:`start` for it."""
    run_id = fresh_run_id()
    return run_id, start(config, run_id)


def start(config: HostsConfig, run_id: str) -> frozenset[str]:
    """Start every node's warm torchrun; the names of the nodes where its step was let go."""
    if not wanted(config):
        return frozenset()
    assert config.slurm is not None and config.slurm.job is not None
    program = nodeprog.source(torchrun_tee)  # as ``staging.torchrun_program``, uncached
    own = stepenv.scrubbed(os.environ)
    started = set()
    for node in config.nodes:
        rank = config.node_rank(node)
        spec = spec_path(rundir.node_dir(node.workdir, run_id, rank))
        env = {k: v for k, v in job_env(config, node).items()
               if k not in stepenv.dropped({k: v})}
        # the run's marker, by which stop finds its processes, is the step's alone, never its
        # srun's here (on a one-machine cluster, a stop would take that srun for the run)
        marker = node_env(config, node, run_id, rank).items() - job_env(config, node).items()
        shell = " ".join(["export", *(f"{k}={shlex.quote(v)}" for k, v in sorted(marker)),
                          "&& exec", shlex.quote(node.python), "-c", shlex.quote(program),
                          warm_start.WARM, shlex.quote(spec)])  # ``~/``: expanded there
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            steps.let_go(config.slurm.job, node.host, shell, step_name(run_id), LET_GO_S,
                         own | env)
            started.add(node.name)
    return frozenset(started)


def cancel(config: HostsConfig, run_id: str) -> None:
    """Cancel the run's steps on every node: a launch undone before its warm torchruns took
    their specs leaves none of them importing torch for nothing."""
    from ddptui.slurm import client  # not on the way to the warm start
    from ddptui.slurm.jobinfo import SlurmError

    if config.slurm is None or config.slurm.job is None:
        return
    with contextlib.suppress(SlurmError):
        for step in client.steps(config.slurm.job):
            if step.name == step_name(run_id):
                with contextlib.suppress(SlurmError):
                    client.cancel(step.step_id)
