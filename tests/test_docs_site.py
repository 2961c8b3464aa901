"""The documentation site as a reader sees it. `mkdocs build --strict` catches broken
links and unreadable docstrings, but not what Markdown silently loses: a list run into
a paragraph, a `<placeholder>` taken for an HTML tag, a settings class shown without
its fields. This builds the site once (or reads the one `make docs` just built, named
by UNDERCAP_DOCS_SITE) and checks every page for those, for words about how the project
was built instead of what undercap does, and for the few rules the pages keep (one way
to run undercap as root, a filled sitemap, colour bars that cover their figures)."""

from __future__ import annotations

import dataclasses
import html
import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

DOCS = REPO / "docs"
SUDO = 'sudo "$(command -v undercap)"'  # the one form, explained on guides/jetson.md
SETTINGS = ("Config", "Settings", "Setup", "Spec")  # dataclasses whose fields the reader sets
REQUIRED_ON_API_PAGE = {"ProfileSettings", "EstimateConfig", "RunConfig", "CompareConfig"}
UNBUILT = re.compile(r"^<!-- unbuilt -->\n.*?^<!-- /unbuilt -->\n", flags=re.S | re.M)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("UNDERCAP_DOCS_SITE")
    if given:
        return Path(given)
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python"):
        pytest.importorskip(module, reason="the docs extra: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    # no -q: it drops the warnings before --strict counts them (a dead link passes)
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _pages(site: Path) -> dict[str, str]:
    """{page path: the HTML of its article} for every content page."""
    out = {}
    for f in sorted(site.rglob("*.html")):
        rel = f.relative_to(site).as_posix()
        if rel.startswith(("assets/", "search/")) or rel == "404.html":
            continue
        text = f.read_text(encoding="utf-8")
        out[rel] = text.split("<article", 1)[-1].split("</article>", 1)[0]
    return out


def _text(fragment: str, code_blocks: bool = False) -> str:
    """What the reader reads: tags dropped, entities decoded (code blocks optional)."""
    if not code_blocks:
        fragment = re.sub(r"<pre\b.*?</pre>", " ", fragment, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def _page_of(md: Path) -> str:
    """docs/guides/race.md -> guides/race/index.html (the site's directory URLs)."""
    rel = md.relative_to(DOCS).with_suffix("").as_posix()
    if rel == "index":
        return "index.html"
    if rel.endswith("/index"):
        return rel[: -len("index")] + "index.html"
    return rel + "/index.html"


def test_every_list_item_is_a_list_item(site: Path) -> None:
    """A nested item indented by 2 spaces, or an item straight after a paragraph line,
    is not a list in Python-Markdown: it shows as a paragraph with a literal "- "."""
    bad = []
    for page, article in _pages(site).items():
        for para in re.findall(r"<p>(.*?)</p>", article, flags=re.S):
            lines = [ln for ln in para.split("\n")[1:] if re.match(r"\s*[-*] \S", ln)]
            joined = re.findall(r"[.:;!?)]\s+- (?:<strong>|<code>|[A-Z]).{0,40}", para)
            bad += [f"{page}: {x.strip()[:70]}" for x in lines + joined]
    assert bad == [], "indent nested items by 4 spaces, a blank line before a list"


def test_placeholders_are_not_taken_for_html_tags(site: Path) -> None:
    """`nvml:<index>`, `<node>`: every placeholder of a page's source (and of the
    generated command-line reference) is on the built page, as often as written."""
    sys.path.insert(0, str(REPO / "docs"))
    from cli_reference import cli_reference_markdown

    pages = _pages(site)
    placeholder = r"(?<=[\w:/=.\[-])(?:<|&lt;)([a-z][\w-]*)(?:>|&gt;)"
    lost = []
    for md in sorted(DOCS.rglob("*.md")):
        source = md.read_text(encoding="utf-8")
        source = UNBUILT.sub("", source)  # notes for the unbuilt file, not on the site
        if "<!-- undercap:cli-reference -->" in source:
            source += cli_reference_markdown()
        text = _text(pages[_page_of(md)], code_blocks=True)
        names = re.findall(placeholder, source)
        for name in sorted(set(names)):
            shown = text.count(f"<{name}>")
            if shown < names.count(name):
                lost.append(f"{md.relative_to(DOCS)}: <{name}> {shown} of {names.count(name)}")
    assert lost == [], "write it as &lt;name&gt; or inside `code`"


def _api_objects() -> list[str]:
    text = (DOCS / "reference" / "api.md").read_text(encoding="utf-8")
    return re.findall(r"^::: ([\w.]+)", text, flags=re.M)


def _resolve(path: str) -> object:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_api_reference_shows_every_field_of_every_settings_class(site: Path) -> None:
    """Each settings dataclass on the API page renders a table row per field: its
    name, type, default and a description (an Args section in the class docstring)."""
    article = _pages(site)["reference/api/index.html"]
    shown = set()
    problems = []
    for path in _api_objects():
        obj = _resolve(path)
        if not (dataclasses.is_dataclass(obj) and obj.__name__.endswith(SETTINGS)):
            continue
        shown.add(obj.__name__)
        start = article.index(f'id="{path}"')
        end = article.find("<h3 ", start + 1)
        section = article[start : end if end > 0 else len(article)]
        rows = {}
        for row in re.findall(r'<tr class="doc-section-item">(.*?)</tr>', section, re.S):
            cells = [_text(c).strip() for c in re.findall(r"<td>(.*?)</td>", row, re.S)]
            if len(cells) == 4:  # name, type, description, default
                rows[cells[0]] = cells
        for f in dataclasses.fields(obj):
            cells = rows.get(f.name)
            if not f.init:
                continue
            if cells is None or not all(cells):
                problems.append(f"{obj.__name__}.{f.name}")
    assert shown >= REQUIRED_ON_API_PAGE
    assert problems == [], "give each field a line in the class docstring's Args section"


def test_api_reference_points_at_nothing_internal(site: Path) -> None:
    """Docstrings the API page shows say what the reader needs, not "see the module
    docstring" or a source file of undercap's (`follow.py`, `select/race.py`)."""
    text = _text(_pages(site)["reference/api/index.html"])
    sources = {f.name for f in (REPO / "src" / "undercap").rglob("*.py")}
    internal = re.findall(r"module\s+docstring", text) + [
        f for f in re.findall(r"\b[\w/]*?(\w+\.py)\b", text) if f in sources
    ]
    assert internal == []


BUILD_HISTORY = [
    r"\bissues? #?\d+",  # an issue number of the project
    r"\bthe issue\b",
    r"\bcommit [0-9a-f]{7,40}\b",
    r"(?<![\w/.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w/.-])",  # a hash
    r"\b(?:was|were) lent\b",
    r"\blent to\b",
    r"\bfrom here\b",
    r"\bno hardware here\b",
    r"\b(?:not|never) (?:run|tested|measured|available|exercised) here\b",
    r"\b(?:was|is) available here\b",
    r"\bwe (?:do not|don't|did not|didn't) have\b",
    r"\b(?:boards|machines|GPUs) we\b",
    r"\bour (?:registry|machine|machines|sandbox|session)\b",
    r"\bthe sessions?\b that",
    r"\b(?:machines?|GPUs?|boards?) (?:the authors|the project) (?:had|has|have)\b",
    # how and when the project's own machines were used
    r"\blent\b",  # "a lent card"
    r"\b(?:\d+-minute |time )?slots?\b",  # "a rerun in a 15-minute slot"
    r"\bfor now\b",
    r"\(before\)",  # a table row of an earlier version: the changelog's
    r"\blandings?\b",  # CI wall times of past landings
]
#: paths and variables of the machines undercap is developed on, not of a user's
OUTSIDE_PATHS = [r"\.\./shared\b", r"\bUNDERCAP_SHARED_DATA\b", r"(?<![\w.])/work/\w"]


def test_pages_say_what_undercap_does_not_how_it_was_built(site: Path) -> None:
    """Issue and commit numbers, and the machines the authors had, belong in the
    repository's history; pages say what undercap does and how far it is verified."""
    found = []
    for page, article in _pages(site).items():
        text = " ".join(_text(article).split())
        for pattern in BUILD_HISTORY:
            for m in re.finditer(pattern, text, flags=re.I):
                found.append(f"{page}: ...{text[max(0, m.start() - 40) : m.end() + 20]}...")
    assert found == []


def test_no_page_names_a_path_outside_the_readers_machine(site: Path) -> None:
    """Commands and notes name what a reader has: `--data-dir data` after
    scripts/make_data.py, not the folder the datasets sat in while undercap was built."""
    found = []
    texts = {page: _text(article, code_blocks=True) for page, article in _pages(site).items()}
    texts["README.md"] = (REPO / "README.md").read_text(encoding="utf-8")
    for page, text in texts.items():
        for pattern in OUTSIDE_PATHS:
            found += [f"{page}: {m.group(0)}" for m in re.finditer(pattern, text)]
    assert found == []


def test_no_stray_literal(site: Path) -> None:
    """An empty default or value written as `` shows as a stray pair of backticks or an
    empty code box; write "none" or `""`."""
    bad = []
    for page, article in _pages(site).items():
        bad += [f"{page}: empty <code>" for _ in re.findall(r"<code>\s*</code>", article)]
        bad += [f"{page}: ``" for _ in re.findall(r"``", _text(article))]
    assert bad == []


def test_api_page_shows_no_private_or_dunder_member(site: Path) -> None:
    """`RunConfig.__post_init__` is how the class works, not what a reader calls."""
    article = _pages(site)["reference/api/index.html"]
    assert re.findall(r'id="[\w.]*\._[\w]*"', article) == []


def test_test_counts_on_the_pages_are_the_trees(site: Path) -> None:
    """Any "N tests" on a page (or in README) is within 5% of what pytest collects,
    deselected included; "N slow tests" / "the N slow ones" is the slow count exactly."""
    hooks = _load_hooks()
    total, slow = hooks.test_counts()
    texts = {page: " ".join(_text(a).split()) for page, a in _pages(site).items()}
    texts["README.md"] = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    off = []
    for page, text in texts.items():
        for m in re.finditer(r"\b(\d[\d,]*) (slow )?tests\b|\bthe (\d+) slow ones\b", text):
            if m.group(3) or m.group(2):
                n = int(m.group(3) or m.group(1))
                off += [f"{page}: {m.group(0)} (slow: {slow})"] if n != slow else []
            elif int(m.group(1).replace(",", "")) >= 100:  # the suite, not a handful
                n = int(m.group(1).replace(",", ""))
                off += [f"{page}: {m.group(0)} ({total})"] if abs(n - total) > 0.05 * total else []
    assert off == []


def _load_hooks() -> object:
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tables_render_as_tables(site: Path) -> None:
    """No table without rows, no literal backslash before a pipe."""
    bad = []
    for page, article in _pages(site).items():
        for table in re.findall(r"<table>(.*?)</table>", article, flags=re.S):
            if "<td" not in table:
                bad.append(f"{page}: a table without rows")
        if "\\|" in _text(article, code_blocks=True):
            bad.append(f"{page}: a literal \\|")
    assert bad == []


def test_one_way_to_run_undercap_as_root() -> None:
    """Every command shown with sudo finds a venv's undercap (sudo's own PATH does not
    hold it): `sudo "$(command -v undercap)" ...`, explained on the Jetson guide."""
    bad = []
    for md in sorted([*DOCS.rglob("*.md"), REPO / "README.md"]):
        source = md.read_text(encoding="utf-8")
        blocks = re.findall(r"^```[^\n]*\n(.*?)^```", source, flags=re.S | re.M)
        spans = re.findall(r"`([^`\n]*(?:\n[^`\n]*)?)`", re.sub(r"^```.*?^```", "", source,
                                                              flags=re.S | re.M))  # fmt: skip
        lines = [ln for b in blocks for ln in b.splitlines()]
        lines += [" ".join(s.split()) for s in spans if len(s.split()) > 2]
        for line in lines:
            if re.search(r"\bsudo\b", line) and SUDO not in line:
                bad.append(f"{md.name}: {line.strip()[:70]}")
    assert bad == []
    assert f"{SUDO} COMMAND" in (DOCS / "guides" / "jetson.md").read_text(encoding="utf-8")


def test_generated_pages_read_well_unbuilt(site: Path) -> None:
    """The README links to the command-line and API references: read unbuilt they are
    mostly a marker and `:::` lines, so each says how to see them; the site omits it."""
    pages = _pages(site)
    for md in ("reference/cli.md", "reference/api.md"):
        source = (DOCS / md).read_text(encoding="utf-8")
        assert UNBUILT.search(source), md
        assert "Reading this file unbuilt" not in pages[_page_of(DOCS / md)]


def test_sitemap_lists_the_pages(site: Path) -> None:
    sitemap = (site / "sitemap.xml").read_text(encoding="utf-8")
    assert len(re.findall(r"<loc>", sitemap)) >= len(_pages(site)) - 1


def test_matrix_colour_bar_covers_every_cell() -> None:
    """The proxy-by-target heatmaps' colour bar runs from 0 to the largest gap shown,
    rounded up (a +44% cell on a bar that stops at 20% reads as 20%)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from matrix_cells import Cell, colour_scale_max

    def cell(gap: float) -> Cell:
        return Cell("p", "t", "sim:jetson-nano", 5.0, "paper", 8, 921.6,
                    1.0 + gap / 100, 8, 921.6, 1.0)  # fmt: skip

    assert colour_scale_max([("a", [cell(3.0), cell(44.3)]), ("b", [cell(12.0)])]) == 45.0
    assert colour_scale_max([("a", [cell(0.0)])]) == 5.0
    assert colour_scale_max([]) == 5.0
