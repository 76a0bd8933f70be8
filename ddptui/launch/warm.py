"""torchrun started before the launch knows its node's files: a *warm* torchrun.

A launch's cost is torchrun's import of torch (1-2 s of CPU) and whatever comes before it.
The early start (:func:`ddptui.launch.phases.start_early`) already overlaps that import with
the probe, preflight and sync, but it can start torchrun only once the node is reached, its
rendezvous port locked and its files written: 0.3-0.5 s after the command, where the
``srun torchrun`` line a user types has torchrun importing after 0.05 s. What torchrun needs
to *import* is known before any of that, from the hosts file alone: the node's Python and the
ranks' environment. So a warm torchrun (:mod:`ddptui.nodeprog.warm_start`) is started

* as ddptui starts, before it imports the rest of its launch, on the nodes it needs no
  connection for (:func:`start`): a Slurm step of its own on each node of a job known now,
  and a process in a session of its own on this machine;
* on an SSH node, as ddptui starts too, through the OpenSSH client
  (:mod:`ddptui.transport.openssh`: connected and started while ddptui still imports its
  own SSH), its answer taken once ddptui's connection is up (:func:`answered`); or, where
  ``ssh`` could not do it, over ddptui's connection (:func:`over`), before the port lock and
  the uploads.

It imports torch while ddptui goes on, and takes the rest (torchrun's arguments, the port's
lock, its log) from a spec written with the node's other files (``staging.warm_spec``), then
holds as an early start does. One whose spec is not taken (it died, or never started) is
given up and started the ordinary way (:func:`ddptui.launch.staging.take_warm`); a launch
undone before then stops them (:func:`cancel`), and each one never told anything ends by
itself (:data:`~ddptui.nodeprog.warm_start.WARM_WAIT_S`).

Never where a setup command must run before torchrun (it is started after the setup), nor
for a workdir the node cannot expand alone (``~other``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import subprocess
from collections.abc import Callable, Iterable
from datetime import datetime

from ddptui import nodeprog
from ddptui.config import HostsConfig, NodeConfig
from ddptui.launch.plan import job_env, new_run_id, node_env
from ddptui.nodeprog import torchrun_tee, warm_start
from ddptui.store import rundir
from ddptui.transport import openssh
from ddptui.transport.base import Transport
from ddptui.transport.srun import stepenv, steps
from ddptui.transport.srun.names import step_name

#: Seconds to let srun go for one node's step.
LET_GO_S = 10.0
#: Seconds to wait, once ddptui's own connection is up, for the OpenSSH client's answer: it
#: connected first, so it has answered unless something is wrong (then ddptui's does it).
OPENSSH_ANSWER_S = 2.0

#: The OpenSSH clients still starting a node's warm torchrun, by (run, node): what
#: :func:`answered` reads when the launch reaches the node, in this same process.
_by_openssh: dict[tuple[str, str], subprocess.Popen[bytes]] = {}
#: The (run, node) pairs whose OpenSSH client said the warm torchrun was let go.
_let_go_by_openssh: set[tuple[str, str]] = set()


def sent(run_id: str) -> set[str]:
    """The nodes whose warm torchrun went through OpenSSH as ddptui started, and which have
    not said it failed: a launch undone stops them too (:func:`cancel`)."""
    return {node for run, node in (*_by_openssh, *_let_go_by_openssh) if run == run_id}


def spec_path(node_dir: str) -> str:
    return rundir.in_node_dir(node_dir, rundir.WARM_SPEC)


def wanted(config: HostsConfig, node: NodeConfig) -> bool:
    """No setup command first (torchrun is started after it), and a workdir absolute or
    under ``~/`` (the node expands it as the transport's ``$HOME``)."""
    return not config.job.setup and (node.workdir.startswith("/") or node.workdir == "~"
                                     or node.workdir.startswith("~/"))


def by_openssh(config: HostsConfig, node: NodeConfig) -> bool:
    """An SSH node: started as ddptui starts, through the OpenSSH client."""
    return wanted(config, node) and node.transport == "ssh" and not node.is_local


def at_once(config: HostsConfig, node: NodeConfig) -> bool:
    """Started as ddptui starts, needing no connection: a step of a job known now, or this
    machine. An SSH node's is sent through OpenSSH then (:func:`by_openssh`), and taken as
    started once reached (:func:`answered`, else :func:`over`)."""
    slurm = config.slurm
    return wanted(config, node) and (node.is_local or (
        node.transport == "srun" and slurm is not None and slurm.job is not None))


def _program(config: HostsConfig, node: NodeConfig, run_id: str) -> tuple[str, dict[str, str]]:
    """The shell line that starts the node's warm torchrun, in ``/`` (nothing of a login's
    directory on ``sys.path`` while torch is imported), and the environment it needs from
    its caller: the ranks' (secret values among them: never on a command line). The run's
    marker, by which stop finds its processes, is set by the line itself: on a one-machine
    cluster, a stop would take the caller (an ``srun``) for a process of the run."""
    rank = config.node_rank(node)
    spec = spec_path(rundir.node_dir(node.workdir, run_id, rank))
    env = job_env(config, node)
    marker = node_env(config, node, run_id, rank).items() - env.items()
    shell = " ".join(["export", *(f"{k}={shlex.quote(v)}" for k, v in sorted(marker)),
                      "&& cd / && exec", shlex.quote(node.python), "-c",
                      shlex.quote(nodeprog.source(torchrun_tee)), warm_start.WARM,
                      shlex.quote(spec)])  # ``~/``: expanded there
    return shell, env


def fresh_run_id() -> str:
    """A new run's name: now, and four random hex digits (``plan.new_run_id``, which is pure)."""
    return new_run_id(datetime.now(), secrets.token_hex(2))


def new_run(config: HostsConfig) -> tuple[str, frozenset[str]]:
    """A new run's name, and :func:`start` for it."""
    run_id = fresh_run_id()
    return run_id, start(config, run_id)


def start(config: HostsConfig, run_id: str) -> frozenset[str]:
    """Start the warm torchrun of every node :func:`at_once` allows; the names of those whose
    start was let go (a Slurm step, a process of this machine in a session of its own). An
    SSH node's start is sent through ``ssh`` and not waited for (:func:`answered`)."""
    started = set()
    own = stepenv.scrubbed(os.environ)
    for node in config.nodes:
        if by_openssh(config, node):
            command, stdin = _over_line(config, node, run_id)
            with contextlib.suppress(OSError):  # no ssh here: ddptui's connection does it
                proc = subprocess.Popen(openssh.argv(node, config.ssh, command),
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
                _by_openssh[(run_id, node.name)] = proc
                with contextlib.suppress(OSError):  # a pipe's buffer holds it whole
                    assert proc.stdin is not None
                    proc.stdin.write(stdin)
                    proc.stdin.close()
            continue
        if not at_once(config, node):
            continue
        shell, env = _program(config, node, run_id)
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            if node.is_local:  # an interpreter that is not there starts nothing to wait for
                subprocess.run(["sh", "-c", _let_go_here(node, shell)], env={**os.environ, **env},
                               check=True, timeout=LET_GO_S, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            else:
                assert config.slurm is not None and config.slurm.job is not None
                steps.let_go(config.slurm.job, node.host, shell, step_name(run_id), LET_GO_S,
                             own | {k: v for k, v in env.items()
                                    if k not in stepenv.dropped({k: v})})
            started.add(node.name)
    return frozenset(started)


def answered(run_id: str, node: str) -> bool:
    """Whether the OpenSSH client :func:`start` sent to ``node`` let its warm torchrun go
    (False when none was sent, or it failed: ddptui's connection does it then)."""
    proc = _by_openssh.pop((run_id, node), None)
    if proc is None:
        return (run_id, node) in _let_go_by_openssh
    assert proc.stdout is not None
    try:  # its few bytes of answer fit the pipe: waiting cannot block it
        proc.wait(timeout=OPENSSH_ANSWER_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return False
    finally:  # what it said, without waiting on a pipe a process it left may hold open
        os.set_blocking(proc.stdout.fileno(), False)
        out = proc.stdout.read() or b""
        proc.stdout.close()
    if proc.returncode != 0 or b"started" not in out:
        return False
    _let_go_by_openssh.add((run_id, node))
    return True


def over(transport: Transport, config: HostsConfig, node: NodeConfig, run_id: str) -> bool:
    """Start an SSH node's warm torchrun over its connection (its environment on the
    command's stdin, as preflight's); whether it was let go."""
    if not wanted(config, node):
        return False
    command, stdin = _over_line(config, node, run_id)
    res = transport.run_stream(command, LET_GO_S, stdin=[stdin])
    return res.exit_code == 0 and "started" in res.stdout


def _over_line(config: HostsConfig, node: NodeConfig, run_id: str) -> tuple[str, bytes]:
    """The command that lets a node's warm torchrun go over a connection, and its stdin:
    the ranks' environment (secret values among them: never on a command line)."""
    shell, env = _program(config, node, run_id)
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(env.items()))
    return f'eval "$(cat)"; {_let_go_here(node, shell)} && echo started', exports.encode()


def _let_go_here(node: NodeConfig, shell: str) -> str:
    """``shell`` in a session of its own, its output nowhere, if the node's Python is there
    at all (else it fails at once: a warm torchrun that cannot start is not waited for)."""
    return (f"command -v {shlex.quote(node.python)} >/dev/null 2>&1 && "
            f"(setsid sh -c {shlex.quote(shell)} >/dev/null 2>&1 </dev/null &)")


def cancel(config: HostsConfig, run_id: str, nodes: Iterable[str],
           transport_of: Callable[[str], Transport | None]) -> None:
    """Stop the warm torchruns of ``nodes`` and of every node whose warm torchrun went
    through OpenSSH (:func:`sent`): a launch undone before they took their specs leaves none
    of them importing torch for nothing (the run's steps cancelled on Slurm; the stop
    program, by the run's marker, elsewhere: over the node's connection, or through OpenSSH
    for a node the launch did not reach). Best effort: each one that is never told anything
    ends by itself."""
    nodes = set(nodes) | sent(run_id)
    if not nodes:
        return
    from ddptui.remote import nodeops  # not on the way to the warm start
    from ddptui.slurm import client
    from ddptui.slurm.jobinfo import SlurmError

    on_slurm = False
    for name in nodes:
        node = config.node(name)
        if node.transport == "srun":
            on_slurm = True
            continue
        ndir = rundir.node_dir(node.workdir, run_id, config.node_rank(node))
        stop = nodeops.stop_cmd(node.python, run_id, config.node_rank(node), 0, None, ndir)
        transport = transport_of(name)
        with contextlib.suppress(Exception):
            if transport is not None:
                transport.run(stop, timeout=30)
            elif answered(run_id, name):  # its client's answer first: the stop comes after
                subprocess.run(openssh.argv(node, config.ssh, stop), timeout=30,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    if on_slurm and config.slurm is not None and config.slurm.job is not None:
        with contextlib.suppress(SlurmError):
            for step in client.steps(config.slurm.job):
                if step.name == step_name(run_id):
                    with contextlib.suppress(SlurmError):
                        client.cancel(step.step_id)
