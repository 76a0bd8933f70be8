"""Rules for NCCL's own failures at communicator set-up.

NCCL says the cause in a WARN line (when NCCL_DEBUG allows) and torch repeats it in a
``DistBackendError`` with a ``Last error:`` line; either is enough, the WARN is preferred.
"""

from __future__ import annotations

from ddptui.diagnose import signatures as sig
from ddptui.diagnose.diagnosis import Cause
from ddptui.diagnose.facts import RankFacts, RunFacts, said
from ddptui.diagnose.finding import Finding, Key, after, cite, first_said, open_ranks, where

_FABRIC = ("allow all TCP between the nodes (NCCL connects back on random ports), and check "
           "that NCCL_SOCKET_IFNAME names the interface the nodes reach each other on")


def _torch_error(rf: RankFacts) -> list[str]:
    """torch's NCCL error line and the `Last error:` text after it."""
    line = first_said(rf, sig.NCCL_ERROR.search)
    if line is None:
        return []
    out = [cite(line)]
    for nxt in after(rf, line, 3):
        out.append(cite(nxt))
    return out


def no_interface(facts: RunFacts, claimed: set[Key]) -> list[Finding]:
    out = []
    for rf in open_ranks(facts, claimed):
        line = first_said(rf, sig.NO_INTERFACE.search)
        if line is None:
            continue
        named = first_said(rf, sig.IFNAME_SET.search)
        m = sig.IFNAME_SET.search(named.text) if named is not None else None
        iface = f"NCCL_SOCKET_IFNAME={m.group(1)}" if m else "NCCL_SOCKET_IFNAME"
        evidence = [cite(ln) for ln in (named, line) if ln is not None]
        out.append(Finding(
            Cause.NCCL_NO_INTERFACE, rf.node, rf.rank, line.time,
            f"NCCL found no network interface matching {iface} on node {rf.node}, so rank "
            f"{rf.rank} could not start",
            f"set NCCL_SOCKET_IFNAME to an interface that exists on every node "
            f"(`ip -o -4 addr` on {rf.node} lists them), or leave it unset",
            evidence + _torch_error(rf)[:1]))
    return out


def duplicate_gpu(facts: RunFacts, claimed: set[Key]) -> list[Finding]:
    out = []
    for rf in open_ranks(facts, claimed):
        line = first_said(rf, sig.DUPLICATE_GPU.search)
        if line is None:
            continue
        m = sig.DUPLICATE_GPU.search(line.text)
        if m is not None and m.group(1):
            what = (f"ranks {m.group(1)} and {m.group(2)} on node {rf.node} use the same GPU "
                    f"(CUDA device {m.group(3)})")
        else:
            what = f"several ranks on node {rf.node} use the same GPU"
        out.append(Finding(
            Cause.NCCL_DUPLICATE_GPU, rf.node, rf.rank, line.time, what,
            "call torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) before creating the "
            "process group, and keep nproc_per_node at most the node's GPU count",
            [cite(line), *_torch_error(rf)[:1]]))
    return out


def version_mismatch(facts: RunFacts, claimed: set[Key]) -> list[Finding]:
    """NCCL's own mismatch report, or nodes whose banners differ and a rank that failed in NCCL."""
    banners: dict[str, tuple[str, str]] = {}
    for rf in facts.ranks.values():
        line = first_said(rf, sig.NCCL_BANNER.search)
        if line is None:
            continue
        m = sig.NCCL_BANNER.search(line.text)
        if m is not None:
            banners.setdefault(rf.node, (m.group(1), cite(line)))
    versions = {v for v, _ in banners.values()}
    out = []
    for rf in open_ranks(facts, claimed):
        line = first_said(rf, sig.VERSION_MISMATCH.search)
        if line is None and len(versions) > 1:
            line = first_said(rf, sig.NCCL_ERROR.search)
        if line is None:
            continue
        spread = ", ".join(f"{v} on {n}" for n, (v, _) in banners.items())
        out.append(Finding(
            Cause.NCCL_VERSION_MISMATCH, rf.node, rf.rank, line.time,
            f"the nodes run different NCCL versions ({spread or 'see the evidence'}); "
            f"{where(rf.node, rf.rank)} failed in NCCL",
            "install the same torch (and so NCCL) build on every node; compare "
            "`python -c 'import torch; print(torch.__version__, torch.cuda.nccl.version())'`",
            [*(c for _, c in banners.values()), cite(line)]))
    return out


def connect(facts: RunFacts, claimed: set[Key]) -> list[Finding]:
    out = []
    for rf in open_ranks(facts, claimed):
        warn = first_said(rf, sig.NCCL_CONNECT.search)
        err = first_said(rf, lambda t: "unhandled system error" in t)
        line = warn or err
        if line is None:
            continue
        peer = sig.CONNECT_PEER.search(warn.text) if warn is not None else None
        why = sig.ERRNO_TEXT.search(warn.text) if warn is not None else None
        if peer is not None:
            what = (f"{where(rf.node, rf.rank)} could not connect to {peer.group(1)} port "
                    f"{peer.group(2)} over NCCL's sockets"
                    + (f" ({why.group(1)})" if why else ""))
        elif warn is not None:
            what = f"{where(rf.node, rf.rank)} could not open NCCL's socket connection"
        else:
            what = (f"NCCL hit a system error on {where(rf.node, rf.rank)}, most often a "
                    f"socket between nodes that could not connect")
        evidence = [cite(ln) for ln in (warn, err) if ln is not None]
        out.append(Finding(Cause.NCCL_CONNECT, rf.node, rf.rank, line.time, what,
                           _FABRIC + "; NCCL_DEBUG=INFO on every node shows which peer",
                           evidence))
    return out


def other_error(facts: RunFacts, claimed: set[Key]) -> list[Finding]:
    """Any other NCCL error torch raised, in NCCL's words, unless it says the peer went away."""
    out = []
    for rf in open_ranks(facts, claimed):
        line = first_said(rf, sig.NCCL_ERROR.search)
        if line is None or sig.NCCL_PEER_GONE in line.text:
            continue
        m = sig.NCCL_ERROR.search(said(line))
        reason = m.group(1) if m is not None else "an error"
        last = [said(ln) for ln in after(rf, line, 3)]
        detail = last[last.index("Last error:") + 1] if "Last error:" in last[:-1] else ""
        out.append(Finding(
            Cause.NCCL_ERROR, rf.node, rf.rank, line.time,
            f"NCCL failed on {where(rf.node, rf.rank)}: {reason}"
            + (f" ({detail})" if detail else ""),
            "run again with NCCL_DEBUG=WARN (or INFO) on every node to see NCCL's own reason",
            _torch_error(rf)))
    return out
