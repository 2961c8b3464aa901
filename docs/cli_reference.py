"""The command-line reference as Markdown, generated from the argparse parser itself
(the documentation site's reference/cli.md is built from this at every `mkdocs build`,
so it cannot drift from the options the commands really take)."""

from __future__ import annotations

import argparse
from typing import Any, Optional

from undercap.cli import build_parser


def subcommands(parser: Optional[argparse.ArgumentParser] = None) -> dict[str, tuple[str, Any]]:
    """{name: (one-line help, sub-parser)} in `undercap --help`'s order."""
    parser = parser or build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {c.dest: c.help or "" for c in action._choices_actions}
    return {name: (helps.get(name, ""), p) for name, p in action.choices.items()}


def _escape(text: str, pipes: bool = False) -> str:
    """Outside code spans: `<` and `>` as entities, so a placeholder such as
    `nvml:<index>` reads as written instead of vanishing as an unknown HTML tag, and
    with `pipes`, `|` escaped for a table cell (inside a code span a table keeps a
    pipe as it is, and would show a backslash)."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # even parts are outside `code`
        part = parts[i].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        parts[i] = part.replace("|", "\\|") if pipes else part
    return "`".join(parts)


def _cell(text: str) -> str:
    """One Markdown table cell: whitespace folded, placeholders and pipes kept."""
    return _escape(" ".join(str(text).split()), pipes=True)


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    names = ", ".join(f"`{s}`" for s in action.option_strings)
    if action.nargs == 0:
        return names
    metavar = action.metavar or action.dest.upper()
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    return f"{names} `{metavar}`"


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS, False):
        return ""
    if action.required:
        return "required"
    default = action.default
    if isinstance(default, (list, tuple)):
        default = ",".join(str(x) for x in default)
    if str(default) == "":
        return "none"  # `` would show as a stray pair of backticks
    return f"`{default}`"


def _options_table(group: argparse._ArgumentGroup) -> list[str]:
    rows = [a for a in group._group_actions if a.help != argparse.SUPPRESS]
    rows = [a for a in rows if not isinstance(a, argparse._HelpAction)]
    if not rows:
        return []
    out = ["| option | default | what it does |", "|---|---|---|"]
    for a in rows:
        default = "required" if a.required else _default(a)
        choices = f" (one of: {', '.join(map(str, a.choices))})" if a.choices else ""
        out.append(f"| {_flags(a)} | {default} | {_cell((a.help or '') + choices)} |")
    return out


def command_markdown(name: str, summary: str, parser: argparse.ArgumentParser) -> str:
    """One command's section: what it does, its usage line, its options per group."""
    text = _cell(summary)
    lines = [f"## undercap {name}", "", text[:1].upper() + text[1:] + ".", ""]
    if parser.description and parser.description.strip() != summary.strip():
        lines += [_escape(" ".join(parser.description.split())), ""]
    # A fixed width, so the page does not depend on the terminal that builds it.
    parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=88)
    usage = parser.format_usage().replace("usage: ", "", 1).strip()
    lines += ["```text", usage, "```", ""]
    for group in parser._action_groups:
        table = _options_table(group)
        if table:
            title = group.title or "options"
            lines += [f"**{title}**", "", *table, ""]
    return "\n".join(lines)


def cli_reference_markdown() -> str:
    """Every subcommand and option of `undercap`, in `undercap --help`'s order."""
    parser = build_parser()
    cmds = subcommands(parser)
    toc = [f"- [`undercap {n}`](#undercap-{n}): {_cell(h)}" for n, (h, _) in cmds.items()]
    body = [command_markdown(n, h, p) for n, (h, p) in cmds.items()]
    return "\n".join(toc) + "\n\n" + "\n".join(body)
