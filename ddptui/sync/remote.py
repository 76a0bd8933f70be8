"""The node side of a sync, as Python source run by the node's own interpreter (pure text).

Python because it is the one program every node is known to have (torchrun needs it); the
node needs no ``tar``, ``rsync`` or ``sha256sum``. :data:`SYNC_SRC` takes the code root,
the digest, the manifest suffix and the prefix of a tree being built as arguments (names
from :mod:`ddptui.store.rundir`), and holds a conversation on one channel, so a sync costs
one process and one round trip per node:

* first it prints ``{"have": true}`` when the tree is already there (and marks it as
  the newest), else the manifest of the newest complete tree, which the sender diffs against,
  less any file whose size or mtime changed since it was written there (a job that rewrote
  one of its own files in place): that content is sent again rather than linked.
* then it reads a one-line JSON header (:meth:`PushPlan.header`; an empty line or none:
  nothing to do), then the bytes of each sent file back to back; it builds the tree in a
  temporary directory (links from the base tree for content it has, the sent bytes for the
  rest), writes the manifest and renames the tree into place, so a tree under its digest's
  name is always complete. Two syncs of the same code to one disk (two nodes sharing a home)
  both succeed: the second rename loses and its copy is dropped.

Trees share unchanged files as hard links, so that a warm sync costs a few links rather than
copies: code that rewrites one of its own synced files in place rewrites it in the other
trees too. New files written into the tree (outputs, checkpoints) are the run's own.
"""

from __future__ import annotations

SYNC_SRC = r"""
import json, os, shutil, sys
root, digest, suf, tmp_prefix = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
def done(d):
    return os.path.isdir(os.path.join(root, d)) and os.path.isfile(os.path.join(root, d + suf))
if done(digest):
    try:
        os.utime(os.path.join(root, digest + suf))
    except OSError:
        pass
    print(json.dumps({"have": True}), flush=True)
    sys.exit(0)
cands = []
try:
    names = os.listdir(root)
except OSError:
    names = []
for n in names:
    if n.endswith(suf) and not n.startswith(".") and done(n[:-len(suf)]):
        try:
            cands.append((os.stat(os.path.join(root, n)).st_mtime, n[:-len(suf)]))
        except OSError:
            pass
def unchanged(d, e):
    if e[1] != "file":
        return True
    try:
        st = os.stat(root + "/" + d + "/" + e[0])
    except OSError:
        return False
    return st.st_size == e[3] and len(e) > 6 and st.st_mtime_ns == e[6]
for _, d in sorted(cands, reverse=True):
    try:
        with open(os.path.join(root, d + suf)) as f:
            m = json.load(f)
    except (OSError, ValueError):
        continue
    m["entries"] = [e[:6] for e in m["entries"] if unchanged(d, e)]
    print(json.dumps({"have": False, "base": d, "manifest": m}), flush=True)
    break
else:
    print(json.dumps({"have": False, "base": None}), flush=True)
inp = sys.stdin.buffer
line = inp.readline()
if not line.strip():
    sys.exit(0)  # the sender had nothing to send, or gave up
hdr = json.loads(line)
def fail(e):
    sys.exit("ddptui sync: %s: %s" % (e.strerror or e, e.filename or root))
try:
    os.makedirs(root, mode=0o700, exist_ok=True)
except OSError as e:
    fail(e)
final = os.path.join(root, digest)
tmp = os.path.join(root, "%s%s-%d" % (tmp_prefix, digest, os.getpid()))
base = os.path.join(root, hdr["base"]) if hdr["base"] else None
def inside(p):
    if p.startswith("/") or "/../" in "/" + p + "/" or p in ("", ".", ".."):
        raise SystemExit("ddptui sync: refusing a path outside the tree: " + p)
    return tmp + "/" + p
def link(s, d):
    try:
        os.link(s, d)
    except OSError:
        shutil.copy2(s, d)
files = 0
try:
    os.mkdir(tmp, 0o700)
    for p, mode in hdr["dirs"]:
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
        link(base + "/" + src, inside(dst))
    for src, dst in hdr["copies"]:
        link(inside(src), inside(dst))
    for p, target in hdr["links"]:
        os.symlink(target, inside(p))
    for p, mode in sorted(hdr["dirs"], reverse=True):
        os.chmod(inside(p), mode)
    for e in hdr["manifest"]["entries"]:
        if e[1] == "file":
            e.append(os.stat(inside(e[0])).st_mtime_ns)
    with open(tmp + suf, "w") as f:
        f.write(json.dumps(hdr["manifest"], separators=(",", ":")))
    try:
        os.rename(tmp, final)
    except OSError:
        if not os.path.isdir(final):
            raise
        shutil.rmtree(tmp, ignore_errors=True)
    os.replace(tmp + suf, final + suf)
except BaseException as e:
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        os.unlink(tmp + suf)
    except OSError:
        pass
    if isinstance(e, OSError):
        fail(e)
    raise
print(json.dumps({"ok": True, "files": files}))
"""
