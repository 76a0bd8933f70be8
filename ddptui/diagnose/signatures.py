"""The strings torch, gloo, NCCL and the kernel print when a run fails, as patterns.

Each pattern was written against a recorded line (tests/data/diagnose/README.md says which);
the variants cover the wording drift between releases that failures-public.md lists.
"""

from __future__ import annotations

import re

# torch puts `[rankN]: ` before every line a rank writes to stderr (2.4+) and `[rankN]:` before
# its C++ log lines, so a rank's own words start after it.
RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")

# The last line of a Python traceback: `ValueError: ...`, `torch.OutOfMemoryError: ...`.
EXCEPTION = re.compile(
    r"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit))(?::\s?(.*))?$"
)
# argparse's `prog: error: message`, which the bundled worker also uses for its own refusals.
USAGE_ERROR = re.compile(r"^([\w.-]+): error: (.+)$")
# torch's launcher text that explains nothing about the rank: never a headline.
BOILERPLATE = (
    "To enable traceback see",
    "ChildFailedError",
    "torch.distributed.elastic.multiprocessing.errors",
    "Decorate your entrypoint fn with @record",
    "SignalException",
)


def is_boilerplate(text: str) -> bool:
    return any(b in text for b in BOILERPLATE)


def own_cause(root_cause: str) -> str:
    """What torch's root-cause text says of the rank, or "" when it is only torch's
    boilerplate ("To enable traceback see: <url>"), which explains nothing."""
    cause = root_cause.strip()
    return "" if is_boilerplate(cause) else cause

# torch >= 2.3: `CUDA out of memory. Tried to allocate 67.53 GiB. GPU 0 has a total capacity
# of 79.18 GiB of which 10.49 GiB is free.`
_SIZE = r"[\d.]+ [KMGT]?i?B"
CUDA_OOM = re.compile(
    rf"CUDA out of memory\. Tried to allocate ({_SIZE})"
    rf"(?:\. GPU (\d+) has a total capacity of ({_SIZE}) of which ({_SIZE}) is free)?"
)

# NCCL, with or without its `host:pid:tid [dev] file:line NCCL WARN` head.
NO_INTERFACE = re.compile(r"no socket interface found")
IFNAME_SET = re.compile(r"NCCL_SOCKET_IFNAME set by environment to (\S+)")
DUPLICATE_GPU = re.compile(
    r"Duplicate GPU detected : rank (\d+) and rank (\d+) both on CUDA device (\w+)"
    r"|Multiple Ranks are using the same GPU"
)
# The banner carries `+cudaX`; torch's error lines end in a bare `NCCL version 2.19.3`.
NCCL_BANNER = re.compile(r"NCCL version (\d+\.\d+\.\d+)\+")
VERSION_MISMATCH = re.compile(r"NCCL version mismatch")
NCCL_CONNECT = re.compile(r"NCCL WARN .*\b(?:[Cc]onnect(?:ion)?)\b")
CONNECT_PEER = re.compile(r"[Cc]onnect to ([^\s<]+)<(\d+)>")
ERRNO_TEXT = re.compile(
    r"(No route to host|Connection refused|Connection timed out|Software caused connection "
    r"abort|Network is unreachable|Connection closed by remote peer)"
)
# torch's wrapper: `NCCL error in: <file>:<line>, <reason> (run with ...), NCCL version x`.
NCCL_ERROR = re.compile(
    r"NCCL error in: \S+, (.+?)(?: \(run with NCCL_DEBUG=\w+ for details\))?, "
    r"NCCL version ([\d.]+)"
)
# An NCCL error that says the other side went away: a consequence, not a cause.
NCCL_PEER_GONE = "remote process exited or there was a network error"

MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")
MISSING_FILE = re.compile(r"FileNotFoundError: \[Errno 2\] No such file or directory: '([^']+)'")
CANT_OPEN = re.compile(r"can't open file '([^']+)': \[Errno 2\] No such file or directory")

ADDRESS_IN_USE = re.compile(r"Address already in use|EADDRINUSE", re.IGNORECASE)
BOUND_PORT = re.compile(r"bind to \S*?:(\d+)\b|port: (\d+)")

RDZV_TIMEOUT = re.compile(
    r"RendezvousTimeoutError|waiting for clients\. (\d+)/(\d+) clients joined"
)
RDZV_UNREACHABLE = re.compile(
    r"client socket has (?:timed out after \d+s while trying to connect to|failed to connect "
    r"to any network address of) \(?([^\s,()]+?)(?::|, )(\d+)\)?"
)
RDZV_JOINING = "Rendezvous'ing worker group"

# gloo's connect to a peer whose advertised address is loopback: `Gloo connectFullMesh failed
# with [.../pair.cc:152] timed out connecting: SO_ERROR: Connection refused,
# remote=[127.0.1.1]:58247` (a node's own name resolves to loopback there).
GLOO_LOOPBACK_PEER = re.compile(r"remote=\[(127\.\d+\.\d+\.\d+|::1)\]:\d+")
LOOPBACK_ADDRESS = re.compile(r"^(?:127\.\d+\.\d+\.\d+|::1|localhost)$")

GLOO_TIMEOUT = re.compile(r"Timed out waiting (\d+)ms for (recv|send) operation")
NCCL_WATCHDOG = re.compile(
    r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+), OpType=(\w+)"
)
# The same WorkNCCL's timeout and run time (torch 1.x to 2.x keep this tail).
NCCL_WATCHDOG_TIME = re.compile(r"Timeout\(ms\)=(\d+)\) ran for (\d+) milliseconds")
# torch >= 2.2's next line: how far this rank's queue of collectives got.
NCCL_WORK_PROGRESS = re.compile(
    r"last enqueued NCCL work: (-?\d+), last completed NCCL work: (-?\d+)"
)
# TORCH_DISTRIBUTED_DEBUG=DETAIL's check before each collective (torch >= 1.10; SequenceNumber
# since 2.0, "inconsistent" before it).
_PRINT = (r"CollectiveFingerPrint\((?:SequenceNumber=(\d+), )?OpType=(\w+)"
          r"(?:, TensorShape=\[([^\]]*)\])?")
COLLECTIVE_MISMATCH = re.compile(
    rf"Detected mismatch between collectives on ranks\. Rank (\d+) is running "
    rf"(?:inconsistent )?collective: {_PRINT}.*?, but Rank (\d+) is running "
    rf"(?:inconsistent )?collective: {_PRINT}"
)

# The same WorkNCCL's fields, read to compare ranks at one sequence number: a rank that ran
# another op, or the same with another element count, is a mismatch (torch >= 2.2 prints
# NumelIn and NumelOut; older releases only the op).
NCCL_WORK = re.compile(
    r"WorkNCCL\(SeqNum=(\d+), OpType=(\w+)(?:, NumelIn=(\d+), NumelOut=(\d+))?"
    r"(?:, Timeout\(ms\)=(\d+))?"
)
# gloo's check of each message it receives against the size its own collective expects:
# `[enforce fail at .../gloo/transport/tcp/pair.cc:456] op.preamble.length <= op.nbytes.
# 500 vs 4.` (bytes sent by the peer vs bytes expected; the line number drifts, 446 before);
# the process then aborts (SIGABRT).
GLOO_SIZE = re.compile(r"op\.preamble\.length <= op\.nbytes\. (\d+) vs (\d+)")

NCCL_HEARTBEAT = "Heartbeat monitor timed out"
PEER_LOST = re.compile(
    r"Connection closed by peer|Connection reset by peer|Connection closed by remote peer|"
    + re.escape(NCCL_PEER_GONE)
)

SEGFAULT_LINE = re.compile(r"Segmentation fault|SIGSEGV")
KERNEL_OOM = re.compile(r"Out of memory: Killed process|oom-kill|oom_reaper|Memory cgroup out of")
# The agent told to stop (ddptui or a person stopping the run): what follows is no failure.
AGENT_STOPPING = re.compile(r"Received \d+ death signal")

# A rank's warnings that explain nothing about a failure, whatever else went wrong: never "the
# last lines" shown under it while a line that explains is there.
HARMLESS = (
    # c10d's store, accepting a peer whose address has no reverse name (containers, network
    # namespaces): it goes on with the address (libtorch's socket.cpp, torch 2.x)
    "The hostname of the client socket cannot be retrieved",
)


def is_harmless(text: str) -> bool:
    return any(h in text for h in HARMLESS)
