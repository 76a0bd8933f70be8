"""py-spy on a node: where it is, and whether one sample of a rank's stack was taken inside a
collective or its wait (a rank that waits there waits for its peers; the straggler is the rank
that waits least, :mod:`ddptui.insight.straggler`).

A sample is ``py-spy dump``'s text. Its main thread is inside when a frame is one of
``torch.distributed``'s collectives (``distributed_c10d.py``) or, in a ``--native`` dump, a
native wait on one: ``c10d::Work::wait`` under a collective or ``work.wait()``,
``c10d::Reducer::finalize_backward`` (DDP waiting for its buckets' all-reduce inside
``loss.backward()``, where no Python frame shows it), or a frame of gloo itself. A rank that
only launches a bucket's all-reduce from a gradient hook is not waiting
(``tests/data/stacks/``). Shipped inside the programs that import it.
"""

from __future__ import annotations

import os
import re
import shutil
import sys

#: ``torch.distributed``'s collectives and point-to-point calls, by their Python name.
COLLECTIVES = frozenset((
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor",
    "all_gather_object", "all_gather_coalesced", "_all_gather_base", "reduce_scatter",
    "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all", "all_to_all_single",
    "broadcast", "broadcast_object_list", "reduce", "gather", "gather_object", "scatter",
    "scatter_object_list", "barrier", "monitored_barrier", "send", "recv", "isend", "irecv",
    "batch_isend_irecv", "send_object_list", "recv_object_list"))
_NATIVE_WAIT = re.compile(r"c10d::\w*Work\w*::(?:wait|synchronize)\b|"
                          r"c10d::Reducer::finalize_backward|^gloo::")
_FRAME = re.compile(r"^ {4}(.+) \(([^()]*)\)\s*$")
#: A Python stack inside a backward: DDP's wait may be under it, unseen without ``--native``.
BACKWARD = "torch/autograd/"


def py_spy() -> str | None:
    """py-spy on the node's PATH, else beside the interpreter."""
    spy = shutil.which("py-spy")
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if spy is None and os.access(beside, os.X_OK):
        spy = beside
    return spy


def main_thread(stack: str) -> list[tuple[str, str]]:
    """The main thread's frames, innermost first: (function, where: file:line or library)."""
    threads: list[tuple[str, list[tuple[str, str]]]] = []
    for line in stack.splitlines():
        if line.startswith("Thread "):
            threads.append((line, []))
        elif threads:
            m = _FRAME.match(line)
            if m is not None:
                threads[-1][1].append((m.group(1), m.group(2)))
    main = [frames for head, frames in threads if '"MainThread"' in head]
    return main[0] if main else (threads[0][1] if threads else [])


def inside_collective(stack: str) -> bool:
    for name, where in main_thread(stack):
        if where.startswith("torch/distributed/") or "/torch/distributed/" in where:
            if name in COLLECTIVES or name.rsplit(".", 1)[-1] == "wait":
                return True
        elif _NATIVE_WAIT.search(name):
            return True
    return False


def in_backward(stack: str) -> bool:
    """Inside ``loss.backward()`` (seen from Python frames): a native dump tells more."""
    return any(BACKWARD in where for _, where in main_thread(stack))
