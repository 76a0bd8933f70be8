"""The local project as a :class:`Manifest`: walk it, leave out what is excluded, hash the rest.

Hashing 200 MB costs about half a second, most of a warm launch's budget, so hashes are kept
in a small cache file keyed by path, size, mtime and inode; an entry modified within the last
few seconds is not trusted (the "racy" case git also guards: a write in the same mtime tick
would keep the size and the mtime).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from ddptui.sync.ignore import GITIGNORE, VENV_MARKER, Excluder
from ddptui.sync.manifest import Entry, Manifest, too_big

_RACY_S = 3.0
_CHUNK = 1 << 20


class ProjectError(Exception):
    """The project cannot be shipped as it is; ``str()`` is the sentence a person reads."""


@dataclass
class Walked:
    manifest: Manifest
    #: path -> (size, mtime_ns) as hashed, so the sender can tell a file changed since.
    stamps: dict[str, tuple[int, int]] = field(default_factory=dict)


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _link_target(root: str, rel: str, target: str) -> str | None:
    """The target relative to the link's directory when it stays inside the project."""
    link_dir = os.path.dirname(os.path.join(root, rel))
    resolved = os.path.normpath(os.path.join(link_dir, target))
    if resolved != root and not resolved.startswith(root.rstrip("/") + "/"):
        return None
    return os.path.relpath(resolved, link_dir) if os.path.isabs(target) else target


class _Hashes:
    """The hash cache of one project; unreadable or stale files just mean more hashing."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.old: dict[str, list[int | str]] = {}
        self.new: dict[str, list[int | str]] = {}
        if path is not None:
            with contextlib.suppress(OSError, ValueError):
                d = json.loads(path.read_text())
                if isinstance(d, dict):
                    self.old = d

    def sha(self, full: str, rel: str, st: os.stat_result, now: float) -> str:
        key = [st.st_size, st.st_mtime_ns, st.st_ino]
        hit = self.old.get(rel)
        if hit is not None and hit[:3] == key and isinstance(hit[3], str):
            digest = hit[3]
        else:
            digest = _sha256(full)
        if now - st.st_mtime > _RACY_S:
            self.new[rel] = [*key, digest]
        return digest

    def save(self) -> None:
        if self.path is None or self.new == self.old:
            return
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.new, separators=(",", ":")))
            os.replace(tmp, self.path)


def walk(root: str | Path, exclude: tuple[str, ...] = (), *, skip: tuple[str, ...] = (),
         hash_cache: Path | None = None, max_mb: float | None = None) -> Walked:
    """Every shipped path under ``root``; ``skip`` names absolute paths never shipped (the
    local state dir when it lies inside the project). A project over ``max_mb`` is refused
    before any file is read. Raises :class:`ProjectError`."""
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        raise ProjectError(f"the project directory {root} does not exist or is not a directory")
    skipped = {os.path.abspath(s) for s in skip}
    rules = Excluder(exclude)
    hashes = _Hashes(hash_cache)
    entries: list[Entry] = []
    files: list[tuple[str, str, os.stat_result]] = []
    stamps: dict[str, tuple[int, int]] = {}
    outside: list[str] = []
    unreadable: list[str] = []
    now = time.time()
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        full_dir = os.path.join(root, rel_dir) if rel_dir else root
        try:
            names = sorted(os.listdir(full_dir))
        except OSError as exc:
            unreadable.append(f"{rel_dir or '.'} ({exc.strerror})")
            continue
        if GITIGNORE in names:
            with contextlib.suppress(OSError, UnicodeDecodeError):
                rules.add_gitignore(rel_dir, Path(full_dir, GITIGNORE).read_text())
        for name in names:
            rel = f"{rel_dir}/{name}" if rel_dir else name
            full = os.path.join(full_dir, name)
            if full in skipped:
                continue
            try:
                st = os.lstat(full)
            except OSError as exc:
                unreadable.append(f"{rel} ({exc.strerror})")
                continue
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                if rules.excluded(rel, False):
                    continue
                target = _link_target(root, rel, os.readlink(full))
                if target is None:
                    outside.append(f"{rel} -> {os.readlink(full)}")
                else:
                    entries.append(Entry(rel, "link", target=target))
            elif stat.S_ISDIR(st.st_mode):
                if rules.excluded(rel, True) or os.path.exists(os.path.join(full, VENV_MARKER)):
                    continue
                entries.append(Entry(rel, "dir", mode | 0o700))
                stack.append(rel)
            elif stat.S_ISREG(st.st_mode) and not rules.excluded(rel, False):
                files.append((rel, full, st))
    if max_mb is not None:
        sized = Manifest.of(Entry(rel, "file", size=st.st_size) for rel, _, st in files)
        refused = too_big(sized, max_mb)
        if refused:
            raise ProjectError(refused)
    for rel, full, st in files:
        try:
            sha = hashes.sha(full, rel, st, now)
        except OSError as exc:
            unreadable.append(f"{rel} ({exc.strerror})")
            continue
        entries.append(Entry(rel, "file", stat.S_IMODE(st.st_mode) | 0o600, st.st_size, sha))
        stamps[rel] = (st.st_size, st.st_mtime_ns)
    if outside:
        raise ProjectError(
            "the project has symbolic links that point outside it, which a node may not "
            f"have: {'; '.join(sorted(outside)[:8])}. Leave them out with `job.exclude`, "
            "or run in place with `job.sync: false` on shared storage")
    if unreadable:
        raise ProjectError(f"cannot read part of the project: {'; '.join(unreadable[:8])}")
    hashes.save()
    return Walked(Manifest.of(entries), stamps)
