"""Reaching nodes: connect, probe the interpreter and torch, and do it on every node at once.

Everything that touches a node is done for all nodes at once (threads, up to 32), so sixteen
nodes cost about what one does; one node's failure is a result beside the others, not an
exception that hides them, so a person sees every bad node of a hosts file in one go.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
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
    """Run ``fn`` on every item at once; each item's answer or failure, in the items' order.
    Plain threads, not ``concurrent.futures``: that and the ``logging`` it pulls in cost
    about 13 ms of every start of ddptui."""
    if not items:
        return []

    results: list[Done[T, R] | Failed[T] | None] = [None] * len(items)
    todo = list(enumerate(items))[::-1]
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                if not todo:
                    return
                i, item = todo.pop()
            try:
                results[i] = Done(item, fn(item))
            except Exception as e:
                results[i] = Failed(item, e)

    threads = [threading.Thread(target=work, daemon=True, name="ddptui-at-once")
               for _ in range(min(32, len(items)) - 1)]
    for th in threads:
        th.start()
    work()  # this thread takes its share too
    for th in threads:
        th.join()
    return [r for r in results if r is not None]


def beside(fn: Callable[[], R]) -> Callable[[], R]:
    """``fn`` started on a thread of its own; the call returned waits for its value, or
    raises what it raised."""
    got: list[R] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            got.append(fn())
        except BaseException as e:
            failed.append(e)

    th = threading.Thread(target=run, daemon=True, name="ddptui-beside")
    th.start()

    def wait() -> R:
        th.join()
        if failed:
            raise failed[0]
        return got[0]

    return wait


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


def connect_all(config: HostsConfig, unreached: Callable[[str], object]) -> dict[str, Transport]:
    """A connection to every node of ``config`` that answers, at once, for a command that
    acts on a run it does not follow; each node that does not answer is left out and said to
    ``unreached`` in ddptui's words."""
    transports: dict[str, Transport] = {}
    for got in map_at_once(list(config.nodes), lambda n: connect(n, config)):
        if isinstance(got, Failed):
            unreached(f"could not reach node {got.item.name}: {got.error}")
        else:
            transports[got.item.name] = got.value
    return transports


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
