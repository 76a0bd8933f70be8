"""The user's project over real SSH (2 hosts x 2 processes, gloo): synced into the nodes'
code caches or run in place, with setup steps, and every way it is refused."""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import SSHD, Cluster, in_host
from jobs import ddptui, marked_pids, run_id_of

pytestmark = [pytest.mark.cluster, pytest.mark.torchrun]
_ports = itertools.count(29700)

TRAIN = '''
import os, socket
import torch.distributed as dist
import helper
from mypkg.util import VALUE
dist.init_process_group("gloo")
data = open("data/train.txt").read().strip()
marks = os.environ.get("SETUP_LOG")
setups = len(open(marks + "." + socket.gethostname()).read().splitlines()) if marks else -1
print(f"RANK {dist.get_rank()} {helper.GREETING} {VALUE} {data} setups={setups} "
      f"cwd={os.getcwd()}", flush=True)
dist.barrier()
dist.destroy_process_group()
'''
MODULE = '''
import os
import torch.distributed as dist
from mypkg.util import VALUE
dist.init_process_group("gloo")
print(f"MODRANK {dist.get_rank()} {VALUE} {open('data/train.txt').read().strip()}", flush=True)
dist.barrier()  # no rank leaves while another still connects to it (gloo's full mesh)
dist.destroy_process_group()
'''


def make_project(root: Path) -> Path:
    proj = root / "proj"
    files = {"train.py": TRAIN, "helper.py": 'GREETING = "v1"\n', "mypkg/__init__.py": "",
             "mypkg/util.py": "VALUE = 41\n", "mypkg/train.py": MODULE,
             "data/train.txt": "abc\n", ".gitignore": "*.log\nscratch/\n",
             "run.log": "ignored\n", "scratch/tmp.txt": "ignored\n", "big/blob.bin": "x" * 5000,
             "tools/run.sh": "#!/bin/sh\necho hi\n", ".venv/lib/site.py": "v", "ckpt.pt": "w"}
    for rel, text in files.items():
        (proj / rel).parent.mkdir(parents=True, exist_ok=True)
        (proj / rel).write_text(text)
    os.chmod(proj / "tools/run.sh", 0o755)
    os.symlink("helper.py", proj / "alias.py")
    return proj


def hosts(c: Cluster, tmp: Path, job: dict[str, Any], **env: str) -> Path:
    d: dict[str, Any] = {
        "defaults": {"python": sys.executable, "nproc_per_node": 2, "env": env},
        "nodes": [{"host": h.name, "workdir": str(tmp / f"work-{h.name}")} for h in c.hosts],
        "rendezvous": {"port": next(_ports)},
        "job": job,
        "ssh": {"config_file": str(c.ssh_config), "known_hosts": str(c.known_hosts),
                "connect_timeout": 5},
    }
    path = tmp / "hosts.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def run(path: Path, tmp: Path, timeout: float = 180) -> tuple[str, dict[str, Any]]:
    res = ddptui("run", str(path), "--headless", "--no-preflight", state=tmp / "state",
                 timeout=timeout)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr
    meta = json.loads((tmp / "state" / "runs" / run_id_of(res.stdout) / "run.json").read_text())
    return res.stdout, meta


def refused(path: Path, tmp: Path) -> str:
    res = ddptui("run", str(path), "--headless", "--no-preflight", state=tmp / "state",
                 timeout=90)
    assert res.returncode == 2, res.stdout[-3000:] + res.stderr
    assert "Traceback" not in res.stderr
    return res.stderr + res.stdout


def test_synced_project_runs_and_a_second_launch_sends_only_the_edit(
        cluster2: Cluster, tmp_path: Path) -> None:
    proj = make_project(tmp_path)
    log = tmp_path / "setup.log"
    path = hosts(cluster2, tmp_path, {
        "script": "proj/train.py", "exclude": ["big/"],
        "setup": [f'echo "$(hostname) $PWD" >> {log}."$(hostname)"']}, SETUP_LOG=str(log))
    out, meta = run(path, tmp_path)
    code = {}
    for rank, node in [(0, "node1"), (1, "node1"), (2, "node2"), (3, "node2")]:
        m = re.search(rf"^\[{node} r{rank}\] RANK {rank} v1 41 abc setups=1 cwd=(\S+)$", out, re.M)
        assert m, out[-3000:]
        code[node] = Path(m.group(1))
    for node in ("node1", "node2"):
        tree = code[node]
        assert tree.parent == tmp_path / f"work-{node}" / ".ddptui" / "code"
        assert (tree / "mypkg/util.py").is_file() and (tree / "data/train.txt").is_file()
        for gone in ("run.log", "scratch", "big", ".venv", "ckpt.pt"):
            assert not (tree / gone).exists(), gone
        assert os.stat(tree / "tools/run.sh").st_mode & 0o111
        assert os.readlink(tree / "alias.py") == "helper.py"
        assert os.stat(tree).st_mode & 0o777 == 0o700
        # setup ran once on this node, in the synced project, before torchrun (setups=1)
        assert (log.parent / f"{log.name}.{node}").read_text() == f"{node} {tree}\n"
        assert f"[{node} setup] $ echo" in out
    sync = meta["sync"]
    assert {n: (s["files_sent"], s["cached"]) for n, s in sync.items()} == {
        "node1": (8, False), "node2": (8, False)}
    assert "synced: 8 of 8 files sent" in out

    (proj / "helper.py").write_text('GREETING = "v2"\n')
    out, meta = run(path, tmp_path)
    assert re.search(r"^\[node2 r3\] RANK 3 v2 41 abc setups=2 ", out, re.M), out[-3000:]
    size = len('GREETING = "v2"\n')
    assert {n: (s["files_sent"], s["bytes_sent"]) for n, s in meta["sync"].items()} == {
        "node1": (1, size), "node2": (1, size)}
    assert "synced: 1 of 8 files sent" in out


def test_module_entry_point_from_the_synced_project(cluster2: Cluster, tmp_path: Path) -> None:
    make_project(tmp_path)
    path = hosts(cluster2, tmp_path, {"module": "mypkg.train", "project": "proj"})
    out, _ = run(path, tmp_path)
    for rank in range(4):
        assert f"MODRANK {rank} 41 abc" in out, out[-3000:]


def test_run_in_place(cluster2: Cluster, tmp_path: Path) -> None:
    """The hosts share this machine's disk, so the project's own path exists on both."""
    proj = make_project(tmp_path)
    job = {"project": str(proj), "script": "proj/train.py", "sync": False}
    out, meta = run(hosts(cluster2, tmp_path, job), tmp_path)
    for rank in range(4):
        assert f"RANK {rank} v1 41 abc setups=-1 cwd={proj}" in out, out[-3000:]
    assert "sync" not in meta
    assert not list(tmp_path.glob("work-*/.ddptui/code"))


def test_failing_setup_on_one_node_starts_nothing_anywhere(cluster2: Cluster,
                                                            tmp_path: Path) -> None:
    make_project(tmp_path)
    path = hosts(cluster2, tmp_path, {"script": "proj/train.py", "setup": [
        "echo preparing", 'if [ "$(hostname)" = node2 ]; then echo "no disk" >&2; exit 7; fi']})
    said = refused(path, tmp_path)
    assert "node node2: job.setup failed (exit code 7)" in said
    assert "no disk" in said and "node node1: job.setup" not in said
    assert not list(tmp_path.glob("work-*/.ddptui/runs/*/node*")), "a node dir was left"
    run_id = run_id_of(said)
    assert marked_pids(run_id) == []
    assert not list(tmp_path.glob("state/runs/*/nodes/*.log")) or all(
        "torch" not in p.read_text() for p in tmp_path.glob("state/runs/*/nodes/*.log"))


def test_project_over_the_limit_is_refused_naming_its_largest_files(
        cluster2: Cluster, tmp_path: Path) -> None:
    proj = make_project(tmp_path)
    (proj / "data/huge.bin").write_bytes(b"\0" * 1_200_000)
    path = hosts(cluster2, tmp_path, {"script": "proj/train.py", "max_sync_mb": 1})
    said = refused(path, tmp_path)
    assert "data/huge.bin (1.2 MB)" in said and "job.max_sync_mb (1 MB)" in said
    assert not list(tmp_path.glob("work-*/.ddptui")), "something reached a node"


@pytest.mark.parametrize("case", ["missing_project", "script_outside"])
def test_bad_project_input_is_exit_2_with_the_line(cluster2: Cluster, tmp_path: Path,
                                                   case: str) -> None:
    make_project(tmp_path)
    (tmp_path / "other.py").write_text("print(1)\n")
    job = ({"script": "proj/train.py", "project": "nope"} if case == "missing_project"
           else {"script": "other.py", "project": "proj"})
    said = refused(hosts(cluster2, tmp_path, job), tmp_path)
    want = ("hosts.yaml:", "job.project", "not a directory") if case == "missing_project" \
        else ("hosts.yaml:", "job.script", "not inside the project")
    for word in want:
        assert word in said, said
    assert not list(tmp_path.glob("work-*"))


def test_in_place_path_missing_on_one_node_names_it(cluster2: Cluster, tmp_path: Path) -> None:
    """node2 gets a second sshd in a mount namespace of its own, where an empty tmpfs hides
    the project: the one path that node1 has is missing there."""
    shared = tmp_path / "shared"
    proj = make_project(shared)
    h = cluster2["node2"]
    cfg = h.dir / "sshd_config.hidden"
    cfg.write_text((h.dir / "sshd_config").read_text()
                   .replace("Port 22\n", "Port 2299\n")
                   .replace(str(h.dir / "sshd.pid"), str(h.dir / "sshd.hidden.pid")))
    inner = f"mount -t tmpfs ddptui-test {shlex.quote(str(shared))} && exec {SSHD} -D " \
            f"-f {shlex.quote(str(cfg))} -E {shlex.quote(str(h.dir / 'sshd.hidden.log'))}"
    h.sshd_procs.append(subprocess.Popen(
        in_host(h, "unshare", "--mount", "--propagation", "private", "sh", "-c", inner),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True))
    with open(cluster2.known_hosts, "a") as kh:
        kh.write(cluster2.host_key_line(h, 2299))
    cluster2.wait_port(h.ip, 2299, timeout=10.0, host=h)
    path = hosts(cluster2, tmp_path, {"script": str(proj / "train.py"), "project": str(proj),
                                      "sync": False})
    d = yaml.safe_load(path.read_text())
    d["nodes"][1]["port"] = 2299
    path.write_text(yaml.safe_dump(d))
    said = refused(path, tmp_path)
    assert "node node2: the project to run in place is not there" in said
    assert str(proj) in said and "node node1" not in said
    assert not list(tmp_path.glob("work-*/.ddptui/runs/*/node*"))


UNEVEN = '''
import json, time
from datetime import timedelta
import torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=timedelta(seconds=20))
rank = dist.get_rank()
steps = 5 if rank == 2 else 60  # rank 2's shard is shorter: uneven inputs
for step in range(1, steps + 1):
    dist.all_reduce(torch.ones(4))
    print("@ddptui " + json.dumps({"rank": rank, "step": step, "loss": 1.0 / step}), flush=True)
    time.sleep(0.2)
print(f"rank {rank}: out of data after {steps} steps", flush=True)
'''


def test_a_rank_that_leaves_early_is_named_as_the_cause(cluster2: Cluster,
                                                        tmp_path: Path) -> None:
    """Rank 2 of 4 returns after step 5 while the others train on: their next all_reduce
    fails, and the summary names rank 2, its step and the fix, the rest as consequences."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "uneven.py").write_text(UNEVEN)
    path = hosts(cluster2, tmp_path, {"script": "proj/uneven.py"})
    res = ddptui("run", str(path), "--headless", "--no-preflight", state=tmp_path / "state",
                 timeout=180)
    out = res.stdout
    assert res.returncode == 1, out[-4000:] + res.stderr
    head = next(ln for ln in out.splitlines() if ln.startswith("ddptui: rank"))
    assert head.startswith("ddptui: rank 2 (node node2) left the run first: it ended with exit "
                           "code 0 at step 5 while the other ranks still trained"), out[-4000:]
    assert "DistributedSampler(drop_last=True)" in head and "algorithms.Join" in head
    assert "  [node2 agent] ddptui: rank 2 (local_rank 0, pid " in out
    consequences = re.findall(r"^  node node\d: rank (\d) \(node node\d\) .*: after rank 2 "
                              r"\(node node2\) left, most likely a consequence$", out, re.M)
    assert consequences and "2" not in consequences, out[-4000:]
    meta = json.loads((tmp_path / "state" / "runs" / run_id_of(out) / "run.json").read_text())
    assert meta["diagnosis"]["cause"] == "early_exit" and meta["diagnosis"]["rank"] == 2


MISMATCH = '''
import json
from datetime import timedelta
import torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=timedelta(seconds=30))
rank = dist.get_rank()
for step in range(1, 4):
    dist.all_reduce(torch.ones(1))
    print("@ddptui " + json.dumps({"rank": rank, "step": step, "loss": 1.0}), flush=True)
dist.all_reduce(torch.ones(1000 if rank == 2 else 1))  # rank 2 alone reduces 1,000 elements
print(f"rank {rank}: past the mismatched all_reduce", flush=True)
'''
_ENFORCE = re.compile(r"^  \[(node\d) r(\d)\]   what\(\):  \[enforce fail at \S+/gloo/transport/"
                      r"tcp/pair\.cc:\d+\] op\.preamble\.length <= op\.nbytes\. (\d+) vs (\d+)\. ",
                      re.M)


def test_a_collective_mismatch_is_named_from_gloos_own_size_check(cluster2: Cluster,
                                                                   tmp_path: Path) -> None:
    """Rank 2 of 4 all-reduces 1,000 elements where the others reduce 1, with no
    TORCH_DISTRIBUTED_DEBUG: gloo's size check aborts the rank that received the larger
    message, and ddptui names the mismatch with gloo's two sizes and that rank, not a crash
    by SIGABRT; `ddptui logs RUN` ends in the same words."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "mismatch.py").write_text(MISMATCH)
    path = hosts(cluster2, tmp_path, {"script": "proj/mismatch.py"})
    assert "TORCH_DISTRIBUTED_DEBUG" not in path.read_text()  # nor in sshd's environment
    res = ddptui("run", str(path), "--headless", "--no-preflight", state=tmp_path / "state",
                 timeout=180)
    out = res.stdout
    assert res.returncode == 1, out[-4000:] + res.stderr
    m = _ENFORCE.search(out)  # gloo's own line, under the verdict as its evidence
    assert m is not None, out[-4000:]
    node, rank, sent, expected = m.groups()
    assert rank in ("1", "2") and int(sent) > int(expected), out[-4000:]
    head = next(ln for ln in out.splitlines() if ln.startswith("ddptui: collective"))
    assert head.startswith(
        f"ddptui: collective mismatch between ranks: rank {rank} (node {node}) received "
        f"{sent} bytes from another rank where its own collective expected {expected}, and "
        "gloo's size check aborted it (SIGABRT)"), out[-4000:]
    assert "rank-dependent branch" in head and "differs on one rank" in head
    assert "was killed by SIGABRT" not in out and "past the mismatched" not in out
    run_id = run_id_of(out)
    meta = json.loads((tmp_path / "state" / "runs" / run_id / "run.json").read_text())
    assert meta["diagnosis"]["cause"] == "collective_mismatch"
    assert meta["diagnosis"]["rank"] == int(rank) and meta["diagnosis"]["node"] == node
    report = out[out.index(head):].splitlines()
    report = report[:next((i for i, ln in enumerate(report) if not ln.startswith(
        ("ddptui: collective", "  "))), len(report))]
    logs = ddptui("logs", run_id, state=tmp_path / "state", timeout=60)
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.endswith("\n".join(report) + "\n"), (logs.stdout[-3000:], report)
