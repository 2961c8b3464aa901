"""The device path: the modules a board's commands can import, which must run on JetPack
4.6's Python 3.6 with torch 1.10 (issue 37; docs/getting-started/install.md).

A board runs `devices`, `restore`, `profile` and `train` (with `--from-selection`, the
guard, checkpoints and resume, a changing cap's re-selection); `select`, `estimate`,
`run`, `compare`, `solar` and `fleet` are the server's (Python >= 3.8). The path is the
closure, from the CLI entry and the device commands' modules, of every import in the
source (module level, in functions, under TYPE_CHECKING: test_layout's graph) and of
every module named in a string (the lazy API tables of PEP 562, the model registry's
factories): a superset of what any run imports, computed, never listed by hand.

    python tests/device_path.py                  # its files, one a line (for vermin)
    python tests/device_path.py --tests          # the tests the 3.6 floor runs
    python tests/device_path.py --test-sources   # those and the helpers they import
"""

import ast
import sys
from pathlib import Path
from typing import Dict, List, Optional, Set

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from test_layout import MODULES, import_graph  # noqa: E402

#: the CLI entry and the modules of the commands a board runs
DEVICE_ROOTS = (
    "undercap",
    "undercap.cli",
    "undercap.cli.__main__",
    "undercap.cli.devices",
    "undercap.cli.profile",
    "undercap.cli.train",
    "undercap.devices.helper.cli",  # undercap-helper, a board's privileged helper
)
#: the tests JetPack 4.6's floor runs (scripts/ci/jetpack4.sh): the device side's, with
#: the Nano and TX2 fake sysfs trees; a test in them that needs the server side is marked
#: @pytest.mark.server (conftest.py)
DEVICE_TESTS = (
    "test_artifacts.py", "test_base.py", "test_datasets.py", "test_devices_cli.py",
    "test_exit_codes.py", "test_guard.py", "test_jetpack4.py", "test_jetson.py",
    "test_jetson_boards.py", "test_layout.py", "test_models.py", "test_nvml.py",
    "test_profile.py", "test_profile_sweep.py", "test_read_only.py", "test_sampler.py",
    "test_select.py", "test_simulated.py", "test_trace.py", "test_train.py",
    "test_train_cli.py", "test_evalplan.py", "test_faults.py", "test_helper.py",
)  # fmt: skip


def server_command_modules() -> Set[str]:
    """cli/__init__.py's SERVER_COMMAND_MODULES, read from the source."""
    tree = ast.parse(MODULES["undercap.cli"].read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "SERVER_COMMAND_MODULES" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    raise LookupError("undercap.cli has no SERVER_COMMAND_MODULES")


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
    out["undercap.cli"] -= server_command_modules()  # named to be refused on 3.6
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


def device_test_files() -> List[Path]:
    """The device tests and the helpers they import (conftest, fakes, select_helpers...)."""
    helpers = [p for p in HERE.glob("*.py") if not p.name.startswith("test_")]
    return sorted(helpers + list((HERE / "fakes").glob("*.py"))) + [HERE / t for t in DEVICE_TESTS]


if __name__ == "__main__":
    ask = sys.argv[1:]
    if ask == ["--tests"]:
        files = [HERE / t for t in DEVICE_TESTS]
    elif ask == ["--test-sources"]:
        files = device_test_files()
    else:
        files = device_path_files()
    print("\n".join(str(p) for p in files))
