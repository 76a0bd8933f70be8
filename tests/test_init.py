"""`ddptui init`: the probe program, the file it writes, bad input, and a real 2-host cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ddptui.config import parse_config
from ddptui.config.parse import parse_user_config
from ddptui.config.user import supplied
from ddptui.scaffold.hostsfile import HostFacts, UserWide, render
from ddptui.scaffold.probe import COMMON, Found, Tried, candidates, parse, probe_cmd

OK = ('DDPTUI-INIT-OK {"python": "/v/bin/python3", "version": "3.11.7", "torch": "2.13.0", '
      '"cuda": true, "devices": 4}')


def test_candidates_in_order_and_an_explicit_python_alone() -> None:
    labels = [label for label, _ in candidates(None)]
    assert labels[0] == "python3 on the login PATH" and labels[-1] == "/opt/conda"
    assert "$VIRTUAL_ENV" in labels and "~/.venv" in labels and candidates(None) == COMMON
    assert candidates("~/env/bin/python") == (("--python", '"$HOME"/env/bin/python'),)
    assert candidates("/a b/python") == (("--python", "'/a b/python'"),)


def test_parse_the_winner_the_failures_and_the_route() -> None:
    out = ("banner\nDDPTUI-INIT-ROUTE\t10.0.0.1 dev eth0 src 10.0.0.2 uid 0\n"
           "DDPTUI-INIT-NO\tpython3 on the login PATH\t/usr/bin/python3\t"
           "ModuleNotFoundError: No module named 'torch'\n" + OK + "\n")
    f = parse(out)
    assert (f.python, f.torch, f.devices, f.nproc, f.route) == (
        "/v/bin/python3", "2.13.0", 4, 4, "eth0, from 10.0.0.2")
    assert f.tried == (Tried("python3 on the login PATH", "/usr/bin/python3",
                             "ModuleNotFoundError: No module named 'torch'"),)
    none = parse("DDPTUI-INIT-ROUTE\tRTNETLINK answers: Network is unreachable\n")
    assert none.python is None and none.route is None and Found(cuda=False).nproc == 1


def test_the_probe_program_runs_here_and_names_what_it_tried(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    run = subprocess.run(["sh", "-c", probe_cmd(None, "127.0.0.1")], capture_output=True,
                         text=True, env=env, timeout=120)
    f = parse(run.stdout)
    assert f.route is not None and f.route.startswith("lo")
    if f.python is None:  # this machine's /usr/bin/python3 has no torch
        assert [t.label for t in f.tried] == [label for label, _ in COMMON]
        assert f.tried[1].why == "not set" and f.tried[-1].why == "does not exist"
    good = subprocess.run(["sh", "-c", probe_cmd(sys.executable, None)], capture_output=True,
                          text=True, env=env, timeout=120)
    assert parse(good.stdout).python == sys.executable


def test_the_written_file_parses_and_says_what_was_found() -> None:
    f = parse(OK)
    cpu = Found("/u/py", "3.11.7", "2.13.0+cpu", False, 0, route="eth0, from 10.0.0.2")
    text = render([HostFacts("gpu-a", f, "gpu-b"), HostFacts("10.0.0.2", cpu, "gpu-a")],
                  command="ddptui init gpu-a 10.0.0.2", ssh_config="/s/config",
                  known_hosts=None)
    cfg = parse_config(text, "/tmp/hosts.yaml")
    assert [(n.host, n.python, n.nproc_per_node) for n in cfg.nodes] == [
        ("gpu-a", "/v/bin/python3", 4), ("10.0.0.2", "/u/py", 1)]
    assert cfg.ssh.config_file == "/s/config" and cfg.job.is_bundled_worker
    assert "# found: torch 2.13.0, Python 3.11.7, 4 GPUs" in text
    assert "# toward gpu-a: eth0, from 10.0.0.2" in text
    assert "no usable GPU: one process on the CPU" in text


def test_the_user_wide_values_are_named_not_copied() -> None:
    u = parse_user_config("defaults:\n  user: alice\n  identity_file: /k/id\n  python: /u/py\n"
                          "  nproc_per_node: 8\n  env: {HF_TOKEN: sekrit}\n"
                          "ssh:\n  known_hosts: /kh\n  config_file: /uc\n",
                          "/x/ddptui/config.yaml")
    given = supplied(u, {"nproc_per_node"}, {"config_file"})
    assert given == {"defaults.env": ("HF_TOKEN",), "defaults.identity_file": "/k/id",
                     "defaults.python": "/u/py", "defaults.user": "alice",
                     "ssh.known_hosts": "/kh"}
    f = parse(OK)
    text = render([HostFacts("gpu-a", f, None)], command="ddptui init gpu-a",
                  ssh_config="/s/config", known_hosts=None,
                  user=UserWide(u.path, given))
    assert "sekrit" not in text and "#   defaults.env: HF_TOKEN (names only)" in text
    assert "#   defaults.user: alice" in text and "here would win over it): /x/ddptui" in text
    assert "# python: /u/py from the user-wide config; found: torch 2.13.0" in text
    cfg = parse_config(text, "/tmp/hosts.yaml", u)
    n = cfg.nodes[0]
    assert (n.user, n.identity_file, n.python, n.nproc_per_node) == ("alice", "/k/id", "/u/py", 4)
    assert (cfg.ssh.config_file, cfg.ssh.known_hosts) == ("/s/config", "/kh")
    assert dict(n.env) == {"HF_TOKEN": "sekrit"}
    bare = parse_config(text, "/tmp/hosts.yaml")  # the file alone: no value was copied
    assert (bare.nodes[0].user, bare.nodes[0].python, bare.ssh.known_hosts) == (
        None, "python3", None)


def _init(*args: str, cwd: Path, env: dict[str, str] | None = None
          ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ddptui.cli", "init", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=300, env=env)


@pytest.mark.parametrize(("args", "said"), [
    (["a", "b", "a"], "host a given twice"),
    (["a", "-o", "missing/h.yaml"], "does not exist"),
    (["a", "--ssh-config", "nope"], "--ssh-config"),
])
def test_bad_input_exits_2_and_writes_nothing(tmp_path: Path, args: list[str],
                                              said: str) -> None:
    res = _init(*args, cwd=tmp_path)
    assert res.returncode == 2 and said in res.stderr and "nothing was written" in res.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_existing_file_is_kept_without_force(tmp_path: Path) -> None:
    (tmp_path / "hosts.yaml").write_text("mine\n")
    res = _init("a", cwd=tmp_path)
    assert res.returncode == 2 and "already exists; --force replaces it" in res.stderr
    assert (tmp_path / "hosts.yaml").read_text() == "mine\n"


# -- a real 2-host cluster -------------------------------------------------------------------
@pytest.mark.cluster
@pytest.mark.torchrun
def test_init_on_the_cluster_writes_a_file_check_passes(cluster2: object,
                                                        tmp_path: Path) -> None:
    from cluster import Cluster

    c: Cluster = cluster2  # type: ignore[assignment]
    ssh = ["--ssh-config", str(c.ssh_config), "--known-hosts", str(c.known_hosts)]
    res = _init("node1", "node2", *ssh, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "2 node(s) ready" in res.stdout
    d = yaml.safe_load((tmp_path / "hosts.yaml").read_text())
    want = str(Path(sys.executable).parent / "python3")  # the nodes' python3 on PATH
    assert [(n["host"], n["python"], n["nproc_per_node"]) for n in d["nodes"]] == [
        ("node1", want, 1), ("node2", want, 1)]
    assert f"# toward node1: eth0, from {c['node2'].ip}" in (tmp_path / "hosts.yaml").read_text()

    bad = _init("node1", "node2", *ssh, "--python", "/usr/bin/python3", "--force",
                "-o", "other.yaml", cwd=tmp_path)
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "host node1: no python there imports torch; tried:" in bad.stderr
    assert "  /usr/bin/python3 (--python): ModuleNotFoundError: No module named 'torch'" \
        in bad.stderr
    assert not (tmp_path / "other.yaml").exists()


@pytest.mark.cluster
@pytest.mark.torchrun
def test_init_reads_the_user_wide_config_that_holds_the_only_key(cluster2: object,
                                                                 tmp_path: Path) -> None:
    """No agent, no key in ~/.ssh, no ssh config: only the user-wide file's key gets in."""
    from cluster import Cluster

    c: Cluster = cluster2  # type: ignore[assignment]
    home, xdg = tmp_path / "home", tmp_path / "xdg"
    (home / ".ssh").mkdir(parents=True)
    conf = xdg / "ddptui" / "config.yaml"
    conf.parent.mkdir(parents=True)
    conf.write_text(yaml.safe_dump({
        "defaults": {"user": "root", "identity_file": str(c.key), "python": sys.executable,
                     "env": {"SOME_TOKEN": "sekrit-value"}},
        "ssh": {"known_hosts": str(c.known_hosts), "connect_timeout": 5}}))
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    env |= {"HOME": str(home), "XDG_CONFIG_HOME": str(xdg)}
    a, b = (h.ip for h in c.hosts)

    res = _init(a, b, cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "2 node(s) ready" in res.stdout
    text = (tmp_path / "hosts.yaml").read_text()
    d = yaml.safe_load(text)
    assert [(n["host"], n["nproc_per_node"]) for n in d["nodes"]] == [(a, 1), (b, 1)]
    # What the user-wide file gave is named in a comment, not copied: it stays the one source.
    assert all(set(n) == {"host", "nproc_per_node"} for n in d["nodes"]), d["nodes"]
    assert "ssh" not in d and "defaults" not in d
    assert f"here would win over it): {conf}" in text
    for said in ("defaults.user: root", f"defaults.identity_file: {c.key}",
                 f"defaults.python: {sys.executable}", f"ssh.known_hosts: {c.known_hosts}",
                 "defaults.env: SOME_TOKEN"):
        assert f"#   {said}" in text, text
    assert "sekrit-value" not in text

    check = subprocess.run([sys.executable, "-m", "ddptui.cli", "check", "hosts.yaml"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=300, env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "2 node(s) ready" in check.stdout
    # The same file without the user-wide config reaches no node: the file relies on it.
    bare = subprocess.run([sys.executable, "-m", "ddptui.cli", "check", "hosts.yaml"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env=env | {"XDG_CONFIG_HOME": str(tmp_path / "none")})
    assert bare.returncode == 1, bare.stdout + bare.stderr
    assert f"✗ ssh: node {a}" in bare.stdout and f"✗ ssh: node {b}" in bare.stdout
