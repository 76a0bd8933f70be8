"""Project sync: ddptui's content-addressed push against ``rsync -a`` over ssh, 8 hosts.

One command: ``python3 bench/sync.py`` (as root: it builds a namespace cluster of 8 hosts
with their own sshd, see ``tests/cluster.py``). It writes a project of 2,000 files and
200 MB (random bytes, so nothing compresses; 50 files of 3.2 MB and 1,950 of about 20 KB in
40 folders, last modified an hour ago as a project usually is), then, in the same run:

* **cold**: ddptui's sync of the project to all 8 hosts at once (the local walk and hashing,
  then every node's query and push over its open connection, as a launch does it), against
  8 ``rsync -a -e 'ssh -F <cluster ssh_config>'`` started at once, one per host, into empty
  folders;
* **warm**: one small file rewritten, then the same two again.

ddptui's SSH connections are opened before the clock starts, as a launch has them open from
its probe; their cost is printed apart. rsync's own ssh connections are inside its time:
it has no other way. Each figure is the median of ``--rounds`` (fresh folders for every cold
round). Targets: cold <= 1.5x rsync; warm <= 1 s for all 8 hosts together. Exit code 0
when both are met, 1 when one is missed.

``--quick`` (2 hosts, 200 files, 4 MB, 1 round) is the CI smoke test's size.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from cluster import Cluster  # noqa: E402

from ddptui.config import HostsConfig, NodeConfig, SSHOptions  # noqa: E402
from ddptui.remote import nodeops  # noqa: E402
from ddptui.store import rundir  # noqa: E402
from ddptui.sync.push import Plans, sync_node  # noqa: E402
from ddptui.sync.walk import walk  # noqa: E402
from ddptui.transport.base import Transport  # noqa: E402
from ddptui.transport.factory import make_transport  # noqa: E402

COLD_TARGET = 1.5
WARM_TARGET_S = 1.0


def make_project(root: Path, files: int, total_mb: float) -> int:
    """``files`` files of ``total_mb`` MB: 2.5 % large ones holding 80 % of the bytes."""
    big = max(1, files * 25 // 1000)
    small = files - big
    big_size = int(total_mb * 1e6 * 0.8 / big)
    small_size = int(total_mb * 1e6 * 0.2 / small)
    hour_ago = time.time() - 3600
    written = 0
    for i in range(files):
        d = root / f"pkg{i % 40:02d}"
        d.mkdir(parents=True, exist_ok=True)
        size = big_size if i < big else small_size // 2 + (i * 7919) % small_size
        p = d / (f"weights{i}.bin" if i < big else f"mod{i}.py")
        p.write_bytes(os.urandom(size))
        os.utime(p, (hour_ago, hour_ago))
        written += size
    return written


def connect_all(cluster: Cluster) -> tuple[list[Transport], float]:
    opts = SSHOptions(config_file=str(cluster.ssh_config), known_hosts=str(cluster.known_hosts))
    nodes = [NodeConfig(h.name, h.name, python=sys.executable) for h in cluster.hosts]
    t0 = time.monotonic()
    config = HostsConfig(Path("bench.yaml"), tuple(nodes), ssh=opts)
    transports = [make_transport(n, config) for n in nodes]
    with ThreadPoolExecutor(len(transports)) as pool:
        list(pool.map(lambda t: t.connect(10), transports))
    return transports, time.monotonic() - t0


def ddptui_sync(project: Path, transports: list[Transport], work: Path, state: Path
                ) -> tuple[float, int, int]:
    """Seconds, files sent and bytes sent (summed over hosts), as a launch's sync phase."""
    t0 = time.monotonic()
    walked = walk(project, hash_cache=rundir.hash_cache(state, "bench"))
    digest = walked.manifest.digest()
    plans = Plans()

    def one(t: Transport) -> dict[str, int]:
        code_root = rundir.code_root(str(work / t.node))
        cmd = nodeops.sync_cmd(sys.executable, code_root, digest)
        return dict(sync_node(t.node, t, cmd, walked, str(project), lambda _text: None,
                              plans))

    with ThreadPoolExecutor(len(transports)) as pool:
        stats = list(pool.map(one, transports))
    seconds = time.monotonic() - t0
    return (seconds, sum(s["files_sent"] for s in stats), sum(s["bytes_sent"] for s in stats))


def rsync_all(project: Path, cluster: Cluster, dest: Path) -> float:
    t0 = time.monotonic()
    procs = [subprocess.Popen(
        ["rsync", "-a", "-e", f"ssh -F {cluster.ssh_config}", f"{project}/",
         f"{h.name}:{dest / h.name}/"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for h in cluster.hosts]
    for p in procs:
        _, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"rsync failed ({p.returncode}): {err.decode()[-500:]}")
    return time.monotonic() - t0


def median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 hosts, 200 files, 4 MB, 1 round")
    ap.add_argument("--hosts", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args()
    hosts = args.hosts or (2 if args.quick else 8)
    files, mb = (200, 4.0) if args.quick else (2000, 200.0)
    rounds = args.rounds or (1 if args.quick else 3)
    tmp = Path(tempfile.mkdtemp(prefix="ddptui-bench-sync-"))
    cluster = Cluster.create(tmp / "cluster", hosts)
    transports: list[Transport] = []
    try:
        project = tmp / "project"
        size = make_project(project, files, mb)
        print(f"project: {files} files, {size / 1e6:.0f} MB; {hosts} hosts; "
              f"{os.cpu_count()} CPU cores here (every host shares them)", flush=True)
        transports, connect_s = connect_all(cluster)
        print(f"ddptui: {hosts} SSH connections opened in {connect_s:.2f} s (not timed below)")
        cold_d, cold_r, warm_d, warm_r = [], [], [], []
        edited = sorted(project.glob("pkg*/mod*.py"))[0]  # an existing small file
        for i in range(rounds):
            for sub in ("dd", "rs", "state"):
                shutil.rmtree(tmp / sub, ignore_errors=True)
                (tmp / sub).mkdir()
            for h in cluster.hosts:
                (tmp / "rs" / h.name).mkdir()
            s, n, b = ddptui_sync(project, transports, tmp / "dd", tmp / "state")
            cold_d.append(s)
            cold_r.append(rsync_all(project, cluster, tmp / "rs"))
            print(f"round {i + 1} cold: ddptui {s:.2f} s ({n} files, {b / 1e6:.0f} MB sent), "
                  f"rsync {cold_r[-1]:.2f} s", flush=True)
            edited.write_bytes(os.urandom(1000) + str(i).encode())
            s, n, b = ddptui_sync(project, transports, tmp / "dd", tmp / "state")
            warm_d.append(s)
            warm_r.append(rsync_all(project, cluster, tmp / "rs"))
            print(f"round {i + 1} warm: ddptui {s:.2f} s ({n} files, {b} bytes sent), "
                  f"rsync {warm_r[-1]:.2f} s", flush=True)
            if n != hosts:
                raise SystemExit(f"warm sync sent {n} files to {hosts} hosts, not one each")
        cold, warm = median(cold_d), median(warm_d)
        ratio = cold / median(cold_r)
        met = ratio <= COLD_TARGET and warm <= WARM_TARGET_S
        print(f"cold: ddptui {cold:.2f} s, rsync -a {median(cold_r):.2f} s, ratio {ratio:.2f} "
              f"(target <= {COLD_TARGET}) {'ok' if ratio <= COLD_TARGET else 'MISSED'}")
        print(f"warm (one file changed): ddptui {warm:.2f} s for {hosts} hosts, rsync -a "
              f"{median(warm_r):.2f} s, ratio {warm / median(warm_r):.2f} (target <= "
              f"{WARM_TARGET_S:g} s) {'ok' if warm <= WARM_TARGET_S else 'MISSED'}")
    finally:
        for t in transports:
            t.close()
        cluster.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
