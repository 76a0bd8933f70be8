"""From a hosts file's `slurm:` section to its nodes: the allocation found (or asked for),
its node list expanded by Slurm, node rank 0's address as Slurm reports it, each node's
processes from the allocation; and the allocation given back when ddptui asked for it."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Mapping

from ddptui.config import HostsConfig, NodeConfig
from ddptui.config.slurm import JOB_FROM_ENV, SlurmConfig
from ddptui.slurm import client
from ddptui.slurm.jobinfo import JobInfo, SlurmError, not_usable, pending_words

#: How long a granted allocation may take to reach RUNNING (its nodes' prolog, boot).
RUNNING_WAIT_S = 120.0

#: Says how a queued request stands, in one line for a person.
Say = Callable[[str], None]


def request_options(s: SlurmConfig[NodeConfig]) -> list[str]:
    """``salloc`` options for what the section asks."""
    out = [f"--nodes={s.nodes}"] if s.nodes else []
    out += [f"--partition={s.partition}"] if s.partition else []
    out += [f"--gpus-per-node={s.gpus_per_node}"] if s.gpus_per_node else []
    out += [f"--time={s.time}"] if s.time else []
    out += [f"--account={s.account}"] if s.account else []
    return out + list(s.options)


def queued_line(info: JobInfo | None, error: str = "") -> str:
    if info is None:
        return f"waiting for Slurm: {error}"
    if info.running:
        return f"Slurm job {info.job_id} granted on {info.node_list}"
    pos, start = client.queue_position(info) if info.pending else (None, None)
    where = f", position {pos} in partition {info.partition}" if pos else ""
    when = f", expected to start {start}" if start else ""
    return (f"Slurm job {info.job_id} is queued ({info.state}, reason {info.reason}: "
            f"{pending_words(info.reason)}{where}{when})")


def resolve(config: HostsConfig, job: str | None = None, *, say: Say = lambda _: None,
            environ: Mapping[str, str] | None = None,
            stop: threading.Event | None = None) -> HostsConfig:
    """``config`` with its nodes made from the allocation (``job``, from ``--slurm-job``,
    wins over the file); raises SlurmError, having given back anything it asked for."""
    slurm = config.slurm
    if slurm is None:
        if job is None:
            return config
        raise SlurmError("--slurm-job needs a hosts file with a `slurm:` section (its "
                         "`defaults:` make the nodes); add `slurm: {job: env}`.")
    env = os.environ if environ is None else environ
    job = job or slurm.job
    owned = False
    if job == JOB_FROM_ENV:
        job = env.get("SLURM_JOB_ID")
        if not job:
            raise SlurmError("`slurm.job: env` takes the allocation this shell runs in, but "
                             "SLURM_JOB_ID is not set here: run ddptui inside salloc or "
                             "sbatch, or give the job id.")
    if job is None:
        last = [""]

        def heard(info: JobInfo | None, error: str) -> None:
            line = queued_line(info, error)
            if line != last[0]:
                last[0] = line
                say(line)

        job = client.allocate(request_options(slurm), heard, stop=stop)
        owned = True
    try:
        info = wait_running(job, owned)
        if owned:
            say(queued_line(info))  # granted, on which nodes
        return with_nodes(config, dataclasses.replace(slurm, job=job, owned=owned), info)
    except BaseException:
        if owned and not slurm.keep:
            give_back(job)
        raise


def wait_running(job: str, owned: bool) -> JobInfo:
    """The job once RUNNING; one granted a moment ago may still be configuring."""
    deadline = time.monotonic() + (RUNNING_WAIT_S if owned else 0)
    while True:
        info = client.show_job(job)
        why = not_usable(info, os.getuid())
        if why is None:
            return info
        if not (owned and info.state in ("CONFIGURING", "PENDING")) or \
                time.monotonic() > deadline:
            raise SlurmError(why)
        time.sleep(0.5)


def with_nodes(config: HostsConfig, slurm: SlurmConfig[NodeConfig], info: JobInfo
               ) -> HostsConfig:
    """One node per node of the allocation, made from the template (``defaults:``)."""
    names = client.hostnames(info.node_list)
    addrs = client.addresses(names)
    template = slurm.template
    assert template is not None, "a parsed slurm section has its template"
    slots = info.slots()
    nproc = template.nproc_per_node if template.nproc_per_node != "auto" or slots is None \
        else slots
    nodes = tuple(dataclasses.replace(template, name=n, host=n, addr=addrs.get(n, n),
                                      nproc_per_node=nproc) for n in names)
    return dataclasses.replace(config, nodes=nodes, slurm=slurm)


def give_back(job: str) -> None:
    """Cancel an allocation ddptui asked for; one already gone is fine."""
    try:
        client.cancel(job)
    except SlurmError as e:
        if "Invalid job id" not in str(e) and "already completing" not in str(e):
            raise
