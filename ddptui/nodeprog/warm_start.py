"""A warm torchrun's start (``ddptui.launch.warm`` says why): its step's one task splits in two
before anything of torch is imported. The child imports torch, then becomes torchrun as
:mod:`ddptui.nodeprog.torchrun_tee` runs it. The parent plays launch.sh: it waits for the spec
ddptui writes with the node's files and takes it, writes the process group and the port
lock's pid, tells the child, waits for it, and writes its exit code. So the files a stop, a
follower and ``attach`` read are launch.sh's, written when launch.sh writes them, and the
exit code only once torchrun is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import tempfile
import time

#: The first argument that makes the tee a warm torchrun; the second is the spec's path.
WARM = "--ddptui-warm"
#: The spec renamed with this suffix by the warm torchrun that takes it (exactly one of it and
#: ddptui giving the spec up wins the rename) ...
TAKEN = ".taken"
#: ... or by ddptui, which gave up waiting and starts launch.sh instead.
VOID = ".void"
#: How often and how long the parent looks for the spec.
WARM_POLL_S = 0.01
WARM_WAIT_S = 120.0
#: launch.sh's exit for a torchrun never released (``torchrun_tee.EXIT_NOT_RELEASED``).
NOT_RELEASED = 96


def warm_take(spec_path: str, child: int) -> dict[str, str] | None:
    """The spec, once ddptui wrote it; None if it was given up, never came, or the child
    ended meanwhile."""
    deadline = time.monotonic() + WARM_WAIT_S
    while time.monotonic() < deadline and not os.path.exists(spec_path + VOID):
        try:
            os.rename(spec_path, spec_path + TAKEN)
        except OSError:  # not written yet
            if os.waitpid(child, os.WNOHANG)[0]:
                return None
            time.sleep(WARM_POLL_S)
            continue
        with open(spec_path + TAKEN, encoding="utf-8") as f:
            spec = json.load(f)
        return {k: spec[k] for k in ("pgid", "lock_pid", "exit_code")}
    return None


def warm_split(spec_path: str) -> tuple[str, int]:
    """In the child, returns the spec's path (``~`` expanded as the node's $HOME, as the agent
    does) and the end of the pipe it is told on; the parent never returns."""
    with contextlib.suppress(OSError):
        os.setsid()  # the run's own process group, as launch.sh under ``setsid``
    spec_path = os.path.expanduser(spec_path)
    told, tell = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(tell)
        with tempfile.TemporaryFile() as kept:  # its output until the log is known, read
            fcntl.fcntl(kept.fileno(), fcntl.F_SETFL, os.O_APPEND)  # back by offset
            os.dup2(kept.fileno(), 1)
            os.dup2(kept.fileno(), 2)
        return spec_path, told
    os.close(told)
    code = NOT_RELEASED
    try:
        spec = warm_take(spec_path, child)
        if spec is not None:
            lock_pid = spec["lock_pid"]
            if lock_pid and os.path.isdir(os.path.dirname(lock_pid)):
                with open(lock_pid, "w") as f:
                    f.write(f"{os.getpid()}\n")  # the lock lives as long as this process
            with open(spec["pgid"], "w") as f:
                f.write(f"{os.getpgid(0)}\n")
            with contextlib.suppress(OSError):  # a child gone already is waited for below
                os.write(tell, b"1")
        os.close(tell)
        _, status = os.waitpid(child, 0)
        with contextlib.suppress(OSError):  # the child died before it read the spec: no
            os.remove(spec_path + TAKEN)  # copy of the secret env is left behind
        code = (128 + os.WTERMSIG(status) if os.WIFSIGNALED(status)
                else os.WEXITSTATUS(status))
        if spec is not None and code != NOT_RELEASED:  # as launch.sh: nothing ran, no code
            with open(spec["exit_code"] + ".tmp", "w") as f:
                f.write(f"{code}\n")
            os.rename(spec["exit_code"] + ".tmp", spec["exit_code"])
    finally:
        os._exit(code)


def warm_enter(spec_path: str, told: int) -> str:
    """In the child, torch imported: once the parent took the spec, this process gets the
    node dir, its log (what it printed so far first), the ranks' environment and project,
    torchrun's arguments and the hold; the node dir is returned. Exits if nothing was taken."""
    if os.read(told, 1) != b"1":
        sys.exit(NOT_RELEASED)
    os.close(told)
    with open(spec_path + TAKEN, encoding="utf-8") as f:
        spec = json.load(f)
    os.remove(spec_path + TAKEN)  # it holds the secret env (launch.sh keeps it, 0700)
    folder = os.path.dirname(spec_path)
    os.chdir(folder)
    log = os.open(spec["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    at = 0
    while True:
        chunk = os.pread(1, 1 << 16, at)
        if not chunk:
            break
        os.write(log, chunk)
        at += len(chunk)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.environ.update({str(k): str(v) for k, v in spec["env"].items()})
    if spec.get("project"):
        path = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = spec["project"] + (f":{path}" if path else "")
        os.environ["DDPTUI_CWD"] = spec["project"]
    os.environ["DDPTUI_HOLD"], os.environ["DDPTUI_HOLD_S"] = spec["hold"], str(spec["hold_s"])
    sys.argv[:] = [os.path.join(folder, "torchrun.py"), *spec["argv"]]
    return folder
