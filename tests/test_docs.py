"""The documentation: the README stays a short landing page whose links resolve, the
site's navigation holds every page, the generated command-line reference covers every
subcommand and option, and the API page's Python example runs as written."""

from __future__ import annotations

import argparse
import re
import sys

from conftest import REPO

DOCS = REPO / "docs"
README_MAX_BYTES = 15_000


def _nav_pages() -> list[str]:
    """The .md paths named in mkdocs.yml's nav (read as text: no YAML parser needed)."""
    text = (REPO / "mkdocs.yml").read_text()
    nav = text[text.index("\nnav:") :]
    return re.findall(r":\s+(\S+\.md)\s*$", nav, flags=re.M)


def test_readme_is_a_short_landing_page_with_working_links() -> None:
    readme = REPO / "README.md"
    assert readme.stat().st_size <= README_MAX_BYTES
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme.read_text(encoding="utf-8"))
    local = [x for x in links if not x.startswith(("http://", "https://", "mailto:"))]
    assert local, "the README links into the documentation"
    assert [x for x in local if not (REPO / x).exists()] == []


DEMO = REPO / "benchmarks" / "results" / "demo"


def _table_rows(text: str) -> dict[str, list[str]]:
    """{first cell: cells} of every markdown table row that is not a header rule."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and not set(cells[0]) <= set("-:"):
            rows.setdefault(cells[0], cells)
    return rows


def test_readme_numbers_are_the_demo_results_it_quotes() -> None:
    """README is not built, so nothing fills its numbers in: its demo table and its
    example's output must be what benchmarks/demo.py stored (the site shows those
    files themselves), so a change that moves the demo's numbers shows here."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    stored = _table_rows((DEMO / "comparison.md").read_text(encoding="utf-8"))
    quoted = _table_rows(readme[readme.index("| power limit | Baseline 1 |") :])
    limits = ["3.5 W", "3.8 W", "none"]
    for limit in limits:
        b1, _, ours, oracle, speedup, _, gap = stored[limit][1:8]
        expected = [limit, f"{b1} s", f"{ours} s", f"{oracle} s", speedup, gap]
        assert quoted[limit] == expected, limit
    shown = re.search(r"```text\n(# undercap run:.*?)\nwrote run-3.5W/\n```", readme, re.S)
    assert shown is not None, "README shows the run's output"
    assert shown.group(1).strip() == (DEMO / "run.md").read_text(encoding="utf-8").strip()


def test_every_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    nav = _nav_pages()
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(nav) == pages
    assert len(nav) == len(set(nav))


def test_cli_reference_covers_every_command_and_option() -> None:
    from undercap.cli import build_parser

    sys.path.insert(0, str(DOCS))
    from cli_reference import cli_reference_markdown, subcommands

    page = cli_reference_markdown()
    cmds = subcommands(build_parser())
    assert {"run", "estimate", "train", "fleet", "select", "profile"} <= set(cmds)
    for name, (_, parser) in cmds.items():
        assert f"## undercap {name}\n" in page, name
        section = page[page.index(f"## undercap {name}\n") :]
        end = section.find("\n## undercap ", 1)
        section = section if end < 0 else section[:end]
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            for flag in action.option_strings:
                assert f"`{flag}`" in section, f"undercap {name} {flag}"
    assert "<!-- undercap:cli-reference -->" in (DOCS / "reference" / "cli.md").read_text()


def test_api_page_python_example_runs(tmp_path, monkeypatch) -> None:
    text = (DOCS / "reference" / "api.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    api = [b for b in blocks if "save_profile" in b]
    assert api, "the API page has no Python example"
    monkeypatch.chdir(tmp_path)
    for code in api:
        exec(compile(code, "api.md", "exec"), {"__name__": "docs"})
    assert (tmp_path / "profile.json").is_file()


def _documented_columns(section: str) -> list[str]:
    """The backticked names in the first cell of each table row of a formats section."""
    names = []
    for first in _table_rows(section):
        names += re.findall(r"`([a-z0-9_]+)`", first)
    return names


def test_formats_page_names_every_comparison_csv_column_in_order() -> None:
    # the columns come from the records' fields: a new field is a new column, and it
    # must be documented (in the order the file has it) before it ships
    from undercap.report.compare_csv import RUN_COLUMNS, SUMMARY_COLUMNS

    text = (DOCS / "reference" / "formats.md").read_text()
    section = text[text.index("## Comparison CSVs") :]
    lead, runs, summary = section.split("goes on with")
    lead_cols = _documented_columns(lead)
    assert lead_cols == list(RUN_COLUMNS[: len(lead_cols)])
    assert lead_cols + _documented_columns(runs) == list(RUN_COLUMNS)
    assert lead_cols + _documented_columns(summary) == list(SUMMARY_COLUMNS)
