"""A project as data: the manifest (path -> content hash, size, mode, or link target), its
digest, what a node lacks of it, and whether it is small enough to ship.

Pure, so that every decision of a sync is tested without a node: the walk builds a
:class:`Manifest` from the disk, the node reports the manifest of the tree it already has,
and :func:`plan_push` says which bytes travel and which files the node makes from what it has.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from ddptui.events import JSON
from ddptui.run_notes import SyncStats

#: Hex characters of the digest that names a synced tree on a node (80 bits).
DIGEST_CHARS = 20
MB = 1_000_000


Kind = Literal["file", "dir", "link"]
_KINDS: dict[str, Kind] = {"file": "file", "dir": "dir", "link": "link"}


@dataclass(frozen=True, slots=True)
class Entry:
    """One path of the project, relative to its root with ``/`` separators."""

    path: str
    kind: Kind
    mode: int = 0o644  # permission bits; only files and directories have their own
    size: int = 0
    sha256: str = ""  # files
    target: str = ""  # links: relative, inside the project

    def to_list(self) -> list[JSON]:
        return [self.path, self.kind, self.mode, self.size, self.sha256, self.target]

    @classmethod
    def from_list(cls, item: JSON) -> Entry:
        """An entry as :meth:`to_list` wrote it; anything else raises ValueError."""
        if not isinstance(item, list):
            raise ValueError(f"a manifest entry is a list, not {type(item).__name__}")
        path, kind, mode, size, sha, target = item
        known = _KINDS.get(kind) if isinstance(kind, str) else None
        if known is None:
            raise ValueError(f"unknown entry kind {kind!r}")
        if not isinstance(mode, int) or not isinstance(size, int):
            raise ValueError(f"an entry's mode and size are numbers, not {mode!r}, {size!r}")
        return cls(str(path), known, mode, size, str(sha), str(target))


@dataclass(frozen=True)
class Manifest:
    entries: tuple[Entry, ...]  # sorted by path

    @classmethod
    def of(cls, entries: Iterable[Entry]) -> Manifest:
        return cls(tuple(sorted(entries, key=lambda e: e.path)))

    @property
    def files(self) -> list[Entry]:
        return [e for e in self.entries if e.kind == "file"]

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.entries if e.kind == "file")

    def digest(self) -> str:
        """Names the tree: equal for equal content, modes and links, whatever the mtimes."""
        h = hashlib.sha256()
        for e in self.entries:
            h.update(f"{e.kind}\0{e.path}\0{e.mode:o}\0{e.sha256}\0{e.target}\n".encode())
        return h.hexdigest()[:DIGEST_CHARS]

    def to_json(self) -> str:
        return json.dumps({"v": 1, "entries": [e.to_list() for e in self.entries]},
                          separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        d = json.loads(text)
        if not isinstance(d, dict) or d.get("v") != 1:
            raise ValueError("not a version-1 manifest")
        return cls.of(Entry.from_list(item) for item in d["entries"])


@dataclass(frozen=True)
class PushPlan:
    """What one node needs to build the tree: sent bytes, and files it makes itself."""

    send: tuple[Entry, ...]  # file bytes that travel, in this order
    from_base: tuple[tuple[str, str], ...]  # (path in the node's base tree, path in the new)
    copies: tuple[tuple[str, str], ...]  # (sent path, path with the same content and mode)
    dirs: tuple[Entry, ...]
    links: tuple[Entry, ...]
    files: int = 0  # every file of the manifest
    bytes: int = field(default=0)  # bytes that travel

    def header(self, manifest: Manifest, base: str | None) -> dict[str, JSON]:
        """What the node-side program reads before the file bytes."""
        return {
            "base": base,
            "dirs": [[d.path, d.mode] for d in self.dirs],
            "send": [[e.path, e.size, e.mode] for e in self.send],
            "from_base": [list(p) for p in self.from_base],
            "copies": [list(p) for p in self.copies],
            "links": [[e.path, e.target] for e in self.links],
            "manifest": json.loads(manifest.to_json()),
        }


def plan_push(new: Manifest, have: Manifest | None) -> PushPlan:
    """Only content the node lacks travels; a file whose content and mode the node's base tree
    holds under any path is linked from there, and a repeat of a sent file is copied from it."""
    in_base: dict[tuple[str, int], str] = {}
    for e in (have.entries if have is not None else ()):
        if e.kind == "file":
            in_base.setdefault((e.sha256, e.mode), e.path)
    sent: dict[tuple[str, int], str] = {}
    send: list[Entry] = []
    from_base: list[tuple[str, str]] = []
    copies: list[tuple[str, str]] = []
    for e in new.files:
        key = (e.sha256, e.mode)
        if key in in_base:
            from_base.append((in_base[key], e.path))
        elif key in sent:
            copies.append((sent[key], e.path))
        else:
            sent[key] = e.path
            send.append(e)
    dirs = tuple(e for e in new.entries if e.kind == "dir")
    links = tuple(e for e in new.entries if e.kind == "link")
    return PushPlan(tuple(send), tuple(from_base), tuple(copies), dirs, links,
                    files=len(new.files), bytes=sum(e.size for e in send))


def too_big(manifest: Manifest, max_mb: float, top: int = 8) -> str | None:
    """None when the project fits; else the sentence naming the largest files."""
    total = manifest.total_bytes
    if total <= max_mb * MB:
        return None
    largest = sorted(manifest.files, key=lambda e: (-e.size, e.path))[:top]
    listed = "; ".join(f"{e.path} ({human_bytes(e.size)})" for e in largest)
    return (f"the project is {human_bytes(total)} in {len(manifest.files)} files, over "
            f"job.max_sync_mb ({max_mb:g} MB); nothing was sent. Largest files: {listed}. "
            "Leave out what the ranks do not need with `job.exclude` or a .gitignore, raise "
            "`job.max_sync_mb`, or run in place with `job.sync: false` on shared storage.")


def human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"  # pragma: no cover - the loop returns


def progress_text(files_done: int, files: int, sent: int, seconds: float) -> str:
    """The node's state detail while it syncs: files, bytes, rate."""
    rate = sent / seconds if seconds > 0 else 0.0
    return (f"sync {files_done}/{files} files, {human_bytes(sent)}, "
            f"{human_bytes(rate)}/s")


def done_text(plan: PushPlan, seconds: float, cached: bool) -> str:
    if cached:
        return f"synced: the node has this code already (0 of {plan.files} files sent)"
    return (f"synced: {len(plan.send)} of {plan.files} files sent "
            f"({human_bytes(plan.bytes)}) in {seconds:.1f} s")


def stats(plan: PushPlan, seconds: float, digest: str, cached: bool) -> SyncStats:
    """What ``run.json`` records of one node's sync (tests read ddptui's own counts here)."""
    return {"digest": digest, "files_sent": 0 if cached else len(plan.send),
            "bytes_sent": 0 if cached else plan.bytes, "files": plan.files,
            "seconds": round(seconds, 3), "cached": cached}
