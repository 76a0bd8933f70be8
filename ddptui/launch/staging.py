"""Putting one planned node in place: its node dir filled, then ``launch.sh`` started (and,
when it was started early and holds, released).

Kept apart from ddptui's bookkeeping so that each step reads as what it does on the
node; ddptui runs them on every node at once and undoes them all if one fails.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import shlex
import time
from pathlib import Path

from ddptui import nodeprog
from ddptui.config import JobConfig
from ddptui.diagnose.preflight.route import RouteChoice
from ddptui.launch.plan import NodeLaunch
from ddptui.nodeprog import torchrun_tee, warm_start
from ddptui.outcome import LaunchError
from ddptui.remote import nodeops
from ddptui.remote.reach import failures, map_at_once
from ddptui.store import rundir
from ddptui.transport.base import Transport

#: How long launch.sh may take to write its pgid before the node counts as not started.
START_TIMEOUT_S = 15
#: Between two looks for the pgid launch.sh writes first thing (a few ms after its start).
PGID_POLL_S = 0.01
#: How long a warm torchrun has to take its spec once written (a process of its own looks
#: every 10 ms) before it is given up and launch.sh started instead: what a node whose warm
#: torchrun died costs the launch.
WARM_TAKE_S = 2.0


def worker_files() -> list[Path]:
    """The bundled worker's sources, found without importing it (its ``__main__`` needs torch,
    which ddptui's own interpreter may not have)."""
    spec = importlib.util.find_spec(rundir.WORKER_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LaunchError([f"the bundled worker package {rundir.WORKER_PACKAGE} is not "
                           "installed; reinstall ddptui"])
    return sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.py"))


@functools.cache
def torchrun_program() -> bytes:
    """The text of :mod:`ddptui.nodeprog.torchrun_tee` (the node programs it imports in
    place), which launch.sh runs as torchrun."""
    return nodeprog.source(torchrun_tee).encode()


class RunExists(LaunchError):
    """The node dir was there before this launch: a run of the same name used the node."""

    def __init__(self, node: str, node_dir: str) -> None:
        super().__init__([f"node {node}: this run's name was used before: its directory "
                          f"{node_dir} is already there. Give the run another name "
                          "(`--run-id`), or leave it out for a new one; `ddptui clean` removes "
                          "old runs. Nothing of that run was read or changed."])
        self.node = node


def route_text(chosen: RouteChoice) -> str:
    """What :func:`ddptui.nodeprog.torchrun_tee.apply_route` reads."""
    argv = ["--local-addr", chosen.local_addr] if chosen.local_addr else []
    return json.dumps({"argv": argv, "env": dict(chosen.env)})


def warm_spec(node_launch: NodeLaunch, hold_s: float) -> bytes:
    """What a warm torchrun (:mod:`ddptui.nodeprog.warm_start`) takes in place of
    launch.sh's lines: torchrun's arguments, the ranks' environment and project, the hold, and
    the files launch.sh would write (its process group, the port lock's pid, its exit code)."""
    ndir = node_launch.node_dir
    return json.dumps({
        "argv": list(node_launch.argv[2:]), "env": node_launch.env,
        "project": node_launch.project_dir, "hold": node_launch.hold_path, "hold_s": hold_s,
        "pgid": rundir.in_node_dir(ndir, rundir.PGID),
        "lock_pid": f"{node_launch.lock}/{rundir.LOCK_PID}" if node_launch.lock else None,
        "log": rundir.in_node_dir(ndir, rundir.NODE_LOG),
        "exit_code": rundir.in_node_dir(ndir, rundir.EXIT_CODE)}).encode()


def upload(transport: Transport, node_launch: NodeLaunch, job: JobConfig,
           route: RouteChoice | None = None, warm: tuple[str, bytes] | None = None) -> bool:
    """The node dir with everything ``launch.sh`` needs, and an empty ``node.log`` so that a
    follower that reads before torchrun writes finds the file; ``warm``: a warm torchrun's
    spec and where it looks for it, written last. True when the workdir was made by this
    upload (an undone launch removes it again)."""
    ndir = node_launch.node_dir
    worker_dir = rundir.in_node_dir(ndir, rundir.WORKER_PACKAGE)
    dirs = [node_launch.log_dir, *([worker_dir] if job.is_bundled_worker else [])]
    res = transport.run(nodeops.launch_mkdir_cmd(ndir, *dirs), timeout=30)
    if res.exit_code == nodeops.EXIT_RUN_EXISTS:
        raise RunExists(node_launch.node.name, ndir)
    if res.exit_code != 0:
        raise LaunchError([f"node {node_launch.node.name}: cannot create the run directory "
                           f"{ndir}: {res.stderr.strip()}"])
    files: list[tuple[bytes, str, int]] = []
    if job.script is None:  # job.is_bundled_worker, spelled so that mypy narrows job.script
        files += [(f.read_bytes(), rundir.in_node_dir(worker_dir, f.name), 0o644)
                  for f in worker_files()]
    elif node_launch.project_dir is None and not job.module:
        src = Path(job.script)  # no project (a plan made without one): the script alone
        files.append((src.read_bytes(), rundir.in_node_dir(ndir, src.name), 0o755))
    files += [(node_launch.script.encode(), rundir.in_node_dir(ndir, rundir.LAUNCH_SCRIPT),
               0o700),  # it holds secret env
              (torchrun_program(), rundir.in_node_dir(ndir, rundir.TORCHRUN), 0o644),
              (b"", rundir.in_node_dir(ndir, rundir.NODE_LOG), 0o644)]
    if node_launch.held:
        files.append((b"", node_launch.hold_path, 0o644))
    if route is not None:
        files.append((route_text(route).encode(), rundir.in_node_dir(ndir, torchrun_tee.ROUTE),
                      0o644))
    # all at once: each is a round trip of its own (a command through the srun agent, an
    # SFTP exchange), and none needs another
    for failed in failures(map_at_once(files, lambda f: transport.put_bytes(*f))):
        raise failed.error
    if warm is not None:  # once the rest is there: the warm torchrun takes it at once
        transport.put_bytes(warm[1], warm[0], 0o600)
    return nodeops.NEW_WORKDIR in res.stdout


def take_warm(transport: Transport, node_launch: NodeLaunch, spec: str) -> int | None:
    """The process group of the node's warm torchrun, once it took its ``spec``; None when it
    did not within :data:`WARM_TAKE_S` and was given up (the spec renamed away from it and
    emptied), for launch.sh to be started instead."""
    pgid = pgid_within(transport, node_launch, WARM_TAKE_S)
    if pgid is not None:
        return pgid
    void = shlex.quote(spec + warm_start.VOID)
    if transport.run(f"mv -- {shlex.quote(spec)} {void} && : > {void}", timeout=30
                     ).exit_code == 0:
        return None
    pgid = pgid_within(transport, node_launch, START_TIMEOUT_S)  # taken just now
    if pgid is None:
        raise LaunchError([f"node {node_launch.node.name}: torchrun, started as ddptui "
                           "started, took its launch but did not say its process group "
                           f"within {START_TIMEOUT_S} s"])
    return pgid


def pgid_within(transport: Transport, node_launch: NodeLaunch, seconds: float) -> int | None:
    """The process group the node's launch writes first thing (launch.sh, or a warm
    torchrun's half that plays it), looked for every :data:`PGID_POLL_S` up to ``seconds``;
    None if it did not come."""
    pgid_path = rundir.in_node_dir(node_launch.node_dir, rundir.PGID)
    deadline = time.monotonic() + seconds
    while True:
        try:
            return int(transport.read_from(pgid_path, 0, 64).decode().strip())
        except (FileNotFoundError, ValueError):
            if time.monotonic() > deadline:
                return None
            time.sleep(PGID_POLL_S)


def start(transport: Transport, node_launch: NodeLaunch, run_id: str, *,
          restart: bool = False) -> int:
    """Start ``launch.sh`` detached (``restart``: after a hold that ran out) and return its
    process group, once it has written it."""
    name = node_launch.node.name
    if restart:
        prep = transport.run(nodeops.restart_prep_cmd(node_launch.node_dir), timeout=30)
        if prep.exit_code != 0:
            raise LaunchError([f"node {name}: could not start torchrun again: "
                               f"{prep.stderr.strip()}"])
    res = transport.start_detached(nodeops.start_job(node_launch.node_dir, run_id), timeout=30)
    if res.exit_code != 0 or "started" not in res.stdout:
        raise LaunchError([f"node {name}: could not start torchrun: "
                           f"{res.stderr.strip() or res.stdout.strip()}"])
    pgid = pgid_within(transport, node_launch, START_TIMEOUT_S)
    if pgid is None:
        log = rundir.in_node_dir(node_launch.node_dir, rundir.NODE_LOG)
        raise LaunchError([f"node {name}: launch.sh did not start within {START_TIMEOUT_S} s "
                           f"(see {log})"])
    return pgid


def release(transport: Transport, node_launch: NodeLaunch,
            route: RouteChoice | None = None) -> bool:
    """Let an early-started torchrun go on; False when it had stopped holding (its wait ran
    out, see :func:`ddptui.nodeprog.torchrun_tee.hold`) and must be started again."""
    said = route_text(route) if route is not None else None
    res = transport.run(nodeops.release_cmd(node_launch.hold_path, said), timeout=30)
    return res.exit_code == 0
