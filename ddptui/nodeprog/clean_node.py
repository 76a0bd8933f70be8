"""The node side of ``ddptui clean`` (:mod:`ddptui.clean.choice`): ``scan`` says what a
workdir holds (each node dir with its liveness, when it ended, its size and the code caches
its ``launch.sh`` names; each code cache with when it was last used), ``remove`` removes what
the cluster-wide choice left to this node.

``remove`` checks liveness again right before it removes anything, so a run started between
the scan and the removal is skipped, and counts the bytes it frees by inode: synced trees
share unchanged files as hard links, and removing one tree frees only what no other link
holds. It prints one JSON line.

Its arguments: the mode, the runs root, the code root, the manifest suffix, the grace of a
launch under way and, for ``remove``, the JSON request.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import sys
import time

from ddptui.nodeprog.procs import procs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

CODE_REF = re.compile(r"\.ddptui/code/([A-Za-z0-9_][A-Za-z0-9._-]*)")


class Workdir:
    """One workdir's runs root and code root, and the process groups with a live member
    (a group of zombies is over) as of the last :meth:`markers`."""

    def __init__(self, runs_root: str, code_root: str, suf: str, grace: float) -> None:
        self.runs_root = os.path.normpath(runs_root)
        self.code_root = os.path.normpath(code_root)
        self.suf, self.grace = suf, grace
        self.groups: set[int] = set()

    def markers(self) -> set[str]:
        found = set()
        self.groups.clear()
        for _, env, fields in procs():
            self.groups.add(int(fields[2]))
            for e in env:
                if e.startswith(b"DDPTUI_RUN="):
                    found.add(e[11:].decode("utf-8", "replace"))
        return found

    def state(self, d: str, run_id: str, rank: str, marks: set[str], now: float) -> str:
        if run_id + "/" + rank in marks:
            return "live"
        code = read(os.path.join(d, "exit_code"))
        pgid = (read(os.path.join(d, "pgid")) or "").strip()
        if code is None and pgid.isdigit() and int(pgid) in self.groups:
            return "live"
        if code is None and not pgid:
            t = mtime(os.path.join(d, "launch.sh")) or mtime(d)
            if t is not None and now - t < self.grace:
                return "launching"
        return "done"

    def node_dirs(self) -> list[tuple[str, str, str]]:
        out: list[tuple[str, str, str]] = []
        try:
            ids = sorted(os.listdir(self.runs_root))
        except OSError:
            return out
        for run_id in ids:
            try:
                names = sorted(os.listdir(os.path.join(self.runs_root, run_id)))
            except OSError:
                continue
            for n in names:
                if n.startswith("node") and n[4:].isdigit():
                    out.append((run_id, n[4:], os.path.join(self.runs_root, run_id, n)))
        return out

    def scan(self) -> dict[str, object]:
        now, marks = time.time(), self.markers()
        runs = []
        for run_id, rank, d in self.node_dirs():
            s = self.state(d, run_id, rank, marks, now)
            ended = max([t for t in (mtime(os.path.join(d, x)) for x in
                                     ("exit_code", "node.log", "launch.sh", "")) if t] or [0])
            refs = sorted(set(CODE_REF.findall(read(os.path.join(d, "launch.sh")) or "")))
            runs.append({"run_id": run_id, "rank": int(rank), "dir": d, "state": s,
                         "ended": ended, "bytes": size([d]), "code": refs})
        code, tmp = [], []
        try:
            names = sorted(os.listdir(self.code_root))
        except OSError:
            names = []
        for n in names:
            p = os.path.join(self.code_root, n)
            if n.startswith(".tmp-"):
                tmp.append({"name": n, "used": mtime(p) or 0})
            elif not n.endswith(self.suf) and not n.startswith(".") and os.path.isdir(p):
                used = max(mtime(p + self.suf) or 0, mtime(p) or 0)
                code.append({"name": n, "used": used, "bytes": size([p, p + self.suf])})
        return {"runs": runs, "code": code, "tmp": tmp, "now": now}

    def remove(self, todo: dict[str, Any]) -> dict[str, object]:
        now, marks = time.time(), self.markers()
        live_refs: set[str] = set()
        skipped = []
        for run_id, rank, d in self.node_dirs():
            if self.state(d, run_id, rank, marks, now) != "done":
                live_refs.update(CODE_REF.findall(read(os.path.join(d, "launch.sh")) or ""))
        dirs, runs, caches = [], 0, 0
        for d, run_id, rank in todo["runs"]:
            d = os.path.normpath(d)
            if os.path.dirname(os.path.dirname(d)) != self.runs_root or not os.path.isdir(d):
                continue  # never anything but a node dir of this workdir
            if self.state(d, run_id, str(rank), marks, now) != "done":
                skipped.append(run_id)
                continue
            dirs.append(d)
            runs += 1
        for n in todo["code"] + todo["tmp"]:
            p = os.path.join(self.code_root, n)
            if "/" in n or n in (".", "..") or n in live_refs or not os.path.lexists(p):
                continue
            dirs += [p, p + self.suf]
            caches += 1
        freed = size(dirs)
        errors = [] if todo["dry"] else self.remove_all(dirs)
        return {"runs": runs, "code": caches, "bytes": freed, "skipped": skipped,
                "errors": errors}

    def remove_all(self, dirs: list[str]) -> list[str]:
        errors = []
        for p in dirs:
            # another node sharing this disk may be removing the same tree at once
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            else:
                try:
                    os.unlink(p)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    errors.append(str(e))
            if os.path.isdir(p) and not os.path.islink(p):
                errors.append("could not remove all of " + p)
            if os.path.normpath(os.path.dirname(p)) != self.code_root:
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.dirname(p))
        return errors


def mtime(p: str) -> float | None:
    try:
        return os.lstat(p).st_mtime
    except OSError:
        return None


def read(p: str) -> str | None:
    try:
        with open(p, "rb") as f:
            return f.read(1 << 22).decode("utf-8", "replace")
    except OSError:
        return None


def size(paths: list[str]) -> int:
    """Bytes on disk, each hard-linked file counted once all of its links are among them."""
    seen: dict[tuple[int, int], tuple[int, int]] = {}
    total = 0
    for top in paths:
        stack = [top]
        while stack:
            p = stack.pop()
            try:
                st = os.lstat(p)
            except OSError:
                continue
            b = getattr(st, "st_blocks", 0) * 512 or st.st_size
            if stat.S_ISDIR(st.st_mode):
                total += b
                with contextlib.suppress(OSError):
                    stack.extend(os.path.join(p, n) for n in os.listdir(p))
            elif st.st_nlink <= 1:
                total += b
            else:
                k = (st.st_dev, st.st_ino)
                n, _ = seen.get(k, (0, b))
                seen[k] = (n + 1, b)
                if n + 1 == st.st_nlink:
                    total += b
    return total


def main(argv: list[str]) -> None:
    mode, runs_root, code_root, suf, grace = argv[:5]
    w = Workdir(runs_root, code_root, suf, float(grace))
    print(json.dumps(w.scan() if mode == "scan" else w.remove(json.loads(argv[5]))))


if __name__ == "__main__":
    main(sys.argv[1:])
