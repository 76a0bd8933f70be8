"""The rules, most specific first: a rank's failure is explained by the first rule that
claims it, so a CUDA out-of-memory is never reported as just "a RuntimeError".

Each rule words its finding itself (what, where, what to do) and quotes its evidence; which
finding becomes the headline is :mod:`ddptui.diagnose.verdict`'s choice.
"""

from __future__ import annotations

from ddptui.diagnose import collectives, nccl, stalls
from ddptui.diagnose import signatures as sig
from ddptui.diagnose.diagnosis import Cause
from ddptui.diagnose.facts import RankFacts, RunFacts, said
from ddptui.diagnose.finding import (
    Finding,
    Key,
    Rule,
    Tier,
    cite,
    exit_evidence,
    first_said,
    last_lines,
    open_ranks,
    where,
)
from ddptui.events import NodeStatus, Source


def cuda_oom(facts: RunFacts, claimed: set[Key]) -> list[Finding]:
    out = []
    for rf in open_ranks(facts, claimed):
        line = first_said(rf, sig.CUDA_OOM.search)
        if line is None:
            continue
        m = sig.CUDA_OOM.search(line.text)
        assert m is not None
        ask, gpu, total, free = m.groups()
        on = f"GPU {gpu}" if gpu is not None else "its GPU"
        sizes = f"asked for {ask}" + (f" with {free} free of {total}" if free else "")
        out.append(Finding(
            Cause.CUDA_OOM, rf.node, rf.rank, line.time,
            f"{where(rf.node, rf.rank)} ran out of memory on {on}: it {sizes}",
            "use a smaller batch or model per GPU (or gradient checkpointing), and check "
            f"`nvidia-smi` on {rf.node} for other processes holding that GPU",
            [cite(line)]))
    return out


def missing_file(facts: RunFacts, claimed: set[Key]) -> list[Finding]:
    out = []
    for rf in open_ranks(facts, claimed):
        line = first_said(rf, lambda t: sig.MISSING_MODULE.search(t) or sig.MISSING_FILE.search(t)
                          or sig.CANT_OPEN.search(t))
        if line is None:
            continue
        text = said(line)
        if (m := sig.MISSING_MODULE.search(text)) is not None:
            what = f"Python module '{m.group(1)}' is missing on node {rf.node}"
            advice = (f"install it into the Python that torchrun runs on {rf.node} "
                      "(every node needs the same packages)")
        elif (m := sig.CANT_OPEN.search(text)) is not None:
            what = f"the script {m.group(1)} does not exist on node {rf.node}"
            advice = f"copy the script to {rf.node} or fix its path in the hosts file"
        else:
            m = sig.MISSING_FILE.search(text)
            assert m is not None
            path = m.group(1)
            what = f"file {path} does not exist on node {rf.node}"
            advice = f"copy it to {rf.node} or fix the path: each node opens its own files"
            if not path.startswith(("/", "~")):
                advice += " (a relative path starts at the rank's working directory)"
        out.append(Finding(Cause.MISSING_FILE, rf.node, rf.rank, line.time,
                           f"{what} ({where(rf.node, rf.rank)} stopped on it)", advice,
                           [cite(line)]))
    return out


def address_in_use(facts: RunFacts, claimed: set[Key]) -> list[Finding]:
    out = []
    for node in facts.nodes.values():
        lines = [ln for ln in node.agent if sig.ADDRESS_IN_USE.search(ln.text)]
        if not lines:
            continue
        port = next((p for ln in lines for m in sig.BOUND_PORT.finditer(ln.text)
                     for p in m.groups() if p), None)
        what = f"port {port}" if port else "the rendezvous port"
        out.append(Finding(
            Cause.ADDRESS_IN_USE, node.node, None, lines[0].time,
            f"{what} on node {node.node} is already in use, so torchrun could not start its "
            "rendezvous store there",
            "another run, or a leftover of one, holds it: stop it (`ss -ltnp` on "
            f"{node.node} names the process) or choose another rendezvous port",
            [cite(ln) for ln in lines[-2:]]))
    return out


def rendezvous(facts: RunFacts, claimed: set[Key]) -> list[Finding]:
    """A timeout names the nodes that never joined; an unreachable endpoint, the one that
    could not reach it."""
    out: list[Finding] = []
    missing = [n for n, nf in facts.nodes.items() if not nf.joined]
    for node in facts.nodes.values():
        reach = next((ln for ln in node.agent if sig.RDZV_UNREACHABLE.search(ln.text)), None)
        if reach is not None:
            m = sig.RDZV_UNREACHABLE.search(reach.text)
            assert m is not None
            if sig.LOOPBACK_ADDRESS.match(m.group(1)):
                out.append(Finding(
                    Cause.RENDEZVOUS_UNREACHABLE, node.node, None, reach.time,
                    f"node {node.node} could not reach the rendezvous endpoint {m.group(1)}:"
                    f"{m.group(2)}, a loopback address, which is each node itself",
                    "give the nodes an endpoint they all reach (`rendezvous.endpoint`, or node "
                    "rank 0's `addr:`); where that is so, a node advertised its own name, "
                    f"which resolves to loopback there: {LOOPBACK_FIX}", [cite(reach)]))
                continue
            out.append(Finding(
                Cause.RENDEZVOUS_UNREACHABLE, node.node, None, reach.time,
                f"node {node.node} could not reach the rendezvous endpoint "
                f"{m.group(1)}:{m.group(2)}",
                f"check from {node.node} that the endpoint's name resolves to the right "
                f"address and the port is open (`nc -zv {m.group(1)} {m.group(2)}`)",
                [cite(reach)]))
            continue
        lates = [ln for ln in node.agent if sig.RDZV_TIMEOUT.search(ln.text)]
        if not lates:
            continue
        # The exception's own line, not the traceback's `raise RendezvousTimeoutError`.
        late = next((ln for ln in lates if sig.EXCEPTION.match(ln.text)), lates[0])
        if missing:
            what = (f"the rendezvous timed out: node{'s' if len(missing) > 1 else ''} "
                    f"{', '.join(missing)} never joined")
            advice = (f"check that torchrun starts on {', '.join(missing)} and reaches the "
                      "rendezvous endpoint within join_timeout")
        else:
            what = f"the rendezvous timed out on node {node.node}: not every node joined"
            advice = "start every node within join_timeout, with the same rendezvous settings"
        out.append(Finding(Cause.RENDEZVOUS_TIMEOUT, missing[0] if missing else node.node,
                           None, late.time, what, advice, [cite(late)]))
        break
    return out


LOOPBACK_WHY = ("a node advertised its own name, which resolves to loopback there "
                "(Debian's `127.0.1.1 <hostname>` in /etc/hosts)")
LOOPBACK_FIX = ("launch with preflight (without `--no-preflight`): it gives a node whose name "
                "resolves to loopback the address and interface of its route toward the "
                "rendezvous; or set `addr:` and GLOO_SOCKET_IFNAME in that node's `env:`")


def loopback_peer(facts: RunFacts, claimed: set[Key]) -> list[Finding]:
    """gloo connecting to a peer at a loopback address: the peer's node advertised it."""
    out = []
    for rf in open_ranks(facts, claimed):
        line = first_said(rf, sig.GLOO_LOOPBACK_PEER.search)
        if line is not None:
            m = sig.GLOO_LOOPBACK_PEER.search(said(line))
            assert m is not None
            out.append(Finding(
                Cause.LOOPBACK_NAME, rf.node, rf.rank, line.time,
                f"{where(rf.node, rf.rank)} could not connect to a peer at {m.group(1)}, a "
                f"loopback address: {LOOPBACK_WHY}", LOOPBACK_FIX, [cite(line)]))
    return out


def peer_lost(facts: RunFacts, claimed: set[Key]) -> list[Finding]:
    out = []
    for rf in open_ranks(facts, claimed):
        line = first_said(rf, sig.PEER_LOST.search)
        if line is not None:
            out.append(Finding(
                Cause.PEER_LOST, rf.node, rf.rank, line.time,
                f"{where(rf.node, rf.rank)} lost its connection to another rank",
                "look for the rank that failed first: its own log says why",
                [cite(line)], Tier.CONSEQUENCE))
    return out


def _agent_signalled(facts: RunFacts, rf: RankFacts) -> bool:
    node = facts.nodes.get(rf.node)
    return node is not None and (rf.stopped_by_agent(node) or node.stopping_at is not None)


def segfault(facts: RunFacts, claimed: set[Key]) -> list[Finding]:
    out = []
    for rf in open_ranks(facts, claimed):
        line = first_said(rf, sig.SEGFAULT_LINE.search)
        if rf.signal != "SIGSEGV" and line is None:
            continue
        time = line.time if line is not None else rf.exit_time or 0.0
        out.append(Finding(
            Cause.SEGFAULT, rf.node, rf.rank, time,
            f"{where(rf.node, rf.rank)} crashed with a segmentation fault (SIGSEGV)",
            "native code crashed (an extension, CUDA or NCCL build): run it with "
            f"PYTHONFAULTHANDLER=1 to see where, and check the builds on {rf.node} match",
            ([cite(line)] if line is not None else []) + exit_evidence(facts, rf)))
    return out


def host_oom(facts: RunFacts, claimed: set[Key]) -> list[Finding]:
    """SIGKILL with no traceback that torchrun did not send: the kernel's OOM killer."""
    out = []
    for rf in open_ranks(facts, claimed):
        if rf.signal != "SIGKILL" or rf.traceback() or _agent_signalled(facts, rf):
            continue
        node = facts.nodes[rf.node]
        kernel = [ln for ln in [*rf.lines, *node.agent] if sig.KERNEL_OOM.search(ln.text)]
        how = ("the kernel's OOM killer killed it" if kernel else
               "most likely the host ran out of memory and the kernel's OOM killer chose it")
        out.append(Finding(
            Cause.HOST_OOM, rf.node, rf.rank, rf.exit_time or 0.0,
            f"{where(rf.node, rf.rank)} was killed by SIGKILL with no traceback: {how}",
            f"lower host memory use on {rf.node} (DataLoader workers, data held in RAM, "
            "pinned memory) or give it more; `dmesg | grep -i oom` there confirms",
            [cite(ln) for ln in kernel[:2]] + exit_evidence(facts, rf)))
    return out


#: What a signal that ended a rank most often means, and what to do about it.
_SIGNALS = {
    "SIGABRT": ("native code aborted it (a failed check in C++, CUDA or NCCL, or the C "
                "library finding its memory corrupted)",
                "the rank's lines just before the abort name the failed check; run it with "
                "PYTHONFAULTHANDLER=1 to see the Python stack"),
    "SIGBUS": ("a bus error, most often shared memory (/dev/shm) too small for DataLoader "
               "workers, or a memory-mapped file that shrank while in use",
               "check `df -h /dev/shm` on {node} (in a container, raise --shm-size) or use "
               "fewer DataLoader workers"),
    "SIGILL": ("an illegal instruction: a binary built for another CPU",
               "install builds of torch and its extensions made for {node}'s CPU"),
    "SIGFPE": ("an arithmetic fault in native code (an integer division by zero)",
               "run it with PYTHONFAULTHANDLER=1 to see where"),
    "SIGKILL": ("most often the kernel's out-of-memory killer, when {node} ran out of memory",
                "`dmesg | grep -i oom` on {node} confirms it; lower host memory use "
                "(DataLoader workers, data held in RAM) or give it more"),
    "SIGTERM": ("something outside torchrun sent it (a scheduler's time limit, a person, a "
                "service manager)",
                "find what sent it on {node}; stop a run with `ddptui stop` instead"),
    "SIGHUP": ("its terminal or session hung up",
               "start the job detached (ddptui does) and check nothing on {node} hangs it up"),
    "SIGINT": ("an interrupt (Ctrl-C) reached it", "find what sent SIGINT on {node}"),
    "SIGPIPE": ("it wrote to a pipe or socket whose reader was gone",
                "check what reads its output (a `| head`, a logger that ended)"),
}


def signalled(facts: RunFacts, claimed: set[Key]) -> list[Finding]:
    """A rank a signal ended that torchrun did not send, named with what it usually means.
    A SIGTERM counts only when torchrun's own list of the processes it stopped could be
    read (the rank's pid is known): otherwise torchrun most likely sent it."""
    out = []
    for rf in open_ranks(facts, claimed):
        name = rf.signal
        if name is None or _agent_signalled(facts, rf) or (name == "SIGTERM" and rf.pid is None):
            continue
        meaning, advice = _SIGNALS.get(name, (
            "a signal from outside the rank, or from its own native code",
            f"read the end of rank {rf.rank}'s log and find what sends {name} on {{node}}"))
        last = [f"last line of rank {rf.rank}: {cite(ln)}" for ln in last_lines(rf, 1)]
        out.append(Finding(
            Cause.SIGNAL, rf.node, rf.rank, rf.exit_time or 0.0,
            f"{where(rf.node, rf.rank)} was killed by {name}: {meaning.format(node=rf.node)}",
            advice.format(node=rf.node), last + exit_evidence(facts, rf)))
    return out


def _own_error(rf: RankFacts) -> tuple[str, float, list[str]] | None:
    """The rank's own last error line (exception or usage error), never torch's boilerplate."""
    for ln in reversed(rf.lines):
        text = said(ln)
        if sig.is_boilerplate(text):
            continue
        if sig.EXCEPTION.match(text) or sig.USAGE_ERROR.match(text):
            return text, ln.time, [cite(ln)]
    return None


def rank_error(facts: RunFacts, claimed: set[Key]) -> list[Finding]:
    out = []
    for rf in open_ranks(facts, claimed):
        found = _own_error(rf)
        if found is None:
            found = _root_cause(facts, rf)
        if found is None:
            continue
        text, time, evidence = found
        usage = sig.USAGE_ERROR.match(text)
        if usage is not None:
            what = f"{where(rf.node, rf.rank)} refused to start: {usage.group(2)}"
            advice = "fix the setting it names (in the hosts file or the job's arguments)"
        else:
            what = f"{where(rf.node, rf.rank)} raised {text}"
            advice = f"fix it in the script; rank {rf.rank}'s log holds the whole traceback"
        out.append(Finding(Cause.RANK_ERROR, rf.node, rf.rank, time, what, advice, evidence))
    return out


def _root_cause(facts: RunFacts, rf: RankFacts) -> tuple[str, float, list[str]] | None:
    """torchrun's Root Cause block, when the rank's own lines did not come through."""
    for f in facts.nodes[rf.node].failures:
        cause = sig.own_cause(f.root_cause)
        if f.rank == rf.rank and sig.EXCEPTION.match(cause):
            return cause, f.time, [f"[{f.node} agent] {cause}"]
    return None


def node_lost(facts: RunFacts, claimed: set[Key]) -> list[Finding]:
    out = []
    for node in facts.nodes.values():
        if node.status is NodeStatus.LOST and node.exit_code is None:
            last = [ln for ln in node.agent if ln.source is Source.SSH][-2:]
            f = Finding(
                Cause.NODE_LOST, node.node, None, node.status_time or 0.0,
                f"node {node.node} was lost: ddptui stopped hearing from it and could not "
                "read an exit code",
                f"check that {node.node} is up and reachable over SSH; what the run left "
                "there is stopped when it answers again (`ddptui stop RUN_ID` later)",
                [cite(ln) for ln in last])
            f.explains = {(rf.node, rf.rank) for rf in facts.node_ranks(node.node)}
            out.append(f)
    return out


def exit_code(facts: RunFacts, claimed: set[Key]) -> list[Finding]:
    """The last resort: a rank that exited non-zero (not stopped by torchrun) for no reason
    ddptui recognises; its last line is the best evidence there is."""
    out = []
    for rf in open_ranks(facts, claimed):
        if rf.exit_code in (None, 0) or rf.signal == "SIGTERM" or _agent_signalled(facts, rf):
            continue
        how = f"code {rf.exit_code}" + (f" ({rf.signal})" if rf.signal else "")
        last = [cite(ln) for ln in last_lines(rf, 1)]
        out.append(Finding(Cause.EXIT_CODE, rf.node, rf.rank, rf.exit_time or 0.0,
                           f"{where(rf.node, rf.rank)} exited with {how}",
                           f"read the end of rank {rf.rank}'s log", last + exit_evidence(facts, rf),
                           Tier.CONSEQUENCE))
    return out


#: Most specific first. peer_lost comes before rank_error although it ranks lower: a gloo
#: "Connection closed by peer" is a RuntimeError a rank raised, but not its own failure.
RULES: tuple[Rule, ...] = (
    cuda_oom,
    nccl.no_interface,
    nccl.duplicate_gpu,
    nccl.version_mismatch,
    nccl.connect,
    missing_file,
    address_in_use,
    rendezvous,
    collectives.mismatch,
    collectives.early_exit,
    stalls.collective_timeout,
    loopback_peer,
    peer_lost,
    nccl.other_error,
    segfault,
    host_oom,
    rank_error,
    signalled,
    node_lost,
    exit_code,
)
