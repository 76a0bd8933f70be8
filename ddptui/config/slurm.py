"""The hosts file's `slurm:` section: nodes from an allocation instead of a list.

Kept apart from ``model.py`` because its nodes are not known when the file is read: the
file gives a *template* (its `defaults:`), and :mod:`ddptui.slurm.allocation` makes one node
of it per node of the allocation, once Slurm has said which.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from ddptui.config import values as v
from ddptui.config.fieldkey import key
from ddptui.config.values import Check, Invalid, kind
from ddptui.events import JSON

#: The host of the template node, until an allocation gives the real ones.
SLURM_TEMPLATE = "slurm-allocation"
#: `slurm.job: env` takes the allocation this shell runs in (salloc, sbatch).
JOB_FROM_ENV = "env"
_JOB_RE = re.compile(r"\d+(_\d+)?")

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    class Node(DataclassInstance, Protocol):
        """What this section needs of its node: a dataclass with an environment."""

        @property
        def env(self) -> Mapping[str, str]: ...

#: The node type: the model's NodeConfig, which this module cannot import (the model holds
#: this section), so that ``HostsConfig.slurm.template`` is typed as a node all the same.
N = TypeVar("N", bound="Node")


def _job(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return str(value)
    if isinstance(value, str) and (value == JOB_FROM_ENV or _JOB_RE.fullmatch(value)):
        return value
    raise Invalid(f'must be a Slurm job id such as 12345, or "env" (this shell\'s '
                  f"SLURM_JOB_ID), not {kind(value)}.")


JOB = Check(_job, {"type": ["string", "integer"], "pattern": r"^(env|\d+(_\d+)?)$"},
            'job id or "env"')

#: Signals a run may be asked to save with: not KILL or STOP (nothing can catch them), and
#: USR2 first, as submitit does, because NCCL once took USR1 for itself.
SIGNALS = ("USR2", "USR1", "TERM", "INT", "HUP", "URG", "CONT")


def _signal(value: object) -> str:
    name = value.upper().removeprefix("SIG") if isinstance(value, str) else ""
    if name in SIGNALS:
        return name
    raise Invalid(f"must be a signal a program can catch ({', '.join(SIGNALS)}, with or "
                  f"without SIG), not {kind(value)}.")


SIGNAL = Check(_signal, {"type": "string", "pattern": "^([Ss][Ii][Gg])?[A-Za-z0-9]+$"},
               "signal name")


#: What ``ddptui run --headless`` exits with when the ranks left at the time limit's signal
#: and the run was not resubmitted: an sbatch script tells it from an end or a failure.
TIME_LIMIT_EXIT = 3


def requeue_advice(job: str = "$SLURM_JOB_ID") -> str:
    """What to do instead of ``resubmit`` on an allocation the user made (one source for the
    hosts file's check and the run's own words)."""
    return ("For an allocation you made, let Slurm run it again: submit the script with "
            "`#SBATCH --requeue` and `#SBATCH --open-mode=append`, run `ddptui run hosts.yaml "
            "--headless` in it (with `slurm: {job: env}`), then `[ $? -eq "
            f"{TIME_LIMIT_EXIT} ] && scontrol requeue {job}`: ddptui exits with "
            f"{TIME_LIMIT_EXIT} when the ranks left at the time limit's signal, and the "
            "requeued job resumes from the checkpoint.")


@dataclass(frozen=True)
class SlurmConfig(Generic[N]):
    """Where the nodes come from on Slurm: an allocation you hold, or one ddptui asks for."""

    job: str | None = field(default=None, metadata=key(JOB, hints=("jobid", "job_id")))
    """An existing allocation (salloc/sbatch), or `env` for this shell's SLURM_JOB_ID."""
    partition: str | None = field(default=None, metadata=key(
        v.word("a partition name"), hints=("queue", "p")))
    """Partition to ask for an allocation in (without `job:`); default: the cluster's."""
    nodes: int | None = field(default=None, metadata=key(v.POS_INT, hints=("N", "num_nodes")))
    """How many nodes to ask for (without `job:`)."""
    gpus_per_node: int | None = field(default=None, metadata=key(
        v.NONNEG_INT, hints=("gpus", "gres")))
    """GPUs per node to ask for (`--gpus-per-node`); also each node's processes by default."""
    time: str | None = field(default=None, metadata=key(
        v.word("a Slurm time limit such as 02:00:00"), hints=("time_limit", "t")))
    """Time limit of an allocation ddptui asks for (`--time`)."""
    account: str | None = field(default=None, metadata=key(v.word("an account name"),
                                                           hints=("A",)))
    """Account to charge (`--account`)."""
    options: tuple[str, ...] = field(default=(), metadata=key(
        v.ARGS, hints=("salloc", "sbatch", "extra")))
    """More `salloc` options, each as one word (e.g. `--qos=high`, `--constraint=a100`)."""
    keep: bool = field(default=False, metadata=key(v.BOOL, hints=("keep_allocation",)))
    """Keep an allocation ddptui asked for after the run, for the next launch."""
    signal: str = field(default="USR2", metadata=key(SIGNAL, hints=("signal_name", "sig")))
    """Signal sent to every rank (not torchrun) `signal_before` the time limit: save, leave."""
    signal_before: int = field(default=120, metadata=key(
        v.NONNEG_INT, hints=("lead", "signal_lead", "warn_before")))
    """Seconds before the allocation's time limit to send `signal`; 0: never."""
    checkpoint: str | None = field(default=None, metadata=key(
        v.text("a path or glob on the nodes"), hints=("checkpoints", "ckpt", "save_path")))
    """The run's checkpoint files on the nodes, relative to where the script runs; default:
    the bundled worker's snapshots."""
    resubmit: int = field(default=0, metadata=key(v.NONNEG_INT, hints=("requeue", "retries")))
    """Ask for a new allocation and resume, at most this often, when the time limit or a
    preemption ends the run (only an allocation ddptui asked for)."""
    template: N | None = None
    """The node every allocation node is made from (`defaults:`); not a key of the file."""
    owned: bool = False
    """ddptui asked for this allocation (and gives it back); set once it is granted."""

    @property
    def asks(self) -> bool:
        """ddptui must ask Slurm for the allocation (no `job:` names one)."""
        return self.job is None

    def to_dict(self) -> dict[str, JSON]:
        d = asdict(self)
        d["options"] = list(self.options)
        if self.template is not None:
            d["template"] = {**asdict(self.template), "env": dict(self.template.env)}
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], node_type: type[N]) -> SlurmConfig[N]:
        t = d.get("template")
        return cls(**{**d, "options": tuple(d.get("options", ())),
                      "template": node_type(**t) if t is not None else None})
