"""torchrun as ddptui starts it on a node: torchrun's own ``main``, with a faster ``--tee``
and its rendezvous paced for the job (:mod:`ddptui.nodeprog.rendezvous_pace`).

Uploaded into the node dir and run by the node's Python in place of ``python -m
torch.distributed.run``, with the same arguments. Its main change is the function torchrun's
``TailLog`` threads run to copy each rank's log file to the agent's stdout/stderr (what ends
up in ``node.log``). torchrun's own copies a line at a time, with a ``readline`` that returns
a line the rank has not finished writing: a rank with unbuffered output (``print`` writes the
text and its newline apart) then gets a line cut in two, and the other ranks' lines written
in between end up glued to its first half. Its speed (a Python call per line) was also the
ceiling of live log streaming (``bench/stream.py``). This one copies whole lines only, a block
of them at a time (one ``write`` of the prefixed block, as many lines as are complete), and
holds a partial line until its newline arrives or the rank's file is finished.

A carriage return (CR) on its own (a progress bar) ends a *bar state*, which a terminal writes
over: copied as ``header + CR + state`` on a line of its own (``ddptui.bars``); how a rank's
output is cut into lines and states is :mod:`ddptui.nodeprog.bar_states`. A state still being
written is copied once the file stays quiet for a look.

When the torch it finds has no ``tail_logfile`` of the shape this replaces, torchrun runs
unchanged. Runs on the node, under whatever Python the node has: stdlib only (torch itself,
imported once the tee is in place), nothing of ddptui.

Started early (``DDPTUI_HOLD`` names a file), it imports torch and then holds until the
ddptui renames that file to :data:`GO`: torch's import (1-2 s of CPU, far more from a
cold network filesystem) then overlaps ddptui's probe, preflight and code sync
instead of following them. It gives up after ``DDPTUI_HOLD_S`` seconds by renaming the file
to :data:`EXPIRED` (so ddptui, whose rename then fails, knows to start it again), and
at once if the file is gone (the launch was undone). A project is entered only once released:
the synced tree may not exist before then.
"""

from __future__ import annotations

import inspect
import json
import os
import runpy
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from ddptui.nodeprog.bar_states import cut, ending, showing
from ddptui.nodeprog.rendezvous_pace import install_names, install_pace
from ddptui.nodeprog.warm_start import NOT_RELEASED, WARM, warm_enter, warm_split

#: Characters read from a rank's file at a time.
CHUNK = 1 << 18
#: A line longer than this without a newline is copied as it is (memory stays bounded).
LONGEST = 1 << 22
#: The longest wait between two looks at a rank's file. torchrun asks for 0.1 s, which is up
#: to 0.1 s more between a rank's line and the screen; a look at a file with nothing new is
#: one ``read`` that returns nothing.
POLL_S = 0.02
#: The parameters of torch's ``tail_logfile`` this stands in for (torch 2.x); the last is
#: newer than the rest.
SHAPE = ("header", "file", "dst", "finished", "interval_sec", "log_line_filter")

#: launch.sh's exit code when the project directory is gone: no torchrun was started.
EXIT_NO_PROJECT = 98
#: The exit code of a hold that ended without a release: no torchrun was started.
EXIT_NOT_RELEASED = NOT_RELEASED
#: Where the hold file is renamed: by ddptui to release it, by the hold to give up.
GO = "go"
EXPIRED = "expired"
#: Seconds between two looks at the hold file.
HOLD_POLL_S = 0.01
#: How long a hold waits for its release: a dead ddptui's leaves no process for long,
#: and a slower launch (a big first sync) costs one more start (``sequence.release_all``).
HOLD_S = 300.0

#: Beside this program, where ddptui writes what it chose for a node whose own name leads
#: nowhere (``ddptui.diagnose.preflight.route``) before the release, or with the node's other
#: files: ``{"argv": [torchrun flags], "env": {name: value}}``, applied before torchrun starts.
ROUTE = "route.json"
#: The exit code when that file cannot be read: torchrun would bind where no node reaches.
EXIT_BAD_ROUTE = 95

#: TailLog's default filter (keep every line): a line filter that is this one is skipped.
_keep_all: Any = None


def tail_logfile(header: str, file: str, dst: TextIO, finished: Any, interval_sec: float,
                 log_line_filter: Callable[[str], bool] | None = None) -> None:
    """Copy ``file`` to ``dst`` with ``header`` before every line, until ``finished`` is set
    and the file is read to its end. Opened as torchrun opens it (undecodable bytes
    replaced) but with its newlines as written, so that a bar state stays apart (see above)."""
    interval_sec = min(interval_sec, POLL_S)
    while not os.path.exists(file):
        if finished.is_set():
            return
        time.sleep(interval_sec)
    keep = None if log_line_filter is _keep_all else log_line_filter
    rest, bar, shown = "", False, ""  # held text; it follows a bare CR; what of it was shown
    with open(file, errors="replace", newline="") as fp:
        while True:
            data = fp.read(CHUNK)
            if data:
                block, rest, ended, bar = cut(rest + data, bar)
                if ended and shown and block.startswith(shown):  # shown when held
                    block = block[len(shown):]
                if len(rest) > LONGEST:  # memory stays bounded: copied as it is
                    block, rest, ended = block + ("\r" if bar else "") + rest + "\n", "", True
                shown = "" if ended else shown
                put(header, block, dst, keep)
            elif finished.is_set():
                put(header, ending(rest, bar), dst, keep)  # the rank ended mid-line
                return
            else:
                now = showing(rest, bar)
                if now and now != shown:
                    put(header, now, dst, keep)  # the bar as it stands now
                    shown = now
                time.sleep(interval_sec)


def put(header: str, block: str, dst: TextIO, keep: Callable[[str], bool] | None) -> None:
    """One write of ``block`` (whole lines, each ending in a newline), every line prefixed."""
    if keep is not None:
        block = "".join(line + "\n" for line in block.split("\n")[:-1] if keep(line + "\n"))
    if not block:
        return
    dst.write(header + block[:-1].replace("\n", "\n" + header) + "\n")
    dst.flush()


def install() -> bool:
    """Put :func:`tail_logfile` in place of torch's, if torch's has the shape it replaces."""
    global _keep_all
    try:
        from torch.distributed.elastic.multiprocessing import tail_log
        names = tuple(inspect.signature(tail_log.tail_logfile).parameters)
        default = inspect.signature(tail_log.TailLog.__init__).parameters.get("log_line_filter")
    except Exception:  # no torch, or another layout: torchrun as it is
        return False
    if names not in (SHAPE, SHAPE[:-1]):
        return False
    _keep_all = default.default if default is not None else None
    tail_log.tail_logfile = tail_logfile  # looked up by name each time TailLog starts
    return True


#: The agent's line for a rank that ended with exit code 0, which torchrun does not log (it
#: logs failures only): without it, a rank that left early (its data ran out first) while the
#: others trained on leaves no trace but its silence. Read by ``ddptui.diagnose.facts``.
CLEAN_EXIT = "ddptui: rank {rank} (local_rank {local_rank}, pid {pid}) exited with code 0"
#: What torchrun's poll of its ranks calls, for each rank, to see whether it ended.
_POLL_HOOK = "_capture_process_failures"


def install_exits() -> bool:
    """Have torchrun's poll of its ranks say when one ends with exit code 0, if its poll has
    the shape this wraps (torch 2.x's ``SubprocessContext``); torchrun is otherwise as it
    is. One line per rank per attempt: a run that ends well prints one for each rank."""
    try:
        from torch.distributed.elastic.multiprocessing.api import SubprocessContext
        capture = getattr(SubprocessContext, _POLL_HOOK)
        if tuple(inspect.signature(capture).parameters) != ("self", "done_local_ranks"):
            return False
    except Exception:  # no torch, or another layout: torchrun as it is
        return False

    def capture_and_say(self: Any, done_local_ranks: set[int]) -> None:
        before = set(done_local_ranks)
        capture(self, done_local_ranks)
        try:
            for local_rank in sorted(done_local_ranks - before):
                proc = self.subprocess_handlers[local_rank].proc
                if proc.returncode == 0:
                    rank = self.envs[local_rank].get("RANK", "?")
                    print(CLEAN_EXIT.format(rank=rank, local_rank=local_rank, pid=proc.pid),
                          file=sys.stderr, flush=True)
        except Exception:  # a word less in the log, never a torchrun that fails for it
            return

    setattr(SubprocessContext, _POLL_HOOK, capture_and_say)
    return True


def hold(path: str, seconds: float) -> bool:
    """Wait for ddptui's release: True once ``path`` was renamed to :data:`GO`,
    False when it vanished or the wait ran out (then it is renamed to :data:`EXPIRED`)."""
    folder = os.path.dirname(path)
    go, expired = os.path.join(folder, GO), os.path.join(folder, EXPIRED)
    deadline = time.monotonic() + seconds
    while True:
        if os.path.exists(go):
            return True
        if not os.path.exists(path):  # renamed to go meanwhile, or the launch was undone
            return os.path.exists(go)
        if time.monotonic() > deadline:
            try:
                os.rename(path, expired)
            except OSError:  # ddptui renamed it first: released after all
                return os.path.exists(go)
            return False
        time.sleep(HOLD_POLL_S)


def apply_route(folder: str) -> None:
    """Add the flags and the variables ddptui chose (see :data:`ROUTE`), if it chose any."""
    path = os.path.join(folder, ROUTE)
    try:
        with open(path, encoding="utf-8") as f:
            chosen = json.load(f)
        argv, env = list(chosen["argv"]), dict(chosen["env"])
    except FileNotFoundError:
        return
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"ddptui: torchrun not started: {path} cannot be read ({e})", file=sys.stderr)
        sys.exit(EXIT_BAD_ROUTE)
    os.environ.update({str(k): str(v) for k, v in env.items()})
    sys.argv[1:1] = [str(a) for a in argv]


def warm_up() -> None:
    """What ``torch.distributed.run`` imports, imported now (the module itself is dropped
    again so that runpy runs it fresh as ``__main__``, as ``-m`` would)."""
    try:
        import torch.distributed.run  # noqa: F401
    except Exception:  # torchrun's own run reports it
        return
    sys.modules.pop("torch.distributed.run", None)


def main() -> None:
    """torchrun run as ``python -m torch.distributed.run`` runs it: its module as
    ``__main__``, whose logger torch leaves unformatted (the agent lines ddptui reads)."""
    told = warm_split(sys.argv[2]) if sys.argv[1:2] == [WARM] else None
    install()
    install_exits()
    install_names()
    if told is not None:  # run as ``python -c``: no file of its own
        warm_up()  # what the wait for the spec overlaps
        folder = warm_enter(*told)
    else:
        folder = os.path.dirname(os.path.abspath(__file__))
    held = os.environ.pop("DDPTUI_HOLD", None)
    seconds = float(os.environ.pop("DDPTUI_HOLD_S", HOLD_S))
    cwd = os.environ.pop("DDPTUI_CWD", None)
    if held:
        if told is None:  # warm already
            warm_up()
        if not hold(held, seconds):
            print("ddptui: torchrun not started: no release came from ddptui (the launch was "
                  f"undone, or took over {seconds:g} s and starts torchrun again)",
                  file=sys.stderr)
            sys.exit(EXIT_NOT_RELEASED)
    apply_route(folder)
    if cwd:
        try:
            os.chdir(cwd)
        except OSError as e:
            print(f"ddptui: cannot enter the project directory {cwd}: {e.strerror}",
                  file=sys.stderr)
            sys.exit(EXIT_NO_PROJECT)
        os.environ["PWD"] = cwd
    install_pace(sys.argv[1:])  # torchrun's arguments as they are now, the route's included
    runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
