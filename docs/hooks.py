"""MkDocs hooks (mkdocs.yml `hooks:`): the generated command-line reference, the
benchmark figures served from where the benchmarks write them (no copies to drift), and
notes meant only for a page read unbuilt (on GitHub, in an editor) left out of the site."""

from __future__ import annotations

import importlib.util
import re
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
    return markdown


def _cli_reference():
    """docs/cli_reference.py, beside this file: the generator of the CLI page."""
    spec = importlib.util.spec_from_file_location(
        "cli_reference", ROOT / "docs" / "cli_reference.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
