"""Ad-hoc runs (`ddptui run -H`), the user-wide defaults, and each run's saved hosts file."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest
import yaml
from cluster import Cluster
from jobs import NUMBERED, ddptui, run_id_of

from ddptui.config import ConfigError, HostsConfig
from ddptui.config.adhoc import (
    AdhocError,
    HostSlot,
    adhoc_document,
    parse_host_list,
    saved_document,
    split_script_args,
)
from ddptui.config.parse import parse_hosts, parse_user_config
from ddptui.config.user import (
    NO_USER_DEFAULTS,
    merge_defaults,
    user_config_path,
)

VALUE_OPTS = {"-H", "--hosts", "--python", "--workdir", "--nproc-per-node", "--state-dir",
              "--run-id"}


@pytest.mark.parametrize(("text", "want"), [
    ("gpu-a", [HostSlot("gpu-a")]),
    ("gpu-a,gpu-b:4", [HostSlot("gpu-a"), HostSlot("gpu-b", 4)]),
    (" a , b:12 ", [HostSlot("a"), HostSlot("b", 12)]),
    ("10.0.0.1:2,10.0.0.2", [HostSlot("10.0.0.1", 2), HostSlot("10.0.0.2")]),
    ("fe80::1", [HostSlot("fe80::1")]),
    ("[fe80::1]:3,[::1]", [HostSlot("fe80::1", 3), HostSlot("::1")]),
])
def test_host_list(text: str, want: list[HostSlot]) -> None:
    assert parse_host_list(text) == want


@pytest.mark.parametrize(("text", "words"), [
    ("a,b:x", ["'b:x'", "whole number", "'x'"]),
    ("a:0", ["'a:0'", "1 or more"]),
    ("a:-1", ["'a:-1'"]),
    ("a:", ["'a:'"]),
    ("a,,b", ["empty item"]),
    ("", ["empty item"]),
    (":4", ["no host"]),
    ("[::1", ["'[::1'"]),
    ("[::1]x", ["'[::1]x'"]),
    ("[::1]:y", ["'[::1]:y'"]),
])
def test_bad_host_lists_name_the_item(text: str, words: list[str]) -> None:
    with pytest.raises(AdhocError) as e:
        parse_host_list(text)
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize(("argv", "own", "script"), [
    (["run", "h.yaml", "--headless"], ["run", "h.yaml", "--headless"], None),
    (["run", "h.yaml", "--headless", "--", "--x", "1"], ["run", "h.yaml", "--headless"],
     ["--x", "1"]),
    (["run", "h.yaml", "--"], ["run", "h.yaml"], []),
    (["run", "-H", "a,b", "job.py", "--headless", "--x"], ["run", "-H", "a,b", "job.py"],
     ["--headless", "--x"]),
    (["--state-dir", "s", "run", "-H", "a", "--python", "p", "--headless", "j.py", "1", "--",
      "2"], ["--state-dir", "s", "run", "-H", "a", "--python", "p", "--headless", "j.py"],
     ["1", "--", "2"]),
    (["run", "-H", "a", "j.py", "--", "--y"], ["run", "-H", "a", "j.py"], ["--y"]),
    (["run", "--hosts=a", "-m", "pkg.train", "--lr", "1"], ["run", "--hosts=a", "-m",
                                                             "pkg.train"], ["--lr", "1"]),
    (["run", "-Ha:2", "j.py", "x"], ["run", "-Ha:2", "j.py"], ["x"]),
    (["run", "R1", "--again", "--", "--x"], ["run", "R1", "--again"], ["--x"]),
    (["dashboard", "h.yaml", "--", "a"], ["dashboard", "h.yaml"], ["a"]),
    (["logs", "R1", "--", "a"], ["logs", "R1", "--", "a"], None),
    (["stop", "R1"], ["stop", "R1"], None),
])
def test_split_script_args(argv: list[str], own: list[str], script: list[str] | None) -> None:
    assert split_script_args(argv, VALUE_OPTS) == (own, script)


def user(text: str) -> object:
    return parse_user_config(text, "/home/u/.config/ddptui/config.yaml")


def parse(text: str, u: object = NO_USER_DEFAULTS) -> HostsConfig:
    return parse_hosts(text, "/p/hosts.yaml", user=u)  # type: ignore[arg-type]


def test_user_defaults_lie_under_the_hosts_file_per_key_env_merged() -> None:
    u = user("defaults:\n  user: alice\n  python: /opt/py\n  workdir: /scratch/w\n"
             "  identity_file: ~/.ssh/lab\n  env: {A: u, B: u}\n"
             "ssh:\n  known_hosts: /kh\n  connect_timeout: 3\n")
    cfg = parse("defaults:\n  python: /env/py\n  env: {B: h, C: h}\n"
                "ssh: {connect_timeout: 7}\n"
                "nodes: [a, {host: b, user: bob, env: {C: n}}]\n", u)
    a, b = cfg.nodes
    assert (a.user, a.python, a.workdir) == ("alice", "/env/py", "/scratch/w")
    assert a.identity_file == os.path.expanduser("~/.ssh/lab")
    assert dict(a.env) == {"A": "u", "B": "h", "C": "h"}
    assert b.user == "bob" and dict(b.env) == {"A": "u", "B": "h", "C": "n"}
    assert (cfg.ssh.known_hosts, cfg.ssh.connect_timeout) == ("/kh", 7)


def test_merge_defaults_is_per_key() -> None:
    assert merge_defaults({}, {}) == {}
    assert merge_defaults({"user": ("a", 1)}, {}) == {"user": ("a", 1)}
    assert merge_defaults({"user": ("a", 1)}, {"user": ("b", 2)}) == {"user": ("b", 2)}
    got = merge_defaults({"env": ({"X": "1", "Y": "1"}, 3)}, {"env": ({"Y": "2"}, 4)})
    assert got == {"env": ({"X": "1", "Y": "2"}, 4)}


def test_user_defaults_for_a_local_node_drop_ssh_fields() -> None:
    u = user("defaults: {user: alice, port: 2222}\n")
    node = parse("nodes: [{transport: local}]\n", u).nodes[0]
    assert (node.user, node.port) == (None, None)


@pytest.mark.parametrize(("text", "where"), [
    ("defaults:\n  python: 3\n", ":2: defaults.python"),
    ("defaults:\n  host: a\n", ":2: defaults.host: cannot be a default"),
    ("defaults:\n  user: a\nnodes: [a]\n", ":3: nodes"),
    ("ssh:\n  conect_timeout: 3\n", ":2: ssh.conect_timeout"),
    ("defaults: [a]\n", ":1: defaults"),
    ("defaults:\n  env: {1A: x}\n", ":2: defaults.env.1A"),
    ("a: [\n", "config.yaml"),
])
def test_bad_user_config_names_its_file_and_line(text: str, where: str) -> None:
    with pytest.raises(ConfigError) as e:
        user(text)
    assert where in str(e.value), str(e.value)
    assert str(e.value).startswith("/home/u/.config/ddptui/config.yaml")


def test_empty_user_config_is_no_defaults() -> None:
    assert parse("nodes: [a]\n", user("")) == parse("nodes: [a]\n")


def test_user_config_path() -> None:
    assert user_config_path({"XDG_CONFIG_HOME": "/x"}) == Path("/x/ddptui/config.yaml")
    assert user_config_path({"HOME": "/h"}) == Path("/h/.config/ddptui/config.yaml")
    assert user_config_path({"XDG_CONFIG_HOME": "", "HOME": "/h"}) == Path(
        "/h/.config/ddptui/config.yaml")


def test_adhoc_document_is_a_hosts_file() -> None:
    doc = adhoc_document(parse_host_list("a,b:4"), "job.py", ["--epochs", "3"],
                         nproc_per_node="2", python="/py", workdir="/w")
    cfg = parse(yaml.safe_dump(doc))
    assert [(n.host, n.nproc_per_node, n.python, n.workdir) for n in cfg.nodes] == [
        ("a", 2, "/py", "/w"), ("b", 4, "/py", "/w")]
    assert cfg.job.script == "/p/job.py" and cfg.job.args == ("--epochs", "3")
    mod = parse(yaml.safe_dump(adhoc_document([HostSlot("a")], "pkg.train", [], module=True,
                                              nproc_per_node="gpu")))
    assert mod.job.module and mod.job.script == "pkg.train"
    assert mod.nodes[0].nproc_per_node == "gpu"


def test_flags_win_over_user_defaults() -> None:
    u = user("defaults: {python: /u/py, nproc_per_node: 8}\n")
    cfg = parse(yaml.safe_dump(adhoc_document([HostSlot("a"), HostSlot("b", 1)], "j.py", [],
                                              python="/flag/py")), u)
    assert [(n.python, n.nproc_per_node) for n in cfg.nodes] == [("/flag/py", 8),
                                                                ("/flag/py", 1)]


FULL = """\
defaults: {python: /py, env: {HF_TOKEN: sekrit, PLAIN: x, MINE: y}}
nodes:
  - {host: a, port: 2200, nproc_per_node: 2, identity_file: /k, node_rank: 2}
  - {host: b, name: bee, node_rank: 0}
  - {transport: local, workdir: /tmp/w, node_rank: 1}
rendezvous: {backend: static, endpoint: "a:1234", join_timeout: 60}
job: {script: job.py, args: [--x, "1"], exclude: ["*.log"], setup: [echo hi], sync: true}
ssh: {known_hosts: /kh, accept_new_host_keys: true}
health: {stall_after: 5, telemetry: false}
metrics: {parse: [lightning, generic], patterns: ['acc (?P<acc>[0-9.]+)']}
secret_env: [MINE]
"""


@pytest.mark.parametrize("text", [FULL, "nodes: [a]\n", "nodes: [a]\njob: {module: pkg.m}\n"])
def test_saved_hosts_file_parses_back_to_the_config(text: str) -> None:
    cfg = parse(text)
    saved = yaml.safe_dump(saved_document(cfg), sort_keys=False)
    again = parse_hosts(saved, "/runs/r/hosts.yaml")
    strip = [dataclasses.replace(n, line=0, env={}) for n in again.nodes]
    assert strip == [dataclasses.replace(n, line=0, env={}) for n in cfg.nodes]
    assert dataclasses.replace(again, path=cfg.path, nodes=cfg.nodes) == cfg
    assert "sekrit" not in saved and "y\n" not in saved.split("MINE:")[-1][:4]
    assert all(n.env.get("HF_TOKEN", "***") == "***" for n in again.nodes)


# -- the command line: bad input is exit 2, in ddptui's words, and nothing starts -----------


@pytest.fixture
def xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "job.py").write_text("print('hi')\n")
    monkeypatch.chdir(tmp_path)  # the ddptui below runs here: SCRIPT is relative to it
    return tmp_path / "xdg"


def cli(tmp: Path, xdg: Path, *args: str) -> tuple[int, str]:
    res = ddptui(*args, state=tmp / "state", timeout=60,
                 env={"XDG_CONFIG_HOME": str(xdg), "PYTHONPATH": str(Path(__file__).parents[1])})
    assert "Traceback" not in res.stderr, res.stderr
    assert not list((tmp / "state").glob("runs/*")), "a run directory was made"
    return res.returncode, res.stdout + res.stderr


@pytest.mark.parametrize(("args", "words"), [
    (["-H", "gpu-a,gpu-b:four", "job.py", "--x"], ["'gpu-b:four'", "whole number"]),
    (["-H", "gpu-a,", "job.py"], ["empty item"]),
    (["-H", "gpu a", "job.py"], ["-H host 'gpu a'", "host name"]),
    (["-H", "a", "nope.py"], ["SCRIPT", "nope.py", "not a file"]),
    (["-H", "a", "--nproc-per-node", "many", "job.py"], ["--nproc-per-node"]),
    (["-H", "a", "--again", "job.py"], ["--again", "-H"]),
    (["h.yaml", "--python", "/py"], ["--python", "-H"]),
    (["NO-SUCH-RUN", "--again"], ["NO-SUCH-RUN", "no saved hosts file"]),
])
def test_bad_command_lines_are_exit_2(tmp_path: Path, xdg: Path, args: list[str],
                                      words: list[str]) -> None:
    code, out = cli(tmp_path, xdg, "run", "--headless", *args)
    assert code == 2, out
    for w in words:
        assert w in out, out


def test_bad_user_config_is_exit_2_naming_file_and_line(tmp_path: Path, xdg: Path) -> None:
    conf = xdg / "ddptui" / "config.yaml"
    conf.parent.mkdir(parents=True)
    conf.write_text("defaults:\n  python: /py\n  nproc_per_node: lots\n")
    (tmp_path / "h.yaml").write_text("nodes: [a]\n")
    for args in (["-H", "a", "job.py"], ["h.yaml"]):
        code, out = cli(tmp_path, xdg, "run", "--headless", *args)
        assert code == 2, out
        assert f"{conf}:3: defaults.nproc_per_node" in out, out
    code, out = cli(tmp_path, xdg, "check", "h.yaml")
    assert code == 2 and f"{conf}:3" in out, out
    code, out = cli(tmp_path, xdg, "init", "a")
    assert code == 2 and f"{conf}:3" in out and "nothing was written" in out, out
    assert not (tmp_path / "hosts.yaml").exists()


def test_help_names_the_adhoc_flags() -> None:
    res = ddptui("run", "--help", state=Path("/nonexistent"))
    assert res.returncode == 0
    for flag in ("-H", "--nproc-per-node", "--python", "--workdir", "--module", "--again"):
        assert flag in res.stdout
    assert sys.executable


@pytest.mark.cluster
@pytest.mark.torchrun
def test_adhoc_run_over_ssh_then_again(cluster2: Cluster, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Two addresses, a user-wide config with the key and python, the script's own args."""
    conf = tmp_path / "xdg" / "ddptui" / "config.yaml"
    conf.parent.mkdir(parents=True)
    conf.write_text(yaml.safe_dump({
        "defaults": {"user": "root", "identity_file": str(cluster2.key),
                     "python": sys.executable, "env": {"JOB_LINES": "5"}},
        "ssh": {"known_hosts": str(cluster2.known_hosts), "connect_timeout": 5}}))
    (tmp_path / "job.py").write_text(NUMBERED)
    monkeypatch.chdir(tmp_path)
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    ips = ",".join(f"{h.ip}:2" for h in cluster2.hosts)
    res = ddptui("run", "--headless", "-H", ips, "--workdir", str(tmp_path / "work"), "job.py",
                 "--x", "1", "--headless", state=tmp_path / "state", env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    first = run_id_of(res.stdout)
    a, b = (h.ip for h in cluster2.hosts)
    for rank, node in [(0, a), (1, a), (2, b), (3, b)]:
        assert f"[{node} r{rank}] [seq 4] rank {rank} says hello" in res.stdout
    assert f'[{a} r0] ARGV ["--x", "1", "--headless"]' in res.stdout
    saved = tmp_path / "state" / "runs" / first / "hosts.yaml"
    assert yaml.safe_load(saved.read_text())["job"]["args"] == ["--x", "1", "--headless"]

    res = ddptui("run", first, "--again", "--headless", "--", "--y", "2", state=tmp_path / "state",
                 env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    assert run_id_of(res.stdout) != first
    assert f'[{a} r0] ARGV ["--y", "2"]' in res.stdout
    for rank, node in [(0, a), (1, a), (2, b), (3, b)]:
        assert f"[{node} r{rank}] [seq 4] rank {rank} says hello" in res.stdout


@pytest.mark.cluster
def test_adhoc_unknown_host_is_exit_2_naming_it(cluster2: Cluster, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "xdg" / "ddptui" / "config.yaml"
    conf.parent.mkdir(parents=True)
    conf.write_text(yaml.safe_dump({
        "defaults": {"python": sys.executable},
        "ssh": {"config_file": str(cluster2.ssh_config),
                "known_hosts": str(cluster2.known_hosts), "connect_timeout": 3}}))
    (tmp_path / "job.py").write_text(NUMBERED)
    monkeypatch.chdir(tmp_path)
    res = ddptui("run", "--headless", "-H", "node1,no-such-node.invalid", "job.py",
                 state=tmp_path / "state", env={"XDG_CONFIG_HOME": str(tmp_path / "xdg")},
                 timeout=90)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "no-such-node.invalid" in res.stderr and "Traceback" not in res.stderr
    for h in cluster2.hosts:  # nothing but sshd on any node
        assert not set(cluster2.pids(h)) - {p.pid for p in h.sshd_procs}
