"""The node programs (ddptui/nodeprog/), here: what each may import, the text a node gets, and
each one's functions called in this process on real processes, files and sockets, so that
coverage and a failing assert reach them (the cluster tests run the same text on nodes)."""

from __future__ import annotations

import ast
import importlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddptui import nodeprog
from ddptui.nodeprog import (
    clean_node,
    doorbell,
    dump_stacks,
    find_torch,
    port_lock,
    preflight,
    procs,
    remains,
    srun_agent,
    stop_run,
    sync_tree,
)
from ddptui.transport.srun import frames

FOLDER = Path(nodeprog.__file__).parent
PROGRAMS = sorted(p.stem for p in FOLDER.glob("*.py") if p.stem != "__init__")
#: Run by whatever ``python3`` a node has, or asked which one it is (the others run under the
#: torch interpreter, 3.8 or newer, and are kept to 3.7).
OLDEST = {"srun_agent": (3, 6), "node_files": (3, 6), "find_torch": (3, 6)}
#: Imported, inside a function, by the programs whose job is to ask torch.
TORCH_USERS = {"preflight", "rendezvous_pace", "torchrun_tee"}


def _imports(tree: ast.AST) -> Iterator[tuple[str, bool]]:
    """Each module imported, and whether at the top level of the program."""
    top = {id(n) for n in ast.iter_child_nodes(tree)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((a.name, id(node) in top) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield node.module or "", id(node) in top


@pytest.mark.parametrize("name", PROGRAMS)
def test_a_node_program_imports_only_the_standard_library(name: str) -> None:
    tree = ast.parse((FOLDER / f"{name}.py").read_text())
    wrong = []
    for mod, at_top in _imports(tree):
        root = mod.split(".")[0]
        if root in sys.stdlib_module_names or root == "__future__":
            continue
        if mod.startswith("ddptui.nodeprog.") and mod.rsplit(".", 1)[1] in PROGRAMS:
            continue  # put in place by nodeprog.source
        if root == "torch" and name in TORCH_USERS and not at_top:
            continue
        wrong.append(mod)
    assert wrong == []


@pytest.mark.parametrize("name", PROGRAMS)
def test_the_text_a_node_gets_is_one_program_of_its_python(name: str) -> None:
    text = nodeprog.source(importlib.import_module(f"ddptui.nodeprog.{name}"))
    assert text.isascii()  # an old node's C locale decodes argv as ASCII
    tree = ast.parse(text, feature_version=OLDEST.get(name, (3, 7)))
    assert [m for m, _ in _imports(tree) if m.startswith("ddptui")] == []
    if name in OLDEST:  # deferred annotations came with 3.7
        assert "__future__" not in [m for m, _ in _imports(tree)]
    # no ddptui on the path (-I), no site-packages (-S): it compiles, and defines what it uses
    res = subprocess.run([sys.executable, "-I", "-S", "-c",
                          f"import ast; compile({text!r}, 'node', 'exec')"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr


def _old_pythons() -> list[tuple[tuple[int, int], str]]:
    """Interpreters older than this one that this machine has (pyenv's), by version."""
    found = []
    for exe in sorted(Path.home().glob(".pyenv/versions/3.*/bin/python3")):
        major, minor = (int(x) for x in exe.parent.parent.name.split(".")[:2])
        if (major, minor) < (3, 8):
            found.append(((major, minor), str(exe)))
    return found


@pytest.mark.skipif(not _old_pythons(), reason="no interpreter older than 3.8 here")
@pytest.mark.parametrize("name", PROGRAMS)
def test_each_program_compiles_under_the_oldest_python_it_promises(name: str) -> None:
    text = nodeprog.source(importlib.import_module(f"ddptui.nodeprog.{name}"))
    for version, exe in _old_pythons():
        if version >= OLDEST.get(name, (3, 7)):
            res = subprocess.run([exe, "-S", "-c", f"compile({text!r}, 'node', 'exec')"],
                                 capture_output=True, text=True, timeout=30)
            assert res.returncode == 0, f"{exe}: {res.stderr}"


def test_a_shared_part_is_put_in_place_of_its_import() -> None:
    text = nodeprog.source(stop_run)
    assert "from ddptui" not in text and "def procs()" in text
    assert text.count("from __future__ import annotations") == 1
    assert text.index("from __future__") < text.index("def procs()")


def test_the_sampler_is_a_shell_program_sh_reads() -> None:
    res = subprocess.run(["sh", "-n", str(FOLDER / "sampler.sh")], capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 0, res.stderr


@pytest.fixture
def marked() -> Iterator[tuple[bytes, subprocess.Popen[bytes]]]:
    """A process carrying a run's marker, as every process of a run does, and a rank's vars."""
    marker = f"DDPTUI_RUN=np-{os.getpid()}-{time.monotonic_ns()}/0"
    env = {**os.environ, "DDPTUI_RUN": marker.split("=", 1)[1], "RANK": "3", "LOCAL_RANK": "1"}
    p = subprocess.Popen(["sleep", "60"], env=env)
    yield marker.encode(), p
    p.kill()
    p.wait(timeout=10)


def test_procs_finds_a_marked_process_and_no_zombie(
        marked: tuple[bytes, subprocess.Popen[bytes]]) -> None:
    marker, p = marked
    assert [pid for pid, env, _ in procs.procs() if marker in env] == [p.pid]
    assert procs.alive(p.pid)
    assert procs.live_fields(b"1 (a) b) Z 0 1 1") is None
    assert procs.live_fields(b"1 (a) b) S 0 7 7") == [b"S", b"0", b"7", b"7"]
    p.kill()
    time.sleep(0.2)  # a zombie until waited for
    assert not procs.alive(p.pid)


def test_stop_ends_a_marked_process_and_remains_sees_it_gone(
        marked: tuple[bytes, subprocess.Popen[bytes]], tmp_path: Path) -> None:
    marker, p = marked
    exit_path = tmp_path / "exit_code"
    seen = remains.check(marker, str(exit_path), str(tmp_path / "s"), str(tmp_path / "e"))
    assert seen == {"alive": [p.pid], "stop_requested": False, "expired": False,
                    "exit_code": None}
    got = stop_run.stop(marker, 5.0, 0)
    assert got["found"] == [p.pid] and got["leftover"] == []
    assert p.wait(timeout=10) == -15  # SIGTERM was enough: not killed
    exit_path.write_text("-9\n")
    assert remains.check(marker, str(exit_path), str(exit_path), "/nonexistent") == {
        "alive": [], "stop_requested": True, "expired": False, "exit_code": -9}


def test_stop_on_standby_ends_quietly_when_its_controller_goes(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-S", "-c", nodeprog.source(stop_run), "DDPTUI_RUN=x",
                          "-", "0", str(tmp_path / "stop")], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=30)
    assert (res.returncode, res.stdout) == (0, "")
    assert not (tmp_path / "stop").exists()


def test_dump_stacks_finds_a_rank_by_its_marker(
        marked: tuple[bytes, subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch) -> None:
    marker, p = marked
    assert dump_stacks.rank_pids(marker, set()) == {3: (p.pid, 1)}
    assert dump_stacks.rank_pids(marker, {2}) == {}
    monkeypatch.setattr(dump_stacks, "py_spy", lambda: None)
    got = dump_stacks.dump(marker, set(), 5.0)
    assert got["ranks"] == [{"rank": 3, "local_rank": 1, "pid": p.pid, "stack": "",
                             "error": ""}]


def test_find_torch_reads_versions_without_importing_torch() -> None:
    assert find_torch.field("__version__ = '2.5.1+cu124'\ncuda = None\n", "__version__") == \
        "2.5.1+cu124"
    assert find_torch.field("cuda: Optional[str] = '12.4'\n", "cuda") == "12.4"
    got = find_torch.probe()
    assert got["python"] == sys.executable
    assert got["torch"] and got["torch_path"], got  # this venv has torch


def test_preflight_binds_accepts_and_connects_on_one_node(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    a = {"port": port, "listen": True, "connect": True, "endpoint": "127.0.0.1", "nonce": "n1",
         "expect": 1, "listen_s": 5.0, "connect_s": 5.0, "attempt_s": 1.0, "budget_s": 10.0,
         "workdir": str(tmp_path / "not" / "yet")}
    got = preflight.ask(a)
    assert got["listen"] == {"bound": True, "accepted": 1}
    assert got["connect"]["result"] == "ok" and got["pending"] == []
    assert got["workdir"]["probed"] == str(tmp_path) and got["workdir"]["writable"]
    assert "lo" in got["interfaces"]


def test_a_port_held_by_a_live_run_is_named_and_a_dead_ones_taken(tmp_path: Path) -> None:
    a = {"dir": str(tmp_path / "locks"), "key": "h", "ports": [5000, 5001], "run": "r1",
         "ndir": str(tmp_path / "n1"), "young_s": 600.0, "owner": "owner", "pid": "pid",
         "exit": "exit_code"}
    assert port_lock.reserve(a) == {"port": 5000, "lock": str(tmp_path / "locks" / "h-5000"),
                                    "held": []}
    (tmp_path / "locks" / "h-5000" / "pid").write_text(str(os.getpid()))
    got = port_lock.reserve({**a, "run": "r2"})
    assert got["port"] == 5001 and got["held"] == [[5000, "r1"]]
    (tmp_path / "n1").mkdir()
    (tmp_path / "n1" / "exit_code").write_text("0")  # r1 ended: its port is free again
    assert port_lock.reserve({**a, "run": "r3"})["port"] == 5000


def test_a_port_asked_for_again_by_its_own_run_is_its_own(tmp_path: Path) -> None:
    """The same run and node dir that took a lock find it theirs; a run of the same name
    elsewhere (another node dir) does not."""
    a = {"dir": str(tmp_path / "locks"), "key": "h", "ports": [5000], "run": "r1",
         "ndir": str(tmp_path / "n1"), "young_s": 600.0, "owner": "owner", "pid": "pid",
         "exit": "exit_code"}
    lock = str(tmp_path / "locks" / "h-5000")
    assert port_lock.reserve(a) == {"port": 5000, "lock": lock, "held": []}
    assert port_lock.reserve(a) == {"port": 5000, "lock": lock, "held": []}
    other = port_lock.reserve({**a, "ndir": str(tmp_path / "elsewhere" / "n1")})
    assert other == {"port": None, "held": [[5000, "r1"]]}


def test_clean_scans_a_workdir_and_counts_shared_links_once(tmp_path: Path) -> None:
    runs, code = tmp_path / ".ddptui" / "runs", tmp_path / ".ddptui" / "code"
    run = f"np{os.getpid()}"  # no run of that name is alive on this machine
    node = runs / run / "node0"
    node.mkdir(parents=True)
    (node / "launch.sh").write_text("cd ~/.ddptui/code/abc\n")
    (node / "exit_code").write_text("0")
    (code / "abc").mkdir(parents=True)
    (code / "abc" / "f").write_bytes(b"x" * 10_000)
    (code / "abc.manifest").write_text("{}")
    os.link(code / "abc" / "f", tmp_path / "f2")
    w = clean_node.Workdir(str(runs), str(code), ".manifest", 3600.0)
    scan = w.scan()
    assert [(r["run_id"], r["state"], r["code"]) for r in scan["runs"]] == [
        (run, "done", ["abc"])]
    one = clean_node.size([str(code / "abc" / "f")])
    assert one == 0  # its other link is not among the paths: removing it frees nothing
    assert clean_node.size([str(code / "abc" / "f"), str(tmp_path / "f2")]) > 0
    got = w.remove({"runs": [[str(node), run, 0]], "code": ["abc"], "tmp": [], "dry": False})
    assert (got["runs"], got["code"], got["errors"]) == (1, 1, [])
    assert not node.exists() and not (code / "abc").exists()


def test_sync_builds_a_tree_and_then_has_it(tmp_path: Path) -> None:
    root = tmp_path / "code"
    tree = sync_tree.Tree(str(root), "d1", ".manifest", ".tmp-")
    assert tree.offer() == {"have": False, "base": None}
    hdr = {"base": None, "dirs": [["pkg", 0o755]], "send": [["pkg/a.py", 3, 0o644]],
           "from_base": [], "copies": [["pkg/a.py", "b.py"]], "links": [["l", "pkg/a.py"]],
           "manifest": {"entries": [["pkg/a.py", "file", 0o644, 3, "h", 0]]}}
    assert tree.build(hdr, io.BytesIO(b"abc")) == 1
    assert (root / "d1" / "b.py").read_text() == "abc"
    assert os.readlink(root / "d1" / "l") == "pkg/a.py"
    assert tree.offer() == {"have": True}
    got = sync_tree.Tree(str(root), "d2", ".manifest", ".tmp-").offer()
    assert got["base"] == "d1" and got["manifest"]["entries"][0][0] == "pkg/a.py"
    with pytest.raises(SystemExit, match="outside the tree"):
        sync_tree.Tree(str(root), "d3", ".manifest", ".tmp-").build(
            {**hdr, "dirs": [["../x", 0o755]]}, io.BytesIO(b""))
    assert sorted(p.name for p in root.iterdir()) == ["d1", "d1.manifest"]


def test_the_doorbell_rings_once_the_log_grows_and_ends_at_end_of_file(tmp_path: Path) -> None:
    log = tmp_path / "node.log"
    log.write_bytes(b"")
    r_in, w_in = os.pipe()
    r_out, w_out = os.pipe()
    t = threading.Thread(target=doorbell.ring, args=(str(log), r_in, w_out), daemon=True)
    t.start()
    os.write(w_in, b"0\n")
    log.write_bytes(b"line\n")
    assert os.read(r_out, 1) == b"."
    os.close(w_in)
    t.join(10)
    assert not t.is_alive()
    for fd in (r_in, r_out, w_out):
        os.close(fd)


def test_the_srun_agent_runs_a_command_and_says_its_exit_code() -> None:
    r, w = os.pipe()
    out = io.BytesIO()
    with os.fdopen(r, "rb") as inp:
        agent = srun_agent.Agent(inp, out)
        t = threading.Thread(target=agent.serve, daemon=True)
        t.start()
        spec = json.dumps({"cmd": "echo hi; exit 3", "stdin": False}).encode()
        os.write(w, frames.frame(7, 1, spec))
        deadline = time.monotonic() + 10
        while frames.frame(7, 13, b"3") not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
        os.close(w)  # the controller goes: the agent ends
        t.join(10)
    assert not t.is_alive()
    data, got = out.getvalue(), []
    while data:
        i, k, n = frames.HEADER.unpack(data[:frames.HEADER.size])
        got.append((i, k, data[frames.HEADER.size:frames.HEADER.size + n]))
        data = data[frames.HEADER.size + n:]
    assert got[0] == (0, 10, os.environ["HOME"].encode())  # ready, and where home is
    assert (7, 11, b"hi\n") in got and got[-1] == (7, 13, b"3")


def test_signal_ranks_leaves_its_mark_first_and_signals_only_the_ranks(tmp_path: Path) -> None:
    """The mark says why the ranks left to a ddptui that follows the run from elsewhere; a
    process of the run that is not a rank (torchrun's agent: no LOCAL_RANK) is not signalled."""
    from ddptui.nodeprog import signal_ranks

    rank_env = dict(os.environ, DDPTUI_RUN="sig-test/0", RANK="3", LOCAL_RANK="1")
    agent_env = dict(os.environ, DDPTUI_RUN="sig-test/0")
    wait = "import signal, time; signal.signal(signal.SIGUSR2, lambda *_: exit(7)); time.sleep(30)"
    rank = subprocess.Popen([sys.executable, "-c", wait], env=rank_env)
    agent = subprocess.Popen([sys.executable, "-c", wait], env=agent_env)
    deaf = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                            env=dict(rank_env, RANK="4", LOCAL_RANK="0"))
    try:
        deadline = time.monotonic() + 10
        while not (signal_ranks.catches(rank.pid, signal.SIGUSR2)
                   and signal_ranks.catches(agent.pid, signal.SIGUSR2)):
            assert time.monotonic() < deadline, "the handlers were never set"
            time.sleep(0.05)
        mark = tmp_path / "time_limit_signal"
        got = signal_ranks.send(b"DDPTUI_RUN=sig-test/0", "USR2", "rehearsal", str(mark))
        assert got == {"signalled": [[3, 1, rank.pid]], "deaf": [[4, deaf.pid]], "failed": []}
        assert rank.wait(10) == 7 and agent.poll() is None and deaf.poll() is None
        kept = json.loads(mark.read_text())
        assert kept["signal"] == "USR2" and kept["why"] == "rehearsal"
        assert abs(kept["sent_at"] - time.time()) < 30
    finally:
        for p in (rank, agent, deaf):
            p.kill()
            p.wait(5)
