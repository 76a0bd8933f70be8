"""One node's sync through the local transport: the node-side programs for real, on a
temporary workdir (no SSH, fast): cold, cached, one edit, links reused, a cut stream."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from ddptui.config import NodeConfig
from ddptui.remote import nodeops
from ddptui.store import rundir
from ddptui.sync.push import SyncError, sync_node
from ddptui.sync.walk import ProjectError, walk
from ddptui.transport.local import LocalTransport


def project(root: Path) -> Path:
    for rel, text in {"a.py": "a", "pkg/b.py": "b", "pkg/c.py": "b", "d/e.txt": "e"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    os.chmod(root / "a.py", 0o755)
    os.symlink("pkg", root / "lnk")
    (root / "emptydir").mkdir()
    return root


def push(proj: Path, work: Path) -> tuple[dict[str, object], Path, list[str]]:
    walked = walk(proj)
    digest = walked.manifest.digest()
    root = rundir.code_root(str(work))
    cmds = nodeops.sync_cmd(sys.executable, root, digest)
    said: list[str] = []
    stats = sync_node("n", LocalTransport(NodeConfig("n", "localhost")), cmds, walked,
                      str(proj), said.append)
    return stats, Path(rundir.code_dir(str(work), digest)), said


def test_cold_then_cached_then_one_edit(tmp_path: Path) -> None:
    proj, work = project(tmp_path / "p"), tmp_path / "w"
    stats, tree, said = push(proj, work)
    assert (stats["files_sent"], stats["files"], stats["cached"]) == (3, 4, False)  # c = copy of b
    assert (tree / "pkg/c.py").read_text() == "b" and os.readlink(tree / "lnk") == "pkg"
    assert os.stat(tree / "a.py").st_mode & 0o100 and (tree / "emptydir").is_dir()
    assert os.stat(tree).st_mode & 0o777 == 0o700
    assert os.stat(tree.parent).st_mode & 0o777 == 0o700
    assert json.loads(Path(f"{tree}{rundir.CODE_MANIFEST_SUFFIX}").read_text())["v"] == 1
    assert said[-1].startswith("synced: 3 of 4 files sent")
    assert push(proj, work)[0]["cached"] is True
    (proj / "d/e.txt").write_text("E2")
    stats, tree2, _ = push(proj, work)
    assert (stats["files_sent"], stats["bytes_sent"]) == (1, 2)
    assert tree2 != tree and (tree2 / "d/e.txt").read_text() == "E2"
    assert os.stat(tree2 / "pkg/b.py").st_ino == os.stat(tree / "pkg/b.py").st_ino  # linked
    assert (tree / "d/e.txt").read_text() == "e"  # the old tree is intact
    assert not [p for p in tree.parent.iterdir() if p.name.startswith(rundir.CODE_TMP_PREFIX)]


def test_a_file_changed_while_sending_leaves_no_tree(tmp_path: Path) -> None:
    proj, work = project(tmp_path / "p"), tmp_path / "w"
    walked = walk(proj)
    (proj / "pkg/b.py").write_text("longer now")
    digest = walked.manifest.digest()
    root = rundir.code_root(str(work))
    cmds = nodeops.sync_cmd(sys.executable, root, digest)
    with pytest.raises(ProjectError, match=r"pkg/b\.py changed"):
        sync_node("n", LocalTransport(NodeConfig("n", "localhost")), cmds, walked, str(proj),
                  lambda _t: None)
    assert not Path(rundir.code_dir(str(work), digest)).exists()
    assert not Path(root).exists() or [p.name for p in Path(root).iterdir()] == []


def test_a_file_that_only_grew_since_hashing_ships_as_hashed(tmp_path: Path) -> None:
    """ddptui's own output, say, written into the project while it launches."""
    proj = project(tmp_path / "p")
    (proj / "run.out").write_text("line 1\n")
    walked = walk(proj)
    with open(proj / "run.out", "a") as fh:
        fh.write("line 2\n")
    digest = walked.manifest.digest()
    root = rundir.code_root(str(tmp_path / "w"))
    cmds = nodeops.sync_cmd(sys.executable, root, digest)
    sync_node("n", LocalTransport(NodeConfig("n", "localhost")), cmds, walked, str(proj),
              lambda _t: None)
    assert (Path(root) / digest / "run.out").read_text() == "line 1\n"


def test_a_node_that_cannot_write_is_named(tmp_path: Path) -> None:
    proj = project(tmp_path / "p")
    (tmp_path / "w").write_text("a file where the workdir should be")
    with pytest.raises(SyncError, match="node n: "):
        push(proj, tmp_path / "w")


def test_a_file_the_job_rewrote_on_the_node_is_sent_again_not_linked(tmp_path: Path) -> None:
    proj, work = project(tmp_path / "p"), tmp_path / "w"
    _, tree, _ = push(proj, work)
    (tree / "pkg/b.py").write_text("changed by the job")  # b and c share one inode there
    (proj / "a.py").write_text("edited")
    stats, tree2, _ = push(proj, work)
    assert stats["files_sent"] == 2  # a.py, and b's content again (c is its copy)
    assert (tree2 / "pkg/b.py").read_text() == "b" == (tree2 / "pkg/c.py").read_text()
