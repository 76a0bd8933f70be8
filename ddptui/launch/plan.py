"""Pure planning: a validated hosts file plus a run id becomes one launch per node.

Everything ddptui needs to start a node (its torchrun argv, the environment ddptui
adds, its node dir and the ``launch.sh`` that ties them together) is decided here, with
no I/O and no clock, so that every quoting and flag decision is tested without a cluster.
Whatever the node's home directory is, ddptui asks the node and passes absolute
workdirs in; whatever address the rendezvous lives at, ddptui resolves it.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from ddptui import events
from ddptui.config import HostsConfig, NodeConfig
from ddptui.config.values import ENV_NAME
from ddptui.nodeprog.torchrun_tee import EXIT_NO_PROJECT, EXIT_NOT_RELEASED
from ddptui.store import rundir

#: launch.sh exits with this when the node dir is gone: no torchrun was started.
EXIT_NO_RUN_DIR = 97

_ENV_NAME_RE = re.compile(f"{ENV_NAME}\\Z")


@dataclass(frozen=True)
class NodeLaunch:
    node: NodeConfig
    node_rank: int
    node_dir: str  # absolute on the node (see ddptui.store.rundir); launch.sh runs in it
    #: [python, <node dir>/torchrun.py, *flags, entry..., *args]: torchrun, by the node's own
    #: python, through :mod:`ddptui.nodeprog.torchrun_tee`
    argv: tuple[str, ...]
    env: dict[str, str]  # only what ddptui sets (not the node's whole environment)
    script: str  # the launch.sh text
    #: The ranks' working directory, first on PYTHONPATH: the synced tree or the in-place
    #: project; None for the bundled worker, which runs from the node dir.
    project_dir: str | None = None
    #: Started early: torchrun imports torch, then holds until ddptui releases it.
    held: bool = False
    #: The rendezvous port's lock that this node's launch keeps live (``launch.reserve``).
    lock: str | None = None

    @property
    def hold_path(self) -> str:
        return rundir.hold_file(self.node_dir)

    @property
    def log_dir(self) -> str:
        """torchrun's ``--log-dir``: per-rank stdout/stderr and ``error.json`` files."""
        return rundir.in_node_dir(self.node_dir, rundir.TORCHELASTIC)

    @property
    def run_dir(self) -> str:
        """The node dir under its old name, which the plan's tests still read."""
        return self.node_dir


@dataclass(frozen=True)
class Plan:
    run_id: str
    nodes: tuple[NodeLaunch, ...]  # in node_rank order
    world_size: int | None  # when every nproc_per_node is an int, else None

    def for_node(self, name: str) -> NodeLaunch:
        for launch in self.nodes:
            if launch.node.name == name:
                return launch
        raise KeyError(name)


def expand_home(path: str, home: str) -> str:
    """``~`` and ``~/x`` against the node's home; anything else is returned unchanged.

    Only the login user's home is known (the transport asks the node), so ``~other`` stays.
    """
    if path != "~" and not path.startswith("~/"):
        return path
    base = home.rstrip("/") or "/"
    rest = path[2:]
    return posixpath.join(base, rest) if rest else base


def new_run_id(now: datetime, rand: str) -> str:
    """Sortable by time (UTC when ``now`` knows its zone) and safe in paths and shells."""
    if not rundir.RUN_ID_RE.match(rand):
        raise ValueError(f"run id suffix must match [A-Za-z0-9._-]+, not {rand!r}")
    if now.tzinfo is not None:
        now = now.astimezone(UTC)
    return f"{now:%Y%m%d-%H%M%S}-{rand}"


def endpoint_host(host: str) -> str:
    """torchrun wants IPv6 literals in brackets wherever a port may follow."""
    if ":" in host and not host.startswith("["):
        return f"[{host}]"
    return host


def make_plan(
    config: HostsConfig,
    run_id: str,
    *,
    workdirs: Mapping[str, str],
    rdzv_host: str,
    worker_module: str = rundir.WORKER_PACKAGE,
    script_paths: Mapping[str, str] | None = None,
    project_dirs: Mapping[str, str] | None = None,
    hold_s: float | None = None,
    store_node: str | None = None,
    locks: Mapping[str, str] | None = None,
) -> Plan:
    """One :class:`NodeLaunch` per node, in node-rank order.

    ``workdirs`` (node name -> absolute workdir), ``project_dirs`` (node name -> the project's
    root there: the synced tree, or ``job.project`` run in place) and ``script_paths`` (node
    name -> the user script there; default: inside the project, else
    ``<node dir>/<script's file name>``) come from ddptui because only it talks to
    the nodes. ``store_node`` hosts the c10d store (None: none of them does); ``locks`` (node
    name -> path) are the rendezvous port's locks that its launch.sh keeps live.
    """
    if not rundir.RUN_ID_RE.match(run_id):
        raise ValueError(f"run id must match [A-Za-z0-9._-]+, not {run_id!r}")
    if not rdzv_host or any(c.isspace() for c in rdzv_host):
        raise ValueError(f"rendezvous host must be a host name or address, not {rdzv_host!r}")
    launches = []
    for node in config.ordered_nodes:
        rank = config.node_rank(node)
        workdir = workdirs.get(node.name)
        if workdir is None or not workdir.startswith("/"):
            raise ValueError(f"node {node.name!r} needs an absolute workdir, got {workdir!r}")
        ndir = rundir.node_dir(workdir, run_id, rank)
        project = (project_dirs or {}).get(node.name) if config.job.script else None
        entry = _entry(config, node, ndir, worker_module, script_paths, project)
        argv = (
            node.python, rundir.in_node_dir(ndir, rundir.TORCHRUN),
            *torchrun_flags(config, node, rank, run_id, ndir, rdzv_host, store_node),
            *entry, *config.job.args,
        )
        env = node_env(config, node, run_id, rank)
        lock = (locks or {}).get(node.name)
        launches.append(NodeLaunch(
            node, rank, ndir, argv, env,
            launch_script(run_id, node.name, rank, ndir, argv, env, project, hold_s, lock),
            project, hold_s is not None, lock))
    counts = [n.nproc_per_node for n in config.nodes if isinstance(n.nproc_per_node, int)]
    world = sum(counts) if len(counts) == len(config.nodes) else None
    return Plan(run_id, tuple(launches), world)


def torchrun_flags(
    config: HostsConfig, node: NodeConfig, node_rank: int, run_id: str, ndir: str,
    rdzv_host: str, store_node: str | None = None,
) -> list[str]:
    """Flags as named in torch/distributed/run.py; the fixed ``--nnodes N`` keeps it
    non-elastic, which is what a fixed hosts file means.

    ``is_host`` is said outright when the store's node is known: left to guess, an agent
    that cannot bind the port (another run's store holds it) becomes a client of that store
    instead of failing, and its run then lives and dies with the other one."""
    rdzv = config.rendezvous
    job = config.job
    flags = ["--nnodes", str(len(config.nodes)), "--nproc-per-node", str(node.nproc_per_node)]
    rdzv_id = rdzv.id or run_id
    if rdzv.backend == "c10d":
        conf = [f"join_timeout={rdzv.join_timeout}"]
        if rdzv.last_call_timeout is not None:
            conf.append(f"last_call_timeout={rdzv.last_call_timeout}")
        if rdzv.close_timeout is not None:
            conf.append(f"close_timeout={rdzv.close_timeout}")
        if store_node is not None:
            conf.append(f"is_host={'true' if node.name == store_node else 'false'}")
        flags += [
            "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"{endpoint_host(rdzv_host)}:{rdzv.effective_port}",
            "--rdzv-id", rdzv_id,
            "--rdzv-conf", ",".join(conf),
        ]
    else:
        # static: the store lives on node rank 0 at master-addr:master-port, and torchrun
        # passes --node-rank as the rendezvous "rank"; "timeout" is its join timeout.
        flags += [
            "--rdzv-backend", "static",
            "--master-addr", endpoint_host(rdzv_host),
            "--master-port", str(rdzv.effective_port),
            "--node-rank", str(node_rank),
            "--rdzv-id", rdzv_id,
            "--rdzv-conf", f"timeout={rdzv.join_timeout}",
        ]
    flags += ["--max-restarts", str(job.max_restarts)]
    if job.monitor_interval is not None:
        flags += ["--monitor-interval", _number(job.monitor_interval)]
    flags += ["--tee", "3", "--log-dir", rundir.in_node_dir(ndir, rundir.TORCHELASTIC)]
    if node.addr is not None:
        flags += ["--local-addr", node.addr]
    return flags


def _entry(
    config: HostsConfig, node: NodeConfig, ndir: str, worker_module: str,
    script_paths: Mapping[str, str] | None, project: str | None,
) -> list[str]:
    job = config.job
    if job.script is None:  # job.is_bundled_worker, spelled so that mypy narrows job.script
        return ["-m", worker_module]  # cwd is the node dir, where the worker is uploaded
    if job.module:
        return ["-m", job.script]
    if script_paths is not None and node.name in script_paths:
        return [script_paths[node.name]]
    if project is not None:
        return [posixpath.join(project, script_in_project(job.script, job.project))]
    return [posixpath.join(ndir, posixpath.basename(job.script.replace("\\", "/")))]


def script_in_project(script: str, project: str | None) -> str:
    """The script's path below the project root, as it is on every node."""
    if project is None:
        return posixpath.basename(script)
    rel = posixpath.relpath(script, project)
    if rel == ".." or rel.startswith("../"):
        raise ValueError(f"the script {script} is not inside the project {project}")
    return rel


def module_paths(module: str) -> tuple[str, ...]:
    """Where ``-m module`` may be found below a project root: a module file or a package."""
    base = module.replace(".", "/")
    return (f"{base}.py", base)


def node_env(config: HostsConfig, node: NodeConfig, run_id: str, node_rank: int) -> dict[str, str]:
    """The hosts file's env for the node, then ddptui's own on top (later wins)."""
    return {**job_env(config, node), "DDPTUI_RUN": f"{run_id}/{node_rank}"}


def job_env(config: HostsConfig, node: NodeConfig) -> dict[str, str]:
    """:func:`node_env` without the run's marker: what preflight's node program runs under,
    so that it imports what the ranks will, yet is never taken for a process of a run.

    ``TTY_COMPATIBLE=1``, unless the node's env says how rich should see its output
    (``TTY_COMPATIBLE`` or ``FORCE_COLOR``): rich (Lightning's RichProgressBar, pip) draws its
    live display only on a terminal, and a rank's output is a file torchrun tees, where it
    drew once, at the end (one point of a run's loss). Told so (rich 14 and later), it
    redraws at each refresh, in place, which the node's tee reads as bar states
    (``nodeprog/torchrun_tee.py``), and in its colours, which the dashboard leaves out.
    """
    env = dict(node.env)
    env["PYTHONUNBUFFERED"] = "1"
    env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = events.PREFIX_TEMPLATE
    env.setdefault("LOGLEVEL", "INFO")  # torchrun's agent logs restarts at INFO
    if not {"TTY_COMPATIBLE", "FORCE_COLOR"} & env.keys():
        env["TTY_COMPATIBLE"] = "1"
    job = config.job
    for key, value in (
        ("NCCL_DEBUG", job.nccl_debug),
        ("NCCL_DEBUG_SUBSYS", job.nccl_debug_subsys),
        ("TORCH_DISTRIBUTED_DEBUG", job.torch_distributed_debug),
        ("TORCH_CPP_LOG_LEVEL", job.torch_cpp_log_level),
    ):
        if value is not None:
            env[key] = value
    return env


def quote(value: str) -> str:
    """Always single-quoted, even when ``shlex.quote`` would leave it bare: one shape for
    every value makes the script easy to read and to check, and ``shlex.split`` undoes it."""
    return "'" + value.replace("'", "'\"'\"'") + "'"


def _comment(text: str) -> str:
    """A comment must stay one line: a newline in an argument would otherwise run code."""
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text
    )


def launch_script(
    run_id: str, name: str, node_rank: int, ndir: str, argv: tuple[str, ...],
    env: Mapping[str, str], project: str | None = None, hold_s: float | None = None,
    lock: str | None = None,
) -> str:
    """The POSIX sh ddptui starts detached with ``setsid sh launch.sh``.

    It records its pid (= the process group, as a session leader) for ``stop``, and writes
    the exit code through a rename so a reader never sees half of it. With a ``project``,
    torchrun runs in it, with it first on ``PYTHONPATH`` (as ``cd project && torchrun``
    would, plus the root importable from any script below it); the node dir's files are
    written by absolute path. With ``hold_s``, torchrun starts in the node dir, holds (see
    :mod:`ddptui.nodeprog.torchrun_tee`) and enters the project itself once released: the
    synced tree may not exist yet when it starts.
    """
    for value in (*argv, ndir):
        if "\x00" in value:
            raise ValueError("a NUL character cannot be passed to a process")
    exports = env_exports(env, project)
    human = shlex.join(["torchrun", *argv[2:]])
    lines = [
        "#!/bin/sh",
        _comment(f"# ddptui run {run_id}, node {name} (node rank {node_rank})"),
        _comment(f"# {human}"),
        f"cd {quote(ndir)} || exit {EXIT_NO_RUN_DIR}",
        f"echo $$ > {rundir.PGID}",
        # the rendezvous port's lock (``ddptui.launch.reserve``) lives as long as this shell
        *([f"[ -d {quote(lock)} ] && echo $$ > {quote(posixpath.join(lock, rundir.LOCK_PID))}"]
          if lock else []),
        *exports,
    ]
    command = " ".join(quote(a) for a in argv)
    if hold_s is not None:
        lines += [f"export DDPTUI_HOLD={quote(rundir.hold_file(ndir))}",
                  f"export DDPTUI_HOLD_S={_number(hold_s)}",
                  *([f"export DDPTUI_CWD={quote(project)}"] if project is not None else [])]
    if project is not None and hold_s is None:
        lines += [
            f"if cd {quote(project)}; then",
            f"  {command}",
            "  rc=$?",
            "else",
            f"  rc={EXIT_NO_PROJECT}",
            "fi",
        ]
    else:
        lines += [command, "rc=$?"]
    if hold_s is not None:  # nothing ran: no exit code, for the start that follows to write
        lines.append(f'[ "$rc" -eq {EXIT_NOT_RELEASED} ] && exit "$rc"')
    done = rundir.EXIT_CODE  # relative while the shell is still in the node dir
    if project is not None:
        done = quote(rundir.in_node_dir(ndir, done))
    tmp = f"{done[:-1]}.tmp'" if project is not None else f"{done}.tmp"
    lines += [f'echo "$rc" > {tmp} && mv {tmp} {done}', 'exit "$rc"']
    return "\n".join(lines) + "\n"


def env_exports(env: Mapping[str, str], project: str | None = None) -> list[str]:
    """The ``export`` lines that give a process the ranks' environment: ``env`` (the node's
    ``env:`` and ddptui's own, see :func:`node_env`), then the project first on
    ``PYTHONPATH``. ``launch.sh`` holds them, and preflight's node program is handed them on
    its stdin (never its command line: secret values are among them)."""
    for key in env:
        if not _ENV_NAME_RE.match(key):
            raise ValueError(f"not an environment variable name: {key!r}")
    for value in (*env.values(), project or ""):
        if "\x00" in value:
            raise ValueError("a NUL character cannot be passed to a process")
    lines = [f"export {key}={quote(env[key])}" for key in sorted(env)]
    if project is not None:
        lines.append(f'export PYTHONPATH={quote(project)}"${{PYTHONPATH:+:$PYTHONPATH}}"')
    return lines


def exported_env(script: str) -> dict[str, str]:
    """The ``export NAME='value'`` lines of a ``launch.sh``, read back: ``ddptui attach``
    takes the secret values ``run.json`` withholds from the node's own copy."""
    env: dict[str, str] = {}
    lines = script.split("\n")
    after = 0  # lines before this one belong to a value already read
    for i, line in enumerate(lines):
        if i < after or not line.startswith("export "):
            continue
        words = None
        for end in range(i + 1, len(lines) + 1):  # a quoted value may hold newlines
            try:
                words = shlex.split("\n".join(lines[i:end])[len("export "):])
                after = end
                break
            except ValueError:
                continue
        if words is not None and len(words) == 1 and "=" in words[0]:
            key, value = words[0].split("=", 1)
            if _ENV_NAME_RE.match(key):
                env[key] = value
    return env


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
