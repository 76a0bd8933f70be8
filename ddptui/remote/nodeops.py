"""The commands ddptui runs on a node, as text: pure, so their quoting is tested without a node.

Each is one shell string for ``Transport.run``. The probe and the stop program are Python
source run by the node's own interpreter (the one torchrun will use), because it is the one
program every node is known to have; nothing else is assumed beyond POSIX ``sh`` and
``setsid``.

Stop finds the run's processes by the ``DDPTUI_RUN`` marker in their environment rather
than by process group: torchrun starts every worker in a session of its own
(``start_new_session=True``), so a SIGKILLed agent would leave workers no group signal
reaches. The marker is inherited by every descendant, whatever it does with sessions.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from dataclasses import dataclass, field
from typing import Any

from ddptui import nodeprog
from ddptui.nodeprog import find_torch, stop_run, torchrun_tee
from ddptui.store import rundir
from ddptui.sync import remote
from ddptui.transport.base import Detached, PythonCommand
from ddptui.transport.srun.names import step_name

#: The launch probe (:mod:`ddptui.nodeprog.find_torch`).
PROBE_SRC = nodeprog.source(find_torch)
#: Stops a run's processes on a node (:mod:`ddptui.nodeprog.stop_run`).
STOP_SRC = nodeprog.source(stop_run)


def marker(run_id: str, node_rank: int) -> str:
    return f"DDPTUI_RUN={run_id}/{node_rank}"


def python_cmd(python: str, src: str, *args: str, no_site: bool = False) -> PythonCommand:
    """``no_site``: ``python -S``, for programs of the standard library alone; it skips the
    site-packages scan (tens of ms a start, which a warm sync pays twice per node)."""
    return PythonCommand(python, src, args, no_site)


def probe_cmd(python: str) -> str:
    return python_cmd(python, PROBE_SRC)


def stop_cmd(python: str, run_id: str, node_rank: int, grace: float | None, pgid: int | None,
             node_dir: str) -> str:
    """``grace`` None: the program on standby, which reads the grace from its stdin when the
    stop comes (see :mod:`ddptui.remote.standby`)."""
    return python_cmd(python, STOP_SRC, marker(run_id, node_rank),
                      "-" if grace is None else f"{grace:g}", str(pgid or 0),
                      rundir.in_node_dir(node_dir, rundir.STOP_REQUESTED), no_site=True)


def sync_cmd(python: str, code_root: str, digest: str) -> str:
    """The node side of one sync (see :mod:`ddptui.sync.remote`)."""
    return python_cmd(python, remote.SYNC_SRC, code_root, digest, rundir.CODE_MANIFEST_SUFFIX,
                      rundir.CODE_TMP_PREFIX, no_site=True)


def in_place_cmd(project: str, entry: tuple[str, ...]) -> str:
    """Exit 0 when the project dir exists and holds every path of ``entry`` (relative; for a
    module, any one of its file, package or namespace dir); else print what is missing."""
    q = shlex.quote(project)
    tests = " || ".join(f"test -e {q}/{shlex.quote(p)}" for p in entry) or "true"
    return (f"test -d {q} || {{ echo 'no directory '{q}; exit 1; }}; "
            f"{tests} || {{ echo 'nothing at '{q}/{shlex.quote(entry[0] if entry else '')}; "
            "exit 1; }")


def setup_script(project: str, steps: tuple[str, ...], env: dict[str, str]) -> str:
    """``job.setup`` as one sh script, fed to ``sh -s`` on stdin, so that neither the steps
    nor the environment show in a process list. Each step runs verbatim in a subshell of its
    own (an ``exit`` or ``cd`` in one does not leak into the next), with no stdin (it would
    read the rest of this script); the first failing step ends the script with its code."""
    q = shlex.quote
    lines = [f"cd {q(project)} || exit 1",
             *(f"export {k}={q(env[k])}" for k in sorted(env)),
             f'export PYTHONPATH={q(project)}"${{PYTHONPATH:+:$PYTHONPATH}}"']
    for i, step in enumerate(steps, 1):
        said = q(f"ddptui: setup step {i} of {len(steps)} failed with exit code ")
        lines += [f"printf '%s\\n' {q('$ ' + step)}",
                  f"(\n{step}\n) < /dev/null || {{ rc=$?; echo {said}$rc >&2; exit $rc; }}"]
    return "\n".join(lines) + "\n"


def mkdir_cmd(*paths: str) -> str:
    """Directories for ddptui's own files, readable by the user alone (0700, and so is every
    parent it creates): ``launch.sh`` in them holds the run's secret env values."""
    quoted = " ".join(shlex.quote(p) for p in paths)
    return f"umask 077 && mkdir -p -- {quoted} && chmod 700 -- {quoted}"


def start_job(node_dir: str, run_id: str) -> Detached:
    """launch.sh, let go by the node's transport (:meth:`Transport.start_detached`): its
    output appended to node.log, no tty, no stdin; it survives the connection closing."""
    return Detached(node_dir, rundir.LAUNCH_SCRIPT, (), rundir.NODE_LOG, step_name(run_id))


def restart_prep_cmd(node_dir: str) -> str:
    """What an expired hold left (its pgid, ``expired``; it writes no exit code) removed,
    and the hold file back, before :func:`start_job` again."""
    d = shlex.quote(node_dir)
    return f"cd {d} && rm -f {rundir.PGID} {torchrun_tee.EXPIRED} && : > {rundir.HOLD}"


def release_cmd(hold: str, route: str | None = None) -> str:
    """Rename the hold file to ``go`` (atomic: the hold, giving up, renames it too), after
    writing ``route`` (:data:`ddptui.nodeprog.torchrun_tee.ROUTE`) beside it, if given."""
    folder = posixpath.dirname(hold)
    go = posixpath.join(folder, torchrun_tee.GO)
    move = f"mv -- {shlex.quote(hold)} {shlex.quote(go)}"
    if route is None:
        return move
    path = shlex.quote(posixpath.join(folder, torchrun_tee.ROUTE))
    return f"printf '%s' {shlex.quote(route)} > {path} && {move}"


#: What :func:`launch_marks_cmd` says of a node dir that is not there.
GONE = "gone"


def launch_marks_cmd(node_dir: str) -> str:
    """Which of a node dir's launch marks are there, one name a line: how far a launch cut
    short got on that node (see ``attach.unreleased``); :data:`GONE` without the node dir."""
    names = " ".join((torchrun_tee.GO, rundir.HOLD, torchrun_tee.EXPIRED, rundir.PGID,
                      rundir.EXIT_CODE))
    return (f"cd {shlex.quote(node_dir)} 2>/dev/null || {{ echo {GONE}; exit 0; }}; "
            f'for f in {names}; do [ -e "$f" ] && echo "$f"; done; true')


def alive_cmd(pgid: int) -> str:
    """Exit 0 while any process of the group lives."""
    return f"kill -0 -{int(pgid)} 2>/dev/null"  # dash has no `--` for kill


def remove_cmd(path: str) -> str:
    return "rm -rf -- " + shlex.quote(path)


#: What a launch's mkdir prints when the workdir was not there before it (see
#: :func:`launch_mkdir_cmd`): an undone launch then removes the workdir too, if empty.
NEW_WORKDIR = "ddptui: new workdir"


#: launch_mkdir_cmd's exit code when the node dir is already there: a run of the same name
#: used this node, and its files (its exit code above all) must be neither read nor removed.
EXIT_RUN_EXISTS = 17


def launch_mkdir_cmd(node_dir: str, *paths: str) -> str:
    """:func:`mkdir_cmd` of a node dir and ``paths``, saying :data:`NEW_WORKDIR` first when it
    makes the workdir itself. The node dir itself is made by one plain ``mkdir``, which fails
    when it exists: two launches of one run name cannot both have it."""
    d = shlex.quote(node_dir)
    return (f"{{ test -e {shlex.quote(_workdir_of(node_dir))} || echo {shlex.quote(NEW_WORKDIR)}"
            f"; }} && {mkdir_cmd(posixpath.dirname(node_dir.rstrip('/')))} && "
            f"{{ (umask 077 && mkdir -- {d}) 2>/dev/null || exit {EXIT_RUN_EXISTS}; }} && "
            f"{mkdir_cmd(node_dir, *paths)}")


def _workdir_of(node_dir: str) -> str:
    """<workdir>/.ddptui/runs/<run id>/node<N> -> <workdir> (``rundir.node_dir``)."""
    return posixpath.dirname(posixpath.dirname(posixpath.dirname(posixpath.dirname(
        node_dir.rstrip("/")))))


def remove_run_cmd(node_dir: str, new_workdir: bool = False) -> str:
    """Undo a launch on a node: its node dir, then each dir above it up to the workdir's
    ``.ddptui`` (the run's, ``runs/``, ``.ddptui/``) that this leaves empty, and the workdir
    itself when the launch made it (``new_workdir``), as a refused first launch found the
    node."""
    run = posixpath.dirname(node_dir.rstrip("/"))
    runs = posixpath.dirname(run)
    dirs = [run, runs, posixpath.dirname(runs)] + ([_workdir_of(node_dir)] if new_workdir else [])
    above = " ".join(shlex.quote(d) for d in dirs)
    return f"{remove_cmd(node_dir)} && {{ rmdir -- {above} 2>/dev/null; true; }}"


@dataclass(frozen=True)
class Probe:
    python: str
    version: str
    hostname: str
    torch: str | None
    torch_error: str | None
    cuda: bool | None = None  # usable; None: not asked (the launch probe imports no torch)
    cuda_version: str | None = None
    nccl: str | None = None
    devices: int | None = None
    torch_path: str | None = None  # the directory torch is found in


def last_json(stdout: str, key: str) -> dict[str, Any] | None:
    """The last line that is a JSON object with ``key``: a login banner may come before it."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and key in d:
            return d
    return None


def parse_probe(stdout: str) -> Probe | None:
    d = last_json(stdout, "python")
    if d is None:
        return None
    return Probe(str(d["python"]), str(d.get("version", "")), str(d.get("hostname", "")),
                 d.get("torch"), d.get("torch_error"), d.get("cuda"),
                 d.get("cuda_version"), d.get("nccl"), d.get("devices"), d.get("torch_path"))


@dataclass(frozen=True)
class StopResult:
    found: list[int]
    killed: list[int]
    leftover: list[int]
    #: What was checked gone on the node after the stop, in ddptui's words (the stopper's
    #: own and its transport's: a Slurm step, torchrun's temp dirs).
    checked: list[str] = field(default_factory=list)


def parse_stop(stdout: str) -> StopResult | None:
    d = last_json(stdout, "leftover")
    if d is None:
        return None
    return StopResult(list(d["found"]), list(d["killed"]), list(d["leftover"]))
