"""NCCL facts from the log: parsed from real recorded output (tests/data/nccl/README.md).

The H100 captures are fed the way the run feeds them (torchrun output through
``NodeLogParser``; headless output back into LogLines), the public lines as quoted. Second
nodes for the cross-node rules are built from the same real lines.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddptui.events import Level, LogLine, Source, classify_level, is_nccl
from ddptui.nccl import (
    SLOW_INIT_FACTOR,
    SLOW_INIT_MARGIN_S,
    NcclFacts,
    NcclWarning,
    RankFacts,
    nccl_warnings,
    render_table,
)
from ddptui.nodelog import NodeLogParser

DATA = Path(__file__).parent / "data" / "nccl"
WORKER = DATA / "h100-worker-torchrun-nccl-info.log"
SUBSYS = DATA / "h100-nccl-subsys-all-init.log"
MISSING = DATA / "h100-nccl-socket-ifname-missing-headless.log"
LO = DATA / "h100-nccl-socket-ifname-lo-headless.log"
_HEADLESS_RE = re.compile(r"^\[(\S+) r(\d+)( nccl)?\] ")


def torchrun(facts: NcclFacts, node: str, text: str) -> NcclFacts:
    """Plain torchrun output, through the real line parser, one second per line."""
    parser = NodeLogParser(node)
    for i, line in enumerate(text.splitlines()):
        for ev in parser.feed(line, float(i)):
            if isinstance(ev, LogLine):
                facts.feed_line(ev)
    return facts


def headless(facts: NcclFacts, path: Path, node: str | None = None) -> NcclFacts:
    """ddptui's headless output turned back into the LogLines that the event parser makes of
    it today (the capture's printer did not yet class NCCL's stamped WARN lines as NCCL)."""
    for i, line in enumerate(path.read_text().splitlines()):
        m = _HEADLESS_RE.match(line)
        if m is None:
            continue
        text = line[m.end():]
        nccl = bool(m.group(3)) or is_nccl(text)
        source = Source.NCCL if nccl else Source.WORKER
        level = Level.INFO if m.group(3) else classify_level(text)
        facts.feed_line(LogLine(node or m.group(1), text, float(i), source, level,
                                int(m.group(2))))
    return facts


def section(name: str) -> list[str]:
    out: list[str] = []
    inside = False
    for line in (DATA / "public-samples.log").read_text().splitlines():
        if line.startswith("## "):
            inside = line[3:].split(" ")[0] == name
        elif inside and line:
            out.append(line)
    assert out, name
    return out


def fed(lines: list[str], node: str = "a", rank: int | None = 0,
        facts: NcclFacts | None = None) -> NcclFacts:
    facts = facts or NcclFacts()
    for i, line in enumerate(lines):
        facts.feed(node, rank, line, float(i))
    return facts


def only_rank(facts: NcclFacts, node: str = "a") -> RankFacts:
    (r,) = facts.nodes[node].ranks.values()
    return r


def rules(facts: NcclFacts) -> list[str]:
    return [w.rule for w in nccl_warnings(facts)]


# -- the H100 captures --------------------------------------------------------------------


def test_h100_torchrun_capture() -> None:
    facts = torchrun(NcclFacts(), "gpu0", WORKER.read_text())
    r = only_rank(facts, "gpu0")
    assert (r.label, r.rank, r.host, r.pid) == ("pid 483", 0, "vm", 483)
    assert (r.nccl_version, r.cuda_runtime, r.cuda_driver) == ("2.28.9", "13.0", "13.0")
    assert r.network == "Socket" and r.fallback_reason == "NET/IB : No device found."
    assert "Failed to initialize NET plugin IB" in r.net_notes
    assert r.hcas == [] and r.ib_found is False
    assert [(i.name, i.address) for i in r.bootstrap] == [("eth0", "192.0.2.2")]
    assert [(i.name, i.address) for i in r.sockets] == [("eth0", "192.0.2.2")]
    (c,) = r.comms.values()
    assert (c.comm, c.comm_id, c.func) == ("0x49bed080", "0xac09dad93356e2dd",
                                           "ncclCommInitRankConfig")
    assert (c.rank, c.nranks, c.n_nodes, c.local_ranks, c.cuda_dev, c.bus_id) == (
        0, 1, 1, 1, 0, "60")
    assert c.init_seconds == 0.69 and c.phases["kernels"] == 0.66
    assert c.slowest_phase == ("kernels", 0.66)
    assert r.ring_channels == 64 and r.ring_order == [0]
    assert r.channels == {"coll": 64, "collnet": 64, "nvls": 0, "p2p": 64, "p2p_per_peer": 64}
    assert r.warns == [] and facts.nodes["gpu0"].n_nodes == 1
    assert 0 < r.unknown < r.lines  # ENV/Plugin, RAS, CC Off...: counted, not raised on
    assert nccl_warnings(facts) == []  # one healthy node: nothing to say


def test_init_time_from_line_times_without_nccl_timings() -> None:
    lines = [ln for ln in WORKER.read_text().splitlines() if "Init timings" not in ln]
    (c,) = only_rank(torchrun(NcclFacts(), "gpu0", "\n".join(lines)), "gpu0").comms.values()
    assert c.nccl_total_s is None
    assert c.started == 13.0 and c.completed == 91.0 and c.init_seconds == 78.0


def test_subsys_all_capture() -> None:
    facts = torchrun(NcclFacts(), "gpu0", SUBSYS.read_text())
    r = only_rank(facts, "gpu0")
    assert r.speed_fallbacks == {"eth0": "10 Gbps"}
    assert r.gdr == {"eth0": False}
    assert r.ring_channels == 64  # from both `Channel NN/64 : 0` and `Ring NN : 0 -> 0 -> 0`
    assert next(iter(r.comms.values())).init_seconds == 0.60
    (w,) = nccl_warnings(facts)
    assert (w.rule, w.severity, w.nodes) == ("speed-fallback", Level.INFO, ("gpu0",))
    assert "eth0 as 10 Gbps" in w.text and "Could not get speed" in w.evidence
    torchrun(facts, "gpu1", WORKER.read_text())
    assert [(w.rule, w.severity) for w in nccl_warnings(facts)] == [
        ("speed-fallback", Level.WARNING)]


def test_socket_ifname_missing_warn_in_new_format() -> None:
    facts = headless(NcclFacts(), MISSING)
    r = only_rank(facts, "gpu0")
    assert r.env == {"NCCL_SOCKET_IFNAME": "eth9"} and r.no_socket_interface
    (warn,) = r.warns
    assert (warn.position, warn.stamp, warn.host) == ("bootstrap.cc:114", "2026-11-22 11:58:29",
                                                      "vm")
    assert warn.message == "Bootstrap : no socket interface found"
    (w,) = nccl_warnings(facts)
    assert w.severity is Level.ERROR and w.nodes == ("gpu0",)
    assert w.text.startswith("node gpu0: NCCL found no socket interface matching "
                             "NCCL_SOCKET_IFNAME=eth9; ")
    assert "bootstrap.cc:114" in w.text and w.evidence.endswith("no socket interface found")


def test_the_stamped_warn_is_classed_nccl_by_events_and_taken() -> None:
    line = next(ln for ln in MISSING.read_text().splitlines() if "NCCL WARN" in ln)
    text = line.split("] ", 1)[1]
    assert is_nccl(text)  # NCCL >= 2.26's [%F %T] stamp
    facts = NcclFacts()
    facts.feed_line(LogLine("a", text, 0.0, Source.NCCL, Level.WARNING, 0))
    facts.feed_line(LogLine("a", "step 3 loss 1.2", 0.0, Source.WORKER, Level.INFO, 0))
    assert only_rank(facts).no_socket_interface and only_rank(facts).lines == 1


def test_socket_ifname_lo_and_the_loopback_rule() -> None:
    facts = headless(NcclFacts(), LO)
    r = only_rank(facts, "gpu0")
    assert [i.label for i in r.bootstrap] == ["lo:127.0.0.1"]  # the "Bootstrap:" spelling
    assert [i.label for i in r.sockets] == ["lo:127.0.0.1"]
    assert r.fallback_reason == "NET/IB : No device found."
    assert nccl_warnings(facts) == []  # loopback is fine while the job is on one node
    torchrun(facts, "gpu1", WORKER.read_text())
    (w,) = nccl_warnings(facts)
    assert (w.rule, w.severity, w.nodes) == ("bad-interface", Level.ERROR, ("gpu0",))
    assert "bootstrap lo:127.0.0.1 (loopback)" in w.text and "NCCL_SOCKET_IFNAME" in w.text
    assert w.evidence.endswith("Bootstrap: Using lo:127.0.0.1<0>")


# -- public lines, by scenario -------------------------------------------------------------


def test_versions_in_every_form() -> None:
    assert only_rank(fed(section("version-raw"), rank=None)).nccl_version == "2.18.5"
    r = only_rank(fed(section("version-info")))
    assert (r.nccl_version, r.cuda_runtime) == ("2.27.5", "12.9")
    assert only_rank(fed(section("version-wrapped"))).nccl_version == "2.10.3"


def test_bootstrap_interfaces() -> None:
    r = only_rank(fed(section("bootstrap-multi")))
    assert [(i.name, i.address) for i in r.bootstrap] == [
        ("enp7s0", "10.10.112.56"), ("virbr0", "192.168.122.1"),
        ("vethee19468", "fe80::4463:98ff:fe1a:66c9%vethee19468"),
        ("veth717ea13", "fe80::3c8e:dcff:fed2:2236%veth717ea13")]
    assert [i.label for i in only_rank(fed(section("bootstrap-alias"))).bootstrap] == [
        "eno1:avahi:xxx.xxx.xxx.xxx"]
    assert [i.label for i in only_rank(fed(section("bootstrap-ib"))).bootstrap] == [
        "ibp12s0:10.149.0.32"]
    stripped = fed(section("bootstrap-stripped"))  # the reporter cut NCCL's prefix off
    assert stripped.nodes == {} and stripped.ignored == 2


def test_infiniband_and_roce() -> None:
    r = only_rank(fed(section("ib-sharp")))
    assert r.network == "IBext" and r.ib_found
    assert [h.label for h in r.hcas or []] == ["mlx5_0:1/IB", "mlx5_1:1/IB", "mlx5_4:1/IB",
                                              "mlx5_5:1/IB"]
    assert all(h.sharp for h in r.hcas or []) and r.ib_oob[0].label == "ibp25s0:10.20.0.120"
    r = only_rank(fed(section("ib-plain")))
    assert (r.network, [h.label for h in r.hcas or []]) == ("IB", ["mlx5_0:1/IB"])
    assert r.fallback_reason is None
    r = only_rank(fed(section("roce")))
    assert [(h.name, h.link) for h in r.hcas or []] == [("mlx5_4", "RoCE")]
    r = only_rank(fed(section("roce-mixed")))
    assert [h.link for h in r.hcas or []] == ["IB", "IB", "IB", "RoCE", "IB"]
    r = only_rank(fed(section("ib-plugin")))
    assert r.net_plugin == "IBext" and any("Plugin Path" in n for n in r.net_notes)


def test_socket_fallbacks_and_why() -> None:
    r = only_rank(fed(section("socket-no-verbs")))
    assert r.network == "Socket" and r.fallback_reason == "Failed to open libibverbs.so[.1]"
    assert [i.label for i in r.sockets] == ["enp36s0f1:168.188.129.189"]
    assert r.warns[0].position == "misc/ibvwrap.cc:63"
    r = only_rank(fed(section("socket-ib-disabled")))
    assert r.env == {"NCCL_IB_DISABLE": "1"} and "NCCL_IB_DISABLE" in (r.fallback_reason or "")
    assert [i.label for i in r.sockets] == ["ibs85f0:192.168.1.14", "ib0:192.168.1.15"]
    r = only_rank(fed(section("socket-2.27")))
    assert r.hcas == [] and r.ib_found is False  # `Using [RO];`: plugin up, no device
    assert "NET/Plugin: Could not find: libnccl-net.so." in r.net_notes
    assert [i.label for i in r.ib_oob] == ["eth0:192.168.69.159"]
    r = only_rank(fed(section("socket-no-ib")))
    assert r.ib_found is False and [i.name for i in r.sockets] == ["ens3"]
    assert any("returned 2" in n for n in only_rank(fed(section("plugin-load"))).net_notes)


@pytest.mark.parametrize(("name", "want"), [
    ("init-start", {"comm": "0x55d900e4a6c0", "rank": 6, "nranks": 16, "cuda_dev": 6,
                    "nvml_dev": 6, "bus_id": "ba000", "comm_id": "0xd8289d3e6e217d26",
                    "func": "ncclCommInitRank", "started": 0.0, "completed": None}),
    ("init-complete", {"comm": "0x8ec0ac0", "rank": 6, "completed": 0.0, "nccl_total_s": None}),
    ("init-pre-2.21", {"rank": 32, "nranks": 64, "bus_id": "18000", "func": None,
                       "comm_id": "0x5ae77eb5ea4ec1ee"}),
    ("init-old", {"rank": 5, "nranks": 16, "bus_id": "89000", "nvml_dev": None}),
    ("init-2.4", {"rank": 15, "nranks": 64, "nvml_dev": 0, "bus_id": None}),
])
def test_communicator_forms(name: str, want: dict[str, object]) -> None:
    first = next(iter(fed(section(name), rank=None).nodes["a"].ranks.values()))
    c = next(iter(first.comms.values()))
    assert {k: getattr(c, k) for k in want} == want


def test_topology_line_and_timings_of_another_rank() -> None:
    ranks = fed(section("init-start"), rank=None).nodes["a"].ranks
    assert list(ranks) == ["pid 49360", "pid 39634"]  # unprefixed: told apart by pid
    topo = ranks["pid 39634"]
    (c,) = topo.comms.values()
    assert (c.rank, c.nranks, c.n_nodes, c.local_ranks, c.local_rank) == (13, 16, 2, 8, 5)
    # NCCL's `Init timings: rank 2` in the same process is another comm's, not rank 6's
    (c,) = only_rank(fed(section("init-complete"), rank=None)).comms.values()
    assert c.nccl_total_s is None and c.init_seconds is None


def test_channels_rings_trees() -> None:
    r = only_rank(fed(section("ring-order")))
    assert r.ring_channels == 2 and r.ring_order[:10] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 15]
    r = only_rank(fed(section("rings-trees")))
    assert r.rings_connected and r.trees_connected
    assert r.channels == {"coll": 6, "p2p": 8, "p2p_per_peer": 1}
    assert fed(section("collector")).nodes["a"].ranks["0"].trees_connected


def test_transports() -> None:
    r = only_rank(fed(section("p2p")))
    assert r.transports == {"P2P/IPC": 2, "P2P/direct pointer": 1, "P2P/CUMEM": 1, "SHM": 2}
    r = only_rank(fed(section("net")))
    assert r.transports == {"NET/IB": 4, "NET/IBext_v10": 1, "NET/Socket": 2}
    assert r.gdr_connections == 3


def test_nvls() -> None:
    lines = section("nvls")
    facts = fed(lines[:2] + lines[3:])
    r = only_rank(facts)
    assert r.nvls_multicast is True and r.nvls_tree
    assert r.channels["nvls"] == 16 and r.channels["p2p_per_peer"] == 2
    assert only_rank(fed(lines[2:3])).nvls_multicast is False


@pytest.mark.parametrize(("name", "positions", "stamp"), [
    ("warn-socket", ["misc/socket.cc:483", "proxy.cc:1519", "misc/socket.cc:49",
                     "proxy.cc:1143"], None),
    ("warn-stamped", ["misc/socket.cc:484"], "2025-08-12 01:37:03"),
    ("warn-ray", ["init.cc:904"], "2026-07-10 06:19:36"),
    ("warn-tagged", ["init.cc:497"], None),
    ("warn-bare", [None, "transport/net_socket.cc:424"], None),
    ("warn-2.2", ["include/socket.h:360"], None),
    ("warn-shm", ["misc/shmutils.cc:71", "misc/shmutils.cc:88"], "2026-04-22 21:34:20"),
    ("warn-root", ["bootstrap.cc:131"], None),
    ("warn-ib", ["transport/net_ib.cc:839"], None),
])
def test_warn_positions_old_and_new(name: str, positions: list[str | None],
                                    stamp: str | None) -> None:
    warns = only_rank(fed(section(name))).warns
    assert [w.position for w in warns] == positions
    assert warns[-1].stamp == stamp
    assert all(w.message and "NCCL WARN" not in w.message for w in warns)


def test_warn_with_function_name() -> None:
    """NCCL 2.30 adds ``(function)`` before NCCL WARN; no public sample yet, so one real line
    (horovod#3929) is given the new field."""
    line = section("warn-tagged")[0].replace("init.cc:497 ", "init.cc:497 (ncclCommInitRank) ")
    (w,) = only_rank(fed([line])).warns
    assert (w.position, w.func) == ("init.cc:497", "ncclCommInitRank")
    assert w.message.startswith("Duplicate GPU detected")


def test_host_from_every_wrapper() -> None:
    assert only_rank(fed(section("warn-tagged"))).warns[0].host == "smc-gpu-03"
    assert only_rank(fed(section("mpirun"), rank=None)).host == "tomte249"
    assert only_rank(fed(section("mpirun"), rank=None)).network == "IB"
    assert only_rank(fed(section("collector"), rank=None)).label == "pid 168"


# -- the warning rules ---------------------------------------------------------------------


def test_sockets_while_another_node_has_ib() -> None:
    facts = fed(section("ib-plain"), "b", facts=fed(section("socket-no-verbs"), "a"))
    found = {w.rule: w for w in nccl_warnings(facts)}
    w = found["socket-with-ib"]
    assert w.nodes == ("a",) and "b: mlx5_0:1/IB" in w.text
    assert "Failed to open libibverbs" in w.text and w.evidence.endswith("Using network Socket")
    assert found["network-mismatch"].nodes == ("a", "b")
    assert "a: Socket, b: IB" in found["network-mismatch"].text
    assert "socket-with-ib" not in rules(fed(section("socket-no-verbs"), "a"))  # one node
    both_ib = fed(section("roce"), "b", facts=fed(section("ib-plain"), "a"))
    assert "socket-with-ib" not in rules(both_ib) and "network-mismatch" not in rules(both_ib)


def test_different_nccl_versions() -> None:
    facts = torchrun(NcclFacts(), "gpu0", WORKER.read_text())
    assert "version-mismatch" not in rules(torchrun(facts, "gpu1", WORKER.read_text()))
    fed(section("version-info"), "old", facts=facts)
    (w,) = [w for w in nccl_warnings(facts) if w.rule == "version-mismatch"]
    assert w.severity is Level.ERROR and set(w.nodes) == {"gpu0", "gpu1", "old"}
    assert "old: 2.27.5" in w.text and w.evidence.endswith("NCCL version 2.27.5+cuda12.9")


def test_bridges_and_link_local_only_across_nodes() -> None:
    assert "bad-interface" not in rules(fed(section("bootstrap-multi"), "b"))
    facts = fed(section("bootstrap-multi"), "b", facts=torchrun(NcclFacts(), "a",
                                                                 WORKER.read_text()))
    (w,) = [w for w in nccl_warnings(facts) if w.rule == "bad-interface"]
    assert w.nodes == ("b",) and w.severity is Level.WARNING
    assert "virbr0:192.168.122.1 (a container/VM bridge)" in w.text
    assert "enp7s0" not in w.text
    linklocal = WORKER.read_text().replace("eth0:192.0.2.2", "eth0:169.254.3.1")
    facts = torchrun(torchrun(NcclFacts(), "a", WORKER.read_text()), "c", linklocal)
    (w,) = nccl_warnings(facts)
    assert w.nodes == ("c",) and "169.254.3.1 (link-local)" in w.text


def _timed(total: str, bootstrap: str) -> str:
    return WORKER.read_text().replace(" total 0.69 (kernels 0.66, alloc 0.00, bootstrap 0.00",
                                      f" total {total} (kernels 0.66, alloc 0.00, "
                                      f"bootstrap {bootstrap}")


def test_slow_init_threshold() -> None:
    facts = NcclFacts()
    for node in ("a", "b"):
        torchrun(facts, node, WORKER.read_text())
    just_under = 0.69 + SLOW_INIT_MARGIN_S - 0.01
    assert just_under > SLOW_INIT_FACTOR * 0.69
    torchrun(facts, "c", _timed(f"{just_under:.2f}", "4.00"))
    assert "slow-init" not in rules(facts)
    torchrun(facts, "d", _timed("30.69", "30.00"))
    (w,) = [w for w in nccl_warnings(facts) if w.rule == "slow-init"]
    assert w.nodes == ("d",) and "30.7 s" in w.text and "waiting in bootstrap" in w.text
    assert "Init timings" in w.evidence


def test_nccl_warns_merge_across_nodes_and_explain() -> None:
    facts = fed(section("warn-root"), "b", facts=fed(section("warn-root"), "a"))
    fed(section("warn-stamped"), "c", facts=facts)
    warns = [w for w in nccl_warnings(facts) if w.rule == "nccl-warn"]
    root = next(w for w in warns if "as the same rank" in w.text)
    assert root.nodes == ("a", "b") and root.severity is Level.ERROR
    assert root.text.startswith("nodes a, b: two processes joined NCCL's bootstrap")
    magic = next(w for w in warns if w.nodes == ("c",))
    assert magic.text.startswith("node c: something other than this job's NCCL connected")
    assert magic.text.endswith("[NCCL WARN at misc/socket.cc:484]")
    connect, *rest = nccl_warnings(fed(section("warn-socket")))
    assert connect.severity is Level.ERROR and "connect to 10.0.0.2<45763>" in connect.text
    assert "node a: NCCL warned: [Proxy Service 0] Failed to execute operation Connect from "\
           "rank 0, retcode 2 [NCCL WARN at proxy.cc:1519]" in [w.text for w in rest]


def test_warnings_are_plain_data() -> None:
    facts = headless(NcclFacts(), MISSING)
    (w,) = nccl_warnings(facts)
    assert isinstance(w, NcclWarning)
    assert json.loads(json.dumps(w.to_dict()))["severity"] == "error"


# -- JSON, table, robustness ---------------------------------------------------------------


def _everything() -> NcclFacts:
    facts = torchrun(NcclFacts(), "gpu0", WORKER.read_text())
    headless(facts, LO, "gpu1")
    headless(facts, MISSING, "gpu2")
    fed([ln for ln in (DATA / "public-samples.log").read_text().splitlines()
         if ln and not ln.startswith("#")], "pub", None, facts)
    return facts


def test_to_dict_is_json() -> None:
    facts = _everything()
    d = facts.to_dict()
    assert json.loads(json.dumps(d)) == d
    gpu0 = d["nodes"]["gpu0"]
    assert gpu0["nccl_versions"] == ["2.28.9"] and gpu0["networks"] == ["Socket"]
    assert gpu0["ranks"]["pid 483"]["comms"]["0x49bed080"]["init_seconds"] == 0.69
    assert gpu0["fallback_reasons"] == ["NET/IB : No device found."]


def test_table() -> None:
    text = render_table(_everything())
    rows = {ln.split("  ")[0]: ln for ln in text.splitlines()}
    assert rows[""].split() == ["gpu0", "gpu1", "gpu2", "pub"]
    assert rows["NCCL"].split()[1:3] == ["2.28.9", "2.28.9"]
    assert "lo:127.0.0.1" in rows["bootstrap"] and "eth0:192.0.2.2" in rows["bootstrap"]
    assert "none" in rows["IB HCAs"] and "0.69 s" in rows["init time"]
    assert "coll 64 collnet 64 nvls 0 p2p 64 (64/peer); rings 64" in rows["channels"]
    assert render_table(NcclFacts()).startswith("no NCCL lines")


def _all_real_lines() -> list[str]:
    lines = {ln for p in DATA.iterdir() if p.suffix == ".log"
             for ln in p.read_text().splitlines() if "NCCL" in ln}
    return sorted(lines)


def test_every_prefix_of_every_real_line_is_safe() -> None:
    facts = NcclFacts()
    for line in _all_real_lines():
        for end in range(len(line) + 1):
            facts.feed("a", None, line[:end])
            facts.feed("b", 0, line[end:])
    nccl_warnings(facts)
    render_table(facts)
    json.dumps(facts.to_dict())


_FRAGMENTS = st.sampled_from([
    "NCCL INFO ", "NCCL WARN ", "NCCL version ", "host:1:2 ", "[0] ", "[2026-11-22 11:58:29] ",
    "comm ", "0x1 ", "rank ", "x", "-1 ", "nranks ", "Init START", "Init COMPLETE", " - ",
    "Channel ", "00/", "64 : ", " -> ", "[send] ", "via ", "NET/", "IB", "/GDRDMA", "Using ",
    "network ", "[0]", "eth0:", "10.0.0.1", "<0>", "fe80::1%", ";", " OOB ", "Bootstrap",
    ": ", "Init timings - f: ", "total ", "1.5", " (", ")", "Could not get speed from ",
    "/sys/class/net/eth0/speed. Defaulting to 10 Gbps.", "NCCL_SOCKET_IFNAME set by "
    "environment to ", "cudaDriverVersion ", "12040", "coll channels, ", "GPU Direct RDMA ",
    "Enabled for HCA 0 'mlx5_0'", "bootstrap.cc:114 ", "\t", " ", "é", "\x00",
])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_FRAGMENTS, max_size=14).map("".join), max_size=12),
       st.sampled_from([None, 0, 3]))
def test_arbitrary_nccl_like_lines_never_raise(lines: list[str], rank: int | None) -> None:
    facts = fed(lines, "a", rank)
    nccl_warnings(facts)
    render_table(facts)
    json.dumps(facts.to_dict())
