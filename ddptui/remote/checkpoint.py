"""The time limit's two node programs, from this side: the signal to a run's ranks on one
node (:mod:`ddptui.nodeprog.signal_ranks`) and the look for its checkpoint there
(:mod:`ddptui.nodeprog.checkpoint_seen`). What they answer, read; the step a checkpoint's
name gives, pure."""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from dataclasses import dataclass

from ddptui import nodeprog
from ddptui.config import HostsConfig
from ddptui.events import JSON
from ddptui.nodeprog import checkpoint_seen, signal_ranks
from ddptui.remote import nodeops
from ddptui.store import rundir
from ddptui.transport.base import Transport

SIGNAL_SRC = nodeprog.source(signal_ranks)
SEEN_SRC = nodeprog.source(checkpoint_seen)
#: Seconds either program may take on a node (they read /proc or stat a few files).
TIMEOUT_S = 30.0
#: Seconds the read of the signal's mark may take, at a run's end.
MARK_TIMEOUT_S = 10.0
#: ``step=1200``, ``step_1200``, ``checkpoint-1200``, ``snapshot-00001200.pt``: the step, by
#: the names HF Trainer, Lightning, nanoGPT-likes and the bundled worker give; else the last
#: number of the name.
_STEP = re.compile(r"(?:step|checkpoint|snapshot|ckpt|iter)[=_-]?0*(\d+)", re.I)
_NUMBER = re.compile(r"(\d+)(?!.*\d)")


class NodeProgramFailed(Exception):
    """The node program gave no answer: ``str()`` says where and what it printed."""


@dataclass(frozen=True)
class Signalled:
    node: str
    ranks: list[tuple[int, int | None, int]]  # (rank, local rank, pid)
    failed: list[tuple[int, int, str]]  # (rank, pid, why)
    deaf: list[tuple[int, int]]  # (rank, pid): no handler for the signal (yet)


@dataclass(frozen=True)
class Seen:
    node: str
    path: str  # as found on the node
    mtime: float  # the node's clock
    matches: int  # every match of the pattern there, old ones too


def pattern(config: HostsConfig) -> str | None:
    """Where the run's checkpoints are, relative to where its script runs; None: not known
    (a script of the user's, and no ``slurm.checkpoint``)."""
    given = config.slurm.checkpoint if config.slurm is not None else None
    return given or (rundir.WORKER_SNAPSHOTS if config.job.is_bundled_worker else None)


def step_of(path: str) -> int | None:
    """The training step a checkpoint's path names, if it names one."""
    name = posixpath.basename(path.rstrip("/"))
    m = _STEP.search(name) or _NUMBER.search(name)
    return int(m.group(1)) if m else None


def signal_node(t: Transport, python: str, run_id: str, node_rank: int, node: str,
                signal: str, why: str, node_dir: str) -> Signalled:
    res = t.run(nodeops.python_cmd(python, SIGNAL_SRC, nodeops.marker(run_id, node_rank),
                                   signal, why, rundir.in_node_dir(
                                       node_dir, rundir.TIME_LIMIT_SIGNAL), no_site=True),
                timeout=TIMEOUT_S)
    d = nodeops.last_json(res.stdout, "signalled")
    if d is None:
        raise NodeProgramFailed(_failed(node, "signal the ranks", res.stdout + res.stderr))
    return Signalled(node, [(int(r), None if lr is None else int(lr), int(p))
                            for r, lr, p in d["signalled"]],
                     [(int(r), int(p), str(why)) for r, p, why in d["failed"]],
                     [(int(r), int(p)) for r, p in d.get("deaf", [])])


def signal_mark(t: Transport, node_dir: str) -> dict[str, JSON] | None:
    """The mark the signal left in the node dir (see :mod:`ddptui.nodeprog.signal_ranks`);
    None when it left none: no signal was sent to this run's ranks there. Bounded (a node
    that stopped answering holds the run's end up for :data:`MARK_TIMEOUT_S` at most)."""
    path = shlex.quote(rundir.in_node_dir(node_dir, rundir.TIME_LIMIT_SIGNAL))
    res = t.run(f"cat {path} 2>/dev/null; exit 0", timeout=MARK_TIMEOUT_S)
    try:
        mark = json.loads(res.stdout)
    except ValueError:  # none there (empty), or not one
        return None
    return mark if isinstance(mark, dict) and isinstance(mark.get("sent_at"), float) else None


def seen_on(t: Transport, python: str, node: str, cwd: str, glob: str, since: float
            ) -> Seen | None:
    """The newest match changed since ``since``; None when there is none (yet)."""
    res = t.run(nodeops.python_cmd(python, SEEN_SRC, cwd, glob, f"{since:.3f}", no_site=True),
                timeout=TIMEOUT_S)
    d = nodeops.last_json(res.stdout, "matches")
    if d is None:
        raise NodeProgramFailed(_failed(node, "look for the checkpoint", res.stdout + res.stderr))
    newest = d["newest"]
    if not newest:
        return None
    return Seen(node, str(newest["path"]), float(newest["mtime"]), int(d["matches"]))


def _failed(node: str, what: str, said: str) -> str:
    last = said.strip().splitlines()[-1:] or ["no answer"]
    return f"could not {what} on node {node}: {last[0][:300]}"
