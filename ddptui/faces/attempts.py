"""``ddptui run --headless`` to the end of the run's last attempt: after an attempt that its
allocation's time limit (or a preemption) ended, a new allocation is asked for and the run
goes on from its checkpoint (:mod:`ddptui.afterwards.resubmit`); lines of every attempt go
to the same output, each attempt announced."""

from __future__ import annotations

import sys
from typing import TextIO

from ddptui.afterwards.resubmit import Allocate, start_attempt
from ddptui.config.slurm import TIME_LIMIT_EXIT, requeue_advice
from ddptui.faces.headless import Printer, run_headless
from ddptui.live.session import Session
from ddptui.outcome import LaunchError

USAGE_EXIT = 2


def run_attempts(session: Session, allocate: Allocate, *, metrics: bool,
                 out: TextIO = sys.stdout) -> int:
    """Follow ``session`` (launched) and every attempt after it; the last one's exit code,
    :data:`TIME_LIMIT_EXIT` when its ranks left at the time limit's signal."""
    first = session.run_id
    while True:
        code = run_headless(session, out)
        why = session.again()
        if why is None:
            break
        number = session.recorder.attempt() + 1
        limit = session.config.slurm.resubmit + 1 if session.config.slurm else number
        out.write(f"ddptui: {why}; attempt {number} of at most {limit} of run {first}: asking "
                  "Slurm for a new allocation of the same shape\n")
        out.flush()
        try:
            after = start_attempt(session.config, session.root, session.run_id, allocate)
        except LaunchError as e:
            out.write(f"ddptui: attempt {number} was not started: {e}\n")
            return USAGE_EXIT
        if after is None:
            return code or 1
        session = after
        a = session.recorder.record().attempt
        resume = a["resumed_from"] if a else None
        step = (f"checkpoint step {resume['step']}" if resume and resume["step"] is not None
                else (resume["path"] if resume else "no checkpoint ddptui saw"))
        out.write(f"ddptui: run {session.run_id}: attempt {number} of run {first} in Slurm job "
                  f"{a['job'] if a else '?'}, resuming from {step}; logs in "
                  f"{session.local_dir}\n")
        out.flush()
        session.add_listener(Printer(metrics=metrics, store=session.store))
        try:
            session.launch()
        except LaunchError as e:
            out.write(f"ddptui: attempt {number} was not started:\n"
                      + "\n".join(f"  {p}" for p in e.problems) + "\n")
            return USAGE_EXIT
    if session.slurm.limit.left_at_signal and code == 0:
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
