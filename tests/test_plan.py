"""The plan: torchrun argv, env and launch.sh for each node, checked down to the byte."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddptui import events
from ddptui.config import HostsConfig, JobConfig, NodeConfig, RendezvousConfig, parse_config
from ddptui.launch.plan import (
    EXIT_NO_RUN_DIR,
    NodeLaunch,
    Plan,
    endpoint_host,
    expand_home,
    launch_script,
    make_plan,
    new_run_id,
    quote,
)

RUN = "20261121-145301-ab12"
ROOT = Path(__file__).resolve().parent.parent


def config(
    nodes: list[NodeConfig] | None = None, *, rendezvous: RendezvousConfig | None = None,
    job: JobConfig | None = None,
) -> HostsConfig:
    nodes = nodes or [NodeConfig("a", "a", nproc_per_node=2),
                      NodeConfig("b", "b", nproc_per_node=2)]
    return HostsConfig(
        Path("/cfg/hosts.yaml"), tuple(nodes), rendezvous or RendezvousConfig(), job or JobConfig()
    )


def plan(cfg: HostsConfig, **kw: object) -> Plan:
    workdirs = {n.name: f"/home/u/{n.name}" for n in cfg.nodes}
    args: dict[str, object] = {"workdirs": workdirs, "rdzv_host": "10.0.0.1"}
    args.update(kw)
    return make_plan(cfg, RUN, **args)  # type: ignore[arg-type]


def flags(launch: NodeLaunch) -> list[str]:
    return list(launch.argv[2:])


# ----------------------------------------------------------------------------- argv


def test_c10d_argv_exactly() -> None:
    p = plan(config())
    a, b = p.nodes
    rdir = f"/home/u/a/.ddptui/runs/{RUN}/node0"
    assert a.run_dir == rdir
    assert a.log_dir == f"{rdir}/torchelastic"
    assert a.argv == (
        "python3", f"{rdir}/torchrun.py",
        "--nnodes", "2",
        "--nproc-per-node", "2",
        "--rdzv-backend", "c10d",
        "--rdzv-endpoint", "10.0.0.1:29400",
        "--rdzv-id", RUN,
        "--rdzv-conf", "join_timeout=600",
        "--max-restarts", "0",
        "--tee", "3",
        "--log-dir", f"{rdir}/torchelastic",
        "-m", "ddptui_worker",
    )
    assert b.run_dir == f"/home/u/b/.ddptui/runs/{RUN}/node1"
    assert flags(b)[:12] == flags(a)[:12]  # one rendezvous for all
    assert (a.node_rank, b.node_rank) == (0, 1)
    assert p.run_id == RUN
    assert p.world_size == 4


def test_static_argv_exactly() -> None:
    cfg = config(
        [NodeConfig("a", "a", nproc_per_node=1, node_rank=1),
         NodeConfig("b", "b", nproc_per_node=1, node_rank=0)],
        rendezvous=RendezvousConfig(backend="static", join_timeout=30),
    )
    p = plan(cfg, rdzv_host="b.internal")
    assert [launch.node.name for launch in p.nodes] == ["b", "a"]  # node-rank order
    b, a = p.nodes
    assert flags(a) == [
        "--nnodes", "2",
        "--nproc-per-node", "1",
        "--rdzv-backend", "static",
        "--master-addr", "b.internal",
        "--master-port", "29500",
        "--node-rank", "1",
        "--rdzv-id", RUN,
        "--rdzv-conf", "timeout=30",
        "--max-restarts", "0",
        "--tee", "3",
        "--log-dir", f"/home/u/a/.ddptui/runs/{RUN}/node1/torchelastic",
        "-m", "ddptui_worker",
    ]
    assert "--node-rank" in flags(b) and flags(b)[flags(b).index("--node-rank") + 1] == "0"
    assert b.run_dir.endswith("/node0") and a.run_dir.endswith("/node1")


def test_optional_flags() -> None:
    cfg = config(
        [NodeConfig("a", "a", nproc_per_node="gpu", addr="10.1.0.5"),
         NodeConfig("b", "b", nproc_per_node=4)],
        rendezvous=RendezvousConfig(port=1234, id="job7", join_timeout=60,
                                    last_call_timeout=5, close_timeout=9),
        job=JobConfig(max_restarts=3, monitor_interval=0.5, args=("--epochs", "2")),
    )
    p = plan(cfg)
    a, b = p.nodes
    fa = flags(a)
    assert fa[fa.index("--nproc-per-node") + 1] == "gpu"
    assert fa[fa.index("--rdzv-endpoint") + 1] == "10.0.0.1:1234"
    assert fa[fa.index("--rdzv-id") + 1] == "job7"
    assert fa[fa.index("--rdzv-conf") + 1] == "join_timeout=60,last_call_timeout=5,close_timeout=9"
    assert fa[fa.index("--max-restarts") + 1] == "3"
    assert fa[fa.index("--monitor-interval") + 1] == "0.5"
    assert fa[fa.index("--local-addr") + 1] == "10.1.0.5"
    assert fa[-4:] == ["-m", "ddptui_worker", "--epochs", "2"]
    assert "--local-addr" not in flags(b)
    assert p.world_size is None


def test_whole_second_monitor_interval() -> None:
    p = plan(config(job=JobConfig(monitor_interval=2.0)))
    f = flags(p.nodes[0])
    assert f[f.index("--monitor-interval") + 1] == "2"


def test_ipv6_rendezvous_host_is_bracketed() -> None:
    f = flags(plan(config(), rdzv_host="fd00::1").nodes[0])
    assert f[f.index("--rdzv-endpoint") + 1] == "[fd00::1]:29400"
    assert endpoint_host("[::1]") == "[::1]"
    assert endpoint_host("h") == "h"


def test_node_python_is_used() -> None:
    cfg = config([NodeConfig("a", "a", python="/opt/venv/bin/python")])
    assert plan(cfg).nodes[0].argv[:2] == (
        "/opt/venv/bin/python", f"/home/u/a/.ddptui/runs/{RUN}/node0/torchrun.py")


def test_entry_bundled_worker_module_name() -> None:
    p = plan(config(job=JobConfig(args=("--steps", "5"))), worker_module="my_worker")
    assert p.nodes[0].argv[-4:] == ("-m", "my_worker", "--steps", "5")


def test_entry_user_script_from_script_paths() -> None:
    cfg = config(job=JobConfig(script="/local/src/train.py", args=("x",)))
    p = plan(cfg, script_paths={"a": "/remote/a/train.py", "b": "/remote/b/train.py"})
    assert p.nodes[0].argv[-2:] == ("/remote/a/train.py", "x")
    assert p.nodes[1].argv[-2:] == ("/remote/b/train.py", "x")
    assert "-m" not in p.nodes[0].argv[2:]


def test_entry_user_script_defaults_into_run_dir() -> None:
    p = plan(config(job=JobConfig(script="/local/src/train.py")))
    assert p.nodes[1].argv[-1] == f"/home/u/b/.ddptui/runs/{RUN}/node1/train.py"


def test_entry_module() -> None:
    p = plan(config(job=JobConfig(script="pkg.train", module=True, args=("-v",))))
    assert p.nodes[0].argv[-3:] == ("-m", "pkg.train", "-v")


def test_argv_from_a_parsed_hosts_file() -> None:
    cfg = parse_config(
        "rendezvous: {backend: static, master_addr: m, master_port: 2000}\n"
        "nodes:\n  - {host: x, node_rank: 1, nproc_per_node: 1}\n"
        "  - {host: y, node_rank: 0, nproc_per_node: 3}\n",
        "/cfg/h.yaml",
    )
    p = plan(cfg, rdzv_host="m")
    assert [(n.node.name, n.node_rank) for n in p.nodes] == [("y", 0), ("x", 1)]
    assert p.world_size == 4
    f = flags(p.nodes[0])
    assert f[f.index("--master-port") + 1] == "2000"


def test_example_file_plans() -> None:
    from ddptui.config import load_config

    cfg = load_config(ROOT / "hosts.example.yaml")
    homes = {n.name: expand_home(n.workdir, "/home/demo") for n in cfg.nodes}
    p = make_plan(cfg, RUN, workdirs=homes, rdzv_host=cfg.rendezvous.endpoint or "127.0.0.1")
    assert [n.run_dir for n in p.nodes] == [
        f"/home/demo/.ddptui-demo/local-a/.ddptui/runs/{RUN}/node0",
        f"/home/demo/.ddptui-demo/local-b/.ddptui/runs/{RUN}/node1",
    ]
    assert p.world_size == 4
    f = flags(p.nodes[0])
    assert f[f.index("--rdzv-endpoint") + 1] == "127.0.0.1:29400"


# ----------------------------------------------------------------------------- env


def test_env_ddptui_values() -> None:
    env = plan(config()).nodes[1].env
    assert env == {
        "PYTHONUNBUFFERED": "1",
        "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": events.PREFIX_TEMPLATE,
        "LOGLEVEL": "INFO",
        "TTY_COMPATIBLE": "1",
        "DDPTUI_RUN": f"{RUN}/1",
    }


def test_env_precedence() -> None:
    node = NodeConfig(
        "a", "a",
        env={"MINE": "x", "LOGLEVEL": "WARNING", "NCCL_DEBUG": "WARN", "PYTHONUNBUFFERED": "0"},
    )
    job = JobConfig(nccl_debug="INFO", nccl_debug_subsys="INIT,NET",
                    torch_distributed_debug="DETAIL", torch_cpp_log_level="INFO")
    env = plan(config([node], job=job)).nodes[0].env
    assert env["MINE"] == "x"
    assert env["LOGLEVEL"] == "WARNING"  # the user's wins: ddptui only fills it in
    assert env["NCCL_DEBUG"] == "INFO"  # job wins over node env
    assert env["PYTHONUNBUFFERED"] == "1"  # ddptui's own wins
    assert env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
    assert env["TORCH_DISTRIBUTED_DEBUG"] == "DETAIL"
    assert env["TORCH_CPP_LOG_LEVEL"] == "INFO"
    assert env["DDPTUI_RUN"] == f"{RUN}/0"


@pytest.mark.parametrize(("own", "want"), [
    ({}, "1"), ({"TTY_COMPATIBLE": "0"}, "0"), ({"FORCE_COLOR": "1"}, None)])
def test_rich_is_told_it_draws_on_a_terminal_unless_the_node_says(
        own: dict[str, str], want: str | None) -> None:
    env = plan(config([NodeConfig("a", "a", env=own)])).nodes[0].env
    assert env.get("TTY_COMPATIBLE") == want
    assert {k: env[k] for k in own} == own


def test_env_is_a_copy() -> None:
    node = NodeConfig("a", "a", env={"A": "1"})
    plan(config([node])).nodes[0].env["A"] = "2"
    assert node.env == {"A": "1"}


# ----------------------------------------------------------------------------- launch.sh


def test_script_shape_exactly() -> None:
    launch = plan(config([NodeConfig("a", "a", env={"Z": "last", "A": "it's"})])).nodes[0]
    rdir = f"/home/u/a/.ddptui/runs/{RUN}/node0"
    lines = launch.script.splitlines()
    assert launch.script.endswith("\n")
    assert lines[0] == "#!/bin/sh"
    assert lines[1] == f"# ddptui run {RUN}, node a (node rank 0)"
    assert lines[2] == "# " + shlex.join(["torchrun", *launch.argv[2:]])
    assert lines[3] == f"cd '{rdir}' || exit {EXIT_NO_RUN_DIR}"
    assert lines[4] == "echo $$ > pgid"
    assert lines[5:12] == [
        "export A='it'\"'\"'s'",
        f"export DDPTUI_RUN='{RUN}/0'",
        "export LOGLEVEL='INFO'",
        "export PYTHONUNBUFFERED='1'",
        "export TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[ddptui ${rank} ${local_rank}] '",
        "export TTY_COMPATIBLE='1'",
        "export Z='last'",
    ]
    assert lines[12] == " ".join(f"'{a}'" for a in launch.argv)
    assert lines[13:] == [
        "rc=$?",
        'echo "$rc" > exit_code.tmp && mv exit_code.tmp exit_code',
        'exit "$rc"',
    ]


NASTY = [
    "two words",
    "it's",
    'say "hi"',
    "$(touch pwned)",
    "`touch pwned`",
    "a; touch pwned",
    "line1\nline2",
    "tab\there",
    "ünïcødé ✓ 日本",
    "$HOME ${PATH} $$ $1",
    "\\back\\slash\\",
    "'",
    "''",
    "",
    "-",
    "--flag=value with space",
    "* ? [a-z]",
    "a|b&c>d<e",
    "#not a comment",
    "~",
    "\r\n",
]


@pytest.mark.parametrize("value", NASTY)
def test_quote_round_trips_through_shlex(value: str) -> None:
    assert shlex.split(quote(value)) == [value]
    assert quote(value).startswith("'")  # always quoted: one shape for every value


def script_words(launch: NodeLaunch) -> tuple[dict[str, str], tuple[str, ...]]:
    """What sh would see: the exported env and the command line, via shlex."""
    body = launch.script.split(f"exit {EXIT_NO_RUN_DIR}\necho $$ > pgid\n", 1)[1]
    body = body.rsplit("\nrc=$?", 1)[0]
    words = shlex.split(body)
    count = words.count("export")
    assert words[: 2 * count : 2] == ["export"] * count
    env = dict(w.split("=", 1) for w in words[1 : 2 * count : 2])
    return env, tuple(words[2 * count :])


def test_argv_and_env_round_trip_through_shlex() -> None:
    node = NodeConfig("a", "a", env={f"V{i}": v for i, v in enumerate(NASTY)})
    launch = plan(config([node], job=JobConfig(args=tuple(NASTY)))).nodes[0]
    env, argv = script_words(launch)
    assert argv == launch.argv
    assert env == launch.env


FAKE_PYTHON = """\
#!{python}
import json, os, sys
with open("out.json", "w", encoding="utf-8") as f:
    json.dump({{"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}}, f)
sys.exit(int(os.environ.get("FAKE_RC", "0")))
"""


def fake_python(tmp_path: Path) -> str:
    fake = tmp_path / "fake python"  # a space in the interpreter's path, too
    fake.write_text(FAKE_PYTHON.format(python=sys.executable))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return str(fake)


def run_launch(tmp_path: Path, launch: NodeLaunch) -> tuple[dict[str, object], int]:
    os.makedirs(launch.run_dir, exist_ok=True)
    script = Path(launch.run_dir) / "launch.sh"
    script.write_text(launch.script, encoding="utf-8")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"}
    done = subprocess.run(["/bin/sh", "launch.sh"], cwd=launch.run_dir, env=env,
                          capture_output=True, timeout=60, check=False)
    out = json.loads((Path(launch.run_dir) / "out.json").read_text(encoding="utf-8"))
    return out, done.returncode


def test_script_run_by_sh_passes_everything_verbatim(tmp_path: Path) -> None:
    env = {f"V{i}": v for i, v in enumerate(NASTY)}
    env["FAKE_RC"] = "3"
    node = NodeConfig("n", "n", python=fake_python(tmp_path), env=env)
    cfg = config([node], job=JobConfig(args=tuple(NASTY), nccl_debug="INFO"))
    launch = make_plan(cfg, RUN, workdirs={"n": str(tmp_path / "work dir")}, rdzv_host="h").nodes[0]
    out, rc = run_launch(tmp_path, launch)
    assert out["argv"] == list(launch.argv[1:])
    assert out["cwd"] == launch.run_dir
    seen = out["env"]
    assert isinstance(seen, dict)
    for key, value in launch.env.items():
        assert seen[key] == value, key
    assert rc == 3
    run_dir = Path(launch.run_dir)
    assert (run_dir / "exit_code").read_text() == "3\n"
    assert not (run_dir / "exit_code.tmp").exists()
    assert int((run_dir / "pgid").read_text()) > 0
    assert not (tmp_path / "pwned").exists() and not (run_dir / "pwned").exists()


def test_script_exits_97_without_run_dir(tmp_path: Path) -> None:
    node = NodeConfig("n", "n", python=fake_python(tmp_path))
    launch = make_plan(config([node]), RUN, workdirs={"n": str(tmp_path / "w")},
                       rdzv_host="h").nodes[0]
    (tmp_path / "launch.sh").write_text(launch.script)
    done = subprocess.run(["/bin/sh", "launch.sh"], cwd=tmp_path, capture_output=True,
                          timeout=60, check=False)
    assert done.returncode == EXIT_NO_RUN_DIR


def test_newline_in_names_and_args_stays_out_of_comments() -> None:
    script = launch_script("r", "evil\nrm -rf /", 0, "/w", ("py", "-m", "x", "a\ntouch x"),
                           {"A": "1"})
    lines = script.splitlines()
    assert lines[1] == "# ddptui run r, node evil\\nrm -rf / (node rank 0)"
    assert lines[2].startswith("# torchrun") and "\\n" in lines[2]
    assert lines[3].startswith("cd ")


def test_launch_script_rejects_what_sh_cannot_carry() -> None:
    with pytest.raises(ValueError):
        launch_script("r", "n", 0, "/w", ("py",), {"BAD-NAME": "1"})
    with pytest.raises(ValueError):
        launch_script("r", "n", 0, "/w", ("py", "a\x00b"), {})


_SAFE_TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_SAFE_TEXT, max_size=5), st.dictionaries(
    st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True), _SAFE_TEXT, max_size=4))
def test_fuzz_script_round_trips_through_shlex(args: list[str], env: dict[str, str]) -> None:
    node = NodeConfig("n", "n", env=env)
    launch = plan(config([node], job=JobConfig(args=tuple(args)))).nodes[0]
    got_env, argv = script_words(launch)
    assert argv == launch.argv
    assert got_env == launch.env


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(_SAFE_TEXT, min_size=1, max_size=4), _SAFE_TEXT)
def test_fuzz_script_run_by_sh(tmp_path: Path, args: list[str], value: str) -> None:
    node = NodeConfig("n", "n", python=fake_python(tmp_path), env={"V": value})
    launch = make_plan(config([node], job=JobConfig(args=tuple(args))), RUN,
                       workdirs={"n": str(tmp_path)}, rdzv_host="h").nodes[0]
    out, rc = run_launch(tmp_path, launch)
    assert rc == 0
    assert out["argv"] == list(launch.argv[1:])
    assert out["env"]["V"] == value  # type: ignore[index]


# ----------------------------------------------------------------------------- helpers


@pytest.mark.parametrize(
    ("path", "home", "expected"),
    [
        ("~", "/home/u", "/home/u"),
        ("~/", "/home/u", "/home/u"),
        ("~/x/y", "/home/u", "/home/u/x/y"),
        ("~/x", "/home/u/", "/home/u/x"),
        ("~/x", "/", "/x"),
        ("/abs/~/x", "/home/u", "/abs/~/x"),
        ("~bob/x", "/home/u", "~bob/x"),
        ("rel", "/home/u", "rel"),
    ],
)
def test_expand_home(path: str, home: str, expected: str) -> None:
    assert expand_home(path, home) == expected


def test_new_run_id() -> None:
    assert new_run_id(datetime(2026, 11, 21, 14, 53, 1), "ab12") == "20261121-145301-ab12"
    aware = datetime(2026, 11, 21, 16, 53, 1, tzinfo=timezone(timedelta(hours=2)))
    assert new_run_id(aware, "x") == "20261121-145301-x"
    assert new_run_id(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "A.b_c-9") == (
        "20260102-030405-A.b_c-9")
    early = new_run_id(datetime(2026, 1, 2, 3, 4, 5), "zz")
    late = new_run_id(datetime(2026, 1, 2, 3, 4, 6), "aa")
    assert early < late
    for bad in ("", "a b", "x/y", "é", "a\n"):
        with pytest.raises(ValueError):
            new_run_id(datetime(2026, 1, 1), bad)


def test_make_plan_rejects_bad_inputs() -> None:
    cfg = config()
    with pytest.raises(ValueError, match="run id"):
        make_plan(cfg, "bad id", workdirs={"a": "/a", "b": "/b"}, rdzv_host="h")
    with pytest.raises(ValueError, match="workdir"):
        make_plan(cfg, RUN, workdirs={"a": "/a"}, rdzv_host="h")
    with pytest.raises(ValueError, match="workdir"):
        make_plan(cfg, RUN, workdirs={"a": "/a", "b": "~/b"}, rdzv_host="h")
    with pytest.raises(ValueError, match="rendezvous host"):
        make_plan(cfg, RUN, workdirs={"a": "/a", "b": "/b"}, rdzv_host="")


def test_plan_for_node() -> None:
    p = plan(config())
    assert p.for_node("b").node_rank == 1
    with pytest.raises(KeyError):
        p.for_node("zz")


def test_plan_module_does_no_io() -> None:
    source = (ROOT / "ddptui" / "launch" / "plan.py").read_text()
    for word in ("open(", "subprocess", "import os", "pathlib", "socket", ".now(", "random"):
        assert word not in source, word
