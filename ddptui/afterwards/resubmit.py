"""A run that its allocation's time limit (or a preemption) ended, brought back in a new one
(``slurm.resubmit: N``): the same hosts file, a new allocation of the same shape asked for,
and the same run launched again, resuming from its checkpoint. Each try is an *attempt*:
a run of its own (``<first>.2``, ``<first>.3``) whose ``run.json`` names the first, which
lists them all, so that the run list, ``ddptui logs`` and the dashboard show one run.

Only an allocation ddptui asked for is asked for again; for one the user holds, the hosts
file's check says what to do instead (:func:`ddptui.config.slurm.requeue_advice`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path

from ddptui.config import HostsConfig, NodeConfig
from ddptui.launch import warm
from ddptui.live.session import Session
from ddptui.run_notes import Attempt, Checkpoint
from ddptui.run_state import RunRecord
from ddptui.slurm.allocation import give_back
from ddptui.slurm.attempts import attempt_id, first_of
from ddptui.slurm.jobinfo import SlurmError
from ddptui.store import rundir
from ddptui.store.record import Recorder

#: Makes a hosts file's allocation: asks Slurm, saying how the request stands; None (the
#: reason said) or a SlurmError when it cannot.
Allocate = Callable[[HostsConfig], HostsConfig | None]

#: What the ranks are told of the attempt they are in (a script may resume on it).
ATTEMPT_ENV = "DDPTUI_ATTEMPT"
RESUME_ENV = "DDPTUI_RESUME_FROM"
_SNAPSHOT_DIR = "--snapshot-dir"


def start_attempt(previous: HostsConfig, root: Path, previous_id: str, allocate: Allocate
                  ) -> Session | None:
    """The session of the next attempt after run ``previous_id`` (its hosts file as it ran,
    ``previous``), in a new allocation of the same shape, linked to the first attempt, not yet
    launched but its torchruns started warm, as a first attempt's are; None when no allocation
    was made (said by ``allocate``)."""
    first = first_of(previous_id)
    before = Recorder.of_run(rundir.run_dir(root, previous_id)).record()
    number = (before.attempt["number"] if before.attempt else 1) + 1
    head = before if first == previous_id else Recorder.of_run(
        rundir.run_dir(root, first)).record()
    resume = before.time_limit["checkpoint"] if before.time_limit else None
    s = previous.slurm
    asked = previous if s is None else dataclasses.replace(
        previous, slurm=dataclasses.replace(s, job=None, owned=False))
    cfg = allocate(next_config(asked, number, head, resume))
    if cfg is None:
        return None
    job = cfg.slurm.job if cfg.slurm is not None and cfg.slurm.job else "?"
    run_id = attempt_id(first, number)
    started = warm.start(cfg, run_id)  # torch imports while the attempt is made and launched
    try:
        session = Session(cfg, state_root=root, run_id=run_id)
        session.warm = started
        link(root, first, number, job, resume, session.recorder)
    except BaseException:  # nothing runs in the allocation just asked for: give it back
        with contextlib.suppress(SlurmError):
            give_back(job)
        raise
    return session


def next_config(asked: HostsConfig, number: int, first: RunRecord,
                resume: Checkpoint | None) -> HostsConfig:
    """The hosts file as written (its allocation still to be asked for), for attempt
    ``number``: the ranks told which attempt this is and where the checkpoint is; the bundled
    worker pointed at the first attempt's snapshots (its own run dir is new)."""
    env = {ATTEMPT_ENV: str(number), **({RESUME_ENV: resume["path"]} if resume else {})}
    job = asked.job
    if job.is_bundled_worker:
        job = dataclasses.replace(job, args=worker_args(job.args, _first_cwd(first)))
    slurm = asked.slurm
    if slurm is not None and slurm.template is not None:
        slurm = dataclasses.replace(slurm, template=_with_env(slurm.template, env))
    return dataclasses.replace(asked, job=job, slurm=slurm,
                               nodes=tuple(_with_env(n, env) for n in asked.nodes))


def worker_args(args: tuple[str, ...], first_cwd: str) -> tuple[str, ...]:
    """The bundled worker's arguments for a later attempt: its snapshots where the first
    attempt kept them (a relative ``--snapshot-dir`` was relative to that run's dir), and
    no ``--fresh``, which would remove them."""
    out, snap, i = [], None, 0
    while i < len(args):
        a = args[i]
        if a == _SNAPSHOT_DIR and i + 1 < len(args):
            snap, i = args[i + 1], i + 2
            continue
        if a.startswith(_SNAPSHOT_DIR + "="):
            snap = a.split("=", 1)[1]
        elif a != "--fresh":
            out.append(a)
        i += 1
    snap = snap or rundir.WORKER_SNAPSHOTS.split("/", 1)[0]
    return (*out, _SNAPSHOT_DIR, snap if snap.startswith("/") else f"{first_cwd}/{snap}")


def _first_cwd(first: RunRecord) -> str:
    """Where the first attempt's worker ran: node rank 0's node dir, whose rank 0 saved."""
    zero = min(first.nodes.values(), key=lambda n: n.node_rank)
    return zero.run_dir


def _with_env(node: NodeConfig, env: Mapping[str, str]) -> NodeConfig:
    return dataclasses.replace(node, env={**node.env, **env})


def link(root: Path, first: str, number: int, job: str, resumed_from: Checkpoint | None,
         attempt: Recorder) -> None:
    """Record attempt ``number`` in its own ``run.json`` (through its session's recorder,
    the one writer there) and in the first attempt's list of them."""
    attempt.update(attempt=Attempt(first=first, number=number, job=job,
                                   resumed_from=resumed_from))
    head = Recorder.of_run(rundir.run_dir(root, first))
    record = head.record()
    if record.attempt is None:
        slurm = record.config.get("slurm")
        first_job = slurm.get("job") if isinstance(slurm, dict) else None
        head.update(attempt=Attempt(first=first, number=1, job=str(first_job or "?"),
                                    resumed_from=None))
    head.update(attempts=[*(record.attempts or []), attempt.record().run_id])
