"""MkDocs hooks (mkdocs.yml `hooks:`): the generated command-line reference, the
benchmark figures served from where the benchmarks write them (no copies to drift),
numbers a page would otherwise copy by hand (the test count from pytest, the demo's
tables from benchmarks/results/demo/), and notes meant only for a page read unbuilt
(on GitHub, in an editor) left out of the site."""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
CLI_MARKER = "<!-- undercap:cli-reference -->"
# Text between these two lines is for readers of the unbuilt .md file only.
UNBUILT = re.compile(r"^<!-- unbuilt -->\n.*?^<!-- /unbuilt -->\n", re.S | re.M)


def on_files(files, config):
    """benchmarks/results/**/*.png at the same path in the site."""
    for png in sorted((ROOT / "benchmarks" / "results").rglob("*.png")):
        uri = png.relative_to(ROOT).as_posix()
        files.append(File.generated(config, uri, abs_src_path=str(png)))
    return files


def on_page_markdown(markdown, page, config, files):
    markdown = UNBUILT.sub("", markdown)
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, _cli_reference().cli_reference_markdown())
    for name in set(GENERATED.findall(markdown)):
        if name not in NUMBERS:
            raise ValueError(f"{page.file.src_path}: unknown marker undercap:{name}")
        markdown = markdown.replace(f"<!-- undercap:{name} -->", NUMBERS[name]())
    return markdown


# --- numbers from the tree -----------------------------------------------------------
#: `<!-- undercap:NAME -->` in a page: replaced by NUMBERS[NAME]() when the site builds
GENERATED = re.compile(r"<!-- undercap:([\w-]+) -->")
DEMO = ROOT / "benchmarks" / "results" / "demo"


@functools.lru_cache(maxsize=None)
def test_counts() -> tuple[int, int]:
    """(every test, the slow ones) as `pytest --collect-only` counts them in tests/."""
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    # "770/785 tests collected (15 deselected) in 5.7s": the slow ones are deselected
    found = re.match(r"(?:\d+/)?(\d+) tests? collected(?: \((\d+) deselected\))?", last)
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"pytest --collect-only: {proc.stderr[-500:] or last}")
    return int(found.group(1)), int(found.group(2) or 0)


def _demo_tables() -> str:
    """compare's time and configuration tables, as `make demo` printed them."""
    text = (DEMO / "comparison.md").read_text(encoding="utf-8")
    tables = re.findall(r"^\|.*?(?=\n\n|\Z)", text, flags=re.S | re.M)
    return "\n\n".join(tables[:2])


def _demo_machine() -> str:
    m = json.loads((DEMO / "machine.json").read_text(encoding="utf-8"))
    return (
        f"{m['cores']}-core {m['cpu']}, Python {m['python']}, torch {m['torch']}; "
        f"the demo took {m['demo_wall_s']:.0f} s"
    )


NUMBERS = {
    "test-count": lambda: str(test_counts()[0]),
    "slow-test-count": lambda: str(test_counts()[1]),
    "demo-tables": _demo_tables,
    "demo-run": lambda: (DEMO / "run.md").read_text(encoding="utf-8").rstrip(),
    "demo-machine": _demo_machine,
    "demo-wall-s": lambda: str(
        round(json.loads((DEMO / "machine.json").read_text())["demo_wall_s"])
    ),
}


def _cli_reference():
    """docs/cli_reference.py, beside this file: the generator of the CLI page."""
    spec = importlib.util.spec_from_file_location(
        "cli_reference", ROOT / "docs" / "cli_reference.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
