"""The node's half of a ``transport: srun`` connection (:mod:`ddptui.transport.srun.agent`):
runs many commands in one long-lived job step, speaking :mod:`ddptui.transport.srun.frames`
on stdin and stdout, and ends, taking its commands with it, when its stdin closes.

A command is a shell line (``sh -c``) or a node program (Python source and its arguments).
A node program runs in a child forked from this agent, not in a new interpreter: the agent
is the interpreter the program would have been started with, already started, and each
program's source is compiled once per agent. A launch runs half a dozen of them per node and
a follower one per read; each new interpreter cost 30-100 ms of the node's CPU, spent while
torchrun imports torch beside it.

Run by whatever ``python3`` the node has, which may be as old as 3.6: so no deferred
annotations here (``from __future__ import annotations`` is 3.7's); they are quoted instead.
"""

import builtins
import contextlib
import json
import os
import signal
import struct
import subprocess
import sys
import threading
import warnings

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import CodeType
    from typing import BinaryIO

H = struct.Struct("!IBI")


class Forked:
    """A node program running in a child of the agent, as :class:`subprocess.Popen` is seen
    by the rest of the agent: its pid (its process group's too), its stdin, its end."""

    def __init__(self, pid: int, stdin: "BinaryIO | None") -> None:
        self.pid, self.stdin = pid, stdin

    def wait(self) -> int:
        """The exit code, or minus the signal that ended it (as ``Popen.wait``)."""
        _, status = os.waitpid(self.pid, 0)
        if os.WIFSIGNALED(status):
            return -os.WTERMSIG(status)
        return os.WEXITSTATUS(status)


def run_program(code: "CodeType", argv: "list[str]", enc: str, errors: str) -> None:
    """In the forked child, fds 0-2 already its own: run ``code`` as ``python -c`` runs a
    program, and leave with its exit code (no interpreter teardown: the agent's)."""
    # The other threads of the agent are gone here, and one may have held the lock of the
    # agent's own stdout when the fork came: the program gets streams of its own.
    sys.stdin = open(0, encoding=enc, errors=errors, closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding=enc, errors=errors, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding=enc, errors="backslashreplace",  # noqa: SIM115
                      closefd=False)
    sys.argv = ["-c", *argv]
    main = type(sys)("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    code_ = 0
    try:
        exec(code, main.__dict__)
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code_ = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code_ = 1
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code_ = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code_ & 0xFF)


class Agent:
    def __init__(self, inp: "BinaryIO", out: "BinaryIO") -> None:
        self.inp, self.out = inp, out
        self.lock = threading.Lock()
        self.procs: dict[int, subprocess.Popen[bytes] | Forked] = {}
        self.codes: dict[str, CodeType] = {}
        self.enc = getattr(sys.stdout, "encoding", None) or "utf-8"
        self.errors = getattr(sys.stdout, "errors", None) or "strict"

    def send(self, i: int, k: int, data: bytes = b"") -> None:
        with self.lock:
            self.out.write(H.pack(i, k, len(data)) + data)
            self.out.flush()

    def pump(self, i: int, fd: int, k: int) -> None:
        while True:
            try:
                b = os.read(fd, 65536)
            except OSError:
                b = b""
            if not b:
                os.close(fd)
                return
            self.send(i, k, b)

    def watch(self, i: int, p: "subprocess.Popen[bytes] | Forked",
              threads: "list[threading.Thread]") -> None:
        for t in threads:
            t.join()
        code = p.wait()
        self.procs.pop(i, None)
        self.send(i, 13, str(code if code >= 0 else 128 - code).encode())

    def follow(self, i: int, p: "subprocess.Popen[bytes] | Forked", out: int, err: int) -> None:
        self.procs[i] = p
        ts = [threading.Thread(target=self.pump, args=(i, fd, k), daemon=True)
              for fd, k in ((out, 11), (err, 12))]
        for t in ts:
            t.start()
        threading.Thread(target=self.watch, args=(i, p, ts), daemon=True).start()

    def start(self, i: int, spec: "dict[str, object]") -> None:
        try:
            p = subprocess.Popen(["sh", "-c", str(spec["cmd"])], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, start_new_session=True,
                                 stdin=subprocess.PIPE if spec["stdin"] else subprocess.DEVNULL)
        except OSError as e:
            self.send(i, 14, str(e).encode())
            return
        assert p.stdout is not None and p.stderr is not None
        self.follow(i, p, os.dup(p.stdout.fileno()), os.dup(p.stderr.fileno()))
        p.stdout.close()
        p.stderr.close()

    def fork(self, i: int, spec: "dict[str, object]") -> None:
        """A node program (``src``, ``argv``) in a forked child, with pipes for its
        streams as a command has. Only this thread makes pipes and children, and a child
        closes every descriptor but its own three: no command holds another's stdin open."""
        src, argv = str(spec["src"]), spec["argv"]
        assert isinstance(argv, list)
        try:
            code = self.codes.get(src) or compile(src, "<ddptui>", "exec")
            self.codes[src] = code
            fds = [os.pipe() if spec["stdin"] else (os.open(os.devnull, os.O_RDONLY), -1),
                   os.pipe(), os.pipe()]
        except (OSError, SyntaxError, ValueError) as e:
            self.send(i, 14, str(e).encode())
            return
        (r_in, w_in), (r_out, w_out), (r_err, w_err) = fds
        try:
            with warnings.catch_warnings():  # 3.12's, of a fork beside threads: the child
                warnings.simplefilter("ignore", DeprecationWarning)  # touches nothing of theirs
                pid = os.fork()
        except OSError as e:
            for fd in (r_in, w_in, r_out, w_out, r_err, w_err):
                if fd >= 0:
                    os.close(fd)
            self.send(i, 14, str(e).encode())
            return
        if pid == 0:  # the child
            try:
                os.setsid()
                for fd, to in ((r_in, 0), (w_out, 1), (w_err, 2)):
                    os.dup2(fd, to)
                close_others()
                run_program(code, [str(a) for a in argv], self.enc, self.errors)
            finally:
                os._exit(127)
        for fd in (r_in, w_out, w_err):
            os.close(fd)
        self.follow(i, Forked(pid, os.fdopen(w_in, "wb") if w_in >= 0 else None), r_out, r_err)

    def read(self, i: int, spec: "dict[str, object]") -> None:
        """Up to ``most`` bytes of ``path`` from ``offset``, answered as a command's output
        and exit (``absent`` when there is no such file). In a thread, not a fork: a follower
        reads its node's log several times a second, and a fork with its threads for each
        read, beside the ranks' own start, made every line wait for the node's CPU."""
        path, most = str(spec["path"]), int(str(spec["most"]))
        try:
            with open(path, "rb") as f:
                f.seek(int(str(spec["offset"])))
                while most > 0:
                    data = f.read(min(most, 1 << 16))
                    if not data:
                        break
                    self.send(i, 11, data)
                    most -= len(data)
        except FileNotFoundError:
            self.send(i, 13, str(spec["absent"]).encode())
            return
        except OSError as e:
            self.send(i, 12, f"{e.strerror}: {path}\n".encode())
            self.send(i, 13, b"1")
            return
        self.send(i, 13, b"0")

    def readn(self, n: int) -> "bytes | None":
        buf = b""
        while len(buf) < n:
            b = self.inp.read(n - len(buf))
            if not b:
                return None
            buf += b
        return buf

    def serve(self) -> None:
        self.send(0, 10, os.environ.get("HOME", "").encode())  # ready; ``home()`` asks no more
        while True:
            h = self.readn(H.size)
            if h is None:
                break
            i, k, n = H.unpack(h)
            data = self.readn(n) if n else b""
            if data is None:
                break
            p = self.procs.get(i)
            if k in (1, 5, 6):
                spec = json.loads(data.decode())
                if k == 6:
                    threading.Thread(target=self.read, args=(i, spec), daemon=True).start()
                else:
                    (self.start if k == 1 else self.fork)(i, spec)
            elif p is not None and p.stdin is not None and k in (2, 3):
                try:
                    if k == 2:
                        p.stdin.write(data)
                        p.stdin.flush()
                    else:
                        p.stdin.close()
                except (OSError, ValueError):
                    pass
            elif p is not None and k == 4:
                with contextlib.suppress(OSError):
                    os.killpg(p.pid, signal.SIGKILL)
        for p in list(self.procs.values()):
            with contextlib.suppress(OSError):
                os.killpg(p.pid, signal.SIGTERM)


def close_others() -> None:
    """Every descriptor above 2 closed (the child's): those open, where Linux lists them."""
    try:
        fds = [int(f) for f in os.listdir("/proc/self/fd")]
    except OSError:
        os.closerange(3, 4096)
        return
    for fd in fds:
        if fd > 2:
            with contextlib.suppress(OSError):
                os.close(fd)


if __name__ == "__main__":
    Agent(sys.stdin.buffer, sys.stdout.buffer).serve()
