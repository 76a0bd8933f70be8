"""The user's project as launch phases: walk it here, ship it (or check it is in place),
then run ``job.setup`` on every node, all before torchrun starts anywhere.

Each phase runs on every node at once and ends the launch by raising ``Abort`` on any
node's failure, naming the node: a project that cannot be shipped, a node without the
in-place path, or a failing setup step leaves no node started.
"""

from __future__ import annotations

import hashlib
import posixpath
import threading
import time
from collections import deque

from ddptui.config.model import JobConfig
from ddptui.events import Level, LogLine, Source
from ddptui.launch.plan import NodeLaunch, Plan, expand_home, module_paths, script_in_project
from ddptui.launch.ports import Abort, LaunchContext, on_every_node
from ddptui.remote import nodeops
from ddptui.run_notes import SyncStats
from ddptui.run_state import NodeEvent
from ddptui.store import rundir
from ddptui.sync.push import Plans, sync_node
from ddptui.sync.walk import ProjectError, Walked, walk

#: A setup step may install packages; an hour bounds a hung one.
SETUP_TIMEOUT_S = 3600
#: Lines of a failed setup quoted in the error.
SETUP_TAIL = 10


def prepare(ctx: LaunchContext) -> Walked | None:
    """The local project's manifest, before any node is contacted: an unreadable or too large
    project is refused with nothing sent. None when nothing is synced."""
    job = ctx.config.job
    if job.script is None or not job.sync or job.project is None:
        return None
    key = hashlib.sha256(job.project.encode()).hexdigest()[:16]
    root = ctx.state_root
    try:
        return walk(job.project, job.exclude, skip=(str(root),),
                    hash_cache=rundir.hash_cache(root, key), max_mb=job.max_sync_mb)
    except ProjectError as exc:
        raise Abort([f"job.project {job.project}: {exc}"], cleanup=False) from None


def project_dirs(job: JobConfig, workdirs: dict[str, str], homes: dict[str, str],
                 walked: Walked | None) -> dict[str, str] | None:
    """Node name -> the project's root there: the synced tree, or the in-place path."""
    if job.script is None or job.project is None:
        return None
    if walked is not None:
        digest = walked.manifest.digest()
        return {n: rundir.code_dir(w, digest) for n, w in workdirs.items()}
    return {n: expand_home(job.project, homes[n]) for n in workdirs}


def check_in_place(ctx: LaunchContext, plan: Plan) -> None:
    """``sync: false``: the project and its entry point exist on every node."""
    job = ctx.config.job
    if job.script is None or job.sync:
        return
    entry = module_paths(job.script) if job.module else (
        script_in_project(job.script, job.project),)

    def check(launch: NodeLaunch) -> None:
        assert launch.project_dir is not None
        res = ctx.pool.get(launch.node.name).run(
            nodeops.in_place_cmd(launch.project_dir, entry), timeout=30)
        if res.exit_code != 0:
            what = (res.stdout.strip() or res.stderr.strip()).splitlines()
            raise ProjectError(
                f"node {launch.node.name}: the project to run in place is not there "
                f"({what[-1] if what else 'exit code ' + str(res.exit_code)}). With "
                "`job.sync: false` the project must already exist at the same path on every "
                "node (shared storage); otherwise leave `sync` on.")

    on_every_node(plan, check, cleanup=False)


def sync_all(ctx: LaunchContext, plan: Plan, walked: Walked | None) -> None:
    """Ship the project to every node at once; the counts go to run.json's ``sync``."""
    job = ctx.config.job
    if walked is None or job.project is None:
        return
    digest = walked.manifest.digest()
    counts: dict[str, SyncStats] = {}
    lock = threading.Lock()
    plans = Plans()

    def ship(launch: NodeLaunch) -> None:
        name, node = launch.node.name, launch.node
        assert launch.project_dir is not None
        code_root = posixpath.dirname(launch.project_dir)  # see rundir.code_dir
        ctx.node_update(name, NodeEvent.UPLOAD, "sync: comparing with the node's copy")
        command = nodeops.sync_cmd(node.python, code_root, digest)
        stats = sync_node(name, ctx.pool.get(name), command, walked, job.project or "",
                          lambda text: ctx.node_update(name, NodeEvent.UPLOAD, text), plans)
        with lock:
            counts[name] = stats
            ctx.record.update(sync=dict(counts))

    on_every_node(plan, ship, cleanup=True)


def run_setup(ctx: LaunchContext, plan: Plan) -> None:
    """``job.setup`` in the project on every node at once, its output as ``setup`` lines."""
    steps = ctx.config.job.setup
    if not steps:
        return

    def setup(launch: NodeLaunch) -> None:
        name = launch.node.name
        assert launch.project_dir is not None
        ctx.node_update(name, NodeEvent.START, f"setup: {len(steps)} step(s)")
        tail: deque[str] = deque(maxlen=SETUP_TAIL)
        pending = {False: b"", True: b""}

        def emit(texts: list[str], level: Level = Level.INFO) -> None:
            tail.extend(texts)
            now = time.time()
            ctx.publish(name, [LogLine(name, t, now, Source.SETUP, level) for t in texts])

        def on_output(data: bytes, is_err: bool) -> None:
            *whole, pending[is_err] = (pending[is_err] + data).split(b"\n")
            if whole:
                emit([w.decode("utf-8", "replace").rstrip("\r") for w in whole])

        script = nodeops.setup_script(launch.project_dir, steps, dict(launch.env))
        res = ctx.pool.get(name).run_stream("sh -s", SETUP_TIMEOUT_S,
                                              stdin=[script.encode()], on_output=on_output)
        emit([p.decode("utf-8", "replace") for p in pending.values() if p])
        if res.exit_code != 0:
            last = "\n".join(f"  {t}" for t in tail)
            raise ProjectError(f"node {name}: job.setup failed (exit code {res.exit_code}); "
                               f"nothing was started. Its last lines:\n{last}")

    on_every_node(plan, setup, cleanup=True)
