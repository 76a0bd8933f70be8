"""``ddptui run --headless`` to the end of the run's last attempt: after an attempt that its
allocation's time limit (or a preemption) ended, a new allocation is asked for and the run
goes on from its checkpoint, as :mod:`ddptui.afterwards.resubmit` decides; lines of every
attempt go to the same output, each attempt announced."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

from ddptui.afterwards import resubmit
from ddptui.config import HostsConfig
from ddptui.config.slurm import TIME_LIMIT_EXIT, requeue_advice
from ddptui.faces.headless import Printer, run_headless
from ddptui.live.session import Session
from ddptui.outcome import LaunchError

USAGE_EXIT = 2

#: Makes a hosts file's allocation (asks Slurm, says how the request stands); None once the
#: reason it could not is printed (:func:`ddptui.faces.resolve.slurm_nodes`).
Allocate = Callable[[HostsConfig], HostsConfig | None]


def run_attempts(session: Session, asked: HostsConfig, allocate: Allocate, *, metrics: bool,
                 out: TextIO = sys.stdout) -> int:
    """Follow ``session`` (launched) and every attempt after it; the last one's exit code,
    :data:`TIME_LIMIT_EXIT` when its ranks left at the time limit's signal."""
    first, number, first_record = session.run_id, 1, session.recorder.record()
    while True:
        code = run_headless(session, out)
        result = session.result
        why = resubmit.why_again(session.config, number,
                                 left_at_limit=session.limit.left_at_limit,
                                 end=session.job.end, stopped=bool(result and result.stopped))
        if why is None:
            break
        if number == 1:
            first_record = session.recorder.record()
        resume = session.limit.found
        number += 1
        limit = session.config.slurm.resubmit + 1 if session.config.slurm else number
        out.write(f"ddptui: {why}; attempt {number} of at most {limit} of run {first}: asking "
                  "Slurm for a new allocation of the same shape\n")
        out.flush()
        cfg = allocate(resubmit.next_config(asked, number, first_record, resume))
        if cfg is None:
            return code or 1
        try:
            session = Session(cfg, state_root=session.root,
                              run_id=resubmit.attempt_id(first, number))
        except LaunchError as e:
            out.write(f"ddptui: attempt {number} was not started: {e}\n")
            return USAGE_EXIT
        job = cfg.slurm.job if cfg.slurm and cfg.slurm.job else "?"
        resubmit.link(session.root, first, number, job, resume, session.recorder)
        session.add_listener(Printer(metrics=metrics))
        step = f"checkpoint step {resume['step']}" if resume and resume["step"] is not None \
            else (resume["path"] if resume else "no checkpoint ddptui saw")
        out.write(f"ddptui: run {session.run_id}: attempt {number} of run {first} in Slurm job "
                  f"{job}, resuming from {step}; logs in {session.local_dir}\n")
        out.flush()
        try:
            session.launch()
        except LaunchError as e:
            out.write(f"ddptui: attempt {number} was not started:\n"
                      + "\n".join(f"  {p}" for p in e.problems) + "\n")
            return USAGE_EXIT
    if session.limit.left_at_limit and code == 0:
        s = session.config.slurm
        if s is not None and not s.owned:
            then = requeue_advice(s.job or "$SLURM_JOB_ID")
        else:
            then = ("`slurm.resubmit: N` asks for a new allocation and resumes from the "
                    "checkpoint, up to N times")
        out.write(f"ddptui: the ranks left at the time limit's signal, so the run is not "
                  f"complete (exit code {TIME_LIMIT_EXIT}). {then}\n")
        return TIME_LIMIT_EXIT
    return code
