"""The node side of a sync, run by the node's own interpreter (:mod:`ddptui.nodeprog.sync_tree`).

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

from ddptui import nodeprog
from ddptui.nodeprog import sync_tree

#: The node program (:mod:`ddptui.nodeprog.sync_tree`).
SYNC_SRC = nodeprog.source(sync_tree)
