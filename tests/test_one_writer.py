"""``run.json`` has one writer, :class:`ddptui.store.record.Recorder`: every command (a run,
a stale run settled, ``ddptui clean``'s note, a diagnosis made again) changes it through the
recorder's typed fields and under its lock, never as a dict of its own.

Read from the source, not from a run: a function writes ``run.json`` when it writes a file
(``write_text``, ``os.replace``, an ``open`` for writing, ``json.dump``, or a call of a
function that does) at a path built from the file's name (``RUN_JSON``, ``"run.json"``), and so
does every function that calls one of those, by name, across ``ddptui/``. Only
``store/record.py`` may.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "ddptui"
THE_WRITER = Path("store/record.py")
#: Calls that write a file, by the name called (``os.replace``, ``path.write_text``, ...).
WRITES = {"write_text", "write_bytes", "replace", "rename", "dump", "touch", "copy", "copyfile",
          "copy2", "move"}
RUN_JSON_NAMES = {"RUN_JSON"}


def _called(node: ast.Call) -> str | None:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _writes_directly(node: ast.Call) -> bool:
    name = _called(node)
    if name in WRITES:
        return not (name == "replace" and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Constant))  # "a".replace("b", "c")
    if name == "open":  # open(p, "w"), p.open("a"), open(p, mode="x")
        modes = [a for a in node.args[1 if isinstance(node.func, ast.Name) else 0:][:1]]
        modes += [k.value for k in node.keywords if k.arg == "mode"]
        return any(isinstance(m, ast.Constant) and isinstance(m.value, str)
                   and set(m.value) & set("wax+") for m in modes)
    return False


def _names_run_json(expr: ast.AST, tainted: set[str]) -> bool:
    """Whether ``expr`` is (or is built from) the path of ``run.json``."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Name) and (node.id in RUN_JSON_NAMES or node.id in tainted):
            return True
        if isinstance(node, ast.Attribute) and node.attr in RUN_JSON_NAMES:
            return True
        if isinstance(node, ast.Constant) and node.value in ("run.json", "run.json.tmp"):
            return True
    return False


def _run_json_names(fn: ast.AST) -> set[str]:
    """The function's variables that hold run.json's path (``p = d / RUN_JSON``,
    ``tmp = p.with_name(...)``, ``with open(p, "w") as f``)."""
    tainted: set[str] = set()
    while True:
        more = set(tainted)
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                if _names_run_json(node.value, tainted):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    more |= {n.id for t in targets for n in ast.walk(t)
                             if isinstance(n, ast.Name)}
            elif (isinstance(node, ast.withitem) and node.optional_vars is not None
                  and _names_run_json(node.context_expr, tainted)):
                more |= {n.id for n in ast.walk(node.optional_vars) if isinstance(n, ast.Name)}
        if more == tainted:
            return tainted
        tainted = more


def _writes_run_json(call: ast.Call, tainted: set[str], file_writers: set[str]) -> bool:
    if not (_writes_directly(call) or _called(call) in file_writers):
        return False
    parts: list[ast.AST] = [*call.args, *(k.value for k in call.keywords)]
    if isinstance(call.func, ast.Attribute):
        parts.append(call.func.value)  # path.write_text(...)
    return any(_names_run_json(p, tainted) for p in parts)


def _functions(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _calls(fn: ast.AST) -> Iterator[ast.Call]:
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            yield node


def run_json_writers(root: Path) -> list[str]:
    """``path:line: function`` of every function outside the recorder that writes
    ``run.json``, directly or through the functions it calls."""
    funcs: list[tuple[Path, ast.FunctionDef | ast.AsyncFunctionDef]] = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        funcs += [(path.relative_to(root), fn) for fn in _functions(tree)]
    others = [(p, fn) for p, fn in funcs if p != THE_WRITER]
    file_writers = {fn.name for _, fn in others if any(map(_writes_directly, _calls(fn)))}
    found = set()
    for p, fn in others:
        tainted = _run_json_names(fn)
        if any(_writes_run_json(c, tainted, file_writers) for c in _calls(fn)):
            found.add((p, fn.name, fn.lineno))
    while True:  # and every function that calls one of them
        names = {name for _, name, _ in found}
        more = {(p, fn.name, fn.lineno) for p, fn in others
                if any(_called(c) in names for c in _calls(fn))} - found
        if not more:
            return [f"ddptui/{p}:{line}: {name}" for p, name, line in sorted(found)]
        found |= more


def test_only_the_recorder_writes_run_json() -> None:
    offenders = run_json_writers(ROOT)
    assert not offenders, ("run.json written beside the Recorder (store/record.py) by:\n"
                           + "\n".join(offenders))


def test_the_look_finds_a_writer_beside_the_recorder(tmp_path: Path) -> None:
    """The shape ddptui had before the one writer: a helper that writes any JSON file, one
    that writes run.json with it, and commands that call that one (settling a stale run,
    ``ddptui clean``'s note) are each found, by file and line."""
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "record.py").write_text(
        "def _write(d):\n    (d / RUN_JSON).write_text('{}')\n")
    (tmp_path / "store" / "runs.py").write_text(
        "import json, os\n"
        "def write_json(path, data):\n"
        "    tmp = path.with_name(path.name + '.tmp')\n"
        "    tmp.write_text(json.dumps(data))\n"
        "    os.replace(tmp, path)\n"
        "def write_run(run_dir, data):\n"
        "    write_json(run_dir / rundir.RUN_JSON, data)\n"
        "def read_run(d):\n"
        "    return json.loads((d / rundir.RUN_JSON).read_text())\n")
    (tmp_path / "sweep.py").write_text(
        "def _note(root, run_id, note):\n"
        "    meta = read_run(root)\n"
        "    meta['node_files_removed'] = note\n"
        "    write_run(root, meta)\n"
        "def _local(d):\n"
        "    return open(d / 'run.json').read()\n")
    (tmp_path / "hindsight.py").write_text(
        "import json\n"
        "def keep(d, meta):\n"
        "    with open(d / 'run.json', 'w') as f:\n"
        "        json.dump(meta, f)\n")
    assert run_json_writers(tmp_path) == [
        "ddptui/hindsight.py:2: keep", "ddptui/store/runs.py:6: write_run",
        "ddptui/sweep.py:1: _note"]
