"""The pure parts of a sync: gitignore matching, the manifest, its digest, what a node lacks,
the size limit; and the local walk on a real tree (fast, no node)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ddptui.events import JSON
from ddptui.sync.ignore import Excluder, compile_rule
from ddptui.sync.manifest import Entry, Manifest, plan_push, progress_text, too_big
from ddptui.sync.walk import ProjectError, walk


def ex(lines: list[str], path: str, is_dir: bool = False, base: str = "") -> bool:
    e = Excluder(defaults=False)
    e.add_gitignore(base, "\n".join(lines))
    return e.excluded(path, is_dir)


@pytest.mark.parametrize(("pattern", "path", "is_dir", "want"), [
    ("*.log", "a.log", False, True),
    ("*.log", "deep/er/a.log", False, True),
    ("*.log", "a.logx", False, False),
    ("/top.txt", "top.txt", False, True),
    ("/top.txt", "sub/top.txt", False, False),
    ("build/", "build", True, True),
    ("build/", "build", False, False),  # a file named build is not the directory
    ("build/", "src/build", True, True),
    ("doc/frotz", "doc/frotz", False, True),
    ("doc/frotz", "a/doc/frotz", False, False),  # a middle slash anchors
    ("foo/*", "foo/test.json", False, True),
    ("foo/*", "foo/bar/hello.c", False, False),  # * stops at a slash
    ("**/foo", "a/b/foo", False, True),
    ("**/foo", "foo", False, True),
    ("**/foo/bar", "x/foo/bar", False, True),
    ("abc/**", "abc/x/y", False, True),
    ("abc/**", "abc", True, False),
    ("a/**/b", "a/b", False, True),
    ("a/**/b", "a/x/y/b", False, True),
    ("a/**/b", "a/xb", False, False),
    ("?.py", "a.py", False, True),
    ("?.py", "ab.py", False, False),
    ("[ab].txt", "b.txt", False, True),
    ("[!ab].txt", "b.txt", False, False),
    ("[!ab].txt", "c.txt", False, True),
    ("\\#hash", "#hash", False, True),
    ("\\!bang", "!bang", False, True),
    ("trail\\ ", "trail ", False, True),
    ("trailing   ", "trailing", False, True),
    ("# comment", "# comment", False, False),
])
def test_gitignore_patterns(pattern: str, path: str, is_dir: bool, want: bool) -> None:
    assert ex([pattern], path, is_dir) is want


def test_negation_last_rule_wins_and_deeper_files_come_later() -> None:
    e = Excluder(defaults=False)
    e.add_gitignore("", "*.txt\n!keep.txt\n")
    e.add_gitignore("sub", "keep.txt\n")
    assert e.excluded("a.txt", False)
    assert not e.excluded("keep.txt", False)
    assert e.excluded("sub/keep.txt", False)  # the deeper file says so
    assert not e.excluded("other/keep.txt", False)


def test_nested_gitignore_is_relative_to_its_directory() -> None:
    e = Excluder(defaults=False)
    e.add_gitignore("pkg", "/gen.py\nout/\n")
    assert e.excluded("pkg/gen.py", False)
    assert not e.excluded("gen.py", False)
    assert not e.excluded("pkg/sub/gen.py", False)
    assert e.excluded("pkg/sub/out", True)


def test_defaults_and_job_exclude_order() -> None:
    e = Excluder(("data/", "!model.pt"))
    for path, is_dir in [(".git", True), ("__pycache__", True), ("x/__pycache__", True),
                         (".venv", True), ("venv", True), ("checkpoints", True),
                         ("ckpt/last.ckpt", False), ("w.pth", False), (".ddptui", True),
                         ("data", True), ("m.pyc", False)]:
        assert e.excluded(path, is_dir), path
    assert not e.excluded("model.pt", False)  # job.exclude re-includes a default
    assert e.excluded("other.pt", False)
    assert not e.excluded("train.py", False)
    e.add_gitignore("", "!checkpoints/\n")
    assert not e.excluded("checkpoints", True)  # the project's own file re-includes too


def test_blank_and_comment_lines_compile_to_nothing() -> None:
    assert compile_rule("") is None and compile_rule("   ") is None
    assert compile_rule("# x") is None and compile_rule("/") is None


def m(*entries: Entry) -> Manifest:
    return Manifest.of(entries)


def f(path: str, sha: str, size: int = 10, mode: int = 0o644) -> Entry:
    return Entry(path, "file", mode, size, sha)


def test_digest_depends_on_content_mode_links_not_order() -> None:
    a = m(f("a.py", "1"), f("b.py", "2"), Entry("d", "dir", 0o755))
    assert a.digest() == m(Entry("d", "dir", 0o755), f("b.py", "2"), f("a.py", "1")).digest()
    assert a.digest() != m(f("a.py", "1"), f("b.py", "3"), Entry("d", "dir", 0o755)).digest()
    assert a.digest() != m(f("a.py", "1", mode=0o755), f("b.py", "2"),
                           Entry("d", "dir", 0o755)).digest()
    assert a.digest() != m(f("a.py", "1"), f("c.py", "2"), Entry("d", "dir", 0o755)).digest()
    assert len(a.digest()) == 20
    assert Manifest.from_json(a.to_json()) == a


@pytest.mark.parametrize("item", [
    "a.py", ["a.py", "fifo", 420, 0, "", ""], ["a.py", "file", "420", 0, "", ""],
    ["a.py", "file", 420, None, "", ""], ["a.py", "file", 420],
])
def test_a_manifest_entry_read_back_is_checked(item: JSON) -> None:
    """A node's manifest is JSON from elsewhere: an entry of the wrong shape or types is no
    entry (ValueError, as an unknown kind always was), not an Entry holding a string mode."""
    with pytest.raises(ValueError):
        Entry.from_list(item)


def test_plan_push_cold_sends_each_content_once() -> None:
    new = m(f("a", "x", 5), f("b", "x", 5), f("c", "y", 7), Entry("l", "link", target="a"))
    p = plan_push(new, None)
    assert [e.path for e in p.send] == ["a", "c"]
    assert p.copies == (("a", "b"),)
    assert p.bytes == 12 and p.files == 3
    assert [e.path for e in p.links] == ["l"]


def test_plan_push_warm_sends_only_the_changed_file() -> None:
    old = m(*[f(f"f{i}", f"h{i}") for i in range(100)])
    new = m(*[f(f"f{i}", "changed" if i == 7 else f"h{i}") for i in range(100)])
    p = plan_push(new, old)
    assert [e.path for e in p.send] == ["f7"]
    assert len(p.from_base) == 99 and p.bytes == 10


def test_plan_push_links_moved_content_but_not_across_modes() -> None:
    old = m(f("old/name.py", "h"), f("run.sh", "s", mode=0o644))
    new = m(f("new/name.py", "h"), f("run.sh", "s", mode=0o755))
    p = plan_push(new, old)
    assert p.from_base == (("old/name.py", "new/name.py"),)
    assert [e.path for e in p.send] == ["run.sh"]  # same bytes, new mode: a file of its own


def test_too_big_names_the_largest_files() -> None:
    small = m(f("a", "1", 100))
    assert too_big(small, 1) is None
    big = m(f("data/big.bin", "1", 900_000), f("b.bin", "2", 300_000), f("c.py", "3", 10))
    msg = too_big(big, 1)
    assert msg is not None
    assert msg.index("data/big.bin (900.0 kB)") < msg.index("b.bin (300.0 kB)")
    assert "1.2 MB" in msg and "job.max_sync_mb" in msg and "job.exclude" in msg


def test_progress_text() -> None:
    assert progress_text(120, 2000, 31_000_000, 0.5) == "sync 120/2000 files, 31.0 MB, 62.0 MB/s"


def tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def test_walk_honours_gitignores_excludes_venvs_links_and_modes(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    tree(root, {"train.py": "t", "pkg/__init__.py": "", "pkg/m.py": "m", ".gitignore": "*.log\n",
                "pkg/.gitignore": "gen/\n", "pkg/gen/x.py": "x", "a.log": "l",
                "env1/pyvenv.cfg": "home = /usr", "env1/lib/x.py": "x", "data/d.txt": "d",
                "skipme/z": "z", ".git/HEAD": "ref", "w.pt": "w", "state/run.json": "{}"})
    (root / "empty").mkdir()
    os.chmod(root / "train.py", 0o755)
    os.symlink("pkg/m.py", root / "alias.py")
    os.symlink(str(root / "data"), root / "abs_inside")
    w = walk(root, ("skipme/",), skip=(str(root / "state"),), hash_cache=tmp_path / "h.json")
    by = {e.path: e for e in w.manifest.entries}
    assert set(by) == {".gitignore", "train.py", "pkg", "pkg/__init__.py", "pkg/m.py",
                       "pkg/.gitignore", "data", "data/d.txt", "empty", "alias.py",
                       "abs_inside"}
    assert by["train.py"].mode & 0o111 and not by["pkg/m.py"].mode & 0o111
    assert by["alias.py"].kind == "link" and by["alias.py"].target == "pkg/m.py"
    assert by["abs_inside"].target == "data"


def test_walk_refuses_links_out_and_a_missing_dir(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    tree(root, {"a.py": "a"})
    os.symlink("/etc", root / "etc")
    with pytest.raises(ProjectError, match="etc -> /etc"):
        walk(root)
    with pytest.raises(ProjectError, match="does not exist"):
        walk(tmp_path / "nope")


def test_walk_hash_cache_is_used_and_racy_entries_are_not(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    tree(root, {"a.py": "one", "b.py": "two"})
    old = 1_600_000_000
    os.utime(root / "a.py", (old, old))
    cache = tmp_path / "h.json"
    first = walk(root, hash_cache=cache)
    assert "a.py" in cache.read_text() and "b.py" not in cache.read_text()  # b is too new
    (root / "a.py").write_text("ONE")  # same size, inode and (restored) mtime: a cache hit
    os.utime(root / "a.py", (old, old))
    again = walk(root, hash_cache=cache)
    sha = {e.path: e.sha256 for e in again.manifest.files}
    assert sha["a.py"] == {e.path: e.sha256 for e in first.manifest.files}["a.py"]  # cached
    cache.unlink()
    fresh = {e.path: e.sha256 for e in walk(root).manifest.files}
    assert fresh["a.py"] != sha["a.py"]


def test_walk_refuses_an_oversized_project_before_reading_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "proj"
    tree(root, {"a.py": "a", "data/big.bin": "x" * 3000})
    with monkeypatch.context() as m:
        m.setattr("ddptui.sync.walk._sha256", lambda p: pytest.fail(f"hashed {p}"))
        with pytest.raises(ProjectError, match=r"data/big\.bin \(3\.0 kB\)"):
            walk(root, max_mb=0.002)
    assert len(walk(root, ("data/",), max_mb=0.002).manifest.files) == 1


def test_plan_runs_the_script_from_the_project_with_it_on_pythonpath(tmp_path: Path) -> None:
    """launch.sh run by sh: torchrun's cwd is the project, PYTHONPATH starts with it, and the
    node dir still gets pgid and exit_code (by absolute path)."""
    import json
    import subprocess
    import sys

    from ddptui.config import HostsConfig, JobConfig, NodeConfig
    from ddptui.launch.plan import make_plan

    fake = tmp_path / "py"
    src = "import json, os, sys; print(json.dumps([os.getcwd(), os.environ['PYTHONPATH']]))"
    fake.write_text(f'#!/bin/sh\nexec {sys.executable} -c "{src}" "$@"\n')
    fake.chmod(0o755)
    proj = tmp_path / "my proj"
    (proj / "src").mkdir(parents=True)
    node = NodeConfig("n", "n", python=str(fake), env={"PYTHONPATH": "/user/lib"})
    job = JobConfig(script=str(proj / "src/train.py"), project=str(proj), args=("--x",))
    cfg = HostsConfig(tmp_path / "hosts.yaml", (node,), job=job)
    launch = make_plan(cfg, "r1", workdirs={"n": str(tmp_path / "w")}, rdzv_host="h",
                       project_dirs={"n": str(proj)}).nodes[0]
    assert launch.project_dir == str(proj)
    assert launch.argv[-2:] == (str(proj / "src/train.py"), "--x")
    os.makedirs(launch.node_dir)
    (Path(launch.node_dir) / "launch.sh").write_text(launch.script)
    done = subprocess.run(["/bin/sh", "launch.sh"], cwd=launch.node_dir, capture_output=True,
                          text=True, timeout=60, env={"PATH": os.environ["PATH"]})
    cwd, pythonpath = json.loads(done.stdout)
    assert cwd == str(proj) and pythonpath == f"{proj}:/user/lib"
    assert (Path(launch.node_dir) / "exit_code").read_text() == "0\n"
    assert (Path(launch.node_dir) / "pgid").read_text().strip().isdigit()
    module = make_plan(HostsConfig(tmp_path / "h", (node,), job=JobConfig(
        script="pkg.train", module=True, project=str(proj))), "r1",
        workdirs={"n": str(tmp_path / "w")}, rdzv_host="h", project_dirs={"n": "/code/d"})
    assert module.nodes[0].argv[-2:] == ("-m", "pkg.train")
    assert "cd '/code/d'" in module.nodes[0].script
