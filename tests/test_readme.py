"""The README's Python example runs as written (in a temp folder)."""

from __future__ import annotations

import re

from conftest import REPO


def test_readme_python_example_runs(tmp_path, monkeypatch):
    text = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README has no python example"
    monkeypatch.chdir(tmp_path)
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    assert (tmp_path / "profile.json").is_file()
