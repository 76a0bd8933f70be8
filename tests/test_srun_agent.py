"""The srun transport's agent and link, spoken to directly on this machine: the same
program and frames that travel inside a Slurm step (tests/test_slurm_run.py runs them in
one), so the protocol's edges are tested in milliseconds."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from ddptui.config import NodeConfig
from ddptui.transport.base import Detached, PythonCommand, TransportError
from ddptui.transport.srun import frames
from ddptui.transport.srun.transport import SrunTransport


class HereTransport(SrunTransport):
    """The agent started here instead of inside a step: everything but ``srun`` itself."""

    def srun(self, *argv: str, name: str = "") -> list[str]:
        return list(argv)


@pytest.fixture
def t() -> HereTransport:
    tr = HereTransport(NodeConfig(name="n1", host="n1", python=sys.executable, transport="srun"),
                       "1")
    tr.connect(10)
    yield tr
    tr.close()


def test_run_gives_exit_code_and_both_streams(t: HereTransport) -> None:
    r = t.run("printf 'ü ✓'; printf err >&2; exit 4", timeout=10)
    assert (r.exit_code, r.stdout, r.stderr) == (4, "ü ✓", "err")


def test_commands_run_at_once_on_one_link(t: HereTransport) -> None:
    import threading

    results: list[str] = []
    threads = [threading.Thread(target=lambda i=i: results.append(
        t.run(f"sleep 0.3; echo {i}", timeout=10).stdout.strip())) for i in range(8)]
    t0 = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(results) == [str(i) for i in range(8)]
    assert time.monotonic() - t0 < 2.0  # concurrent, not 8 x 0.3 s in a row


def test_run_stream_feeds_stdin_and_hands_output(t: HereTransport) -> None:
    seen: list[tuple[bytes, bool]] = []
    r = t.run_stream("cat; echo done >&2", timeout=10, stdin=[b"a" * 3_000_000, b"", b"b"],
                     on_output=lambda data, err: seen.append((data, err)))
    assert r.exit_code == 0 and r.stdout == "a" * 3_000_000 + "b"
    assert b"".join(d for d, e in seen if not e) == b"a" * 3_000_000 + b"b"
    assert [d for d, e in seen if e] == [b"done\n"]


def test_timeout_kills_the_command(t: HereTransport, tmp_path: Path) -> None:
    with pytest.raises(TransportError, match="timed out"):
        t.run(f"echo $$ > {tmp_path}/pid; sleep 30", timeout=0.5)
    pid = int((tmp_path / "pid").read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{pid}")
    assert t.run("echo still", timeout=10).stdout == "still\n"  # the link lives on


def test_files_round_trip_binary(t: HereTransport, tmp_path: Path) -> None:
    data = bytes(range(256)) * 1000
    path = str(tmp_path / "f.bin")
    t.put_bytes(data, path, 0o600)
    assert Path(path).read_bytes() == data and (os.stat(path).st_mode & 0o777) == 0o600
    assert t.read_from(path, 10, 20) == data[10:30]
    assert t.read_from(path, len(data), 5) == b""
    with pytest.raises(FileNotFoundError):
        t.read_from(str(tmp_path / "none"), 0, 5)
    assert t.home() == os.path.expanduser("~")


def test_spawned_command_reads_sends_and_ends_on_close(t: HereTransport) -> None:
    s = t.spawn("while read -r line; do echo got $line; done")
    s.send(b"one\n")
    out = b""
    deadline = time.monotonic() + 5
    while b"got one" not in out and time.monotonic() < deadline:
        out += s.read(0.5) or b""
    assert out == b"got one\n"
    s.close()
    assert s.read(0.1) is None


def test_a_closed_link_fails_every_call_in_words(t: HereTransport) -> None:
    s = t.spawn("sleep 30")
    assert t._link is not None
    t._link.proc.kill()  # the step ended under it (scancel, a node failure)
    assert s.read(5) is None
    with pytest.raises(TransportError, match="step of Slurm job 1 on n1 has ended"):
        t.run("true", timeout=5)


def test_a_step_that_cannot_start_is_one_paragraph() -> None:
    # `sh` in python's place: the step starts and its program fails at once, as a node's
    # missing interpreter does
    tr = HereTransport(NodeConfig(name="n1", host="n1", python="sh", transport="srun"), "7")
    with pytest.raises(TransportError) as e:
        tr.connect(5)
    msg = str(e.value)
    assert "could not start ddptui's step on node n1 of Slurm job 7 with sh" in msg
    assert "srun said: " in msg and "\n" not in msg.split("srun said: ")[0]


def test_detached_program_lines() -> None:
    d = Detached("/w/it's", "launch.sh", ("a b",), "node.log")
    assert d.foreground() == "cd '/w/it'\"'\"'s' && exec sh launch.sh 'a b' >> node.log 2>&1 " \
                             "< /dev/null"
    assert d.background().endswith("&) && echo started")


def test_stdin_that_waits_on_the_output_is_fed_beside_the_reading(t: HereTransport) -> None:
    """A sync's stdin sends its manifest, then waits for the node's answer before sending
    files: the output must reach ``on_output`` while stdin is still being fed."""
    import threading

    heard = threading.Event()

    def stdin():
        yield b"question\n"
        assert heard.wait(5), "the answer was not handed over while stdin was open"
        yield b"files\n"

    r = t.run_stream("read -r q; echo answer; read -r f; echo got $f", timeout=10, stdin=stdin(),
                     on_output=lambda data, err: heard.set())
    assert r.stdout == "answer\ngot files\n"


def test_stdin_that_fails_ends_the_command_and_raises(t: HereTransport) -> None:
    def stdin():
        yield b"x"
        raise ValueError("a file changed while it was sent")

    with pytest.raises(ValueError, match="changed"):
        t.run_stream("cat > /dev/null; sleep 30", timeout=10, stdin=stdin())


# Node programs run inside the agent: a fork of its interpreter, no new one.

#: A node program that says whether it runs in the agent's process image (the agent's own
#: source is on its command line) or in an interpreter of its own.
_WHERE = ("import sys\n"
          "with open('/proc/self/cmdline', 'rb') as f:\n"
          "    inside = b'class ' + b'Agent' in f.read()\n"
          "print('inside' if inside else 'own', sys.argv[1:], __name__, flush=True)\n"
          "sys.stdout.write(sys.stdin.read())\n"
          "sys.exit(int(sys.argv[1]))\n")


def test_a_node_program_runs_in_the_agent_with_argv_stdin_and_exit_code(
        t: HereTransport) -> None:
    r = t.run_stream(PythonCommand(sys.executable, _WHERE, ("5", "a b")), timeout=10,
                     stdin=[b"fed\n"])
    assert (r.exit_code, r.stdout) == (5, "inside ['5', 'a b'] __main__\nfed\n")
    # another interpreter than the agent's: a command line as before, in a new interpreter
    other = PythonCommand("python3", _WHERE, ("0",))
    assert t.run_stream(other, timeout=10, stdin=[b""]).stdout.startswith("own ['0']")


def test_a_node_program_fails_as_python_would(t: HereTransport) -> None:
    raised = t.run(PythonCommand(sys.executable, "import sys\nprint('x')\nraise KeyError(7)",
                                 ()), timeout=10)
    assert (raised.exit_code, raised.stdout) == (1, "x\n")
    assert raised.stderr.startswith("Traceback") and "KeyError: 7" in raised.stderr
    said = t.run(PythonCommand(sys.executable, "import sys\nsys.exit('no such thing')", ()),
                 timeout=10)
    assert (said.exit_code, said.stderr) == (1, "no such thing\n")
    with pytest.raises(TransportError, match=r"cannot run a program there: .*syntax"):
        t.run(PythonCommand(sys.executable, "def (:", ()), timeout=10)
    assert t.run("echo still", timeout=10).stdout == "still\n"  # the agent lives on


def test_spawned_programs_are_spoken_to_apart(t: HereTransport) -> None:
    """The doorbell and the standby stop program of a node both wait on their stdin, beside
    the shell commands of the same link."""
    echo = "import sys\nfor line in sys.stdin:\n    print('got', line.strip(), flush=True)\n"
    a = t.spawn(PythonCommand(sys.executable, echo, ()))
    b = t.spawn(PythonCommand(sys.executable, echo, ()))
    c = t.spawn("cat")  # and a shell command's stdin beside them
    for s, word in ((a, b"a"), (b, b"b")):
        s.send(word + b"\n")
        out, deadline = b"", time.monotonic() + 5
        while b"\n" not in out and time.monotonic() < deadline:
            out += s.read(0.5) or b""
        assert out == b"got " + word + b"\n"
    a.close()
    assert a.read(0.1) is None
    b.send(b"still\n")
    out, deadline = b"", time.monotonic() + 5
    while b"\n" not in out and time.monotonic() < deadline:
        out += b.read(0.5) or b""
    assert out == b"got still\n"
    for s in (b, c):
        s.close()


def test_a_closed_stdin_ends_a_program_without_a_kill(t: HereTransport) -> None:
    """A forked program holds no other command's stdin open, or that one never ends."""
    s = t.spawn(PythonCommand(sys.executable, "import sys\nsys.stdin.read()\nsys.exit(3)", ()))
    t.spawn(PythonCommand(sys.executable, "import sys\nsys.stdin.read()", ()))  # left open
    s.channel.eof()
    msg, deadline = (0, b""), time.monotonic() + 5
    while msg is not None and msg[0] != frames.EXIT and time.monotonic() < deadline:
        msg = s.channel.get(0.5)
    assert msg == (frames.EXIT, b"3")  # its own code: it ended by itself, not by a kill


OLD_AGENT = Path.home() / ".pyenv/versions/3.6.15/bin/python3"


@pytest.mark.skipif(not OLD_AGENT.exists(), reason="no Python 3.6 here")
def test_an_agent_of_python_3_6_runs_programs_and_moves_files(tmp_path: Path) -> None:
    tr = HereTransport(NodeConfig(name="n1", host="n1", python=str(OLD_AGENT),
                                  transport="srun"), "1")
    tr.connect(10)
    try:
        r = tr.run(PythonCommand(str(OLD_AGENT), _WHERE, ("2",)), timeout=10)
        assert (r.exit_code, r.stdout) == (2, "inside ['2'] __main__\n")
        path = str(tmp_path / "f")
        tr.put_bytes(b"x" * 5, path, 0o640)
        assert tr.read_from(path, 1, 3) == b"xxx" and os.stat(path).st_mode & 0o777 == 0o640
        with pytest.raises(OSError, match="cannot write"):
            tr.put_bytes(b"", str(tmp_path / "no" / "f"))
        assert tr.home() == os.environ["HOME"]
    finally:
        tr.close()
