"""The house rules that the folder tree promises: short modules, folders a reader can take in,
imports that follow the order docs/architecture.md states (read from it) without circles, a
dashboard that reaches a run only through the engine, a pure core, and a wheel that ships
every package."""

from __future__ import annotations

import ast
import fnmatch
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400
#: Modules directly in one folder of ddptui/: past this, a folder is a heap, not a room.
MAX_MODULES = 20
#: Where the order of the packages is written, in its ```layers block (bottom first).
ARCHITECTURE = ROOT / "docs" / "architecture.md"
#: The pure core: what a hosts-file value becomes before anything touches a node, and every
#: reading and judging of what comes back (docs/architecture.md, "Pure core").
CORE = ("ddptui.config", "ddptui.events", "ddptui.nodelog", "ddptui.ingest", "ddptui.bars",
        "ddptui.run_state", "ddptui.metrics", "ddptui.nccl", "ddptui.telemetry",
        "ddptui.chart", "ddptui.insight", "ddptui.launch.plan", "ddptui.store.rundir")
NOT_IN_CORE = ("paramiko", "subprocess", "textual")
#: What the dashboard reaches only through the engine's client and plain view types: the
#: run's machinery and the ways to a node.
BEHIND_THE_ENGINE = ("ddptui.launch", "ddptui.live", "ddptui.remote", "ddptui.afterwards",
                     "ddptui.transport", "ddptui.slurm")


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
    return graph_of(dict(_sources()), typing_too=typing_too)


def graph_of(sources: dict[str, Path], *, typing_too: bool = False) -> dict[str, set[str]]:
    """Each of ``sources``' modules -> the others it imports."""
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


def _packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    packages: dict[str, set[str]] = {}
    for m, deps in graph.items():
        packages.setdefault(_package(m), set()).update(
            _package(d) for d in deps if _package(d) != _package(m))
    packages.pop("ddptui", None)  # the package root holds only the version
    return packages


def test_packages_import_each_other_without_a_circle() -> None:
    """Between rooms the arrows point one way: a package that imports another is never
    imported by it, however indirectly."""
    cycle = _cycle(_packages(_graph(typing_too=True)))
    assert cycle is None, "package circle: " + " -> ".join(cycle or [])


def layers_in(doc: Path) -> list[list[str]]:
    """The packages of ``doc``'s ```layers block, one layer a line, bottom first, each named
    under ``ddptui.``; a ``#`` starts the reader's words. The doc is the one place the order
    is written, so the test cannot drift from what a reader is told."""
    lines = doc.read_text().splitlines()
    assert "```layers" in lines, f"{doc.name} has no ```layers block"
    start = lines.index("```layers") + 1
    block = lines[start:lines.index("```", start)]
    return [[f"ddptui.{name}" for name in words]
            for line in block if (words := line.split("#")[0].split())]


def against_the_order(graph: dict[str, set[str]], layers: list[list[str]]) -> list[str]:
    """Each import of a package on the same layer or one above, each package in no layer or
    in two, and each layer's name that is no package: a package imports only those below
    it, so the order read bottom to top is an order to read the code in."""
    graph = {m: deps for m, deps in graph.items() if m.split(".")[0] == "ddptui"}
    level: dict[str, int] = {}
    wrong = []
    for n, layer in enumerate(layers, 1):
        for package in layer:
            if package in level:
                wrong.append(f"{package} is on layers {level[package]} and {n}")
            level[package] = n
    packages = _packages(graph)
    wrong += [f"{p} is on no layer" for p in sorted(set(packages) - set(level))]
    wrong += [f"{p} is on layer {level[p]} but is no package"
              for p in sorted(set(level) - set(packages))]
    for m, deps in sorted(graph.items()):
        mine = level.get(_package(m))
        wrong += [f"{m} (layer {mine}) imports {d} (layer {level[_package(d)]})"
                  for d in sorted(deps) if _package(d) != _package(m) and mine is not None
                  and level.get(_package(d), 0) >= mine]
    return wrong


def test_packages_import_only_those_below_them_in_the_documented_order() -> None:
    """Imports made only for the type checker count, as for circles."""
    wrong = against_the_order(_graph(typing_too=True), layers_in(ARCHITECTURE))
    assert wrong == [], "against docs/architecture.md's order of layers:\n" + "\n".join(wrong)


def test_the_order_check_names_an_import_upward_and_a_package_left_out(tmp_path: Path) -> None:
    doc = tmp_path / "architecture.md"
    doc.write_text("# x\n\n```layers\nevents     # bottom\nconfig store   # peers\ncli\n```\n")
    files = {"ddptui.events": "", "ddptui.config.values": "import ddptui.events\n",
             "ddptui.store.views": "from ddptui.config import values\n",
             "ddptui.cli": "from ddptui import store\nimport ddptui.events\n"}
    graph = _graph_in(tmp_path, files)
    assert against_the_order(graph, layers_in(doc)) == [
        "ddptui.store.views (layer 2) imports ddptui.config.values (layer 2)"]
    files["ddptui.events"] = "from ddptui.config import values\n"
    files["ddptui.metrics"] = ""
    assert against_the_order(_graph_in(tmp_path, files), layers_in(doc)) == [
        "ddptui.metrics is on no layer",
        "ddptui.events (layer 1) imports ddptui.config.values (layer 2)",
        "ddptui.store.views (layer 2) imports ddptui.config.values (layer 2)"]


#: Names the architecture doc gives files that live elsewhere than this tree.
NOT_HERE = {"torchrun.py": "the tee's name in a node dir (nodeprog/torchrun_tee.py)"}


def tree_in(doc: Path) -> list[str]:
    """The paths of the fenced block under ``doc``'s "## The tree": a line's first column
    (up to two spaces) holds names, each folder (``name/``) holds the lines indented under
    it; a line whose first column is not names (a description carried over) is skipped."""
    text = doc.read_text()
    block = text[text.index("## The tree"):].split("```")[1].splitlines()[1:]
    paths: list[str] = []
    folders: list[str] = []
    for line in block:
        names = re.split(r"\s{2,}", line.strip())[0].split()
        if not names or not all(re.fullmatch(r"[\w./-]*[./][\w./-]*", n) for n in names):
            continue
        depth = (len(line) - len(line.lstrip())) // 2
        del folders[depth:]
        paths += ["".join(folders) + n for n in names]
        if names[-1].endswith("/"):
            folders.append(names[-1])
    return paths


def named_in_prose(doc: Path) -> list[str]:
    """Each ``path.py`` the doc's text names in backquotes, outside its fenced blocks."""
    prose = "".join(doc.read_text().split("```")[::2])
    return sorted(set(re.findall(r"`((?:\w+/)*\w+\.py)`", prose)))


def untrue_to_the_tree(doc: Path, root: Path) -> list[str]:
    """Each file or folder the doc names that is not in ``root`` (in prose, a module path
    may start below ``ddptui/``), and each package of ``ddptui/`` its tree leaves out."""
    tree = tree_in(doc)
    wrong = [f"the tree names {p}, which is not there" for p in tree if not (root / p).exists()]
    wrong += [f"the text names {p}, which is not there" for p in named_in_prose(doc)
              if p not in NOT_HERE and not (root / p).exists()
              and not (root / "ddptui" / p).exists()]
    packages = sorted(f"{p.parent.relative_to(root)}/" for p in (root / "ddptui").rglob("*.py")
                      if p.name == "__init__.py")
    wrong += [f"the tree leaves out {p}" for p in packages if p not in tree]
    return wrong


def test_the_architecture_doc_names_what_is_there() -> None:
    wrong = untrue_to_the_tree(ARCHITECTURE, ROOT)
    assert wrong == [], "docs/architecture.md:\n" + "\n".join(wrong)


def test_the_doc_check_names_a_gone_module_and_a_missing_package(tmp_path: Path) -> None:
    for path in ("ddptui/__init__.py", "ddptui/cli.py", "ddptui/live/__init__.py",
                 "ddptui/live/bus.py", "ddptui/store/__init__.py", "worker/train.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    doc = tmp_path / "architecture.md"
    doc.write_text("# x\n\nThe bus (`live/bus.py`), the old `launch/watch.py`.\n\n## The tree\n\n"
                   "```\nworker/     the worker\n  train.py  its loop\nddptui/\n  cli.py  args\n"
                   "  live/    following:\n           long words carried over\n"
                   "    bus.py session.py  the bus, the session\n```\n")
    assert untrue_to_the_tree(doc, tmp_path) == [
        "the tree names ddptui/live/session.py, which is not there",
        "the text names launch/watch.py, which is not there",
        "the tree leaves out ddptui/store/"]


def _graph_in(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    """The import graph of modules written under ``tmp_path``, each from its text."""
    sources = {}
    for module, text in files.items():
        path = tmp_path / (module.replace(".", "_") + ".py")
        path.write_text(text)
        sources[module] = path
    return graph_of(sources, typing_too=True)


def around_the_engine(graph: dict[str, set[str]]) -> list[str]:
    """Each import by the dashboard of what only the engine may touch."""
    return [f"{m} imports {d}" for m, deps in sorted(graph.items()) for d in sorted(deps)
            if _package(m) == "ddptui.tui" and _package(d) in BEHIND_THE_ENGINE]


def test_the_dashboard_reaches_a_run_only_through_the_engine() -> None:
    """Type-only imports count: a view type the dashboard needs belongs in a plain module
    that both sides import, not in the run's machinery."""
    wrong = around_the_engine(_graph(typing_too=True))
    assert wrong == [], "the dashboard reaches around the engine:\n" + "\n".join(wrong)


def test_the_engine_check_names_a_dashboard_module_under_type_checking(tmp_path: Path) -> None:
    graph = _graph_in(tmp_path, {
        "ddptui.tui.app": "from ddptui.engine import client\n",
        "ddptui.tui.widgets.log": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from ddptui.live.session import Session\n",
        "ddptui.engine.client": "from ddptui.live import session\n",
        "ddptui.live.session": ""})
    assert around_the_engine(graph) == ["ddptui.tui.widgets.log imports ddptui.live.session"]


def crowded(package: Path) -> list[str]:
    """Each folder of ``package`` (itself included) with more than MAX_MODULES modules
    directly in it, its ``__init__`` aside."""
    folders = {package, *(p.parent for p in package.rglob("*.py"))}
    counts = {d: sum(p.name != "__init__.py" for p in d.glob("*.py")) for d in sorted(folders)}
    return [f"{d.relative_to(package.parent)}/: {n} modules (at most {MAX_MODULES})"
            for d, n in counts.items() if n > MAX_MODULES]


def test_no_folder_holds_more_than_twenty_modules() -> None:
    assert crowded(ROOT / "ddptui") == []


def test_the_folder_check_names_a_crowded_folder(tmp_path: Path) -> None:
    for folder, n in (("pkg", 3), ("pkg/heap", MAX_MODULES + 1), ("pkg/room", MAX_MODULES)):
        (tmp_path / folder).mkdir()
        for i in range(n):
            (tmp_path / folder / f"m{i}.py").write_text("")
        (tmp_path / folder / "__init__.py").write_text("")
    assert crowded(tmp_path / "pkg") == [f"pkg/heap/: {MAX_MODULES + 1} modules (at most 20)"]


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


#: The run's machinery: what ``ddptui/launch/`` held until it was split by its jobs (issue
#: 34), the node programs aside (``nodeprog/``: each a module of its own, linted and tested).
RUN_MACHINERY = ("launch", "live", "afterwards", "remote", "outcome.py")
#: ``ddptui/launch/``'s size when its run life was spread over one class in six files: the
#: rework into a session, phases, a stopper and watches made of callables must not grow it.
LAUNCH_LINES = 4746
#: What later work added to the run's machinery since, each named: a feature may grow it, a
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
    "the node's whole-line tee moved to nodeprog/ with the other node programs (issue 34)":
        -264,
    "launch/ split by its jobs into launch/ live/ afterwards/ remote/ outcome.py: each "
    "package's docstring (issue 34)": 14,
    "Slurm's time limit seen coming: the ranks signalled at the lead and their checkpoint "
    "named (live/timelimit.py, live/allocation.py, remote/checkpoint.py), a run's next "
    "attempt in a new allocation (afterwards/resubmit.py) (issue 35)": 467,
    "rich told that the ranks' output is a terminal, so its bars redraw there "
    "(TTY_COMPATIBLE in launch/plan.py's job_env), and the tee shipped with the node "
    "program it imports (nodeprog/bar_states.py, launch/staging.py)": 12,
    "the ranks' stacks sampled in rounds over the run's connections, counted on the node, "
    "for the straggler judged from them (live/stack_sampler.py, started with the samplers)":
        138,
    "a warm torchrun started as ddptui starts (a Slurm step, this machine) or once an SSH "
    "node is reached, which takes its launch from a spec written with the node's files "
    "(launch/warm.py, staging's spec and its giving up, the phases that start and cancel "
    "it) (issue 35)": 244,
}


def test_the_run_machinery_grows_only_by_named_features() -> None:
    files = [f for name in RUN_MACHINERY for f in sorted((ROOT / "ddptui").glob(f"{name}/*.py"))
             or [ROOT / "ddptui" / name]]
    n = sum(len(p.read_text().splitlines()) for p in files)
    most = LAUNCH_LINES + sum(GROWN_SINCE.values())
    assert n <= most, f"{', '.join(RUN_MACHINERY)} hold {n} lines (at most {most})"


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
    # A file that is not a module (a node program in shell, the screen's CSS) ships only
    # where package-data names it.
    data: dict[str, list[str]] = tool.get("package-data", {})
    unshipped = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "ddptui").rglob("*"))
                 if p.is_file() and p.suffix not in (".py", ".pyc")
                 and "__pycache__" not in p.parts
                 and not any(fnmatch.fnmatch(p.name, g) for g in
                             data.get(".".join(p.parent.relative_to(ROOT).parts), []))]
    assert unshipped == []


#: A string literal longer than this is a program or a document kept out of reach of the
#: linter, the type checker and an editor: node programs live in ddptui/nodeprog/ as files.
MAX_LITERAL_LINES = 40


def long_literals(root: Path) -> list[str]:
    """``file:line: N lines`` of each string constant under ``root`` longer than
    :data:`MAX_LITERAL_LINES` (a docstring counts too: one that long is a document)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                n = len(node.value.splitlines())
                if n > MAX_LITERAL_LINES:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno}: {n} lines")
    return found


def test_no_string_literal_is_longer_than_forty_lines() -> None:
    long = long_literals(ROOT / "ddptui")
    assert long == [], "programs kept as text (move them to ddptui/nodeprog/):\n" + "\n".join(
        long)


def test_the_literal_check_names_the_file_and_line_of_a_long_one(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "\n".join(f"x = {i}" for i in range(MAX_LITERAL_LINES))  # 40 lines: allowed
    (pkg / "ok.py").write_text(f'A = """{body}"""\nB = f"""{body}\n{{A}}"""\n')
    (pkg / "prog.py").write_text(f'"""doc"""\n\nSRC = r"""\n{body}\n"""\n')
    assert long_literals(pkg) == [f"pkg/prog.py:3: {MAX_LITERAL_LINES + 1} lines"]
