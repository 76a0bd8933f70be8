"""Every path name a run has, on its nodes and here: the one place they are spelled.

A run lives in two kinds of directory, named apart so that no variable can mean both:

* the **node dir**, on a node: ``<workdir>/.ddptui/runs/<run_id>/node<rank>/`` (a string,
  POSIX, as the node sees it), holding ``launch.sh`` and the ``torchrun.py`` it runs, the
  ``node.log`` torchrun's output is appended to, the ``pgid`` and ``exit_code`` that
  ``launch.sh`` writes, torchrun's ``torchelastic/`` log dir and, for the bundled worker,
  ``ddptui_worker/``;
* the **run dir**, on this machine: ``<state root>/runs/<run_id>/`` (a :class:`Path`), holding
  ``run.json``, the raw copy of each node's log in ``nodes/``, the disk mirror (``ranks/``,
  ``lines.log``, ``metrics.jsonl``, ``events.jsonl``, ``checkpoint.json``) and the engine's
  ``engine.log``.

Pure string and path building, like :mod:`ddptui.launch.plan` that uses it: no I/O, no
environment (:func:`ddptui.store.runs.state_root` reads ``$XDG_STATE_HOME``).
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

#: What a run id (and its random suffix) may hold: it names directories on every node and
#: here, and appears unquoted in the ``DDPTUI_RUN`` marker.
RUN_ID_RE = re.compile(r"[A-Za-z0-9._-]+\Z")

# On a node, under its workdir.
NODE_RUNS = ".ddptui/runs"
LAUNCH_SCRIPT = "launch.sh"
#: torchrun with ddptui's whole-line tee (``ddptui.nodeprog.torchrun_tee``), run by launch.sh.
TORCHRUN = "torchrun.py"
NODE_LOG = "node.log"
#: An early-started torchrun holds while this exists (``ddptui.nodeprog.torchrun_tee.hold``).
HOLD = "hold"
#: What a warm torchrun runs (``ddptui.launch.warm``), written with the node's files; it holds
#: the secret env (0600), and is removed once taken, or renamed and emptied when given up.
WARM_SPEC = "warm.json"
PGID = "pgid"
EXIT_CODE = "exit_code"
#: Written by the stop command, so a ddptui following from elsewhere says "stopped".
STOP_REQUESTED = "stop_requested"
#: Left by the time limit's signal (or its rehearsal) in each node dir: why the ranks left.
TIME_LIMIT_SIGNAL = "time_limit_signal"
#: torchrun's ``--log-dir``: per-rank stdout/stderr and ``error.json`` files.
TORCHELASTIC = "torchelastic"
#: The bundled worker's upload, named as its package: ``python -m`` finds it from the node dir.
WORKER_PACKAGE = "ddptui_worker"
#: The bundled worker's snapshots, relative to where it runs (the node dir): its
#: ``--snapshot-dir`` default and file names (``worker/snapshot.py``).
WORKER_SNAPSHOTS = "ckpt/snapshot-*.pt"
#: Synced projects, one tree per content digest, shared by the runs that ship that content.
NODE_CODE = ".ddptui/code"
#: Beside each tree ``<digest>/``: ``<digest>.manifest.json``, what the next sync diffs against.
CODE_MANIFEST_SUFFIX = ".manifest.json"
#: A tree being built (``<prefix><digest>-<pid>``), renamed to ``<digest>`` once complete.
CODE_TMP_PREFIX = ".tmp-"
#: The telemetry sampler (``ddptui.telemetry.sampler``): its script, the pid of its session
#: leader, the heartbeat file ddptui touches, and its two alternating output segments.
SAMPLER_SCRIPT = "telemetry.sh"
SAMPLER_PID = "telemetry.pid"
SAMPLER_BEAT = "telemetry.beat"
SAMPLER_OUT = "telemetry.{}.out"
#: Rendezvous port locks on the node that hosts the store (``ddptui.launch.reserve``): one
#: directory per address and port, shared by every user's runs there; in it, the owning run's
#: id and, once started, its launch.sh's pid.
RDZV_LOCKS = "/tmp/ddptui-rdzv"
LOCK_OWNER = "owner"
LOCK_PID = "pid"

# Here, under the state root.
STATE_DIR = "ddptui"
RUNS = "runs"
RUN_JSON = "run.json"
NODES = "nodes"
RANKS = "ranks"
#: Every line as the all-ranks view shows it, in arrival order.
ALL_LINES = "lines.log"
METRICS = "metrics.jsonl"
EVENTS = "events.jsonl"
#: Beside each mirrored log (``lines.log``, ``ranks/rankN.log``), its ``.seq`` index: the
#: store's sequence number of each of its lines, an int64 a line in this machine's byte order,
#: so that scrollback asks for "the lines before seq S" instead of matching a line's text.
SEQ_SUFFIX = ".seq"
#: Sizes of the mirror's files and how far each raw log reached, replaced atomically.
CHECKPOINT = "checkpoint.json"
#: Every telemetry sample of every node, one JSON record a line.
TELEMETRY = "telemetry.jsonl"
#: The engine process's stdout and stderr, which would otherwise tear the dashboard's screen.
ENGINE_LOG = "engine.log"
#: The ranks' Python stacks (py-spy), one file per collection, named by its time.
STACKS = "stacks"
#: Per project, the hashes of its files by size, mtime and inode, so a warm sync hashes little.
SYNC_HASHES = "sync-hashes"


def node_dir(workdir: str, run_id: str, node_rank: int) -> str:
    return posixpath.join(workdir, NODE_RUNS, run_id, f"node{node_rank}")


def code_root(workdir: str) -> str:
    return posixpath.join(workdir, NODE_CODE)


def code_dir(workdir: str, digest: str) -> str:
    """A synced project's root on a node: the ranks' working directory and PYTHONPATH."""
    return posixpath.join(workdir, NODE_CODE, digest)


def hash_cache(root: Path, project_key: str) -> Path:
    """``project_key``: a short hash of the project's absolute path."""
    return root / SYNC_HASHES / f"{project_key}.json"


def in_node_dir(node_dir: str, name: str) -> str:
    """``name`` (one of this module's node-side names) inside a node dir."""
    return posixpath.join(node_dir, name)


def hold_file(node_dir: str) -> str:
    """The file an early-started torchrun holds on (launch.sh exports it, release moves it)."""
    return in_node_dir(node_dir, HOLD)


def sampler_out(segment: int) -> str:
    """The sampler's output segment ``segment`` (they alternate: 0, 1, 0, ...)."""
    return SAMPLER_OUT.format(segment % 2)


def state_dir(xdg_state_home: str | None, home: str) -> Path:
    """Where every local run dir lives, per the XDG base directory spec."""
    base = xdg_state_home or posixpath.join(home, ".local", "state")
    return Path(base) / STATE_DIR


def runs_dir(root: Path) -> Path:
    return root / RUNS


def run_dir(root: Path, run_id: str) -> Path:
    return root / RUNS / run_id


def node_log(run_dir: Path, node: str) -> Path:
    """The raw copy of a node's ``node.log``: its size is how far it was read."""
    return run_dir / NODES / f"{node}.log"


def stacks_file(run_dir: Path, stamp: str) -> Path:
    """``stamp``: when the stacks were taken, e.g. ``20261122-201503``."""
    return run_dir / STACKS / f"stacks-{stamp}.txt"


def rank_log_name(rank: int) -> str:
    """Relative to the run dir, as the mirror's checkpoint records it."""
    return f"{RANKS}/rank{rank}.log"


def seq_index_name(log_name: str) -> str:
    """The ``.seq`` index of a mirrored log, named as the log is (relative or not)."""
    return log_name.removesuffix(".log") + SEQ_SUFFIX


def rank_log(run_dir: Path, rank: int) -> Path:
    return run_dir / rank_log_name(rank)
