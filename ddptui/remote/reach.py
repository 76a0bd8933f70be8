"""Reaching nodes: connect, probe the interpreter and torch, and do it on every node at once.

Everything that touches a node is done for all nodes at once (a thread pool), so sixteen
nodes cost about what one does; one node's failure is a result beside the others, not an
exception that hides them, so a person sees every bad node of a hosts file in one go.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

from ddptui.config import HostsConfig, NodeConfig
from ddptui.diagnose.preflight.report import TorchInfo
from ddptui.outcome import LaunchError
from ddptui.remote import nodeops
from ddptui.transport.base import CommandResult, Transport
from ddptui.transport.factory import make_transport

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Done(Generic[T, R]):
    """``fn`` answered ``value`` for ``item``."""

    item: T
    value: R


@dataclass(frozen=True, slots=True)
class Failed(Generic[T]):
    """``fn`` raised ``error`` for ``item``: one node's failure beside the others' answers."""

    item: T
    error: Exception


def map_at_once(items: Sequence[T], fn: Callable[[T], R]) -> list[Done[T, R] | Failed[T]]:
    """Run ``fn`` on every item at once; each item's answer or failure, in the items' order."""
    if not items:
        return []

    def guarded(item: T) -> Done[T, R] | Failed[T]:
        try:
            return Done(item, fn(item))
        except Exception as e:
            return Failed(item, e)

    with ThreadPoolExecutor(max_workers=min(32, len(items))) as pool:
        return list(pool.map(guarded, items))


def answers(results: Sequence[Done[T, R] | Failed[T]]) -> list[Done[T, R]]:
    """The items that answered, in order."""
    return [r for r in results if isinstance(r, Done)]


def failures(results: Sequence[Done[T, R] | Failed[T]]) -> list[Failed[T]]:
    """The items that failed, in order."""
    return [r for r in results if isinstance(r, Failed)]


def connect(node: NodeConfig, config: HostsConfig) -> Transport:
    transport = make_transport(node, config)
    transport.connect(config.ssh.connect_timeout)
    return transport


def probe_node(node: NodeConfig, config: HostsConfig) -> tuple[Transport, nodeops.Probe, str]:
    """Connect and check the interpreter and torch; the open transport is kept for reuse."""
    transport = connect(node, config)
    try:
        return transport, probe(node, transport), transport.home()
    except BaseException:
        transport.close()
        raise


def probe(node: NodeConfig, transport: Transport) -> nodeops.Probe:
    """The node's interpreter and torch, or a :class:`LaunchError` that says how to fix them."""
    return found_probe(node, transport.run(nodeops.probe_cmd(node.python), timeout=60))


def found_probe(node: NodeConfig, res: CommandResult, bare: TorchInfo | None = None
           ) -> nodeops.Probe:
    found = nodeops.parse_probe(res.stdout)
    where = f"node {node.name} ({node.host})"
    if res.exit_code == 127 or found is None:
        detail = (res.stderr.strip() or res.stdout.strip()).splitlines()
        raise LaunchError([
            f"{where}: the python interpreter {node.python!r} does not exist or does not "
            f"run there (exit code {res.exit_code}: {detail[-1] if detail else 'no output'}"
            "). Set `python:` for this node (or in `defaults:`) to an interpreter that has "
            "torch installed."])
    if found.torch is None:
        bare_has = bare is not None and bare.version is not None
        raise LaunchError([
            f"{where}: {node.python} ({found.python}, Python {found.version}) cannot import "
            f"torch: {found.torch_error}. " + (
                f"A bare login there imports torch {bare.version}"
                f"{f' from {bare.path}' if bare.path else ''}: the node's `env:` (PATH, "
                "PYTHONPATH) hides it from the ranks; correct it in the hosts file."
                if bare is not None and bare_has else
                "Install torch there or point `python:` at an environment that has it.")])
    return found
