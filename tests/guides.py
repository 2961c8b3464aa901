"""The shell blocks of a documentation page, as the page's tests run them: each fenced
block with the `<!-- guide-test: ... -->` marker on the line before it (if any), and
each block's commands, backslash continuations joined, with the comment line above
them and the comment at their end. Python 3.6-compatible: tests/test_jetpack4.py
imports it on the board's Python."""

import re
from typing import List, NamedTuple, Optional

FENCE = re.compile(r"^(?:<!-- guide-test: ([^\n]*?) -->\n)?```(\w*)\n(.*?)^```", re.S | re.M)


class Block(NamedTuple):
    marker: Optional[str]  # "skip (why)", "jetpack4 round trip", ...
    lang: str
    body: str


class Command(NamedTuple):
    line: str  # the command, continuations joined, its end comment removed
    heading: str  # the last comment line above it in the block ("" if none)
    comment: str  # the comment at its end ("" if none)


def blocks(text: str) -> List[Block]:
    return [Block(m.group(1), m.group(2), m.group(3)) for m in FENCE.finditer(text)]


def commands(body: str) -> List[Command]:
    out, heading = [], ""
    for raw in re.sub(r"\\\n\s*", " ", body).splitlines():
        line = raw.strip()
        if line.startswith("#"):
            heading = line.lstrip("# ")
        elif line:
            command, _, comment = line.partition(" #")
            out.append(Command(command.strip(), heading, comment.strip()))
    return out
