"""The house rules that the folder tree promises: short modules, imports that follow the flow
(config -> plan -> launch -> store -> faces) without circles, a pure core, and a wheel that
ships every package."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400
#: The pure core: what a hosts-file value becomes before anything touches a node.
CORE = ("ddptui.config", "ddptui.events", "ddptui.nodelog", "ddptui.ingest", "ddptui.launch.plan")
NOT_IN_CORE = ("paramiko", "subprocess", "textual")
#: The top of the flow: nothing below it may import it.
FACES = ("ddptui.cli", "ddptui.tui", "ddptui.faces")


def _sources() -> Iterator[tuple[str, Path]]:
    for path in sorted((ROOT / "ddptui").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), path
    for path in sorted((ROOT / "worker").rglob("*.py")):
        yield "worker." + path.stem, path


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _under_type_checking(tree: ast.Module) -> set[int]:
    """Lines of imports made only for the type checker: they never run."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in ast.walk(node):
                lines.add(getattr(child, "lineno", -1))
    return lines


def imports(module: str, path: Path, modules: frozenset[str] = frozenset(), *,
            typing_too: bool = False) -> set[str]:
    """Every module ``module`` imports when it runs, at the top or inside a function (and,
    ``typing_too``, for the type checker alone); ``modules`` are the project's own, to tell a
    submodule from a name in a package."""
    tree = ast.parse(path.read_text())
    skip = set() if typing_too else _under_type_checking(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, path, node)
            subs = {f"{base}.{a.name}" for a in node.names}
            found.update(subs)
            # `from pkg import submodule` loads the submodule, not pkg's own names: pkg's
            # __init__ runs as the parent of any submodule, which is no edge of the flow.
            if not subs <= modules:
                found.add(base)
    return found


def _graph(typing_too: bool = False) -> dict[str, set[str]]:
    sources = dict(_sources())
    modules = frozenset(sources)
    return {m: {i for i in imports(m, p, modules, typing_too=typing_too)
                if i in sources and i != m} for m, p in sources.items()}


@pytest.mark.parametrize(("module", "path"), list(_sources()), ids=lambda v: str(v))
def test_every_module_is_short(module: str, path: Path) -> None:
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(ROOT)}: {n} lines (at most {MAX_LINES})"


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for dep in sorted(graph.get(m, ())):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep):], dep]
            if dep not in state and (found := visit(dep)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_module_imports_itself_round_a_circle() -> None:
    """Imports made only for the type checker count: a circle hidden under TYPE_CHECKING is
    still two modules that must be read together."""
    cycle = _cycle(_graph(typing_too=True))
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def _package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def test_packages_import_each_other_without_a_circle() -> None:
    """Between rooms the arrows point one way: a package that imports another is never
    imported by it, however indirectly."""
    packages: dict[str, set[str]] = {}
    for m, deps in _graph(typing_too=True).items():
        packages.setdefault(_package(m), set()).update(
            _package(d) for d in deps if _package(d) != _package(m))
    packages.pop("ddptui", None)  # the package root holds only the version
    cycle = _cycle(packages)
    assert cycle is None, "package circle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_sees_a_circle_under_type_checking(tmp_path: Path) -> None:
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("import pkg.b\n")
    b.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n")
    mods = frozenset({"pkg.a", "pkg.b"})
    graph = {m: imports(m, p, mods, typing_too=True) & mods - {m}
             for m, p in (("pkg.a", a), ("pkg.b", b))}
    assert _cycle(graph) == ["pkg.a", "pkg.b", "pkg.a"]
    assert imports("pkg.b", b, mods) & mods == set()  # what runs: no circle


def test_no_module_reaches_into_another_objects_private_members() -> None:
    """ruff's SLF001 is on for ddptui/ (pyproject.toml), with no line let off."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert "SLF" in config["select"] or "SLF001" in config["select"]
    let_off = [f"{p.relative_to(ROOT)}:{i}" for _, p in _sources()
               for i, line in enumerate(p.read_text().splitlines(), 1)
               if "noqa" in line and "SLF" in line]
    assert let_off == []
    assert not any(k.startswith("ddptui") for k in config.get("per-file-ignores", {}))


#: ``ddptui/launch/``'s size when its run life was spread over one class in six files: the
#: rework into a session, phases, a stopper and watches made of callables must not grow it.
LAUNCH_LINES = 4746
#: What later work added to ``ddptui/launch/`` since, each named: a feature may grow it, a
#: rework may not.
GROWN_SINCE = {
    "the rendezvous port reserved on the store's node (reserve.py, its phase, is_host)": 235,
    "progress-bar states cut in the node's tee (nested bars too) and kept by the bus": 64,
    "metric scanners handed to the followers and to attach's replay": 6,
    "a lost node's lines fetched when reached again, and what was stopped there said": 9,
    "attach of a run no node holds says so instead of following it": 39,
    "metric runs (a flood's metric lines taken whole) kept as the run's evidence": 12,
    "Slurm: the run's own job step, its stop through scancel, the job watched and given back":
        36,
    "the node's tee says when a rank ends with exit code 0 (torchrun logs failures only)": 38,
    "a sampler whose start was in flight at the run's end is ended too": 4,
    "preflight in the ranks' environment beside a bare login, and the env: name at fault "
    "(rank_env.py, issue 25)": 243,
    "a failed run's diagnosis made again from its stored logs for `ddptui logs` "
    "(hindsight.py, issue 25)": 172,
    "races fixed: a rendezvous lock renamed into place with its owner in it; a Slurm stop "
    "confirmed by the node's processes and the step's end, not by scancel's answer; the "
    "reaper fetches again what a lost node's ranks wrote until it stopped them (issue 33)": 34,
}


def test_the_launch_package_grows_only_by_named_features() -> None:
    n = sum(len(p.read_text().splitlines()) for p in (ROOT / "ddptui" / "launch").glob("*.py"))
    most = LAUNCH_LINES + sum(GROWN_SINCE.values())
    assert n <= most, f"ddptui/launch/ holds {n} lines (at most {most})"


def test_nothing_below_the_faces_imports_them() -> None:
    wrong = [f"{m} imports {d}" for m, deps in _graph().items() for d in deps
             if d.startswith(FACES) and not m.startswith(FACES)]
    assert wrong == []


def test_the_worker_imports_nothing_of_ddptui() -> None:
    wrong = [f"{m} imports {d}" for m, p in _sources() if m.startswith("worker.")
             for d in imports(m, p) if d.split(".")[0] == "ddptui"]
    assert wrong == []


def test_the_core_imports_no_io_and_no_screen() -> None:
    """Read from the source (nothing is imported lazily either) and from a fresh interpreter
    (nothing is pulled in indirectly)."""
    graph, sources = _graph(), dict(_sources())
    core = [m for m in sources if m.startswith(CORE)]
    reach, todo = set(core), list(core)
    while todo:
        for dep in graph[todo.pop()]:
            if dep not in reach:
                reach.add(dep)
                todo.append(dep)
    direct = [f"{m} imports {i}" for m in sorted(reach) for i in imports(m, sources[m])
              if i.split(".")[0] in NOT_IN_CORE]
    assert direct == []
    code = (f"import sys; import {', '.join(CORE)}; "
            f"print(' '.join(m for m in {NOT_IN_CORE!r} if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, timeout=60).stdout.split()
    assert loaded == []


def test_the_wheel_lists_every_package() -> None:
    """pyproject lists packages by hand (the worker's folder is mapped to another name), so a
    new folder must be added there or it is missing from the wheel."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {".".join(p.parent.relative_to(ROOT).parts)
               for p in (ROOT / "ddptui").rglob("__init__.py")}
    assert set(tool["packages"]) == on_disk | {"ddptui_worker"}
    assert tool["package-dir"] == {"ddptui_worker": "worker"}
    assert (ROOT / "worker" / "__main__.py").is_file()
