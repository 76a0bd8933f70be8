"""Preflight's vocabulary: the marks, the checks in table order, one result, the verdict,
and what every rule is given (:class:`Context`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from ddptui.config import HostsConfig
from ddptui.diagnose.preflight.report import NodeReport, TorchInfo
from ddptui.diagnose.preflight.route import RouteChoice


class Mark(StrEnum):
    PASS = "✓"
    FAIL = "✗"
    SKIP = "-"


#: The checks in table order.
CHECKS = ("ssh", "python", "torch", "gpus", "gpu use", "cpus", "hostname", "network",
          "workdir", "clock", "port", "reach")


@dataclass(frozen=True)
class Endpoint:
    """Where the rendezvous lives: what every node connects to, and who listens there."""

    host: str
    port: int
    node: str | None
    """The node that hosts the store, or None when the endpoint is not one of the nodes."""


@dataclass(frozen=True)
class Result:
    node: str
    check: str
    mark: Mark
    detail: str
    """A few words for the table and ``--json``: what was found."""
    problem: str | None = None
    """For a failure: one line, what is wrong and what to do. For a pass, a caution: the run
    can start, but will be slower than it could be (two ranks on the one CPU a Slurm
    allocation gives), said where the run's lines are."""


@dataclass(frozen=True)
class Verdict:
    results: tuple[Result, ...]
    routes: tuple[RouteChoice, ...] = ()
    """The address and interface given to each node whose name fails (see
    :mod:`ddptui.diagnose.preflight.route`): what a launch applies."""

    @property
    def ok(self) -> bool:
        return all(r.mark != Mark.FAIL for r in self.results)

    @property
    def problems(self) -> list[str]:
        return [r.problem for r in self.results if r.mark == Mark.FAIL and r.problem]

    @property
    def cautions(self) -> list[Result]:
        return [r for r in self.results if r.mark == Mark.PASS and r.problem]

    def get(self, node: str, check: str) -> Result | None:
        for r in self.results:
            if r.node == node and r.check == check:
                return r
        return None


def ok(detail: str) -> tuple[Mark, str, None]:
    return Mark.PASS, detail, None


def caution(detail: str, words: str) -> tuple[Mark, str, str]:
    """A pass, said with a caution (see :attr:`Result.problem`)."""
    return Mark.PASS, detail, words


def skip(detail: str) -> tuple[Mark, str, None]:
    return Mark.SKIP, detail, None


def fail(detail: str, problem: str) -> tuple[Mark, str, str]:
    return Mark.FAIL, detail, problem


Outcome = tuple[Mark, str, str | None]


@dataclass(frozen=True)
class Context:
    config: HostsConfig
    reports: Mapping[str, NodeReport]
    endpoint: Endpoint
    torch_ref: tuple[str, TorchInfo] | None

    @property
    def multi_node(self) -> bool:
        """More than one machine: only then is loopback a trap. Local nodes (and ssh to
        localhost) are all this machine."""
        here = ("localhost", "127.0.0.1", "::1")
        machines = {"" if n.is_local or n.host in here else n.host for n in self.config.nodes}
        return len(machines) > 1


def mib(v: float | None) -> str:
    return "?" if v is None else f"{v:,.0f} MiB"


def gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"
