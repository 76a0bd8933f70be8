"""Secret env values: which names are secret, withheld from run.json, masked in every line,
read back from the node on attach; and, over SSH to two hosts, absent from every local file,
the headless output and every process's command line while present in the ranks."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from jobs import ddptui, run_id_of, spawn_ddptui
from test_ssh_run import hosts

from ddptui.config import ConfigError, HostsConfig
from ddptui.config.parse import parse_hosts
from ddptui.config.secrets import (
    MIN_MASKED_LEN,
    REDACTED,
    Masker,
    config_masker,
    config_secret_names,
    is_secret,
    looks_secret,
    missing_secrets,
    redact_config_dict,
    secret_names,
)
from ddptui.events import LogLine
from ddptui.launch import withheld
from ddptui.launch.plan import exported_env, launch_script
from ddptui.live.follow import EventQueue, NodeFollower
from ddptui.nodelog import NodeLogParser
from ddptui.outcome import LaunchError

SECRET_NAMES = [
    "HF_TOKEN", "hf_token", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY", "OPENAI_API_KEY",
    "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN", "GITHUB_TOKEN",
    "GH_TOKEN", "DB_PASSWORD", "PGPASSWORD", "SMTP_PASSWD", "GPG_PASSPHRASE", "APIKEY",
    "api_key", "SSH_KEY", "PRIVATE_KEY", "SIGNING_KEYS", "CLIENT_SECRET", "SECRETS",
    "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN", "NPM_AUTH_TOKEN", "NEPTUNE_API_TOKEN",
    "COMET_API_KEY", "KEY", "Key", "MY_ACCESS_TOKEN_2", "AZURE_STORAGE_KEY", "__TOKEN__",
]
PLAIN_NAMES = [
    "CUDA_VISIBLE_DEVICES", "NCCL_IB_PKEY", "UCX_IB_PKEY", "TOKENIZERS_PARALLELISM",
    "MAX_TOKENS", "NUM_TOKENS", "TOKENS_PER_STEP", "HF_HUB_DISABLE_IMPLICIT_TOKEN",
    "SSL_KEY_FILE", "HF_TOKEN_PATH", "SECRET_DIR", "PASSWORD_FILE", "CACHE_KEY_PREFIX",
    "RSA_KEY_SIZE", "KEY_TYPE", "KEYBOARD_LAYOUT", "OMP_NUM_THREADS", "MASTER_ADDR",
    "NCCL_DEBUG", "PATH", "PWD", "PYTHONPATH", "GOOGLE_APPLICATION_CREDENTIALS", "_", "",
    "JOB_LINES", "LOGLEVEL", "HF_TOKENIZER_NAME",
]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_names_that_hold_secrets(name: str) -> None:
    assert looks_secret(name) and is_secret(name)


@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_names_that_do_not(name: str) -> None:
    assert not looks_secret(name)
    assert is_secret(name, [name]), "secret_env wins over every exception"
    assert not is_secret(name, [name + "X"])


def test_secret_names_and_redact_env() -> None:
    env = {"HF_TOKEN": "hf_abc", "A": "1", "MAX_TOKENS": "2048", "PROJECT_CRED": "pc"}
    assert secret_names(env) == ["HF_TOKEN"]
    assert secret_names(env, ["PROJECT_CRED"]) == ["HF_TOKEN", "PROJECT_CRED"]


HOSTS = """
secret_env: [PROJECT_CRED]
defaults:
  env: {HF_TOKEN: hf_value_one, MAX_TOKENS: "2048", PROJECT_CRED: "cred-value"}
nodes:
  - host: a
  - host: b
    env: {HF_TOKEN: hf_value_two, WANDB_API_KEY: wandb-value}
"""


def config() -> HostsConfig:
    return parse_hosts(HOSTS, "/cfg/hosts.yaml")


def test_secret_env_is_read_and_checked() -> None:
    assert config().secret_env == ("PROJECT_CRED",)
    for text, words in [
        ("secret_env: [NOPE]\nnodes: [{host: a, env: {X: '1'}}]\n",
         ["secret_env[0]", "NOPE", "no node's `env:`"]),
        ("secret_env: ['1A']\nnodes: [a]\n", ["secret_env[0]", "environment variable name"]),
        ("secret_env: X\nnodes: [a]\n", ["secret_env", "list of environment variable names"]),
    ]:
        with pytest.raises(ConfigError) as e:
            parse_hosts(text, "/cfg/hosts.yaml")
        assert all(w in str(e.value) for w in words), str(e.value)
    assert parse_hosts("secret_env:\nnodes: [a]\n", "/cfg/h.yaml").secret_env == ()


VALUES = ("hf_value_one", "hf_value_two", "wandb-value", "cred-value")


def test_run_json_withholds_every_secret_value_and_keeps_the_rest() -> None:
    cfg = config()
    d = redact_config_dict(cfg.to_dict())
    text = json.dumps(d)
    assert not [v for v in VALUES if v in text]
    assert '"MAX_TOKENS": "2048"' in text
    assert d["withheld_env"] == ["HF_TOKEN", "PROJECT_CRED", "WANDB_API_KEY"]
    assert d["nodes"][1]["env"]["WANDB_API_KEY"] == REDACTED
    back = HostsConfig.from_dict(json.loads(text))
    assert missing_secrets({n.name: n.env for n in back.nodes}, back.withheld_env) == {
        "a": ["HF_TOKEN", "PROJECT_CRED"], "b": ["HF_TOKEN", "PROJECT_CRED", "WANDB_API_KEY"]}
    with pytest.raises(LaunchError) as e:
        withheld.refuse_incomplete(back)
    assert "HF_TOKEN" in str(e.value) and "/cfg/hosts.yaml" in str(e.value)
    assert not [v for v in VALUES if v in str(e.value)]
    withheld.refuse_incomplete(cfg)  # the hosts file's own config launches
    assert not config_masker(back), "*** is nothing to mask"
    assert config_secret_names(cfg) == ["HF_TOKEN", "PROJECT_CRED", "WANDB_API_KEY"]


class ScriptReader:
    """The one call attach makes of a transport here: read the node's launch.sh."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files

    def read_from(self, path: str, offset: int, max_bytes: int) -> bytes:
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path].encode()[offset:offset + max_bytes]


def test_attach_reads_withheld_values_back_from_each_node_launch_script() -> None:
    cfg = config()
    back = HostsConfig.from_dict(json.loads(json.dumps(redact_config_dict(cfg.to_dict()))))
    dirs = {"a": "/w/a/.ddptui/runs/r/node0", "b": "/w/b/.ddptui/runs/r/node1"}
    scripts = {f"{dirs[n.name]}/launch.sh": launch_script("r", n.name, i, dirs[n.name],
                                                          ("python", "-m", "x"), dict(n.env))
               for i, n in enumerate(cfg.nodes)}
    both = withheld.recover(back, {"a": ScriptReader(scripts), "b": ScriptReader(scripts)}, dirs)
    assert both.nodes == cfg.nodes and both.withheld_env == ()
    withheld.refuse_incomplete(both)
    assert set(config_masker(both).values) == set(VALUES)
    del scripts[f"{dirs['b']}/launch.sh"]  # node b's run was cleaned: its values are gone
    one = withheld.recover(back, {"a": ScriptReader(scripts), "b": ScriptReader(scripts)}, dirs)
    assert one.nodes[0] == cfg.nodes[0] and one.nodes[1].env["HF_TOKEN"] == REDACTED
    with pytest.raises(LaunchError):
        withheld.refuse_incomplete(one)


NASTY = ["it's a \"test\"", "$(touch /tmp/pwned)", "a;\nexport EVIL=1\n b", "ünï ✓", "", " ",
         "x=y", "'", "\\"]


def test_exported_env_reads_back_exactly_what_launch_sh_exports() -> None:
    env = {f"V_{i}": v for i, v in enumerate(NASTY)}
    script = launch_script("r", "n", 0, "/w/n", ("python", "-m", "x", "export X=1"), env)
    assert exported_env(script) == env


def test_masker_text_and_bytes() -> None:
    m = Masker.of(["s3cr3t", "s3cr3t-longer", "a.b*c+", "ab", "ünï-✓", "two\nlines", "", "x"])
    assert m.text("s3cr3t-longer and s3cr3t") == "*** and ***"
    assert m.text("regex a.b*c+ vs aXbbc+") == "regex *** vs aXbbc+"
    assert m.text("ab x") == "ab x", f"shorter than {MIN_MASKED_LEN}: left alone"
    assert m.text("say ünï-✓!") == "say ***!"
    assert m.text("two\nlines / lines") == "*** / ***"
    data = "k=s3cr3t-longer ünï-✓ s3cr3t\n".encode()
    masked = m.data(data)
    assert len(masked) == len(data)
    assert masked == b"k=" + b"*" * 13 + b" " + b"*" * len("ünï-✓".encode()) + b" ******\n"
    assert Masker.of([]).text("s3cr3t") == "s3cr3t" and Masker.of([]).data(b"s") == b"s"
    assert not Masker.of(["abc"])
    setup = withheld.mask_lines(m, [LogLine("a", "pip from https://u:s3cr3t@idx", 0.0), 7])
    assert isinstance(setup[0], LogLine) and setup[0].text == "pip from https://u:***@idx"
    assert setup[1] == 7


def test_follower_masks_before_the_raw_copy_and_keeps_node_offsets(tmp_path: Path) -> None:
    raw_path = tmp_path / "node.log"
    f = NodeFollower(node="a", transport=None, node_dir="/w", raw_path=raw_path,  # type: ignore[arg-type]
                     parser=NodeLogParser("a"), out=EventQueue(), pgid=None,
                     stopping=threading.Event(), reconnect=lambda: None,  # type: ignore[arg-type,return-value]
                     masker=Masker.of(["hf_value_one"]))
    data = b"[ddptui 0 0] token hf_value_one here\nagent says hf_value_one\n"
    with open(raw_path, "ab") as raw:
        events = f._take(raw, data)
    assert f.offset == len(data) == raw_path.stat().st_size
    assert b"hf_value_one" not in raw_path.read_bytes()
    texts = [getattr(e, "text", "") for e in events]
    assert texts and not [t for t in texts if "hf_value_one" in t]
    assert "token ************ here" in texts


# -- over SSH: two hosts, two ranks each ---------------------------------------------------

SECRET = "hf_S3cr3t-" + hashlib.sha256(b"ddptui").hexdigest()[:20]
CRED = "pc-" + hashlib.sha256(b"cred").hexdigest()[:16]

SECRET_JOB = r'''
import hashlib, os, time
import torch.distributed as dist
dist.init_process_group("gloo")
r = dist.get_rank()
token, cred = os.environ["HF_TOKEN"], os.environ["PROJECT_CRED"]
ok = hashlib.sha256(token.encode()).hexdigest() == os.environ["JOB_EXPECTED_SHA"]
print(f"rank {r} token ok {ok} length {len(token)}", flush=True)
print(f"rank {r} prints it anyway: {token} and {cred}", flush=True)
time.sleep(float(os.environ.get("JOB_HOLD", "4")))
dist.barrier()
dist.destroy_process_group()
'''


@pytest.mark.cluster
@pytest.mark.torchrun
def test_a_secret_reaches_the_ranks_and_nothing_else(cluster2: Any, tmp_path: Path) -> None:
    env = {"HF_TOKEN": SECRET, "PROJECT_CRED": CRED, "JOB_HOLD": "4",
           "JOB_EXPECTED_SHA": hashlib.sha256(SECRET.encode()).hexdigest()}
    d = hosts(cluster2, tmp_path, env=env, secret_env=["PROJECT_CRED"])
    d["job"]["script"] = "project/job.py"  # the project synced is this folder alone
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "job.py").write_text(SECRET_JOB)
    path = tmp_path / "hosts.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    state, out = tmp_path / "state", tmp_path / "headless.out"
    proc = spawn_ddptui("run", str(path), "--headless", "--no-preflight", state=state, out=out)
    samples: list[bytes] = []
    seen_ranks = False
    end = time.monotonic() + 180
    try:
        while proc.poll() is None and time.monotonic() < end:
            for h in cluster2.hosts:  # every node's view (they share this PID namespace)
                ps = cluster2.exec(h, ["ps", "-ww", "-eo", "args"], timeout=20).stdout
                samples.append(ps)
                seen_ranks = seen_ranks or b"job.py" in ps
            time.sleep(0.3)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
    text = out.read_text()
    assert proc.returncode == 0, text[-3000:]
    assert seen_ranks, "ps was sampled while the ranks ran:\n" + "\n".join(
        ln for ln in samples[len(samples) // 2].decode().splitlines() if "python" in ln)
    for value in (SECRET, CRED):
        assert not [s for s in samples if value.encode() in s], "a secret on a command line"
        assert value not in text
    for rank in range(4):
        assert f"rank {rank} token ok True length {len(SECRET)}" in text
    assert "prints it anyway: " + "*" * len(SECRET) + " and " + "*" * len(CRED) in text
    run = state / "runs" / run_id_of(text)
    files = [p for p in run.rglob("*") if p.is_file()]
    assert len(files) > 5 and run / "run.json" in files
    for p in files:
        data = p.read_bytes()
        assert SECRET.encode() not in data and CRED.encode() not in data, p
    meta = json.loads((run / "run.json").read_text())
    assert {n["env"]["HF_TOKEN"] for n in meta["config"]["nodes"]} == {REDACTED}
    assert meta["config"]["withheld_env"] == ["HF_TOKEN", "PROJECT_CRED"]
    for n in meta["nodes"]:  # on the node, the values live only in the user's own files
        ndir = Path(n["run_dir"])
        assert ndir.stat().st_mode & 0o777 == 0o700
        assert ndir.parent.parent.stat().st_mode & 0o777 == 0o700  # .ddptui/runs
        assert (ndir.parents[2] / "code").stat().st_mode & 0o777 == 0o700  # synced code
        script = ndir / "launch.sh"
        assert script.stat().st_mode & 0o777 == 0o700 and SECRET in script.read_text()
    check = ddptui("check", str(path), state=state, timeout=120)
    assert check.returncode == 0, check.stderr
    assert "HF_TOKEN=***" in check.stdout and "PROJECT_CRED=***" in check.stdout
    assert SECRET not in check.stdout + check.stderr
