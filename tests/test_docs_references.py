"""Every reference in the repository points inside it or upstream, and every one resolves.

- No tracked file (captures under ``tests/fixtures/`` aside) cites a document the project does
  not contain: a design, style or domain note by file name, or a numbered source ("seed" plus a
  number). Domain facts are cited from ``docs/domain/`` or from upstream pull requests.
- Every relative Markdown link (in ``.md`` files and notebooks' Markdown cells) names a file or
  folder that exists, and where it names an anchor in a Markdown file, a heading there has it.
- Every ``docs/….md`` or ``docs/….md#anchor`` mentioned anywhere (code comments, docstrings,
  SQL, notebooks, scripts) names an existing file, relative to the repository root, and an
  existing heading anchor.
- Every repository path the README and ``docs/`` cite (a path under one of the repository's
  top-level folders, ``replay/sim/fleet.py`` or ``tests/store/``) exists; a pattern (with ``*``,
  ``<…>``, ``{…}``, ``NN`` or a one-letter placeholder, ``replay/X``) is left alone.

Anchors are GitHub's heading slugs: the heading's text lowercased, everything but letters,
digits, ``_``, ``-`` and spaces dropped, spaces turned into ``-``; a repeated heading gets
``-1``, ``-2``, … in order.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXCLUDED = ("tests/fixtures/",)

# a note outside the project by file name, a numbered source document, a numbered section of one
# (the project's docs have anchors, not section numbers) or a source tag in square brackets
OUTSIDE = re.compile(r"\b(?:DOMAIN|DESIGN|STYLE)\.md\b|seeds?[-_ ]?0\d\d|§\s*\d"
                     r"|(?-i:\[(?:RL|GYM|CK1?|S[034]|LENS)\])", re.IGNORECASE)
# docs/<path>.md with an optional #anchor, not inside a longer path or URL
DOCS_REF = re.compile(r"(?<![\w./-])(docs/[\w./-]*?\.md)(?:#([\w-]+))?")
MD_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//)", re.IGNORECASE)
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


# -- the checks, as functions of text -----------------------------------------------------------


def outside_mentions(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line citing a document outside the project."""
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)
            if OUTSIDE.search(line)]


def _prose_lines(markdown: str) -> Iterator[tuple[int, str]]:
    """Markdown lines outside fenced code blocks, inline code removed."""
    fenced = False
    for n, line in enumerate(markdown.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, INLINE_CODE.sub("", line)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link reads as its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every heading anchor of a Markdown text, repeated headings numbered as GitHub does."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in markdown.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if m:
            base = slug(m.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return out


def markdown_links(markdown: str) -> list[tuple[int, str]]:
    """(line, target) of every relative link; URLs with a scheme are not ours to check."""
    return [(n, target) for n, line in _prose_lines(markdown)
            for target in MD_LINK.findall(line) if not SCHEME.match(target)]


def repository_paths(text: str, folders: Iterable[str]) -> list[tuple[int, str]]:
    """(line, path) of every path under one of ``folders`` (the repository's top-level folders)
    a text cites, not inside a longer path or URL; patterns and placeholders are left out."""
    names = "|".join(re.escape(f) for f in sorted(folders, key=len, reverse=True))
    if not names:
        return []
    found = re.compile(rf"(?<![\w./@:-])((?:{names})/[\w./*<>{{}}-]*)")
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        for m in found.finditer(line):
            path = m.group(1).rstrip(".")
            if not re.search(r"[*<>{}]|\bNN|/[A-Z](?:/|$)", path):
                out.append((n, path))
    return out


def docs_references(text: str) -> list[tuple[int, str, str | None]]:
    """(line, path, anchor or None) of every ``docs/….md`` mentioned in a text."""
    return [(n, m.group(1), m.group(2)) for n, line in enumerate(text.splitlines(), 1)
            for m in DOCS_REF.finditer(line)]


@cache
def _anchors_of(path: Path) -> frozenset[str]:
    return frozenset(anchors(path.read_text(encoding="utf-8")))


def broken(target: Path, anchor: str | None) -> str | None:
    """Why a reference to ``target`` (and ``anchor``) does not resolve, or None if it does."""
    if not target.exists():
        return "no such file"
    if anchor and target.suffix == ".md" and anchor not in _anchors_of(target):
        return f"no heading with anchor #{anchor}"
    return None


def notebook_markdown(text: str) -> str:
    cells = json.loads(text).get("cells", [])
    return "\n".join("".join(c.get("source", "")) for c in cells if c.get("cell_type") == "markdown")


# -- the repository -----------------------------------------------------------------------------


def tracked_texts() -> Iterator[tuple[str, str]]:
    """(path, text) of every tracked text file outside the excluded folders."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for rel in sorted(p for p in listed if p and not p.startswith(EXCLUDED)):
        path = ROOT / rel
        if not path.is_file():
            continue  # deleted in the work tree, not yet committed
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            yield rel, data.decode("utf-8")
        except UnicodeDecodeError:
            continue


def _problems(found: Iterable[str]) -> str:
    return "\n".join(found)


def test_the_repository_lists_its_files():
    # the checks below would pass vacuously on an empty listing
    paths = {rel for rel, _ in tracked_texts()}
    assert {"README.md", "docs/domain/incidents.md", "rolloutscope/vocabulary.py"} <= paths


def test_no_file_cites_a_document_outside_the_project():
    found = [f"{rel}:{n}: {line}" for rel, text in tracked_texts()
             for n, line in outside_mentions(text)]
    assert not found, ("cite docs/domain/ or the upstream source instead:\n"
                       + _problems(found))


def test_every_relative_markdown_link_resolves():
    found = []
    for rel, text in tracked_texts():
        if rel.endswith(".md"):
            markdown = text
        elif rel.endswith(".ipynb"):
            markdown = notebook_markdown(text)
        else:
            continue
        here = (ROOT / rel).parent
        for n, target in markdown_links(markdown):
            path, _, anchor = target.partition("#")
            why = broken((here / path).resolve() if path else ROOT / rel, anchor or None)
            if why:
                found.append(f"{rel}:{n}: ({target}) {why}")
    assert not found, _problems(found)


def test_every_docs_reference_resolves():
    found = [f"{rel}:{n}: {path}{'#' + anchor if anchor else ''} {why}"
             for rel, text in tracked_texts()
             for n, path, anchor in docs_references(text)
             if (why := broken(ROOT / path, anchor))]
    assert not found, _problems(found)


def _top_level_folders() -> set[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().splitlines()
    return {p.split("/", 1)[0] for p in listed if "/" in p and not p.startswith(".")}


def test_every_repository_path_the_docs_cite_exists():
    folders = _top_level_folders()
    assert {"rolloutscope", "replay", "tests", "docs"} <= folders
    found = [f"{rel}:{n}: {path} does not exist"
             for rel, text in tracked_texts()
             if rel == "README.md" or (rel.startswith("docs/") and rel.endswith(".md"))
             for n, path in repository_paths(text, folders)
             if not (ROOT / path).exists()]
    assert not found, _problems(found)


def test_the_incident_patterns_each_have_a_heading():
    text = (ROOT / "docs/domain/incidents.md").read_text(encoding="utf-8")
    numbered = {a.split("--")[0] for a in anchors(text) if re.match(r"p\d+--", a)}
    assert numbered == {f"p{i}" for i in range(1, 19)}


# -- the checks themselves catch what they must -------------------------------------------------


def test_a_citation_of_an_outside_document_is_caught():
    name = "DOMAIN" + ".md"
    text = (f"ok line\n# see {name} {chr(167)}5\nas seed {'00'}4 says\nthe seed-{'00'}3 harness\n"
            f"seeds {'00'}3 and 004\nsee {chr(167)}4.2\nfirst generation [{'CK'}1]\n")
    assert [n for n, _ in outside_mentions(text)] == [2, 3, 4, 5, 6, 7]
    # names built from one are caught too: they say where a thing came from, not what it holds
    names = (f"SEED_{'00'}3_MERGED = 1\ndef test_seed_{'00'}0s_table():\n"
             f"the_seed_{'00'}4_timeline\nSEED{'00'}4 = {{}}\nclass TestSeed{'00'}3Numbers:\n")
    assert [n for n, _ in outside_mentions(names)] == [1, 2, 3, 4, 5]
    # the replay's random seed is not a citation
    assert outside_mentions("MERGED_FLEET_FIXES = 1\nseed=0\n--seed N\nseeds 12\nd[ck] = 1\n") == []


def test_github_slugs():
    assert slug("P1 — deadline fires while a snapshot has the rollout parked") == \
        "p1--deadline-fires-while-a-snapshot-has-the-rollout-parked"
    assert slug("Gym's own retries") == "gyms-own-retries"
    assert slug("The `checkpoint:` block, [linked](x.md)") == "the-checkpoint-block-linked"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n## B!\n") == {"a", "a-1", "b"}


def test_a_broken_link_or_anchor_is_caught(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## Known section\n")
    assert broken(page, None) is None
    assert broken(page, "known-section") is None
    assert broken(page, "unknown") == "no heading with anchor #unknown"
    assert broken(tmp_path / "missing.md", None) == "no such file"
    text = ("[a](page.md#known-section) [b](https://x.org/y.md) `[c](nowhere.md)`\n"
            "```\n[d](nowhere.md)\n```\n[e](other.md)\n")
    assert markdown_links(text) == [(1, "page.md#known-section"), (5, "other.md")]
    folders = ("replay", "tests")
    cited = ("see `replay/sim/fleet.py`, replay/run_scenario.py. and tests/store/; not "
             "https://x.org/replay/a.py, src/replay/b.py, tests/replay/test_*.py, "
             "replay/<name>.py, replay/X\n")
    assert repository_paths(cited, folders) == [
        (1, "replay/sim/fleet.py"), (1, "replay/run_scenario.py"), (1, "tests/store/")]
    ref = "docs" + "/domain/incidents.md"
    assert docs_references(f"see {ref}#p1--x and {ref}.\nhttps://h/{ref}\n") == [
        (1, ref, "p1--x"), (1, ref, None)]
