"""The sampler that runs on each node while a run is up (``ddptui/nodeprog/sampler.sh``).

It needs nothing installed: POSIX ``sh`` reads ``/proc`` once a second with builtins (one
``sleep`` a second is its only fork), and when ``nvidia-smi`` is on the node's PATH, one
``nvidia-smi --query-gpu ... -l 1`` streams beside it (polling it each second would pay for
NVML's start each time). Every line it prints carries a tag (see :mod:`ddptui.telemetry.parse`):

``@epoch E U``  the node's clock and uptime once, so that samples carry the node's time
``@gpu FIELDS`` the GPU query's fields (or ``@gpu-none``); ``G row`` one GPU row
``T U``         a /proc block begins (uptime U); ``C`` /proc/stat's cpu line, ``L`` loadavg,
                ``M`` two meminfo lines, ``N`` one /proc/net/dev line; ``E`` the block ends
``P@``/``P+ row``/``P- row``/``P.``  compute processes (``+``: carries the run's marker)
``@next``       the output goes on in the other segment file; ``@bye WHY`` it exits

Its output goes through one writer loop into two segment files that it alternates between
every ``SEGMENT_LINES`` lines, so a run of weeks never fills the node's disk.

It stops by itself when the run's process group is gone, or when ddptui has not touched its
heartbeat file for ``beat_timeout`` seconds (a closed laptop, a killed ddptui): nothing
is left behind on a node that ddptui can no longer reach.
"""

from __future__ import annotations

import shlex
from typing import NamedTuple

from ddptui import nodeprog


class SamplerFiles(NamedTuple):
    """The sampler's file names in the node dir (``ddptui.store.rundir`` spells them)."""

    script: str
    pid: str
    beat: str
    out: str  # with ``{}`` for the segment: 0 or 1


#: What is asked of nvidia-smi, in this order (``uuid`` joins the compute processes).
GPU_FIELDS = ("index", "uuid", "name", "utilization.gpu", "memory.used", "memory.total",
              "power.draw", "power.limit", "temperature.gpu", "clocks.sm")
APP_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")
#: Lines per segment file: about 10 minutes of a node with 8 GPUs.
SEGMENT_LINES = 20_000
#: List the compute processes every this many samples.
APPS_EVERY = 5
#: Seconds without a heartbeat after which the sampler exits by itself.
BEAT_TIMEOUT_S = 60
#: How often ddptui touches the heartbeat file.
BEAT_EVERY_S = 5.0

#: The sampler, with a placeholder for each name it writes (``ddptui/nodeprog/sampler.sh``).
SCRIPT = nodeprog.shell("sampler")


def script(files: SamplerFiles) -> str:
    """The sampler's source, with every name it writes spelled by the caller."""
    pre, suf = files.out.split("{}")
    return (SCRIPT.replace("__PID__", files.pid).replace("__BEAT__", files.beat)
            .replace("__OUT_PRE__", pre).replace("__OUT_SUF__", suf)
            .replace("__OUT0__", files.out.format(0)).replace("__OUT1__", files.out.format(1))
            .replace("__GPU_FIELDS__", shlex.quote(",".join(GPU_FIELDS)))
            .replace("__APP_FIELDS__", ",".join(APP_FIELDS))
            .replace("__APPS_EVERY__", str(APPS_EVERY)))


#: Seconds a start waits for the new sampler to write its pid file, and a stop for the ended
#: sampler's processes to be gone: both take milliseconds on a quiet node.
SETTLE_S = 10


def start_cmd(node_dir: str, files: SamplerFiles, pgid: int | None, run_id: str, *,
              path: str | None = None, beat_timeout: int = BEAT_TIMEOUT_S,
              segment_lines: int = SEGMENT_LINES) -> str:
    """Start the sampler detached, as ``launch.sh`` is (own session, no terminal, no stdin),
    after ending one a previous ddptui left; ``path`` is the hosts file's PATH for the
    node, so that nvidia-smi is found where the job's own commands are.

    It answers "started" only once the new sampler has written its pid file: a stop that
    comes right after must find whom to end, or the sampler would outlive its run."""
    d = shlex.quote(node_dir)
    pid = shlex.quote(files.pid)
    args = " ".join(shlex.quote(a) for a in (str(pgid or 0), str(beat_timeout),
                                             str(segment_lines), f"DDPTUI_RUN={run_id}/",
                                             path or ""))
    outs = " ".join(shlex.quote(files.out.format(i)) for i in (0, 1))
    # the old one gone and its output removed before this returns: a reader that starts
    # at once must not read a previous sampler's lines as new
    return (f"cd {d} && {{ {_kill(files.pid)}; rm -f {outs}; }}; "
            f"(setsid sh {shlex.quote(files.script)} {args} > /dev/null 2>&1 < /dev/null &) "
            f"&& {_within(f'[ -s {pid} ]')} && echo started")


def _within(condition: str) -> str:
    """Shell that waits at most ``SETTLE_S`` seconds for ``condition`` to hold; its status
    says whether it did."""
    return (f'{{ ok=; i=0; while [ $i -le {SETTLE_S * 20} ]; do if {condition}; then ok=1; '
            f'break; fi; sleep 0.05; i=$((i + 1)); done; [ -n "$ok" ]; }}')


#: Whether process group ``$p`` still has a member that is not a zombie (one read of each
#: process's stat: the fields after the name are state, ppid, pgrp).
_GROUP_LIVES = ('{ live=; for s in /proc/[0-9]*/stat; do read -r l 2>/dev/null < "$s" || '
                'continue; set -- ${l##*) }; [ "$1" != Z ] && [ "$3" = "$p" ] && { live=1; '
                'break; }; done; [ -n "$live" ]; }')


def _kill(pid_file: str) -> str:
    """End the sampler's whole process group (it leads its own session) with SIGKILL, and
    wait, bounded, until no process of it is left, so that a run reported stopped leaves
    nothing behind.

    It has nothing to save (its reader keeps only whole lines), and its subshells would take
    a SIGTERM only once the command they wait on (a ``sleep 1``, a ``read``) returns: waiting
    for them added 0.3 s to the end of every run and spared nothing. Its zombies do not count
    as left: where init is slow to reap orphans, ``kill -0`` goes on finding them for a
    second or more."""
    pid = shlex.quote(pid_file)
    return (f'p=$(cat {pid} 2>/dev/null); case "$p" in ""|*[!0-9]*) ;; '
            f'*) kill -KILL -"$p" 2>/dev/null; {_within(f"! {_GROUP_LIVES}")} ;; esac; '
            f'rm -f {pid}')


def stop_cmd(node_dir: str, files: SamplerFiles) -> str:
    d = shlex.quote(node_dir)
    return f"cd {d} 2>/dev/null || exit 0; {_kill(files.pid)}; echo stopped"
