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
