"""The glossary (docs/glossary.md) linked from each term's first use in every chapter, and the units convention.

`python -m utils.course.glossary --apply` links, in every chapter's prose, the first use of each glossary term (or one
of its aliases) to its entry; `--check` (run by the tests) exits 1 when a chapter mentions a term whose first
use is not linked. Headings, code, existing links and math are never touched.

`unit_problems(text)` finds decimal byte units (KB, MB, GB, TB) used outside the two places the convention
allows them: marketed GPU sizes, rates (GB/s),
sentences that say they are decimal, and claims quoted as commonly stated; and sentences that read a GPU's marketed
"GB" as GiB (a card's "80 GB" is a label; the course plans with the total torch reports, docs/glossary.md).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

REPO_ROOT = Path(__file__).resolve().parents[2]
GLOSSARY = REPO_ROOT / "docs" / "glossary.md"
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
LINK_TARGET = "../docs/glossary.md"

# Spans of markdown never to link inside: code, links and images, math, HTML tags.
_PROTECTED = re.compile(r"```.*?```|`[^`\n]*`|!?\[[^\]]*\]\([^)]*\)|\$\$.*?\$\$|\$[^$\n]*\$|<[^>\n]+>", re.S)
# Decimal byte units in prose; allowed for marketed GPU sizes and bandwidths.
_DECIMAL_UNIT = re.compile(r"\b(KB|MB|GB|TB)\b(?!/s)")
_ALLOWED_CONTEXT = re.compile(
    r"\b(T4|L4|A10G?|A100|H100|H200|B200|V100|RTX\s?\d+|GPU|GPUs|card|marketed|marketing|HBM\d?e?|decimal|[Cc]laims?)\b"
    r"|10\^9|10⁹")
# A GPU's "GB" is its product label, not a byte count (docs/glossary.md, "A GPU's memory"): prose that equates the label
# with binary units ('an "80 GB" card has 80 GiB', "sold in binary units") breaks the convention.
_LABEL_AS_GIB = re.compile(r"\b(\d+)\s*GB\W{0,3}\s*(?:[\w-]+\s+){0,2}?(?:has|is|holds|means|equals|=)\s+"
                           r"(?:about\s+|exactly\s+)?\1\s*GiB|sold in binary units", re.I)


@dataclass(frozen=True)
class Term:
    name: str
    anchor: str
    spellings: tuple[str, ...]  # the name and its aliases, longest first


def github_anchor(heading: str) -> str:
    """The anchor GitHub (and JupyterLab) give a Markdown heading."""
    if not isinstance(heading, str) or not heading.strip():
        raise (TypeError if not isinstance(heading, str) else ValueError)(
            f"heading must be a non-empty str, got {heading!r}")
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def terms(path: Path = GLOSSARY) -> list[Term]:
    """The glossary's entries: '### Name' headings, aliases from the '*Also: a, b*' line under them."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: the glossary cannot be read ({type(exc).__name__}: {exc})") from None
    found = []
    for i, line in enumerate(lines):
        if not line.startswith("### "):
            continue
        name = line[4:].strip()
        aliases: list[str] = []
        following = next((nxt for nxt in lines[i + 1:] if nxt.strip()), "")
        if following.startswith("*Also:"):
            aliases = [a.strip() for a in following.strip("*").removeprefix("Also:").split(",") if a.strip()]
        spellings = tuple(sorted({name, *aliases}, key=len, reverse=True))
        found.append(Term(name, github_anchor(name), spellings))
    if not found:
        raise ValueError(f"{path}: no glossary entries ('### Term' headings) found")
    return found


def _variants(spelling: str) -> set[str]:
    """A spelling as written, and with its first letter in the other case when the rest is lower case
    ("Binade"/"binade"); acronyms and mixed case ("ZeRO", "ULP") only exactly, so "zero" is never ZeRO."""
    if spelling[1:] == spelling[1:].lower():
        return {spelling, spelling[0].upper() + spelling[1:], spelling[0].lower() + spelling[1:]}
    return {spelling}


def _pattern(term: Term) -> re.Pattern[str]:
    options = sorted({v for s in term.spellings for v in _variants(s)}, key=len, reverse=True)
    return re.compile(r"(?<![\w/#.-])(" + "|".join(re.escape(o) for o in options) + r")(?![\w-])")


def _prose_spans(text: str) -> list[tuple[int, int]]:
    """Character ranges of a Markdown cell that may be linked: not headings, code, links, math or tags."""
    spans, pos = [], 0
    protected = [(m.start(), m.end()) for m in _PROTECTED.finditer(text)]
    for start, end in protected + [(len(text), len(text))]:
        if pos < start:
            spans.append((pos, start))
        pos = max(pos, end)
    # drop heading lines
    result = []
    for start, end in spans:
        for m in re.finditer(r"[^\n]+|\n", text[start:end]):
            a, b = start + m.start(), start + m.end()
            line_start = text.rfind("\n", 0, a) + 1
            if not text[line_start:].lstrip().startswith("#"):
                result.append((a, b))
    return result


def _first_use(cells: list[str], term: Term) -> tuple[int, re.Match[str]] | None:
    pattern = _pattern(term)
    for index, text in enumerate(cells):
        for start, end in _prose_spans(text):
            match = pattern.search(text, start, end)
            if match:
                return index, match
    return None


def _is_linked(cells: list[str], term: Term) -> bool:
    link = re.compile(r"\]\(" + re.escape(LINK_TARGET) + "#" + re.escape(term.anchor) + r"\)")
    return any(link.search(text) for text in cells)


def link_first_uses(cells: list[str], glossary: list[Term]) -> list[str]:
    """The cells with each term's first prose use linked (terms already linked anywhere are left alone)."""
    cells = list(cells)
    for term in glossary:
        if _is_linked(cells, term):
            continue
        found = _first_use(cells, term)
        if found is None:
            continue
        index, match = found
        text = cells[index]
        cells[index] = (text[:match.start()] + f"[{match.group(1)}]({LINK_TARGET}#{term.anchor})"
                        + text[match.end():])
    return cells


def unlinked_terms(cells: list[str], glossary: list[Term]) -> list[str]:
    """Terms the cells use in prose but never link to the glossary."""
    return [t.name for t in glossary if _first_use(cells, t) is not None and not _is_linked(cells, t)]


def unit_problems(text: str) -> list[str]:
    """Sentences that use a decimal byte unit (KB/MB/GB/TB) for something other than a marketed GPU size or a
    rate (the course shows computed bytes in KiB/MiB/GiB), or that equate a GPU's marketed "GB" with GiB."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    found = []
    for start, end in _prose_spans(text):
        chunk = text[start:end]
        for sentence in re.split(r"(?<=[.!?])\s+|\n", chunk):
            decimal = _DECIMAL_UNIT.search(sentence) and not _ALLOWED_CONTEXT.search(sentence)
            if decimal or _LABEL_AS_GIB.search(sentence):
                found.append(sentence.strip())
    return found


def with_explicit_anchors(text: str) -> str:
    """The glossary's text with an explicit `<a id="anchor"></a>` line before each entry's heading. JupyterLab keeps
    a heading's case in its id (`#Compute-capability`) where GitHub and Sphinx lower it, so the chapters' lowercase
    links land on the term in JupyterLab only through such an anchor; it works on GitHub and the site too."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    lines = text.splitlines()
    out: list[str] = []
    for line in lines:
        if line.startswith("### "):
            anchor = f'<a id="{github_anchor(line[4:])}"></a>'
            while out and out[-1].startswith('<a id="'):  # an earlier (possibly stale) anchor is replaced
                out.pop()
            out.append(anchor)
        out.append(line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def _markdown_cells(path: Path) -> tuple[nbformat.NotebookNode, list[int]]:
    nb = nbformat.read(path, as_version=4)
    return nb, [i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"]


def apply(path: Path, glossary: list[Term]) -> int:
    """Link first uses in one notebook; returns how many links were added."""
    nb, indexes = _markdown_cells(path)
    before = [nb.cells[i].source for i in indexes]
    after = link_first_uses(before, glossary)
    added = sum(a.count(LINK_TARGET) - b.count(LINK_TARGET) for a, b in zip(after, before, strict=True))
    if added:
        for i, text in zip(indexes, after, strict=True):
            nb.cells[i].source = text
        nbformat.write(nb, path)
    return added


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Link glossary terms at their first use in every chapter.")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--apply", action="store_true")
    action.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    glossary = terms()
    chapters = sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))
    text = GLOSSARY.read_text(encoding="utf-8")
    if args.apply:
        if with_explicit_anchors(text) != text:
            GLOSSARY.write_text(with_explicit_anchors(text), encoding="utf-8")
            print(f"{GLOSSARY.name}: explicit anchors written")
        for path in chapters:
            print(f"{path.name}: {apply(path, glossary)} link(s) added")
        return 0
    problems = [] if with_explicit_anchors(text) == text else [f"{GLOSSARY.name}: an entry lacks its explicit anchor"]
    for path in chapters:
        nb, indexes = _markdown_cells(path)
        missing = unlinked_terms([nb.cells[i].source for i in indexes], glossary)
        if missing:
            problems.append(f"{path.name}: first use not linked: {', '.join(missing)}")
    print("\n".join(problems) or "every chapter links its glossary terms")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
