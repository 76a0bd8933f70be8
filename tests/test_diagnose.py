"""The diagnosis rules against recorded output: ddptui's own runs, the H100 captures, gloo
failures recorded with torchrun on the CPU, and lines quoted from public issue threads
(tests/data/diagnose/README.md says where each came from)."""

from __future__ import annotations

import json
import re

import pytest
from replay import DATA, T0, node_events, shift_ranks

from ddptui.diagnose import Cause, Diagnosis, diagnose
from ddptui.events import Event, Metric, NodeState, NodeStatus
from ddptui.nodelog import NodeLogParser

HERE = DATA / "diagnose"
_BLOCK_RANK = re.compile(r"^(\s+rank\s+: )(\d+)( \(local_rank)")
_HEADLESS = re.compile(r"^\[(\S+) (r(\d+)(?: nccl)?|agent|nccl)\] ?(.*)$")
_STATE = re.compile(r"^\[(\S+)\] ── (\w+)(?: \((?:exit code (-?\d+)|.*)\))?$")


def lines(name: str) -> list[str]:
    return (HERE / name).read_text(encoding="utf-8").splitlines()


def headless_events(name: str, t0: float = T0, dt: float = 0.05) -> list[Event]:
    """A headless capture turned back into the node log torchrun wrote, fed to the parser.

    ``[gpu0 r1] x`` and ``[gpu0 r1 nccl] x`` become ``[ddptui 1 1] x`` (one node, so the local
    rank is the global one), ``[gpu0 agent] x`` becomes ``x``, ``[gpu0] ── failed (exit code
    1)`` a NodeState; ddptui's own report lines (``ddptui:``, ``✗``, indented) are dropped.
    """
    parsers: dict[str, NodeLogParser] = {}
    out: list[Event] = []
    for i, line in enumerate(lines(name)):
        t = t0 + i * dt
        m = _STATE.match(line)
        if m is not None:
            code = int(m.group(3)) if m.group(3) else None
            out.append(NodeState(m.group(1), NodeStatus(m.group(2)), t, exit_code=code))
            continue
        m = _HEADLESS.match(line)
        if m is None:
            continue
        node, rank, text = m.group(1), m.group(3), m.group(4)
        raw = f"[ddptui {rank} {rank}] {text}" if rank is not None else text
        out.extend(parsers.setdefault(node, NodeLogParser(node)).feed(raw, t))
    return out


def node_log(node: str, name: str, *, t0: float = T0, offset: int = 0,
             end: NodeStatus = NodeStatus.FAILED, code: int | None = 1) -> list[Event]:
    """A recorded node log (torchrun's own output) as ddptui reads it, then how it ended."""
    raw = (DATA / name if (DATA / name).exists() else HERE / name).read_text(encoding="utf-8")
    shifted = [_BLOCK_RANK.sub(lambda m: f"{m[1]}{int(m[2]) + offset}{m[3]}", ln)
               for ln in shift_ranks(raw.splitlines(), offset)]  # the failure block's too
    evs = node_events(node, shifted, t0=t0)
    return [NodeState(node, NodeStatus.RUNNING, t0), *evs,
            NodeState(node, end, t0 + 1000, exit_code=code)]


def public(name: str) -> tuple[str, list[str]]:
    """A section of public-lines.txt: its role (``rank N`` or ``agent``) and its lines."""
    text = (HERE / "public-lines.txt").read_text(encoding="utf-8")
    for block in text.split("\n## ")[1:]:
        head, *body = block.rstrip("\n").split("\n")
        if head.split(" | ")[0] == name:
            return head.split(" | ")[1], [ln for ln in body if ln]
    raise KeyError(name)


def public_log(node: str, name: str, t0: float = T0) -> list[str]:
    role, body = public(name)
    if role == "agent":
        return body
    r = role.split()[1]
    return [f"[ddptui {r} {r}] {ln}" for ln in body]


def public_events(node: str, *names: str, t0: float = T0) -> list[Event]:
    raw = [ln for name in names for ln in public_log(node, name)]
    return [NodeState(node, NodeStatus.RUNNING, t0), *node_events(node, raw, t0=t0),
            NodeState(node, NodeStatus.FAILED, t0 + 1000, exit_code=1)]


def check(d: Diagnosis | None, cause: Cause, node: str | None, rank: int | None
          ) -> Diagnosis:
    assert d is not None
    assert (d.cause, d.node, d.rank) == (cause, node, rank), d.headline
    for boiler in ("To enable traceback", "ChildFailedError", "errors.html",
                   "torch.distributed.elastic.multiprocessing.errors"):
        assert boiler not in d.headline
    assert "What to do: " in d.headline and d.advice in d.headline
    json.dumps(d.to_dict())
    return d


# -- the rank's own error, never torch's boilerplate ---------------------------------------

def test_rank_exception_from_ddptui_recorded_torchrun() -> None:
    for name in ("fail-node0.log", "torchrun/root_cause.log", "restart-node0.log"):
        d = check(diagnose(node_log("a", name)), Cause.RANK_ERROR, "a", 1)
        assert "raised ValueError: boom on rank 1" in d.headline
        assert d.evidence == ["[a r1] [rank1]: ValueError: boom on rank 1"]


def test_failed_scenario_names_the_failing_node_and_calls_the_rest_consequences() -> None:
    evs = [*node_log("local-a", "fail-node0.log"),
           *node_log("local-b", "train-node1.log", end=NodeStatus.STOPPED, code=-15)]
    d = check(diagnose(evs, nodes=["local-a", "local-b"]), Cause.RANK_ERROR, "local-a", 1)
    assert any("(the cause)" in s for s in d.details["local-a"])
    assert any("stopped by torchrun (SIGTERM)" in s and "rank 0" in s
               for s in d.details["local-a"])
    assert d.details["local-b"] == ["ended stopped (exit code -15)"]


def test_gloo_value_error_on_rank_1() -> None:
    d = check(diagnose(node_log("a", "gloo-value-error.log")), Cause.RANK_ERROR, "a", 1)
    assert "ValueError: batch 3 has 0 samples: check --data-dir on this node" in d.headline


def test_worker_usage_error_not_torchs_headline() -> None:
    d = check(diagnose(headless_events("h100-two-ranks-one-gpu-headless.log")),
              Cause.RANK_ERROR, "gpu0", 1)
    assert d.what == ("rank 1 (node gpu0) refused to start: rank 1: 2 processes on this node "
                      "but only 1 GPU(s)")
    assert d.evidence == ["[gpu0 r1] ddptui_worker: error: rank 1: 2 processes on this node "
                          "but only 1 GPU(s)"]


def test_earliest_failure_is_the_headline_and_the_later_one_a_consequence() -> None:
    evs = [*node_log("b", "gloo-value-error.log", t0=T0 + 100, offset=2),
           *node_log("a", "torchrun/root_cause.log")]
    d = check(diagnose(evs), Cause.RANK_ERROR, "a", 1)
    assert any("rank 3 (node b) raised ValueError" in s and "consequence" in s
               for s in d.details["b"])


# -- rendezvous and ports ------------------------------------------------------------------

def test_rendezvous_timeout_names_the_node_that_never_joined() -> None:
    evs = node_log("a", "gloo-rdzv-timeout.log")
    d = check(diagnose(evs, nodes=["a", "b"]), Cause.RENDEZVOUS_TIMEOUT, "b", None)
    assert "node b never joined" in d.headline
    assert d.evidence == ["[a agent] torch.distributed.elastic.rendezvous.api."
                          "RendezvousTimeoutError"]
    assert d.details["b"] == ["the rendezvous timed out: node b never joined (the cause)",
                              "sent nothing: its torchrun never started or was never reached"]


def test_rendezvous_clients_joined_public() -> None:
    d = check(diagnose(public_events("a", "clients-joined"), nodes=["a", "b", "c"]),
              Cause.RENDEZVOUS_TIMEOUT, "b", None)
    assert "nodes b, c never joined" in d.headline


@pytest.mark.parametrize(("name", "endpoint"), [("rdzv-unreachable", "192.0.0.1:1234"),
                                                ("rdzv-unreachable-tuple", "127.0.0.1:42649")])
def test_rendezvous_endpoint_unreachable_public(name: str, endpoint: str) -> None:
    d = check(diagnose(public_events("n2", name)), Cause.RENDEZVOUS_UNREACHABLE, "n2", None)
    assert f"could not reach the rendezvous endpoint {endpoint}" in d.headline
    # a loopback endpoint: given as one, or a node's own name resolving to loopback there
    assert ("a loopback address" in d.headline) == endpoint.startswith("127.")
    assert ("launch with preflight" in d.headline) == endpoint.startswith("127.")


def test_a_peer_at_a_loopback_address_is_a_name_resolving_to_loopback() -> None:
    evs = [*node_log("node1", "gloo-loopback-name-node1.log"),
           *node_log("node2", "gloo-loopback-name-node2.log")]
    d = diagnose(evs)
    assert d is not None and d.cause is Cause.LOOPBACK_NAME, d
    assert "could not connect to a peer at 127.0.1.1, a loopback address: a node advertised " \
           "its own name" in d.headline and "launch with preflight" in d.headline
    assert any("remote=[127.0.1.1]" in e for e in d.evidence)


def test_address_in_use_recorded() -> None:
    d = check(diagnose(node_log("a", "gloo-addr-in-use.log")), Cause.ADDRESS_IN_USE, "a", None)
    assert d.what.startswith("port 29612 on node a is already in use")
    assert "EADDRINUSE" in d.evidence[-1]


def test_address_in_use_public() -> None:
    d = check(diagnose(public_events("m", "addr-in-use")), Cause.ADDRESS_IN_USE, "m", None)
    assert "port 29400" in d.headline


# -- collective timeouts: the rank that stopped first ---------------------------------------

def test_gloo_timeout_culprit_from_metric_steps() -> None:
    d = check(diagnose(node_log("a", "gloo-hang-metrics-ahead.log")),
              Cause.COLLECTIVE_TIMEOUT, "a", 1)
    assert "rank 0 timed out waiting in a gloo recv (5 s timeout) for rank 1 (node a)" \
        in d.headline
    assert "its last step was 2 while rank 0 reached 3" in d.headline
    assert d.evidence[-1] == ("last line of rank 1: [a r1] rank 1: loading shard 3 "
                              "(slow disk)")


def test_gloo_timeout_culprit_is_the_rank_that_never_waited() -> None:
    d = check(diagnose(node_log("a", "gloo-hang-metrics.log")), Cause.COLLECTIVE_TIMEOUT, "a", 1)
    assert "only rank that never reported waiting" in d.headline


def test_gloo_timeout_rank0_prints_only_three_ranks() -> None:
    d = check(diagnose(node_log("a", "gloo-hang-rank0-only.log")),
              Cause.COLLECTIVE_TIMEOUT, "a", 1)
    assert "ranks 0, 2 timed out waiting" in d.headline
    assert len([e for e in d.evidence if "Timed out waiting 5000ms" in e]) == 2


def test_nccl_watchdog_public_names_the_silent_rank() -> None:
    d = check(diagnose(public_events("b", "watchdog"), world_size=2),
              Cause.COLLECTIVE_TIMEOUT, None, 0)
    assert "rank 1 timed out waiting in NCCL ALLREDUCE #808 for rank 0" in d.headline
    d = check(diagnose(public_events("b", "watchdog-old"), world_size=2),
              Cause.COLLECTIVE_TIMEOUT, None, 0)
    assert "#469508" in d.headline


def test_nccl_heartbeat_public() -> None:
    d = check(diagnose(public_events("a", "heartbeat"), world_size=2),
              Cause.COLLECTIVE_TIMEOUT, None, 1)
    assert d.evidence[0].startswith("[a r0] [rank0]:[E ProcessGroupNCCL.cpp:1316]")


# -- memory ----------------------------------------------------------------------------------

def test_cuda_oom_h100() -> None:
    d = check(diagnose(headless_events("h100-cuda-oom-headless.log")), Cause.CUDA_OOM, "gpu0", 0)
    assert d.what == ("rank 0 (node gpu0) ran out of memory on GPU 0: it asked for 67.53 GiB "
                      "with 10.49 GiB free of 79.18 GiB")
    assert d.evidence[0].startswith("[gpu0 r0] [rank0]: torch.OutOfMemoryError: CUDA out of")


def test_host_oom_sigkill_without_traceback() -> None:
    d = check(diagnose(node_log("a", "gloo-sigkill.log")), Cause.HOST_OOM, "a", 1)
    assert "killed by SIGKILL with no traceback" in d.headline
    assert any("failed (exitcode: -9) local_rank: 1" in e for e in d.evidence)
    # rank 0 said "Connection closed by peer" before torchrun logged the kill: a consequence
    assert any("rank 0 (node a) lost its connection" in s and "consequence" in s
               for s in d.details["a"])


def test_sigkill_sent_by_torchrun_is_no_oom() -> None:
    evs = node_log("a", "gloo-sigkill.log")
    evs = [e for e in evs if not (hasattr(e, "text") and "closing signal" in e.text)]
    pid = next(int(m.group(1)) for e in evs if hasattr(e, "text")
               and (m := re.search(r"exitcode: -9\) local_rank: 1 \(pid: (\d+)", e.text)))
    evs += node_events("a", [f"W1122 19:21:59.138000 21526 site-packages/torch/distributed/"
                             f"elastic/multiprocessing/api.py:1028] Sending process {pid} "
                             "closing signal SIGTERM"], t0=T0)
    d = diagnose(evs)
    assert d is not None and d.cause is Cause.PEER_LOST


# -- files, crashes, nodes --------------------------------------------------------------------

def test_missing_module_on_one_node() -> None:
    evs = [*node_log("a", "train-node0.log", end=NodeStatus.STOPPED, code=-15),
           *node_log("b", "gloo-missing-module.log", offset=2)]
    d = check(diagnose(evs), Cause.MISSING_FILE, "b", 3)
    assert d.what.startswith("Python module 'apex_fused_adam' is missing on node b")


def test_missing_script() -> None:
    d = check(diagnose(node_log("a", "gloo-missing-script.log")), Cause.MISSING_FILE, "a", 1)
    assert "the script /tmp/diagrec/no_such_train.py does not exist on node a" in d.headline
    assert any("rank 0" in s and "consequence" in s for s in d.details["a"])


def test_segfault() -> None:
    d = check(diagnose(node_log("a", "gloo-segfault.log")), Cause.SEGFAULT, "a", 1)
    assert any("Signal 11 (SIGSEGV)" in e or "exitcode: -11" in e for e in d.evidence)


def test_sigabrt_recorded_names_the_signal_and_what_it_means() -> None:
    d = check(diagnose(node_log("a", "gloo-sigabrt.log")), Cause.SIGNAL, "a", 1)
    assert d.what.startswith("rank 1 (node a) was killed by SIGABRT: native code aborted it")
    assert any("exitcode  : -6 (pid:" in e for e in d.evidence)
    # rank 0's "Connection reset by peer" came first, yet is the consequence
    assert any("rank 0 (node a) lost its connection" in s and "consequence" in s
               for s in d.details["a"])


def test_sigabrt_public_failure_block() -> None:
    d = check(diagnose(public_events("h", "sigabrt-block")), Cause.SIGNAL, "h", 10)
    assert "rank 10 (node h) was killed by SIGABRT" in d.headline


@pytest.mark.parametrize(("code", "name", "words"), [
    (-7, "SIGBUS", "df -h /dev/shm"), (-4, "SIGILL", "another CPU"),
    (-9, "SIGKILL", "dmesg | grep -i oom"), (-15, "SIGTERM", "outside torchrun"),
    (-10, "SIGUSR1", "find what sends SIGUSR1")])
def test_each_signal_is_named_with_what_it_usually_means(code: int, name: str,
                                                         words: str) -> None:
    """The recorded SIGABRT's lines with another signal in torchrun's failure block (a
    SIGKILL with a traceback, which is no plain out-of-memory kill)."""
    evs = [e for e in node_log("a", "gloo-sigabrt.log")]
    evs = [NodeState(e.node, e.status, e.time, exit_code=e.exit_code) if isinstance(e, NodeState)
           else e for e in evs]
    raw = (HERE / "gloo-sigabrt.log").read_text(encoding="utf-8").replace(
        "exitcode  : -6 (pid: 32095)  (SIGABRT)", f"exitcode  : {code} (pid: 32095)  ({name})"
    ).replace("failed (exitcode: -6) local_rank: 1", f"failed (exitcode: {code}) local_rank: 1")
    raw += "[ddptui 1 1] [rank1]: Traceback (most recent call last):\n" if code == -9 else ""
    evs = [NodeState("a", NodeStatus.RUNNING, T0), *node_events("a", raw.splitlines(), t0=T0),
           NodeState("a", NodeStatus.FAILED, T0 + 1000, exit_code=1)]
    d = check(diagnose(evs), Cause.SIGNAL, "a", 1)
    assert f"was killed by {name}" in d.what and words in d.headline


def test_a_sigterm_torchrun_sent_is_no_signal_finding() -> None:
    d = diagnose(node_log("a", "gloo-missing-data.log"))
    assert d is not None and d.cause is Cause.MISSING_FILE
    assert not any("SIGTERM" in s and "killed" in s for s in d.details["a"])


def test_data_file_missing_on_one_node() -> None:
    evs = [*node_log("a", "train-node0.log", end=NodeStatus.STOPPED, code=-15),
           *node_log("b", "gloo-missing-data.log", offset=2)]
    d = check(diagnose(evs), Cause.MISSING_FILE, "b", 3)
    assert d.what == ("file data/shard-1.bin does not exist on node b (rank 3 (node b) "
                      "stopped on it)")
    assert "copy it to b" in d.advice and "relative path" in d.advice
    assert any("rank 2 (node b) lost its connection" in s and "consequence" in s
               for s in d.details["b"])


def test_lost_node() -> None:
    evs = [*node_log("a", "train-node0.log", end=NodeStatus.STOPPED, code=-15),
           *node_log("b", "train-node1.log", end=NodeStatus.LOST, code=None)]
    d = check(diagnose(evs), Cause.NODE_LOST, "b", None)
    assert "node b was lost" in d.headline


# -- NCCL --------------------------------------------------------------------------------------

def test_nccl_socket_ifname_names_no_interface_h100() -> None:
    d = check(diagnose(headless_events("h100-nccl-socket-ifname-missing-headless.log")),
              Cause.NCCL_NO_INTERFACE, "gpu0", 0)
    assert "NCCL_SOCKET_IFNAME=eth9" in d.headline
    assert any("NCCL WARN Bootstrap : no socket interface found" in e for e in d.evidence)


@pytest.mark.parametrize(("name", "rank", "text"), [
    ("socket-start-connect", 0, "connect to 10.0.0.2 port 45763 over NCCL's sockets "
                                "(Software caused connection abort)"),
    ("socket-poll-connect", 6, "connect to 10.0.0.4 port 56849 over NCCL's sockets "
                               "(No route to host)"),
    ("unhandled-system-error", 0, "NCCL hit a system error"),
])
def test_nccl_connect_public(name: str, rank: int, text: str) -> None:
    d = check(diagnose(public_events("n", name)), Cause.NCCL_CONNECT, "n", rank)
    assert text in d.headline


@pytest.mark.parametrize(("name", "rank", "text"), [
    ("duplicate-gpu", 3, "ranks 2 and 0 on node n use the same GPU (CUDA device 1000)"),
    ("duplicate-gpu-ray", 15, "ranks 15 and 7 on node n use the same GPU (CUDA device e4000)"),
])
def test_nccl_duplicate_gpu_public(name: str, rank: int, text: str) -> None:
    d = check(diagnose(public_events("n", name)), Cause.NCCL_DUPLICATE_GPU, "n", rank)
    assert d.what == text


def test_nccl_version_mismatch_across_nodes() -> None:
    evs = [*headless_events("h100-nccl-socket-ifname-lo-headless.log"),
           *public_events("b", "banner-2.27")]
    d = check(diagnose(evs), Cause.NCCL_VERSION_MISMATCH, "b", 2)
    assert "(2.28.9 on gpu0, 2.27.5 on b)" in d.headline


def test_other_nccl_error_in_nccls_words() -> None:
    d = check(diagnose(public_events("b", "banner-2.27")), Cause.NCCL_ERROR, "b", 2)
    assert "NCCL failed on rank 2 (node b): unhandled cuda error" in d.headline


# -- ranks that disagree about their collectives -------------------------------------------

def test_a_rank_that_left_early_is_the_cause_not_the_first_peer_that_lost_it() -> None:
    """Rank 1 ran out of data after step 3 and returned; ranks 0 and 2's next all_reduce
    found the connection closed, and torchrun's own root cause is rank 0."""
    d = check(diagnose(node_log("a", "gloo-early-exit.log")), Cause.EARLY_EXIT, "a", 1)
    assert d.what == ("rank 1 (node a) left the run first: it ended with exit code 0 at step 3 "
                      "while the other ranks still trained, so their next collective had no "
                      "partner (ranks 0, 2 failed in it)")
    assert "DistributedSampler(drop_last=True)" in d.advice
    assert "torch.distributed.algorithms.Join" in d.advice
    assert d.evidence[:2] == [
        "last line of rank 1: [a r1] rank 1: epoch done after 4 batches",
        "[a agent] ddptui: rank 1 (local_rank 1, pid 31721) exited with code 0"]
    for r in (0, 2):
        assert any(f"rank {r} (node a) lost its connection" in s and "after rank 1 (node a) "
                   "left, most likely a consequence" in s for s in d.details["a"])


def test_early_exit_without_steps_leaves_the_step_out() -> None:
    """No metric lines (a script that prints none): the step is not made up."""
    evs = [e for e in node_log("b", "gloo-early-exit.log")
           if not isinstance(e, Metric) and "@ddptui" not in getattr(e, "text", "")]
    d = check(diagnose(evs), Cause.EARLY_EXIT, "b", 1)
    assert "ended with exit code 0 while" in d.what


def test_ranks_that_all_exit_0_at_different_times_are_a_success() -> None:
    exits = [f"ddptui: rank {r} (local_rank {r}, pid {100 + r}) exited with code 0"
             for r in (1, 0)]
    evs = [NodeState("a", NodeStatus.RUNNING, T0),
           *node_events("a", ["[ddptui 0 0] step 1", "[ddptui 1 1] step 1", exits[0],
                              "[ddptui 0 0] step 2", exits[1]], t0=T0),
           NodeState("a", NodeStatus.EXITED, T0 + 10, exit_code=0)]
    assert diagnose(evs) is None and diagnose(evs, exit_code=0) is None


def test_a_clean_exit_with_no_collective_failure_after_it_is_not_the_cause() -> None:
    """Rank 0 finished; rank 1 then failed on its own (its ValueError, no collective in it):
    that is the cause, and rank 0's clean end is no finding."""
    raw = [ln for ln in (HERE / "gloo-value-error.log").read_text(encoding="utf-8")
           .splitlines() if not ln.startswith("[ddptui 0 0]")]
    raw.insert(0, "ddptui: rank 0 (local_rank 0, pid 7) exited with code 0")
    d = check(diagnose([NodeState("a", NodeStatus.RUNNING, T0), *node_events("a", raw, t0=T0),
                        NodeState("a", NodeStatus.FAILED, T0 + 1000, exit_code=1)]),
              Cause.RANK_ERROR, "a", 1)
    assert not any("left" in s for s in d.details["a"])


@pytest.mark.parametrize(("name", "what"), [
    ("gloo-mismatch-op.log", "ranks 0 and 1 called different collectives at collective #3: "
     "ALLREDUCE of shape [4] on rank 0, BROADCAST of shape [4] on rank 1"),
    ("gloo-mismatch-shape.log", "ranks 0 and 1 called ALLREDUCE with different tensors at "
     "collective #0: shape [4] on rank 0, [5] on rank 1")])
def test_collective_mismatch_under_detail(name: str, what: str) -> None:
    d = check(diagnose(node_log("a", name)), Cause.COLLECTIVE_MISMATCH, "a", 0)
    assert d.what.startswith(what) and "TORCH_DISTRIBUTED_DEBUG=DETAIL" in d.what
    assert "CollectiveFingerPrint" not in d.headline
    assert len(d.evidence) == 2 and all("Detected mismatch" in e for e in d.evidence)
    assert not any("consequence" in s for s in d.details["a"])  # one finding for both


def test_nccl_watchdog_names_the_collective_its_sequence_number_and_progress() -> None:
    d = check(diagnose(public_events("b", "watchdog"), world_size=2),
              Cause.COLLECTIVE_TIMEOUT, None, 0)
    assert ("(NCCL's watchdog: ALLREDUCE with sequence number 808 ran 600.02 s against its "
            "600 s timeout; rank 1 had completed up to #807 and queued up to #811)") in d.what


def test_harmless_warnings_are_not_a_ranks_last_line() -> None:
    warn = ("[W1125 21:25:35.256000 31720 torch/csrc/distributed/c10d/socket.cpp:767] [c10d] "
            "The hostname of the client socket cannot be retrieved. err=-3")
    evs = node_log("a", "gloo-early-exit.log")
    end = next(i for i, e in enumerate(evs) if "epoch done" in getattr(e, "text", "")) + 1
    evs[end:end] = node_events("a", [f"[ddptui 1 1] {warn}"], t0=T0)
    d = check(diagnose(evs), Cause.EARLY_EXIT, "a", 1)
    assert d.evidence[0] == "last line of rank 1: [a r1] rank 1: epoch done after 4 batches"


# -- no diagnosis --------------------------------------------------------------------------------

def test_a_run_that_exited_0_has_no_diagnosis() -> None:
    assert diagnose(headless_events("h100-nccl-socket-ifname-lo-headless.log")) is None
    assert diagnose(node_log("a", "fail-node0.log"), exit_code=0) is None
    assert diagnose([]) is None


def test_to_dict_is_what_run_json_stores() -> None:
    d = diagnose(node_log("a", "gloo-value-error.log"))
    assert d is not None
    doc = json.loads(json.dumps(d.to_dict()))
    assert doc["cause"] == "rank_error" and doc["node"] == "a" and doc["rank"] == 1
    assert set(doc) == {"cause", "headline", "what", "advice", "node", "rank", "time",
                        "evidence", "details"}


def test_data_readme_names_every_file() -> None:
    readme = (HERE / "README.md").read_text(encoding="utf-8")
    for f in HERE.iterdir():
        if f.is_file() and f.name != "README.md":
            assert f"`{f.name}`" in readme, f.name


def test_a_stored_diagnosis_with_a_field_of_the_wrong_type_is_unreadable() -> None:
    """run.json is read back as JSON: a record whose fields are not the diagnosis's types
    raises ValueError, which sends the caller to diagnose the run anew."""
    good = Diagnosis(Cause.CUDA_OOM, "h", "w", "a", "n1", 3, 1.5, ["e"], {"n1": ["d"]}).to_dict()
    assert Diagnosis.from_dict(json.loads(json.dumps(good))).to_dict() == good
    for field, wrong in (("rank", "3"), ("node", 1), ("evidence", "e"), ("details", {"n": 1}),
                         ("cause", "no such cause")):
        with pytest.raises(ValueError):
            Diagnosis.from_dict({**good, field: wrong})
