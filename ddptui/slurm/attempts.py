"""When a run that its allocation ended is tried again in a new one (``slurm.resubmit``), and
how its attempts are named: a decision of Slurm's facts and the hosts file alone, so that
every face (the headless loop, the dashboard through its engine) takes the same one."""

from __future__ import annotations

import re

from ddptui.config import HostsConfig
from ddptui.slurm.jobinfo import JobEnd

#: Slurm's ends that a new allocation answers: the time ran out, or a job of higher priority
#: took the nodes. Any other end (a failure, a cancel) is not tried again.
ENDS_RESUBMITTED = frozenset({"TIMEOUT", "PREEMPTED"})
_ATTEMPT_ID = re.compile(r"^(?P<first>.+)\.(?P<n>[2-9]|[1-9]\d+)$")


def attempt_id(first: str, number: int) -> str:
    """Attempt ``number``'s run id: the first's, then ``<first>.2``, ``<first>.3``."""
    return first if number == 1 else f"{first}.{number}"


def first_of(run_id: str) -> str:
    """The first attempt's run id (a run resubmitted never is itself)."""
    m = _ATTEMPT_ID.match(run_id)
    return m.group("first") if m else run_id


def why_again(config: HostsConfig, number: int, *, left_at_signal: bool, end: JobEnd | None,
              stopped: bool) -> str | None:
    """Why attempt ``number`` is followed by another, in ddptui's words; None: it is not."""
    s = config.slurm
    if s is None or not s.owned or stopped or number > s.resubmit:
        return None
    if end is not None and end.state in ENDS_RESUBMITTED:
        return f"Slurm job {end.job_id} ended ({end.state})"
    if left_at_signal:
        return f"the ranks left at the signal of Slurm job {s.job}'s time limit"
    return None
