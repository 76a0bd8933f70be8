"""The hosts file: every field, its default, and every way it can be wrong."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddptui.config import (
    DEFAULT_KEYS,
    JOB_KEYS,
    NODE_KEYS,
    RENDEZVOUS_KEYS,
    SSH_KEYS,
    TOP_KEYS,
    ConfigError,
    HostsConfig,
    JobConfig,
    NodeConfig,
    Problem,
    RendezvousConfig,
    SSHOptions,
    load_config,
    parse_config,
)

ROOT = Path(__file__).resolve().parent.parent
HOME = os.path.expanduser("~")


def parse(text: str, path: str | Path = "/cfg/hosts.yaml") -> HostsConfig:
    return parse_config(textwrap.dedent(text), path)


def problems(text: str, path: str | Path = "/cfg/hosts.yaml") -> list[Problem]:
    with pytest.raises(ConfigError) as info:
        parse(text, path)
    return info.value.problems


def only(text: str, path: str | Path = "/cfg/hosts.yaml") -> Problem:
    found = problems(text, path)
    assert len(found) == 1, found
    return found[0]


# ----------------------------------------------------------------------------- defaults


def test_minimal_file_takes_every_default() -> None:
    cfg = parse("nodes: [gpu1]\n")
    assert cfg.path == Path("/cfg/hosts.yaml")
    assert cfg.nodes == (NodeConfig(name="gpu1", host="gpu1", line=1),)
    node = cfg.nodes[0]
    assert node.transport == "ssh"
    assert node.user is None and node.port is None and node.identity_file is None
    assert node.python == "python3"
    assert node.workdir == "~/.ddptui-work"
    assert node.nproc_per_node == "auto"
    assert dict(node.env) == {}
    assert node.addr is None and node.node_rank is None
    assert cfg.rendezvous == RendezvousConfig()
    assert cfg.rendezvous.effective_port == 29400
    assert cfg.rendezvous.join_timeout == 600
    assert cfg.job == JobConfig()
    assert cfg.job.is_bundled_worker
    assert cfg.job.stop_grace == 10.0
    assert cfg.ssh == SSHOptions()
    assert cfg.ssh.connect_timeout == 10.0


def test_every_node_field() -> None:
    cfg = parse(
        """\
        nodes:
          - name: box
            host: 10.0.0.2
            addr: 10.1.0.2
            user: alice
            port: 2222
            identity_file: ~/.ssh/id_ed25519
            python: /opt/py/bin/python
            workdir: /scratch/alice
            nproc_per_node: 4
            transport: ssh
            env: {A: b}
        """
    )
    assert cfg.nodes == (
        NodeConfig(
            name="box", host="10.0.0.2", addr="10.1.0.2", user="alice", port=2222,
            identity_file=f"{HOME}/.ssh/id_ed25519", python="/opt/py/bin/python",
            workdir="/scratch/alice", nproc_per_node=4, transport="ssh", env={"A": "b"},
            line=2,
        ),
    )


@pytest.mark.parametrize("value", ["gpu", "cpu", "auto", 1, 8])
def test_nproc_per_node_values(value: object) -> None:
    cfg = parse(f"nodes: [{{host: h, nproc_per_node: {value}}}]\n")
    assert cfg.nodes[0].nproc_per_node == value


def test_defaults_apply_and_nodes_override() -> None:
    cfg = parse(
        """\
        defaults:
          user: bob
          port: 22
          identity_file: ~/k
          python: python3.11
          workdir: ~/w
          nproc_per_node: 2
          env: {A: "1", B: "2"}
        nodes:
          - a
          - host: b
            user: carol
            port: 2200
            workdir: /w
            nproc_per_node: gpu
            python: /usr/bin/python3
            env: {B: three, C: "4"}
        """
    )
    a, b = cfg.nodes
    assert (a.user, a.port, a.identity_file, a.python, a.workdir, a.nproc_per_node) == (
        "bob", 22, f"{HOME}/k", "python3.11", "~/w", 2)
    assert dict(a.env) == {"A": "1", "B": "2"}
    assert (b.user, b.port, b.identity_file, b.python, b.workdir, b.nproc_per_node) == (
        "carol", 2200, f"{HOME}/k", "/usr/bin/python3", "/w", "gpu")
    assert dict(b.env) == {"A": "1", "B": "three", "C": "4"}


def test_string_entry_is_the_host_and_the_name() -> None:
    cfg = parse("nodes: [a, b.example.com]\n")
    assert [(n.name, n.host) for n in cfg.nodes] == [("a", "a"), ("b.example.com", "b.example.com")]


def test_name_defaults_to_host_and_can_be_given() -> None:
    cfg = parse("nodes: [{host: h1}, {host: h2, name: second}]\n")
    assert [n.name for n in cfg.nodes] == ["h1", "second"]
    assert cfg.node("second").host == "h2"
    with pytest.raises(KeyError):
        cfg.node("nope")


def test_local_transport_defaults_host_and_drops_ssh_defaults() -> None:
    cfg = parse(
        """\
        defaults: {user: bob, port: 2222, identity_file: /k}
        nodes:
          - {transport: local}
          - {transport: local, host: here, name: other, workdir: /x}
        """
    )
    a, b = cfg.nodes
    assert (a.name, a.host, a.transport, a.is_local) == ("localhost", "localhost", "local", True)
    assert (a.user, a.port, a.identity_file) == (None, None, None)
    assert (b.name, b.host) == ("other", "here")


def test_transport_default_can_be_local() -> None:
    cfg = parse("defaults: {transport: local}\nnodes: [{name: a, workdir: /a}, {name: b}]\n")
    assert [n.transport for n in cfg.nodes] == ["local", "local"]


def test_env_values_become_strings() -> None:
    cfg = parse(
        """\
        nodes:
          - host: h
            env:
              S: text
              I: 3
              F: 0.5
              T: true
              N: no
              E: ""
              Q: "it's $(x)"
        """
    )
    assert dict(cfg.nodes[0].env) == {
        "S": "text", "I": "3", "F": "0.5", "T": "1", "N": "0", "E": "", "Q": "it's $(x)"}


def test_paths_expand_tilde_locally_but_not_workdir() -> None:
    cfg = parse(
        """\
        defaults: {identity_file: ~/.ssh/k, workdir: ~/runs}
        ssh: {config_file: ~/.ssh/config, known_hosts: ~/kh}
        nodes: [h]
        """
    )
    assert cfg.nodes[0].identity_file == f"{HOME}/.ssh/k"
    assert cfg.nodes[0].workdir == "~/runs"
    assert cfg.ssh.config_file == f"{HOME}/.ssh/config"
    assert cfg.ssh.known_hosts == f"{HOME}/kh"


def test_yaml_anchors_and_merge_keys_work() -> None:
    cfg = parse("defaults: &common {user: bob, port: 2200}\nnodes: [h]\n")
    assert cfg.nodes[0].user == "bob"
    cfg = parse(
        """\
        nodes:
          - &n {host: a, nproc_per_node: 2}
          - {<<: *n, host: b}
        """
    )
    assert [(n.host, n.nproc_per_node) for n in cfg.nodes] == [("a", 2), ("b", 2)]


# ----------------------------------------------------------------------------- rendezvous


def test_rendezvous_every_field() -> None:
    cfg = parse(
        """\
        rendezvous:
          backend: c10d
          endpoint: 10.0.0.1
          port: 29555
          id: myjob
          join_timeout: 30
          last_call_timeout: 5
          close_timeout: 7
        nodes: [h]
        """
    )
    assert cfg.rendezvous == RendezvousConfig("c10d", "10.0.0.1", 29555, "myjob", 30, 5, 7)
    assert cfg.rendezvous.effective_port == 29555


def test_static_defaults_and_master_aliases() -> None:
    cfg = parse("rendezvous: {backend: static}\nnodes: [h]\n")
    assert cfg.rendezvous.effective_port == 29500
    cfg = parse("rendezvous: {backend: static, master_addr: m, master_port: 1234}\nnodes: [h]\n")
    assert (cfg.rendezvous.endpoint, cfg.rendezvous.port) == ("m", 1234)


@pytest.mark.parametrize(
    ("endpoint", "host", "port"),
    [("h:1234", "h", 1234), ("[::1]:99", "::1", 99), ("::1", "::1", None), ("h", "h", None)],
)
def test_endpoint_may_carry_its_port(endpoint: str, host: str, port: int | None) -> None:
    cfg = parse(f'rendezvous: {{endpoint: "{endpoint}"}}\nnodes: [h]\n')
    assert (cfg.rendezvous.endpoint, cfg.rendezvous.port) == (host, port)


def test_rendezvous_id_number_becomes_string() -> None:
    assert parse("rendezvous: {id: 42}\nnodes: [h]\n").rendezvous.id == "42"


def test_rendezvous_errors() -> None:
    found = problems(
        """\
        rendezvous:
          backend: etcd
          port: 0
          join_timeout: -1
          master_addr: x
          endpoint: "h:1:2x"
        nodes: [h]
        """
    )
    by_field = {p.field: p for p in found}
    assert by_field["rendezvous.backend"].line == 2
    assert "c10d, static" in by_field["rendezvous.backend"].message
    assert by_field["rendezvous.port"].line == 3
    assert "between 1 and 65535" in by_field["rendezvous.port"].message
    assert by_field["rendezvous.join_timeout"].line == 4
    assert by_field["rendezvous.master_addr"].line == 5
    assert "only for `backend: static`" in by_field["rendezvous.master_addr"].message


def test_rendezvous_conflicts() -> None:
    p = only('rendezvous: {endpoint: "h:1", port: 2}\nnodes: [h]\n')
    assert p.field == "rendezvous.endpoint" and "give the port once" in p.message
    p = only("rendezvous: {backend: static, endpoint: a, master_addr: b}\nnodes: [h]\n")
    assert p.field == "rendezvous.master_addr"
    p = only("rendezvous: {backend: static, close_timeout: 3}\nnodes: [h]\n")
    assert p.field == "rendezvous.close_timeout" and "c10d" in p.message
    p = only('rendezvous: {endpoint: "h:99999"}\nnodes: [h]\n')
    assert p.field == "rendezvous.endpoint" and "65535" in p.message
    p = only('rendezvous: {endpoint: "h:x"}\nnodes: [h]\n')
    assert p.field == "rendezvous.endpoint"


# ----------------------------------------------------------------------------- node ranks


def test_static_node_ranks_order_the_nodes() -> None:
    cfg = parse(
        """\
        rendezvous: {backend: static}
        nodes:
          - {host: a, node_rank: 1}
          - {host: b, node_rank: 2}
          - {host: c, node_rank: 0}
        """
    )
    assert [n.name for n in cfg.nodes] == ["a", "b", "c"]
    assert [n.name for n in cfg.ordered_nodes] == ["c", "a", "b"]
    assert cfg.rendezvous_node.name == "c"
    assert [cfg.node_rank(n) for n in cfg.nodes] == [1, 2, 0]


def test_without_node_rank_file_order_decides() -> None:
    cfg = parse("nodes: [a, b, c]\n")
    assert [cfg.node_rank(n) for n in cfg.nodes] == [0, 1, 2]
    assert cfg.rendezvous_node.name == "a"


def test_node_rank_needs_static() -> None:
    p = only("nodes:\n  - {host: a, node_rank: 0}\n")
    assert (p.field, p.line) == ("nodes[0].node_rank", 2)
    assert "static" in p.message


def test_node_rank_all_or_none_and_a_permutation() -> None:
    found = problems(
        """\
        rendezvous: {backend: static}
        nodes:
          - {host: a, node_rank: 0}
          - {host: b}
          - {host: c, node_rank: 0}
          - {host: d, node_rank: 7}
          - {host: e, node_rank: -1}
        """
    )
    got = {(p.field, p.line) for p in found}
    assert ("nodes[1].node_rank", 4) in got  # missing
    assert ("nodes[2].node_rank", 5) in got  # repeated
    assert ("nodes[3].node_rank", 6) in got  # out of range
    assert ("nodes[4].node_rank", 7) in got  # negative


# ----------------------------------------------------------------------------- job


def test_job_every_field(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(
        textwrap.dedent(
            """\
            job:
              script: train.py
              args: [--epochs, 3, "--name=a b", 0.5]
              max_restarts: 2
              monitor_interval: 0.5
              nccl_debug: info
              nccl_debug_subsys: INIT,NET
              torch_distributed_debug: DETAIL
              torch_cpp_log_level: warning
              stop_grace: 0
            nodes: [h]
            """
        )
    )
    job = load_config(hosts).job
    assert job == JobConfig(
        script=str(tmp_path / "train.py"), module=False, project=str(tmp_path),
        args=("--epochs", "3", "--name=a b", "0.5"), max_restarts=2, monitor_interval=0.5,
        nccl_debug="INFO", nccl_debug_subsys="INIT,NET", torch_distributed_debug="DETAIL",
        torch_cpp_log_level="WARNING", stop_grace=0.0,
    )
    assert not job.is_bundled_worker


def test_job_script_absolute_and_tilde(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text("")
    cfg = parse(f"job: {{script: {script}}}\nnodes: [h]\n")
    assert cfg.job.script == str(script)


def test_job_module() -> None:
    cfg = parse("job: {module: my_pkg.train, args: [-x]}\nnodes: [h]\n")
    assert (cfg.job.script, cfg.job.module, cfg.job.args) == ("my_pkg.train", True, ("-x",))


def test_job_missing_script_is_reported_with_resolved_path(tmp_path: Path) -> None:
    p = only("nodes: [h]\njob:\n  script: nope.py\n", tmp_path / "hosts.yaml")
    assert (p.field, p.line) == ("job.script", 3)
    assert str(tmp_path / "nope.py") in p.message


def test_job_errors() -> None:
    found = problems(
        """\
        job:
          script: a.py
          module: "not a module"
          args: "--epochs 3"
          max_restarts: -1
          monitor_interval: 0
          nccl_debug: LOUD
          torch_distributed_debug: ON
          torch_cpp_log_level: 3
          stop_grace: -2
        nodes: [h]
        """
    )
    by_field = {p.field: p for p in found}
    assert "job.script" in by_field  # does not exist
    assert by_field["job.module"].line == 3
    assert by_field["job.args"].line == 4
    assert "list" in by_field["job.args"].message
    assert "[--epochs, '3']" in by_field["job.args"].message
    assert by_field["job.max_restarts"].line == 5
    assert "-1" in by_field["job.max_restarts"].message
    assert by_field["job.monitor_interval"].line == 6
    assert "VERSION, WARN, INFO, TRACE" in by_field["job.nccl_debug"].message
    assert "OFF, INFO, DETAIL" in by_field["job.torch_distributed_debug"].message
    assert "INFO, WARNING, ERROR, FATAL" in by_field["job.torch_cpp_log_level"].message
    assert by_field["job.stop_grace"].line == 10


def test_script_and_module_exclusive(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("")
    p = only("job: {script: a.py, module: m}\nnodes: [h]\n", tmp_path / "h.yaml")
    assert p.field == "job.module" and "together" in p.message


def test_nccl_debug_subsys_list_or_string() -> None:
    cfg = parse("job: {nccl_debug_subsys: [INIT, NET]}\nnodes: [h]\n")
    assert cfg.job.nccl_debug_subsys == "INIT,NET"
    cfg = parse("job: {nccl_debug_subsys: ^INIT}\nnodes: [h]\n")
    assert cfg.job.nccl_debug_subsys == "^INIT"
    p = only("job: {nccl_debug_subsys: [1, {a: b}]}\nnodes: [h]\n")
    assert p.field == "job.nccl_debug_subsys" and "a list" in p.message


def test_torch_distributed_debug_off_survives_yaml_boolean() -> None:
    cfg = parse("job: {torch_distributed_debug: OFF}\nnodes: [h]\n")
    assert cfg.job.torch_distributed_debug == "OFF"


def test_args_items_must_be_scalars() -> None:
    found = problems("job:\n  args: [ok, true, [x], null]\nnodes: [h]\n")
    assert [p.field for p in found] == ["job.args[1]", "job.args[2]", "job.args[3]"]
    assert all(p.line == 2 for p in found)


def test_empty_args_and_sections() -> None:
    cfg = parse("defaults:\nrendezvous:\njob:\n  args:\nssh:\nnodes: [h]\n")
    assert cfg.job.args == ()
    assert cfg.rendezvous == RendezvousConfig()


# ----------------------------------------------------------------------------- ssh


def test_ssh_every_field() -> None:
    cfg = parse(
        """\
        ssh:
          config_file: /etc/ssh/cfg
          known_hosts: /kh
          accept_new_host_keys: true
          connect_timeout: 3
        nodes: [h]
        """
    )
    assert cfg.ssh == SSHOptions("/etc/ssh/cfg", "/kh", True, 3.0)


def test_ssh_errors() -> None:
    found = problems("ssh: {accept_new_host_keys: maybe, connect_timeout: 0}\nnodes: [h]\n")
    assert {p.field for p in found} == {"ssh.accept_new_host_keys", "ssh.connect_timeout"}


# ----------------------------------------------------------------------------- node errors


@pytest.mark.parametrize(
    ("entry", "field", "needle"),
    [
        ("{host: h, port: 70000}", "nodes[0].port", "between 1 and 65535"),
        ("{host: h, port: '22'}", "nodes[0].port", "the string '22'"),
        ("{host: h, port: true}", "nodes[0].port", "boolean"),
        ("{host: h, nproc_per_node: 0}", "nodes[0].nproc_per_node", '"gpu", "cpu" or "auto"'),
        ("{host: h, nproc_per_node: many}", "nodes[0].nproc_per_node", "'many'"),
        ("{host: h, transport: telnet}", "nodes[0].transport", '"ssh", "local" or "srun"'),
        ("{host: h, workdir: rel/dir}", "nodes[0].workdir", "absolute"),
        ("{host: h, workdir: ~bob/x}", "nodes[0].workdir", "absolute"),
        ("{host: 'a b'}", "nodes[0].host", "without spaces"),
        ("{host: bob@h}", "nodes[0].host", "`user:`"),
        ("{host: -oProxyCommand=x}", "nodes[0].host", "'-'"),
        ("{host: h, user: ''}", "nodes[0].user", "login name"),
        ("{host: h, name: ''}", "nodes[0].name", "label"),
        ("{host: h, python: ''}", "nodes[0].python", "interpreter"),
        ("{host: h, env: [A]}", "nodes[0].env", "NAME: value"),
        ("{host: h, env: {1A: x}}", "nodes[0].env.1A", "environment variable name"),
        ("{host: h, env: {A-B: x}}", "nodes[0].env.A-B", "environment variable name"),
        ("{host: h, env: {A: null}}", "nodes[0].env.A", "string, number or boolean"),
        ("{host: h, env: {A: [1]}}", "nodes[0].env.A", "a list"),
        ("{host: h, env: {DDPTUI_RUN: x}}", "nodes[0].env.DDPTUI_RUN", "ddptui itself"),
        ("{host: h, addr: 'a b'}", "nodes[0].addr", "without spaces"),
        ("{name: x}", "nodes[0].host", "transport: local"),
        ("{transport: local, port: 22}", "nodes[0].port", "no effect"),
        ("[a]", "nodes[0]", "a list"),
        ("42", "nodes[0]", "the number 42"),
        ("{host: h, nprocs: 2}", "nodes[0].nprocs", "did you mean"),
    ],
)
def test_node_errors(entry: str, field: str, needle: str) -> None:
    p = only(f"# comment\nnodes:\n  - {entry}\n")
    assert p.field == field
    assert p.line == 3
    assert needle in p.message, p.message
    assert p.message.endswith((".", "?"))


def test_misspelt_key_gets_a_suggestion() -> None:
    p = only("defaults:\n  nproc_per_nod: 2\nnodes: [h]\n")
    assert (p.field, p.line) == ("defaults.nproc_per_nod", 2)
    assert "did you mean `nproc_per_node`?" in p.message
    p = only("nodes: [h]\nrendevous: {backend: static}\n")
    assert "did you mean `rendezvous`?" in p.message
    p = only("nodes: [h]\njob: {max-restarts: 1}\n")
    assert "did you mean `max_restarts`?" in p.message
    p = only("nodes: [h]\nzzz: 1\n")
    assert "the keys here are: defaults, nodes" in p.message


def test_node_only_keys_are_not_defaults() -> None:
    p = only("defaults: {host: h}\nnodes: [h]\n")
    assert p.field == "defaults.host" and "each node" in p.message


def test_duplicate_nodes() -> None:
    found = problems(
        """\
        nodes:
          - a
          - a
          - {host: b, workdir: /w}
          - {host: b, workdir: /w, name: b2}
          - {host: b, workdir: /w, name: b3, port: 2}
          - {host: b, workdir: /w, name: b4, user: other}
        """
    )
    assert [(p.field, p.line) for p in found] == [("nodes[1].name", 3), ("nodes[3]", 5)]
    assert "'a'" in found[0].message and "nodes[0]" in found[0].message
    assert "nodes[2]" in found[1].message


def test_two_local_nodes_need_their_own_workdirs() -> None:
    p = only("nodes:\n  - {transport: local, name: a}\n  - {transport: local, name: b}\n")
    assert p.field == "nodes[1]" and "workdir" in p.message


def test_duplicate_key_is_reported() -> None:
    p = only("nodes: [a]\njob: {}\nnodes: [b]\n")
    assert (p.field, p.line) == ("nodes", 3)
    assert "line 1" in p.message


# ----------------------------------------------------------------------------- the file


def test_every_problem_is_reported_at_once_in_line_order() -> None:
    found = problems(
        """\
        defaults:
          port: x
        rendezvous: {port: 0}
        job: {max_restarts: -3}
        ssh: {connect_timeout: never}
        nodes:
          - {host: a, nproc_per_node: none}
          - {host: b, colour: red}
        """
    )
    assert [(p.field, p.line) for p in found] == [
        ("defaults.port", 2),
        ("rendezvous.port", 3),
        ("job.max_restarts", 4),
        ("ssh.connect_timeout", 5),
        ("nodes[0].nproc_per_node", 7),
        ("nodes[1].colour", 8),
    ]
    text = str(ConfigError(found))
    assert text.splitlines()[0].startswith("/cfg/hosts.yaml:2: defaults.port: must be")


@pytest.mark.parametrize(
    ("text", "field", "line", "needle"),
    [
        ("", "file", None, "empty"),
        ("# only a comment\n", "file", None, "empty"),
        ("just text\n", "file", 1, "mapping"),
        ("- a\n- b\n", "file", 1, "a list"),
        ("defaults: {}\n", "nodes", 1, "missing"),
        ("nodes: []\n", "nodes", 1, "non-empty"),
        ("nodes:\n", "nodes", 1, "non-empty"),
        ("nodes: h\n", "nodes", 1, "non-empty list"),
        ("nodes: [h]\njob: [1]\n", "job", 2, "mapping"),
        ("nodes: [h]\n1: x\n", "file", 2, "not a name"),
        ("nodes: [!!python/object:os.system x]\n", "nodes[0]", 1, "tagged"),
        ("nodes: [h]\njob: {args: [!!binary '']}\n", "job.args[0]", 2, "binary data"),
        ("nodes: [h]\njob: {args: [!!int 'x']}\n", "job.args[0]", 2, "cannot be read as !!int"),
        ("nodes: [h]\njob: {args: [!!float 'x']}\n", "job.args[0]", 2, "cannot be read"),
        ("nodes: [h]\njob: {args: [!!timestamp 'x']}\n", "job.args[0]", 2, "cannot be read"),
        ("nodes: [h\x01]\n", "yaml", 1, "not valid YAML"),
    ],
)
def test_file_level_errors(text: str, field: str, line: int | None, needle: str) -> None:
    p = only(text)
    assert (p.field, p.line) == (field, line)
    assert needle in p.message, p.message


def test_yaml_syntax_error_has_line_and_column() -> None:
    p = only("nodes:\n  - a\n  - [b\nrendezvous: {}\n")
    assert p.field == "yaml"
    assert p.line is not None and p.line >= 3
    assert "column" in p.message


def test_yaml_tab_indent_and_multiple_documents() -> None:
    assert only("nodes:\n\t- a\n").field == "yaml"
    p = only("nodes: [a]\n---\nnodes: [b]\n")
    assert (p.field, p.line) == ("yaml", 2)


def test_deep_nesting_is_a_config_error() -> None:
    p = only("nodes: " + "[" * 5000 + "]" * 5000 + "\n")
    assert p.field in ("yaml", "nodes[0]")


def test_huge_numbers_do_not_crash() -> None:
    p = only(f"nodes: [{{host: h, port: 0x{'f' * 5000}}}]\n")
    assert p.field == "nodes[0].port"
    p = only(f"nodes: [{{host: h, port: {'9' * 5000}}}]\n")
    assert p.field == "nodes[0].port"


def test_load_config_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.yaml")
    [p] = info.value.problems
    assert (p.file, p.line, p.field) == (str(tmp_path / "nope.yaml"), None, "file")
    assert "does not exist" in p.message
    assert str(info.value) == f"{tmp_path / 'nope.yaml'}: file: does not exist."


def test_load_config_directory_and_bad_encoding(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    assert "directory" in info.value.problems[0].message
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"nodes:\n  - \xff\n")
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    assert info.value.problems[0].line == 2
    assert "UTF-8" in info.value.problems[0].message


def test_load_config_reads_file(tmp_path: Path) -> None:
    hosts = tmp_path / "h.yaml"
    hosts.write_text("nodes: [héllo-node]\n", encoding="utf-8")
    assert load_config(str(hosts)).nodes[0].name == "héllo-node"


def test_example_hosts_file_parses() -> None:
    cfg = load_config(ROOT / "hosts.example.yaml")
    assert [n.name for n in cfg.nodes] == ["local-a", "local-b"]
    assert all(n.transport == "local" and n.nproc_per_node == 2 for n in cfg.nodes)
    assert all(n.workdir.startswith("~/.ddptui-demo/") for n in cfg.nodes)
    assert cfg.rendezvous.backend == "c10d"
    assert cfg.rendezvous.endpoint == "127.0.0.1"
    assert cfg.job.is_bundled_worker


def test_example_commented_nodes_parse_too() -> None:
    """The commented-out remote examples must be valid once uncommented."""
    lines = (ROOT / "hosts.example.yaml").read_text().splitlines()
    start = lines.index("nodes:")
    end = next(i for i, line in enumerate(lines) if line.startswith("rendezvous:"))
    out = lines[:start]
    for line in lines[start:end]:
        stripped = line.lstrip()
        if stripped.startswith(("# - ", "#   ")):
            out.append(line[: len(line) - len(stripped)] + stripped[2:])
        else:
            out.append(line)
    out += lines[end:]
    cfg = parse_config("\n".join(out), "/x/hosts.yaml")
    assert [n.name for n in cfg.nodes][2:] == ["gpu-box-1", "gpu-box-2"]
    assert cfg.nodes[3].nproc_per_node == "gpu"


def test_to_dict_is_json_ready() -> None:
    import json

    cfg = parse("nodes: [{host: a, env: {X: y}}, b]\njob: {args: [z]}\n")
    data = json.loads(json.dumps(cfg.to_dict()))
    assert data["nodes"][0]["env"] == {"X": "y"}
    assert data["job"]["args"] == ["z"]
    assert type(cfg).from_dict(data) == cfg
    # JSON types as they are, not only after a round trip: run.json's readers take it as JSON
    cfg = parse("nodes: [a]\njob: {args: [z], exclude: [y], setup: [x]}\n")
    assert cfg.to_dict() == json.loads(json.dumps(cfg.to_dict()))


def test_key_tuples_match_the_docs() -> None:
    doc = (ROOT / "docs" / "hosts-file.md").read_text()
    for key in (*TOP_KEYS, *NODE_KEYS, *DEFAULT_KEYS, *RENDEZVOUS_KEYS, *JOB_KEYS, *SSH_KEYS):
        assert f"`{key}`" in doc, key


# ----------------------------------------------------------------------------- fuzz

_KEYS = st.sampled_from(
    sorted({*TOP_KEYS, *NODE_KEYS, *RENDEZVOUS_KEYS, *JOB_KEYS, *SSH_KEYS, "nprocs", "A"})
)
_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["gpu", "local", "ssh", "static", "c10d", "~/x", "/abs", "h:1"]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(_KEYS, inner, max_size=5)
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_KEYS, _VALUES, max_size=6))
def test_fuzz_structured_documents(doc: dict[str, object]) -> None:
    text = yaml.safe_dump(doc, allow_unicode=True)
    try:
        cfg = parse_config(text, "/fuzz/hosts.yaml")
    except ConfigError as exc:
        assert exc.problems
        assert all(isinstance(p, Problem) and p.message for p in exc.problems)
        str(exc)
    else:
        assert cfg.nodes


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_fuzz_any_text(text: str) -> None:
    try:
        parse_config(text, "/fuzz/hosts.yaml")
    except ConfigError as exc:
        assert exc.problems
        str(exc)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["nodes:", "  - a", "  - {host: b, port: 2}", "- ", "job:", "  args: [x]", "{", "]",
             "&a", "*a", "<<: *a", "  env: {A: 1}", "defaults: &a {user: u}", "!!str", ":", "'",
             '"', "\t", "rendezvous: {backend: static}", "  - {node_rank: 0, host: c}", "---"]
        ),
        max_size=12,
    )
)
def test_fuzz_plausible_lines(lines: list[str]) -> None:
    try:
        parse_config("\n".join(lines), "/fuzz/hosts.yaml")
    except ConfigError as exc:
        assert exc.problems


_PLAUSIBLE = st.one_of(
    _SCALARS,
    st.sampled_from([1, 2, 22, 29400, 70000, -1, 0, "auto", "~/w", "/w", "rel", "h", "a b"]),
    st.dictionaries(st.sampled_from(["A", "B_1", "1X", "LOGLEVEL", "DDPTUI_RUN"]), _SCALARS,
                    max_size=3),
    st.lists(_SCALARS, max_size=3),
)
_NODE = st.one_of(
    st.sampled_from(["a", "b", "a b", "", "-x", "u@h"]),
    st.dictionaries(st.sampled_from([*NODE_KEYS, "hostname"]), _PLAUSIBLE, max_size=5),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.fixed_dictionaries(
        {"nodes": st.lists(_NODE, max_size=4)},
        optional={
            "defaults": st.dictionaries(st.sampled_from([*DEFAULT_KEYS, "host"]), _PLAUSIBLE,
                                        max_size=4),
            "rendezvous": st.dictionaries(st.sampled_from(RENDEZVOUS_KEYS), _PLAUSIBLE,
                                          max_size=4),
            "job": st.dictionaries(st.sampled_from(JOB_KEYS), _PLAUSIBLE, max_size=4),
            "ssh": st.dictionaries(st.sampled_from(SSH_KEYS), _PLAUSIBLE, max_size=3),
        },
    )
)
def test_fuzz_schema_shaped_documents(doc: dict[str, object]) -> None:
    text = yaml.safe_dump(doc, allow_unicode=True)
    try:
        cfg = parse_config(text, "/fuzz/hosts.yaml")
    except ConfigError as exc:
        assert exc.problems
        assert all(p.message.endswith((".", "?")) for p in exc.problems), exc.problems
        assert all(p.line is None or p.line >= 1 for p in exc.problems)
    else:
        assert cfg.nodes
        assert len({n.name for n in cfg.nodes}) == len(cfg.nodes)
        from ddptui.launch.plan import make_plan

        plan = make_plan(cfg, "r", workdirs={n.name: "/w" for n in cfg.nodes}, rdzv_host="h")
        assert len(plan.nodes) == len(cfg.nodes)
