"""The device path: the modules a board's commands can import, which must run on JetPack
4.6's Python 3.6 with torch 1.10 (issue 37; docs/getting-started/install.md).

A board runs `devices`, `restore`, `profile` and `train` (with `--from-selection`, the
guard, checkpoints and resume, a changing cap's re-selection); `select`, `estimate`,
`run`, `compare`, `solar` and `fleet` are the server's (Python >= 3.8). The path is the
closure, from the CLI entry and the device commands' modules, of every import in the
source (module level, in functions, under TYPE_CHECKING: test_layout's graph) and of
every module named in a string (the lazy API tables of PEP 562, the model registry's
factories): a superset of what any run imports, computed, never listed by hand.

    python tests/device_path.py   # its files, one a line (vermin -t=3.6- reads them)
"""

import ast
import sys
from pathlib import Path
from typing import Dict, List, Optional, Set

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "src")]  # this tree's undercap, not an install
from test_layout import MODULES, import_graph  # noqa: E402

from undercap.cli import SERVER_COMMAND_MODULES  # noqa: E402

#: the CLI entry and the modules of the commands a board runs
DEVICE_ROOTS = (
    "undercap",
    "undercap.cli",
    "undercap.cli.__main__",
    "undercap.cli.devices",
    "undercap.cli.profile",
    "undercap.cli.train",
)


def string_edges() -> Dict[str, Set[str]]:
    """Modules named in string constants ("undercap.x.y" or "undercap.x.y:attr")."""
    out = {mod: set() for mod in MODULES}  # type: Dict[str, Set[str]]
    for mod, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            text = _text(node)
            if text and text.startswith("undercap."):
                name = text.partition(":")[0]
                if name in MODULES and name != mod:
                    out[mod].add(name)
    out["undercap.cli"] -= set(SERVER_COMMAND_MODULES)  # named to be refused on 3.6
    out["undercap"] = set()  # the public API's table: a name loads only when a caller uses it
    return out


def _text(node: ast.AST) -> Optional[str]:
    if sys.version_info >= (3, 8):
        ok = isinstance(node, ast.Constant) and isinstance(node.value, str)
        return node.value if ok else None  # type: ignore[attr-defined]
    return node.s if isinstance(node, ast.Str) else None  # ast.Str: Python < 3.8


def device_path() -> List[str]:
    graph = import_graph()
    for mod, named in string_edges().items():
        graph[mod] |= named
    seen = set()  # type: Set[str]
    todo = list(DEVICE_ROOTS)
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        parts = mod.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # parent packages
        todo += sorted(graph[mod])
    return sorted(seen)


def device_path_files() -> List[Path]:
    return [MODULES[m] for m in device_path()]


if __name__ == "__main__":
    print("\n".join(str(p) for p in device_path_files()))
