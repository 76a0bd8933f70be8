"""The node side of a sync (:mod:`ddptui.sync.remote` says how it goes): one conversation on
one channel, so a sync costs one process and one round trip per node.

Its arguments: the code root, the digest, the manifest suffix and the prefix of a tree being
built. First it prints ``{"have": true}`` when the tree is there, else the manifest of the
newest complete tree (less the files changed in place since); then it reads a one-line JSON
header and the bytes of each sent file, builds the tree aside, and renames it into place.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, BinaryIO, NoReturn


class Tree:
    def __init__(self, root: str, digest: str, suf: str, tmp_prefix: str) -> None:
        self.root, self.digest, self.suf, self.tmp_prefix = root, digest, suf, tmp_prefix

    def done(self, d: str) -> bool:
        return (os.path.isdir(os.path.join(self.root, d))
                and os.path.isfile(os.path.join(self.root, d + self.suf)))

    def unchanged(self, d: str, e: list[Any]) -> bool:
        if e[1] != "file":
            return True
        try:
            st = os.stat(self.root + "/" + d + "/" + e[0])
        except OSError:
            return False
        return bool(st.st_size == e[3] and len(e) > 6 and st.st_mtime_ns == e[6])

    def offer(self) -> dict[str, Any]:
        """What the sender diffs against: the tree itself, or the newest complete one."""
        if self.done(self.digest):
            with contextlib.suppress(OSError):
                os.utime(os.path.join(self.root, self.digest + self.suf))
            return {"have": True}
        cands = []
        try:
            names = os.listdir(self.root)
        except OSError:
            names = []
        suf = self.suf
        for n in names:
            if n.endswith(suf) and not n.startswith(".") and self.done(n[:-len(suf)]):
                with contextlib.suppress(OSError):
                    cands.append((os.stat(os.path.join(self.root, n)).st_mtime, n[:-len(suf)]))
        for _, d in sorted(cands, reverse=True):
            try:
                with open(os.path.join(self.root, d + suf)) as f:
                    m = json.load(f)
            except (OSError, ValueError):
                continue
            m["entries"] = [e[:6] for e in m["entries"] if self.unchanged(d, e)]
            return {"have": False, "base": d, "manifest": m}
        return {"have": False, "base": None}

    def build(self, hdr: dict[str, Any], inp: BinaryIO) -> int:
        """The tree of ``hdr`` built aside from the base tree's links and the sent bytes, then
        renamed into place; the number of files sent."""
        root, suf = self.root, self.suf
        try:
            os.makedirs(root, mode=0o700, exist_ok=True)
        except OSError as e:
            fail(e, root)
        final = os.path.join(root, self.digest)
        tmp = os.path.join(root, f"{self.tmp_prefix}{self.digest}-{os.getpid()}")
        base = os.path.join(root, hdr["base"]) if hdr["base"] else None

        def inside(p: str) -> str:
            if p.startswith("/") or "/../" in "/" + p + "/" or p in ("", ".", ".."):
                raise SystemExit("ddptui sync: refusing a path outside the tree: " + p)
            return tmp + "/" + p

        files = 0
        try:
            os.mkdir(tmp, 0o700)
            for p, _mode in hdr["dirs"]:
                os.makedirs(inside(p), exist_ok=True)
            for p, size, mode in hdr["send"]:
                full, left = inside(p), size
                with open(full, "wb") as f:
                    while left:
                        chunk = inp.read(min(left, 1 << 20))
                        if not chunk:
                            raise SystemExit("ddptui sync: the stream ended early, in " + p)
                        f.write(chunk)
                        left -= len(chunk)
                os.chmod(full, mode)
                files += 1
            for src, dst in hdr["from_base"]:
                link(f"{base}/{src}", inside(dst))
            for src, dst in hdr["copies"]:
                link(inside(src), inside(dst))
            for p, target in hdr["links"]:
                os.symlink(target, inside(p))
            for p, mode in sorted(hdr["dirs"], reverse=True):
                os.chmod(inside(p), mode)
            for ent in hdr["manifest"]["entries"]:
                if ent[1] == "file":
                    ent.append(os.stat(inside(ent[0])).st_mtime_ns)
            with open(tmp + suf, "w") as mf:
                mf.write(json.dumps(hdr["manifest"], separators=(",", ":")))
            try:
                os.rename(tmp, final)
            except OSError:
                if not os.path.isdir(final):
                    raise
                shutil.rmtree(tmp, ignore_errors=True)
            os.replace(tmp + suf, final + suf)
        except BaseException as e:
            shutil.rmtree(tmp, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.unlink(tmp + suf)
            if isinstance(e, OSError):
                fail(e, root)
            raise
        return files


def link(s: str, d: str) -> None:
    try:
        os.link(s, d)
    except OSError:
        shutil.copy2(s, d)


def fail(e: OSError, root: str) -> NoReturn:
    sys.exit(f"ddptui sync: {e.strerror or e}: {e.filename or root}")


def main(argv: list[str]) -> None:
    tree = Tree(*argv[:4])
    offer = tree.offer()
    print(json.dumps(offer), flush=True)
    if offer["have"]:
        return
    inp = sys.stdin.buffer
    line = inp.readline()
    if not line.strip():
        return  # the sender had nothing to send, or gave up
    files = tree.build(json.loads(line), inp)
    print(json.dumps({"ok": True, "files": files}))


if __name__ == "__main__":
    main(sys.argv[1:])
