"""Installable on a Jetson: Python >= 3.8 (JetPack 5; JetPack 4.6's 3.6 for the device
side), a light core install, and a clear error naming the extra to install when an
optional dependency is missing."""

from __future__ import annotations

import ast
import glob
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "undercap"
RUNTIME_GENERICS = {"list", "dict", "tuple", "set", "frozenset", "type"}
ABC_GENERICS = {"Callable", "Iterable", "Iterator", "Mapping", "Sequence", "Generator"}


def _toml() -> dict:
    try:
        import tomllib  # novermin
    except ImportError:  # pragma: no cover - Python < 3.11
        import tomli as tomllib
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_core_install_is_light() -> None:
    project = _toml()["project"]
    # Python 3.6: JetPack 4.6's, the device side only (tests/test_jetpack4.py)
    assert project["requires-python"] == ">=3.6"
    core = {d.split(";")[0].split(">")[0].split("=")[0].strip() for d in project["dependencies"]}
    assert core == {"torch", "numpy", "tqdm", "tomli", "dataclasses"}, core
    torch_reqs = [d for d in project["dependencies"] if d.startswith("torch")]
    # NVIDIA's JetPack 5 wheels are torch 2.0 / 2.1; JetPack 4.6's (Python 3.6) torch 1.10
    assert torch_reqs == [
        "torch>=2.0; python_version >= '3.8'",
        "torch>=1.10; python_version < '3.8'",
    ]
    old_only = [d for d in project["dependencies"] if "python_version < '3.8'" in d or "'3.7'" in d]
    assert {d.split(";")[0] for d in old_only} == {"torch>=1.10", "numpy>=1.19", "dataclasses>=0.8"}
    extras = project["optional-dependencies"]
    for extra, dist in (("plot", "matplotlib"), ("mat", "scipy"), ("digits", "scikit-learn")):
        assert any(d.startswith(dist) for d in extras[extra]), extra


def _annotation_nodes(tree: ast.AST) -> set[int]:
    """ids of every node inside an annotation (never evaluated at runtime under
    `from __future__ import annotations`, so PEP 585/604 syntax is fine there)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        anns = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            args = a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg]
            anns = [x.annotation for x in args if x is not None and x.annotation is not None]
            anns += [node.returns] if node.returns is not None else []
        elif isinstance(node, ast.AnnAssign):
            anns = [node.annotation]
        for ann in anns:
            out.update(id(n) for n in ast.walk(ann))
    return out


def runtime_py39_syntax(source: str) -> list[str]:
    """Expressions evaluated at runtime that Python 3.8 rejects: subscripted builtins
    or collections.abc classes (PEP 585, 3.9) and `X | Y` of types (PEP 604, 3.10).
    vermin cannot tell these from annotations, so this complements it."""
    tree = ast.parse(source)
    skip = _annotation_nodes(tree)
    abc = {  # names taken from collections.abc (typing's are subscriptable on 3.8)
        a.asname or a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module == "collections.abc"
        for a in n.names
    }
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        name = getattr(getattr(node, "value", None), "id", None)
        if isinstance(node, ast.Subscript) and name in RUNTIME_GENERICS | (ABC_GENERICS & abc):
            found.append(f"line {node.lineno}: {name}[...] at runtime")
        is_isinstance = (
            isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance"
        )
        if is_isinstance and len(node.args) == 2 and isinstance(node.args[1], ast.BinOp):
            found.append(f"line {node.lineno}: isinstance(x, A | B)")
    return found


def test_runtime_syntax_finder_finds_what_3_8_rejects() -> None:
    bad = "from typing import Any\nR = dict[str, Any]\nok = isinstance(1, int | float)\n"
    assert len(runtime_py39_syntax(bad)) == 2
    abc = "from collections.abc import Callable\nF = Callable[[int], int]\n"
    assert len(runtime_py39_syntax(abc)) == 1
    typing = "from typing import Callable\nF = Callable[[int], int]\n"
    assert runtime_py39_syntax(typing) == []
    fine = "from __future__ import annotations\ndef f(x: dict[str, int] | None) -> list[int]: ...\n"
    assert runtime_py39_syntax(fine) == []


def test_src_has_no_runtime_syntax_newer_than_3_8() -> None:
    found = {
        str(p.relative_to(REPO)): hits
        for p in sorted(SRC.rglob("*.py"))
        if (hits := runtime_py39_syntax(p.read_text()))
    }
    assert found == {}


def test_vermin_says_python_3_8() -> None:
    vermin = shutil.which("vermin") or str(Path(sys.executable).with_name("vermin"))
    if not Path(vermin).exists():
        pytest.skip("vermin is not installed (make test installs it)")
    args = [vermin, "-q", "-t=3.8-", "--violations", "--feature", "union-types", "--no-tips"]
    proc = subprocess.run([*args, str(SRC)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_src_compiles_under_a_real_python_3_8() -> None:
    found = sorted(glob.glob("/root/.pyenv/versions/3.8*/bin/python")) + [
        p for p in (shutil.which("python3.8"),) if p
    ]
    if not found:
        pytest.skip("no Python 3.8 interpreter here")
    files = [str(p) for p in SRC.rglob("*.py")]
    proc = subprocess.run(
        [found[0], "-m", "py_compile", *files], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr


def test_missing_extra_names_the_pip_install(monkeypatch, capsys, tmp_path) -> None:
    from undercap.cli import main
    from undercap.errors import MissingExtraError, require

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    with pytest.raises(MissingExtraError, match=r"pip install 'undercap\[plot\]'"):
        require("matplotlib", "plot", "plotting")
    profile = REPO / "tests" / "fixtures" / "v0.1" / "profile.json"
    assert main(["plot-profile", str(profile), "-o", str(tmp_path / "p.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: plotting needs matplotlib") and "undercap[plot]" in err
