"""The package's shape: no import cycles (module- or function-level), small modules and
functions, torch-free modules that stay torch-free, and one place per stage."""

import ast
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Set

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "undercap"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
#: argparse registration is one flat list of options; it may be long. So may capped(),
#: the documented entry point of users' loops: 25 keywords and their docstring come to 42
#: lines before its 28 of code (packing its calls with `fmt: skip` to fit hid that)
LONG_OK = {"register", "add_device_args", "capped"}


def _modules() -> Dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _target(name: str, imported: Optional[str]) -> Optional[str]:
    """The undercap module an import statement loads (a submodule when `from pkg
    import sub` names one), or None for other libraries."""
    if not name.startswith("undercap"):
        return None
    if imported and f"{name}.{imported}" in MODULES:
        return f"{name}.{imported}"
    return name if name in MODULES else None


def import_graph() -> Dict[str, Set[str]]:
    """Every import anywhere in each module: module level, inside functions, under
    TYPE_CHECKING; an edge per undercap module it loads."""
    graph: Dict[str, Set[str]] = {m: set() for m in MODULES}
    for mod, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [_target(a.name, None) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [_target(node.module, a.name) for a in node.names]
            else:
                continue
            graph[mod].update(t for t in targets if t and t != mod)
    return graph


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_a_function_level_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    graph = import_graph()
    assert sum(len(v) for v in graph.values()) > 100  # the graph was really read
    assert cycles(graph) == []


#: The stages from the bottom up: a package imports only packages of a lower rank
#: (its own modules aside). `undercap` itself (the lazy public API, __version__) is
#: outside the order. report/ sits low: profiling and training draw progress bars.
LAYERS = {
    "errors": 0, "defaults": 0, "_compat": 0,
    "artifacts": 1,
    "select": 2, "devices": 2, "models": 2,
    "data": 3, "report": 3,
    "train": 4,
    "profile": 5, "estimate": 5,
    "recipes": 6,
    "fleet": 7,
    "cli": 8,
}  # fmt: skip


def upward_imports(graph: Dict[str, Set[str]]) -> List[str]:
    """Every import from a package to one of the same or a higher rank."""
    out = []
    for mod, targets in sorted(graph.items()):
        src = mod.split(".")[1] if "." in mod else None
        for t in sorted(targets):
            dst = t.split(".")[1] if "." in t else None
            if src and dst and src != dst and LAYERS[dst] >= LAYERS[src]:
                out.append(f"{mod} -> {t}")
    return out


def test_upward_import_finder_finds_one() -> None:
    graph = {"undercap.models.registry": {"undercap.data.text", "undercap.errors"}}
    assert upward_imports(graph) == ["undercap.models.registry -> undercap.data.text"]


def test_imports_run_down_the_layers() -> None:
    assert set(LAYERS) == {m.split(".")[1] for m in MODULES if "." in m}
    assert upward_imports(import_graph()) == []


def test_top_level_shows_the_method() -> None:
    # py.typed is PEP 561's marker file, not a stage (the before-stop hook skips it too)
    entries = sorted(
        p.name for p in PKG.iterdir() if not p.name.startswith(("_", ".")) and p.name != "py.typed"
    )
    stages = {"devices", "profile", "estimate", "select", "train", "recipes"}
    assert stages <= set(entries)
    assert len(entries) <= 14, entries


@pytest.mark.skipif(sys.version_info < (3, 8), reason="ast's end_lineno: Python 3.8+")
def test_modules_and_functions_are_small() -> None:
    too_long = []
    for mod, path in MODULES.items():
        text = path.read_text()
        lines = text.count("\n")
        if lines > MAX_MODULE_LINES:
            too_long.append(f"{mod}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if n > MAX_FUNCTION_LINES and node.name not in LONG_OK:
                    too_long.append(f"{mod}.{node.name}: {n} lines")
    assert too_long == []


TORCH_FREE = [
    "undercap",
    "undercap.artifacts",
    "undercap.select",
    "undercap.devices",
    "undercap.models",
    "undercap.recipes.selection",
    "undercap.report.text",
    "undercap.cli",
]


@pytest.mark.parametrize("module", TORCH_FREE)
def test_torch_free_modules_do_not_import_torch(module: str) -> None:
    code = f"import sys, {module}; sys.exit('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(SRC)}, check=False)
    assert proc.returncode == 0, f"importing {module} imported torch"
