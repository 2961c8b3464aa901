"""MkDocs hooks (mkdocs.yml `hooks:`): the generated command-line reference, and the
benchmark figures served from where the benchmarks write them (no copies to drift)."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
CLI_MARKER = "<!-- undercap:cli-reference -->"


def on_files(files, config):
    """benchmarks/results/**/*.png at the same path in the site."""
    for png in sorted((ROOT / "benchmarks" / "results").rglob("*.png")):
        uri = png.relative_to(ROOT).as_posix()
        files.append(File.generated(config, uri, abs_src_path=str(png)))
    return files


def on_page_markdown(markdown, page, config, files):
    if CLI_MARKER in markdown:
        from undercap.cli.reference import cli_reference_markdown

        markdown = markdown.replace(CLI_MARKER, cli_reference_markdown())
    return markdown
