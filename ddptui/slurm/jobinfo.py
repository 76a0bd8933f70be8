"""What ``scontrol show job -o`` says of a job, and ddptui's words for its states.

Pure: the text comes in, a :class:`JobInfo` comes out, so every state and field is tested
without a cluster; :mod:`ddptui.slurm.client` is the part that runs the commands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

_PAIR = re.compile(r"(?:^|\s)([A-Za-z][\w/:.]*)=(\S*)")
_GPUS = re.compile(r"gpu(?::[\w.-]+)?[:=](\d+)")

#: Slurm states in which a job's steps can run.
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING"})
#: Why a job ended, for a run that ended with it: ddptui's words, then what to do.
ENDED: dict[str, str] = {
    "CANCELLED": "was cancelled (scancel, or an administrator); the run ended with it",
    "TIMEOUT": "reached its time limit and Slurm ended it; ask for more time (`slurm.time`, "
               "salloc --time) or save and resume from a checkpoint",
    "NODE_FAIL": "lost a node, which Slurm reported as failed (NODE_FAIL); `sinfo -R` says "
                 "why, and a new allocation avoids the node",
    "PREEMPTED": "was preempted by a job of higher priority; run it again, or in a partition "
                 "or QOS that is not preemptible",
    "BOOT_FAIL": "failed to boot its nodes (BOOT_FAIL); ask your administrators",
    "DEADLINE": "passed its deadline (`--deadline`) and Slurm ended it; give it a later one "
                "or ask for less time",
    "OUT_OF_MEMORY": "was ended by Slurm for using more memory than it asked for; ask for "
                     "more (`--mem`)",
    "COMPLETED": "has ended (its time or its last step)",
    "FAILED": "has failed",
}


#: A job Slurm has already forgotten (``MinJobAge`` after its end) and no accounting knows.
FORGOTTEN = ("has ended, and Slurm no longer keeps its record (it forgets an ended job "
             "MinJobAge seconds after its end), so why is not known here; `sacct -j JOB` says "
             "why where the cluster keeps accounting")


def ended_words(state: str) -> tuple[str, str]:
    """What ending in ``state`` means and what to do, as two parts (the second may be "");
    ``state`` "" is a job Slurm has forgotten."""
    what, _, advice = (ENDED.get(state, f"ended ({state})") if state else FORGOTTEN
                       ).partition("; ")
    return what, advice


@dataclass(frozen=True)
class JobEnd:
    """How Slurm ended a job: its final state and reason; state "" where nothing that
    ddptui can ask still knows (see :data:`FORGOTTEN`)."""

    job_id: str
    state: str
    reason: str

    def evidence(self) -> str:
        return (f"[slurm] JobId={self.job_id} JobState={self.state} Reason={self.reason}"
                if self.state else f"[slurm] JobId={self.job_id}: no longer known to Slurm")


class SlurmError(Exception):
    """Slurm refused or could not answer; ``str()`` is one paragraph for a person."""


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    state: str
    reason: str
    user_id: int | None
    user: str
    node_list: str
    num_nodes: int
    num_tasks: int
    tasks_per_node: int
    gpus_per_node: int
    partition: str
    time_limit: str
    end_time: str

    @property
    def running(self) -> bool:
        return self.state in RUNNING_STATES

    @property
    def pending(self) -> bool:
        return self.state in ("PENDING", "CONFIGURING", "REQUEUED")

    def slots(self) -> int | None:
        """Processes per node the allocation holds: its GPUs per node, else the tasks per
        node it was asked with; None when it says neither (each node's own count decides)."""
        if self.gpus_per_node > 0:
            return self.gpus_per_node
        return self.tasks_per_node if self.tasks_per_node > 0 else None


def fields(text: str) -> dict[str, str]:
    """``Key=Value`` pairs of one ``-o`` (one line) record."""
    return {m.group(1): m.group(2) for m in _PAIR.finditer(text)}


def _int(text: str | None) -> int:
    try:
        return int(text or "")
    except ValueError:
        return 0


def parse_job(text: str) -> JobInfo:
    """One job's ``scontrol show job -o`` line."""
    f = fields(text.strip().splitlines()[0] if text.strip() else "")
    if "JobId" not in f:
        raise SlurmError(f"scontrol gave no job record: {text.strip()[:200]!r}")
    uid = re.search(r"\((\d+)\)", f.get("UserId", ""))
    user = f.get("UserId", "").split("(", 1)[0]
    nodes = _int(f.get("NumNodes", "").split("-")[0])
    per_node = _int(f.get("NtasksPerN:B:S:C", "0").split(":")[0])
    tasks = _int(f.get("NumTasks"))
    if per_node == 0 and nodes and tasks and tasks % nodes == 0 and tasks > nodes:
        per_node = tasks // nodes
    gpus = 0
    for key in ("TresPerNode", "TresPerJob", "TRES"):
        m = _GPUS.search(f.get(key, ""))
        if m:
            gpus = int(m.group(1)) // (max(nodes, 1) if key != "TresPerNode" else 1)
            break
    return JobInfo(f["JobId"], f.get("JobState", "UNKNOWN"), f.get("Reason", "None"),
                   int(uid.group(1)) if uid else None, user, f.get("NodeList", ""), nodes,
                   tasks, per_node, gpus, f.get("Partition", ""), f.get("TimeLimit", ""),
                   f.get("EndTime", ""))


def node_addresses(text: str) -> dict[str, str]:
    """``NodeName -> NodeAddr`` from ``scontrol show node -o`` lines (Slurm's own address
    of each node: what the other nodes reach it at, never a guess from this machine)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        f = fields(line)
        if "NodeName" in f:
            out[f["NodeName"]] = f.get("NodeAddr") or f["NodeName"]
    return out


def not_usable(info: JobInfo, uid: int) -> str | None:
    """Why ddptui cannot run in this allocation, in its own words; None when it can."""
    j = f"Slurm job {info.job_id}"
    if info.user_id is not None and info.user_id != uid:
        return (f"{j} belongs to {info.user or info.user_id}, not to you; ddptui runs only in "
                "your own allocations.")
    if info.pending:
        return (f"{j} is still waiting for its nodes ({info.state}, reason {info.reason}); "
                f"wait until `squeue -j {info.job_id}` says RUNNING, or let ddptui ask for an "
                "allocation itself (`slurm: {nodes: N}`).")
    if not info.running:
        ended = ENDED.get(info.state, f"is {info.state}")
        return (f"{j} {ended}, so it has no nodes to run on; give a running allocation "
                "(`squeue --me`), or let ddptui ask for one.")
    return None


def pending_words(reason: str) -> str:
    """Slurm's pending reason, said plainly (the reason itself stays beside it)."""
    return {
        "Priority": "jobs of higher priority are ahead of it",
        "Resources": "it waits for nodes to become free",
        "Dependency": "it waits for another job",
        "QOSMaxJobsPerUserLimit": "you have as many jobs as your QOS allows",
        "AssocGrpGRES": "your account's GPU limit is reached",
        "ReqNodeNotAvail": "a node it needs is unavailable (down, drained or reserved)",
        "PartitionTimeLimit": "its time limit is above the partition's; it will never start",
        "BeginTime": "its start time has not come",
        "PartitionDown": "its partition is down; it starts once the partition is up again",
        "PartitionInactive": "its partition takes no jobs now",
        "JobHeldUser": "it is held; `scontrol release JOB` lets it go",
        "JobHeldAdmin": "an administrator holds it",
        "Reservation": "it waits for its reservation to start",
        "NodeDown": "a node it needs is down",
        "None": "Slurm has not looked at it yet",
    }.get(reason, "Slurm holds it")


def seconds_left(info: JobInfo, now: datetime) -> int | None:
    """Seconds until the job's ``EndTime`` (Slurm's local time, as ``now``); None if unknown
    (no limit: ``Unknown``)."""
    try:
        end = datetime.fromisoformat(info.end_time)
    except ValueError:
        return None
    return max(0, int((end - now).total_seconds()))


def slurm_duration(secs: int) -> str:
    """Seconds as Slurm writes durations: ``[D-]HH:MM:SS``."""
    d, rem = divmod(secs, 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{m:02d}:{s:02d}"


def time_left(info: JobInfo, now_iso: str) -> str | None:
    """``EndTime - now`` as Slurm writes durations; None if unknown."""
    try:
        now = datetime.fromisoformat(now_iso)
    except ValueError:
        return None
    left = seconds_left(info, now)
    return None if left is None else slurm_duration(left)
