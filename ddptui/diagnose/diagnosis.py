"""What a diagnosis says: one cause, one headline, the evidence behind it.

A plain dataclass rather than events or text, so each face (the headless summary, the
dashboard's toast, ``run.json``) words and places it as it needs without parsing anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from ddptui.events import JSON


class Cause(StrEnum):
    """Why a run failed, as ddptui names it; ``run.json`` stores the value."""

    CUDA_OOM = "cuda_oom"
    NCCL_NO_INTERFACE = "nccl_no_interface"
    NCCL_DUPLICATE_GPU = "nccl_duplicate_gpu"
    NCCL_VERSION_MISMATCH = "nccl_version_mismatch"
    NCCL_CONNECT = "nccl_connect"
    NCCL_ERROR = "nccl_error"
    MISSING_FILE = "missing_file"
    ADDRESS_IN_USE = "address_in_use"
    RENDEZVOUS_TIMEOUT = "rendezvous_timeout"
    RENDEZVOUS_UNREACHABLE = "rendezvous_unreachable"
    LOOPBACK_NAME = "loopback_name"
    COLLECTIVE_TIMEOUT = "collective_timeout"
    COLLECTIVE_MISMATCH = "collective_mismatch"
    EARLY_EXIT = "early_exit"
    SIGNAL = "signal"
    SEGFAULT = "segfault"
    HOST_OOM = "host_oom"
    RANK_ERROR = "rank_error"
    NODE_LOST = "node_lost"
    SLURM_JOB_ENDED = "slurm_job_ended"
    PEER_LOST = "peer_lost"
    EXIT_CODE = "exit_code"


@dataclass(slots=True)
class Diagnosis:
    """The run's one explanation.

    ``headline`` is ddptui's own sentence (what, where, what to do); ``evidence`` holds lines
    copied verbatim from the ranks and torch, each after ``[node rN]`` or ``[node agent]``, to
    show under it, never in its place. ``details`` says, per node, what else happened there and
    whether it was a consequence of the headline.
    """

    cause: Cause
    headline: str
    what: str
    advice: str
    node: str | None = None
    rank: int | None = None
    time: float | None = None
    evidence: list[str] = field(default_factory=list)
    details: dict[str, list[str]] = field(default_factory=dict)

    def report(self, prefix: str = "") -> list[str]:
        """The whole explanation as every face shows it: ddptui's sentence (after
        ``prefix``), the lines it rests on, then what else happened, node by node."""
        out = [f"{prefix}{self.headline}"]
        out.extend(f"  {line}" for line in self.evidence)
        for node, lines in self.details.items():
            out.extend(f"  node {node}: {line}" for line in lines)
        return out

    def to_dict(self) -> dict[str, JSON]:
        """JSON-ready, for ``run.json``'s ``diagnosis`` key."""
        return {
            "cause": self.cause.value,
            "headline": self.headline,
            "what": self.what,
            "advice": self.advice,
            "node": self.node,
            "rank": self.rank,
            "time": self.time,
            "evidence": list(self.evidence),
            "details": {node: list(lines) for node, lines in self.details.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, JSON]) -> Diagnosis:
        """Back from ``run.json``, for ``ddptui logs``; a record it cannot read raises
        ``ValueError`` (an unknown cause, a missing field), so the caller diagnoses anew."""
        node, rank, t = data.get("node"), data.get("rank"), data.get("time")
        evidence, details = data.get("evidence") or [], data.get("details") or {}
        if not (isinstance(node, str | None) and isinstance(rank, int | None)
                and isinstance(t, int | float | None) and isinstance(evidence, list)
                and isinstance(details, dict)
                and all(isinstance(lines, list) for lines in details.values())):
            raise ValueError("run.json's diagnosis cannot be read: a field of the wrong type")
        try:
            return cls(Cause(str(data["cause"])), str(data["headline"]), str(data["what"]),
                       str(data["advice"]), node, rank, t, [str(s) for s in evidence],
                       {str(n): [str(s) for s in lines]
                        for n, lines in details.items() if isinstance(lines, list)})
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"run.json's diagnosis cannot be read: {e!r}") from None
