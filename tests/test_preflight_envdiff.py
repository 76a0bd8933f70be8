"""The ranks' environment against a bare login's: the comparison and the words (pure), and
the command that asks a node in that environment, run by a real ``sh`` on this machine."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from test_preflight_rules import config, healthy, only_failure, verdict

from ddptui.config import HostsConfig, NodeConfig
from ddptui.diagnose.preflight import Mark
from ddptui.diagnose.preflight.envdiff import PROJECT, causes, env_changes_torch, suspects
from ddptui.diagnose.preflight.report import TorchInfo
from ddptui.launch import rank_env
from ddptui.launch.plan import env_exports, job_env, launch_script, node_env
from ddptui.launch.rank_env import probe_as_ranks
from ddptui.transport.local import LocalTransport

SITE = TorchInfo("2.99.0+site", path="/opt/site/torch")
STOCK = TorchInfo("2.13.0+cpu", path="/usr/lib/python3/site-packages/torch")


def test_same_version_from_the_same_place_is_no_difference() -> None:
    r = healthy("a", torch=STOCK, bare_torch=dataclasses.replace(STOCK, nccl="2.21.5"))
    assert not env_changes_torch(r)  # NCCL read two ways is not compared
    assert env_changes_torch(dataclasses.replace(r, torch=SITE))
    assert env_changes_torch(dataclasses.replace(r, torch=TorchInfo(error="No module")))
    assert not env_changes_torch(dataclasses.replace(r, bare_torch=None))  # not asked


def test_the_cause_is_the_name_whose_removal_gives_the_bare_torch_back() -> None:
    without = {"HF_TOKEN": SITE, "PYTHONPATH": STOCK, PROJECT: SITE}
    assert causes(STOCK, without) == ("PYTHONPATH",)
    assert causes(STOCK, {"A": SITE, "B": SITE}) == ()  # only both together
    assert causes(None, without) == ()
    assert suspects({"PYTHONPATH": "/x", "NCCL_DEBUG": "INFO"}, {"NCCL_DEBUG"}, "/p") == \
        ["PYTHONPATH", PROJECT]


def test_a_torch_mismatch_made_by_env_names_node_versions_and_variable() -> None:
    site = healthy("b", torch=SITE, bare_torch=STOCK, torch_causes=("PYTHONPATH",))
    v = verdict([healthy("a", torch=STOCK, bare_torch=STOCK), site])
    node, check, problem = only_failure(v)
    assert (node, check) == ("b", "torch")
    assert problem.startswith("node b has torch 2.99.0+site but node a has torch 2.13.0+cpu")
    assert ("with PYTHONPATH in its `env:` they get torch 2.99.0+site from /opt/site/torch, "
            "while a bare login on node b gets torch 2.13.0+cpu from "
            "/usr/lib/python3/site-packages/torch") in problem
    assert "Remove or correct PYTHONPATH in the hosts file's `env:` for node b" in problem


def test_on_a_tie_the_node_whose_env_changes_torch_is_the_odd_one() -> None:
    """Two nodes, two versions: the one that only its `env:` makes different is blamed,
    whatever its node rank."""
    v = verdict([healthy("a", torch=SITE, bare_torch=STOCK),
                 healthy("b", torch=STOCK, bare_torch=STOCK)])
    node, _, problem = only_failure(v)
    assert node == "a" and "node a has torch 2.99.0+site but node b has" in problem
    assert "a bare login on node a gets torch 2.13.0+cpu" in problem  # cause not asked yet


def test_env_that_hides_torch_says_so_and_agreeing_nodes_pass() -> None:
    v = verdict([healthy("a"), healthy("b", torch=TorchInfo(error="ModuleNotFoundError: x"),
                                       bare_torch=STOCK, torch_causes=("PATH",))])
    _, check, problem = only_failure(v)
    assert check == "torch" and "they get no torch (ModuleNotFoundError: x)" in problem
    assert "PATH in its `env:`" in problem
    # every node's env gives the same site torch: a difference that changes no verdict
    same = verdict([healthy(n, torch=SITE, bare_torch=STOCK) for n in ("a", "b")])
    assert same.get("b", "torch").mark == Mark.PASS  # type: ignore[union-attr]


def test_launch_sh_and_the_probe_export_the_same_lines() -> None:
    cfg = config("a", env={"PYTHONPATH": "/site", "HF_TOKEN": "tok'en"})
    node = cfg.nodes[0]
    env = node_env(cfg, node, "r1", 0)
    script = launch_script("r1", "a", 0, "/w/n", ("py", "t.py"), env, "/w/code/x")
    rank = rank_env.for_node(cfg, node, "/w/code/x")
    assert rank.env == job_env(cfg, node) and "DDPTUI_RUN" not in rank.env
    for line in rank.exports():
        assert line in script.splitlines()
    assert rank.exports()[-1] == env_exports({}, "/w/code/x")[0]  # the project goes first
    assert "PYTHONPATH" not in "".join(rank.exports(without="PYTHONPATH")[:-1])
    assert rank.exports(without=PROJECT) == env_exports(rank.env)


@pytest.fixture
def site_torch(tmp_path: Path) -> Path:
    pkg = tmp_path / "site" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "2.99.0+site"\n')
    return pkg.parent


def test_a_local_node_probed_as_its_ranks_names_pythonpath(site_torch: Path) -> None:
    secret = "hf_s3cr3t_value_1234"
    node = NodeConfig("a", "localhost", transport="local", python=sys.executable,
                      env={"PYTHONPATH": str(site_torch), "HF_TOKEN": secret,
                           "MULTI": "one\ntwo"})
    cfg = HostsConfig(Path("h.yaml"), (node,))
    rank = rank_env.for_node(cfg, node)
    assert secret not in rank_env.command(rank, "pass")  # on stdin, not the command line
    t = LocalTransport(node)
    t.connect(5)
    try:
        found, bare = probe_as_ranks(node, t, rank)
        assert found.torch == "2.99.0+site" and found.torch_path == str(site_torch / "torch")
        import torch

        assert bare is not None and bare.version == torch.__version__
        assert rank_env.ask_causes(t, rank, bare) == ("PYTHONPATH",)
    finally:
        t.close()
