"""Slurm's client commands (``scontrol``, ``squeue``, ``salloc``, ``scancel``), run here on
the login node, their failures turned into :class:`SlurmError` in ddptui's words with Slurm's
own message as evidence. Every call is bounded."""

from __future__ import annotations

import contextlib
import re
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ddptui.slurm.jobinfo import JobEnd, JobInfo, SlurmError, node_addresses, parse_job

#: Seconds any one client command may take (slurmctld answers in milliseconds when up).
COMMAND_TIMEOUT_S = 30.0
#: Seconds a step cancelled or ended may take to leave Slurm's list of running steps
#: (a moment, unless slurmd or slurmctld is overloaded).
SETTLE_S = 15.0
_GRANTED = re.compile(r"(?:Granted job allocation|Pending job allocation|job) (\d+)")


class UnknownJob(SlurmError):
    """Slurm does not know the job ("Invalid job id specified"): it never existed, or ended
    long enough ago."""


def run(argv: Sequence[str], timeout: float = COMMAND_TIMEOUT_S) -> str:
    """stdout of ``argv``; a SlurmError naming the command and Slurm's words otherwise."""
    try:
        res = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise SlurmError(f"`{argv[0]}` is not installed here: run ddptui where Slurm's client "
                         "commands are (a login node of the cluster).") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"`{' '.join(argv)}` did not answer within {timeout:g} s: is "
                         "slurmctld reachable from here (`scontrol ping`)?") from None
    if res.returncode != 0:
        said = (res.stderr.strip() or res.stdout.strip())[-400:]
        kind = UnknownJob if "Invalid job id" in said else SlurmError
        raise kind(f"`{' '.join(argv)}` failed (exit code {res.returncode}). Slurm "
                   f"said: {said}")
    return res.stdout


def show_job(job: str) -> JobInfo:
    """The job as slurmctld knows it; a job it does not know is named as such."""
    try:
        return parse_job(run(["scontrol", "show", "job", "-o", job]))
    except UnknownJob:
        raise UnknownJob(f"Slurm has no job {job}: it never existed, or it ended long "
                         "enough ago to be forgotten; `squeue --me` lists yours.") from None


def accounted_end(job: str) -> JobEnd | None:
    """How a job ended, from Slurm's accounting (``sacct``), for a job slurmctld has already
    forgotten; None where the cluster keeps no accounting or it has no final state yet."""
    try:
        out = run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "State,Reason"])
    except SlurmError:
        return None
    for line in out.splitlines():
        state, _, reason = line.strip().partition("|")
        state = state.split(" ")[0]  # "CANCELLED by 1000"
        if state and state not in ("RUNNING", "PENDING", "COMPLETING", "REQUEUED"):
            return JobEnd(job, state, reason or "None")
    return None


def hostnames(node_list: str) -> list[str]:
    """``gpu[01-04,07]`` as Slurm itself expands it."""
    return run(["scontrol", "show", "hostnames", node_list]).split()


def addresses(names: list[str]) -> dict[str, str]:
    return node_addresses(run(["scontrol", "show", "node", "-o", ",".join(names)]))


def cancel(job: str) -> None:
    """``scancel`` a job or a step (``J.S``)."""
    run(["scancel", job])


def wait_step_gone(step: str, timeout: float = SETTLE_S) -> bool:
    """Whether Slurm stopped listing the step ``J.S`` within ``timeout`` seconds (a step
    cancelled or ended is listed a moment longer, while slurmd reports its end)."""
    deadline = time.monotonic() + timeout
    while step_listed(step):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


@dataclass(frozen=True)
class Step:
    step_id: str  # "JOB.STEP"
    name: str
    nodes: str


def steps(job: str) -> list[Step]:
    """The job's running steps (``squeue -s``); none once Slurm no longer knows the job (it
    ended long enough ago to be forgotten)."""
    try:
        out = run(["squeue", "-h", "-s", "-j", job, "-o", "%i|%j|%N"])
    except UnknownJob:
        return []
    found = []
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3:
            found.append(Step(*parts))
    return found


def step_listed(step: str) -> bool:
    """Whether Slurm still lists the step ``J.S`` among its job's running steps."""
    return any(s.step_id == step for s in steps(step.split(".", 1)[0]))


def job_running(job: str) -> bool:
    """Whether Slurm runs the job now; False for one it is ending (COMPLETING: Slurm itself
    kills what is left of it), has ended or has forgotten."""
    try:
        return show_job(job).state == "RUNNING"
    except UnknownJob:
        return False


def queue_position(info: JobInfo) -> tuple[int | None, str | None]:
    """Where a pending job stands in its partition (1: next) and when Slurm expects it to
    start (``squeue --start``; None when it does not say)."""
    try:
        ahead = run(["squeue", "-h", "-t", "PD", "-p", info.partition, "-o", "%i",
                     "--sort=-p,i"]).split()
        start = run(["squeue", "-h", "--start", "-j", info.job_id, "-o", "%S"]).strip()
    except SlurmError:
        return None, None
    pos = ahead.index(info.job_id) + 1 if info.job_id in ahead else None
    return pos, (start if start and start not in ("N/A", "Unknown") else None)


#: Called while an allocation waits: (job id or None, its state, Slurm's reason).
OnWait = Callable[[JobInfo | None, str], None]


def allocate(options: list[str], on_wait: OnWait, *, poll: float = 1.0,
             stop: threading.Event | None = None) -> str:
    """``salloc --no-shell OPTIONS``: the granted job's id, once it runs. ``on_wait`` hears
    the job's state while it is queued; ``stop`` set gives the request back (scancel)."""
    argv = ["salloc", "--no-shell", "--job-name=ddptui", *options]
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
    except FileNotFoundError:
        raise SlurmError("`salloc` is not installed here: run ddptui where Slurm's client "
                         "commands are (a login node of the cluster).") from None
    lines: list[str] = []
    job: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip())
            m = _GRANTED.search(line)
            if m and not job:
                job.append(m.group(1))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        while proc.poll() is None:
            if stop is not None and stop.is_set():
                raise SlurmError("the request for an allocation was given up before Slurm "
                                 "granted it" + (f" (job {job[0]}, cancelled)" if job else ""))
            if job:
                try:
                    on_wait(show_job(job[0]), "")
                except SlurmError as e:
                    on_wait(None, str(e))
            time.sleep(poll)
    except BaseException:  # given up (Ctrl-C, stop): nothing of the request may stay queued
        if job:
            with contextlib.suppress(SlurmError):
                cancel(job[0])
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        raise
    reader.join(5)
    said = "\n".join(lines[-6:])
    if proc.returncode != 0 or not job:
        raise SlurmError(f"Slurm refused the allocation ddptui asked for (`{' '.join(argv)}`, "
                         f"exit code {proc.returncode}); change the `slurm:` section. Slurm "
                         f"said: {said}")
    return job[0]
