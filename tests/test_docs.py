"""The README's Python example runs as written (in a temp folder)."""

from __future__ import annotations

import re

from conftest import REPO


def test_readme_python_example_runs(tmp_path, monkeypatch):
    text = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    # the API example; the own-loop example is examples/own_loop.py (test_user_code.py)
    api = [b for b in blocks if "save_profile" in b]
    assert api, "README has no Python API example"
    monkeypatch.chdir(tmp_path)
    for code in api:
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    assert (tmp_path / "profile.json").is_file()
