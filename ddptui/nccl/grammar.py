"""The shapes of libnccl's ``NCCL_DEBUG`` lines, from 2.4 to 2.30, as small pure functions.

Kept apart from the fact model so that each spelling NCCL used over the years (``Bootstrap :``
and ``Bootstrap:``, ``Ring 00 :`` and ``Channel 00/0 :``, WARN with and without a leading
``[%F %T]`` stamp, with and without ``(function)``) is written down once, next to its regex.
Every function here takes text and returns plain values or None; none raises on odd input,
because a line cut by a pipe or a crash is ordinary in a log being followed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal["INFO", "WARN", "VERSION"]

# What wraps the NCCL part differs by launcher (torchrun's `[rank0]:`, ddptui's headless
# `[gpu0 r0 nccl] `, mpirun tags, `srun --label`), but what follows the wrapper does not:
# `[stamp] host:pid:tid [dev] file:line (func) `, each part optional, right before the token.
_HEAD_RE = re.compile(
    r"(?:\[(?P<stamp>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)[^\]]*\] )?"
    r"(?:(?P<host>[^\s:\[\]]*):(?P<pid>\d+):(?P<tid>\d+) )?"
    r"(?:\[(?P<dev>\d+)\] )?"
    r"(?:(?P<file>[\w./-]+\.\w+):(?P<line>\d+) (?:\((?P<func>[^)]*)\) )?)?$"
)
_OLD_WARN_RE = re.compile(r"\S+\.\w+:\d+ WARN ")  # NCCL <= 2.2 wrote no "NCCL" token


@dataclass(slots=True)
class Head:
    """What NCCL put before its INFO/WARN token: who wrote the line and, for WARN, where."""

    host: str | None = None
    pid: int | None = None
    dev: int | None = None
    file: str | None = None
    line: int | None = None
    func: str | None = None
    stamp: str | None = None

    @property
    def position(self) -> str | None:
        """``file:line`` of a WARN, as a person greps NCCL's source for it."""
        return f"{self.file}:{self.line}" if self.file and self.line is not None else None


def split_line(text: str) -> tuple[Kind, str, str] | None:
    """``(kind, head, body)``, or None when the line carries no NCCL token at all.

    Plain substring searches, no regex: this runs once for every NCCL line of every rank.
    """
    i = text.find("NCCL INFO ")
    if i >= 0:
        return "INFO", text[:i], text[i + 10:]
    i = text.find("NCCL WARN ")
    if i >= 0:
        return "WARN", text[:i], text[i + 10:]
    i = text.find("NCCL version ")
    if i >= 0:
        return "VERSION", text[:i], text[i:]
    if " WARN " in text:
        m = _OLD_WARN_RE.search(text)
        if m is not None:
            return "WARN", text[:m.end() - 5], text[m.end():]
    return None


def parse_head(head: str) -> Head:
    m = _HEAD_RE.search(head)
    if m is None:  # cannot happen (every group is optional) but a log must never raise
        return Head()
    pid, dev, line = m.group("pid"), m.group("dev"), m.group("line")
    return Head(m.group("host"), int(pid) if pid else None, int(dev) if dev else None,
                m.group("file"), int(line) if line else None, m.group("func"),
                m.group("stamp"))


def first_word(body: str) -> str:
    i = body.find(" ")
    return body if i < 0 else body[:i]


# -- versions ---------------------------------------------------------------------------------

_VERSION_RE = re.compile(r"NCCL version (\d+\.\d+\.\d+)(?:[-+]cuda(\d+\.\d+))?")


def nccl_version(body: str) -> tuple[str, str | None] | None:
    """``("2.28.9", "13.0")`` from ``NCCL version 2.28.9+cuda13.0``; the CUDA is the one
    libnccl was built for, which the rank's CUDA runtime must be at least."""
    m = _VERSION_RE.search(body)
    return (m.group(1), m.group(2)) if m else None


def cuda_driver(body: str) -> str | None:
    """``cudaDriverVersion 13000`` is CUDA's integer form (1000*major + 10*minor): "13.0"."""
    value = body[len("cudaDriverVersion "):].strip()
    if not value.isdigit():
        return None
    n = int(value)
    return f"{n // 1000}.{n % 1000 // 10}"


# -- interfaces and devices -------------------------------------------------------------------

_PORT_RE = re.compile(r"<\d+>$")
_INDEX_RE = re.compile(r"^\[\d+\]")


def interfaces(listing: str) -> list[tuple[str, str]]:
    """``[(name, address)]`` from ``[0]eth0:10.0.0.1<0> [1]ib0:fe80::1%ib0<0>``.

    Names may hold a colon (``eno1:avahi``) and IPv6 addresses do, so an address with a dot is
    split at the last colon and any other at the first.
    """
    out: list[tuple[str, str]] = []
    for token in listing.split():
        token = _INDEX_RE.sub("", token)
        m = _PORT_RE.search(token)
        if m is None:
            continue
        token = token[:m.start()]
        name, sep, addr = token.rpartition(":")
        if not sep:
            continue
        if "." not in addr or (":" in name and "::" in token):
            name, _, addr = token.partition(":")
        if name and addr:
            out.append((name, addr))
    return out


def bootstrap_listing(body: str) -> str | None:
    """The interface list of ``Bootstrap : Using x`` (<= 2.23) or ``Bootstrap: Using x``."""
    for lead in ("Bootstrap : Using", "Bootstrap: Using"):
        if body.startswith(lead):
            return body[len(lead):]
    return None


_HCA_RE = re.compile(r"\[\d+\]([^\s:\[\]]+):(\d+)/(\w+)(/SHARP)?")


def ib_devices(body: str) -> tuple[list[tuple[str, int, str, bool]], str] | None:
    """``([(hca, port, "IB"|"RoCE", sharp)], oob_listing)`` of ``NET/IB : Using ...; OOB ...``.

    An empty list is NCCL >= 2.27's ``Using [RO];``: the IB plugin loaded and found nothing.
    """
    i = body.find(": Using")
    if i < 0:
        return None
    devs, _, oob = body[i + 7:].partition(";")
    found = [(m.group(1), int(m.group(2)), m.group(3), bool(m.group(4)))
             for m in _HCA_RE.finditer(devs)]
    return found, oob.strip().removeprefix("OOB ").strip()


_GDR_RE = re.compile(r"GPU Direct RDMA (Enabled|Disabled) for (?:GPU \S+ / )?HCA (\d+)"
                     r"(?: '([^']*)')?")


def gdr(body: str) -> tuple[bool, str] | None:
    """``(enabled, hca)`` of NCCL's per-HCA GPU Direct RDMA decision."""
    m = _GDR_RE.search(body)
    if m is None:
        return None
    return m.group(1) == "Enabled", m.group(3) or f"HCA {m.group(2)}"


_SPEED_RE = re.compile(r"^Could not get speed from (\S+?)\.? Defaulting to (.+?)\.?\s*$")


def speed_fallback(body: str) -> tuple[str, str] | None:
    """``("eth0", "10 Gbps")`` from NCCL's guess when sysfs has no link speed (VMs, virtio)."""
    m = _SPEED_RE.match(body)
    if m is None:
        return None
    path = m.group(1).rstrip("/")
    parts = path.split("/")
    iface = parts[-2] if len(parts) >= 2 and parts[-1] == "speed" else path
    return iface, m.group(2)


_ENV_RE = re.compile(r"^(NCCL_\w+) set by environment to (.*?)\.?\s*$")


def env_setting(body: str) -> tuple[str, str] | None:
    m = _ENV_RE.match(body)
    return (m.group(1), m.group(2)) if m else None


# -- communicators ----------------------------------------------------------------------------

_KV_RE = re.compile(r"\b(comm|rank|nranks|nRanks|nNodes|localRanks|localRank|cudaDev|nvmlDev|"
                    r"busId|commId|MNNVL|parent|color|key) (\S+)")


def comm_fields(body: str) -> dict[str, str]:
    """The ``name value`` pairs of an Init START/COMPLETE or topology line, by name.

    Pairs, not one regex per release: NCCL added ``nvmlDev``, ``busId``, ``commId`` and the
    leading function name over the years, and each stays optional here.
    """
    return {k.lower(): v for k, v in _KV_RE.findall(body)}


_TIMINGS_RE = re.compile(r"^Init timings(?: - (\w+))?: rank (\d+) nranks (\d+) total ([\d.]+)"
                         r"(?: \((.*)\))?")
_PART_RE = re.compile(r"(\w+) ([\d.]+)")


def init_timings(body: str) -> tuple[int, float, dict[str, float]] | None:
    """``(rank, total_s, {phase: s})`` of ``Init timings[ - func]: rank r nranks n total t``."""
    m = _TIMINGS_RE.match(body)
    if m is None:
        return None
    try:
        parts = {k: float(v) for k, v in _PART_RE.findall(m.group(5) or "")}
        return int(m.group(2)), float(m.group(4)), parts
    except ValueError:  # "total 1.2.3" from a garbled line
        return None


_COUNTS_RE = re.compile(r"(\d+) (coll|collnet|nvls|p2p) channels(?: per peer)?")


def channel_counts(body: str) -> dict[str, int]:
    """``{"coll": 64, "nvls": 0, "p2p": 64, "p2p_per_peer": 64}`` from the summary line."""
    out: dict[str, int] = {}
    for m in _COUNTS_RE.finditer(body):
        key = m.group(2) + ("_per_peer" if m.group(0).endswith("per peer") else "")
        out[key] = int(m.group(1))
    return out


_RING_RE = re.compile(r"^Channel (\d+)/(\d+) :((?: +\d+)*)\s*$")


def ring(body: str) -> tuple[int, int, list[int]] | None:
    """``(channel, n_channels, ring order)`` of ``Channel 00/02 :    0   1   2   3``."""
    m = _RING_RE.match(body)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2)), [int(x) for x in m.group(3).split()]


_CONN_RE = re.compile(r"^(?:Channel|Ring) (\d+)(?:/\d+)? : (\d+)(?:\[[0-9a-fA-F]+\])? -> "
                      r"(\d+)(?:\[[0-9a-fA-F]+\])?(?: \[(send|receive)\])? via (\S.*?)\s*$")


def connection(body: str) -> tuple[int, int, int, str, bool] | None:
    """``(channel, from, to, transport, gdr)`` of a ``... via P2P/IPC/read`` line.

    The transport is folded to its family: ``NET/IB/3/GDRDMA`` is ``NET/IB`` with GDR,
    ``P2P/IPC/read`` is ``P2P/IPC``, ``SHM/direct/direct`` and the old ``direct shared
    memory`` are ``SHM``.
    """
    m = _CONN_RE.match(body)
    if m is None:
        return None
    how = m.group(5)
    parts = how.split("/")
    if parts[0] == "NET" and len(parts) > 1:
        name = f"NET/{parts[1]}"
    elif parts[0] == "SHM" or "shared memory" in how:
        name = "SHM"
    elif parts[0] == "P2P" and len(parts) > 1:
        name = f"P2P/{parts[1]}"
    else:
        name = parts[0]
    return int(m.group(1)), int(m.group(2)), int(m.group(3)), name, how.endswith("/GDRDMA")


_RINGS_DONE_RE = re.compile(r"^Connected all rings(?:, use ring PXN (\d+) GDR (\d+))?")


def rings_connected(body: str) -> tuple[bool | None, bool | None] | None:
    """``(pxn, gdr)`` of ``Connected all rings[, use ring PXN 0 GDR 1]`` (None before 2.24)."""
    m = _RINGS_DONE_RE.match(body)
    if m is None:
        return None
    pxn, g = m.group(1), m.group(2)
    return (pxn != "0" if pxn else None), (g != "0" if g else None)
