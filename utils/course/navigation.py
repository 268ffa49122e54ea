"""Each chapter ends with clickable links: its lab (the learner's copy in my-labs/, which `make lab` makes, and the
generated one in labs/ to read), the previous and the next chapter.

`python -m utils.course.navigation --apply` writes (or rewrites) that closing Markdown cell, marked with the cell
metadata `course.navigation`; a test fails while a chapter lacks it or it is stale. Markdown only: the chapters' code
and hence their committed outputs are untouched.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import nbformat

REPO_ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS, LABS = REPO_ROOT / "notebooks", REPO_ROOT / "labs"


def _title(path: Path) -> str:
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return path.stem


def navigation_markdown(chapter: Path) -> str:
    """The closing cell's Markdown for `chapter` (a path in notebooks/)."""
    chapters = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    names = [p.name for p in chapters]
    if not isinstance(chapter, str | Path) or Path(chapter).name not in names:
        raise ValueError(f"chapter must be one of the notebooks/ chapters, got {chapter!r}")
    i = names.index(Path(chapter).name)
    parts = []
    labs = sorted(LABS.glob(f"lab{names[i][:2]}_*.ipynb"))
    if labs:
        parts.append(f"**Practise:** [lab {names[i][:2]}](../my-labs/{labs[0].name}), your own copy, which `make lab` "
                     f"makes (git ignores it; `make reset-lab N={names[i][:2]}` starts it over). To read it without "
                     f"working in it: [labs/{labs[0].name}](../labs/{labs[0].name}), generated: your work there "
                     "would break `make test`'s lab check")
    if i + 1 < len(chapters):
        parts.append(f"**Next:** [{_title(chapters[i + 1])}]({names[i + 1]})")
    if i > 0:
        parts.append(f"**Previous:** [{_title(chapters[i - 1])}]({names[i - 1]})")
    return "---\n\n" + "  \n".join(parts)


def apply(path: Path) -> bool:
    """Write or refresh `path`'s closing navigation cell; returns whether the notebook changed."""
    text = navigation_markdown(path)
    nb = nbformat.read(path, as_version=4)
    last = nb.cells[-1] if nb.cells else None
    if last and last.cell_type == "markdown" and last.get("metadata", {}).get("course", {}).get("navigation"):
        if last.source == text:
            return False
        last.source = text
    else:
        nb.cells.append(nbformat.v4.new_markdown_cell(text, metadata={"course": {"navigation": True}}))
    nbformat.write(nb, path)
    return True


def problems() -> list[str]:
    """Chapters whose closing cell is missing or stale."""
    found = []
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        last = json.loads(path.read_text(encoding="utf-8"))["cells"][-1]
        if not last.get("metadata", {}).get("course", {}).get("navigation") or \
                "".join(last["source"]) != navigation_markdown(path):
            found.append(f"{path.name}: its closing links to the lab and the next chapter are missing or stale")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Closing links of every chapter (lab, previous, next).")
    parser.add_argument("--apply", action="store_true", help="write or refresh them")
    args = parser.parse_args(argv)
    if args.apply:
        changed = [p.name for p in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")) if apply(p)]
        print(f"updated: {', '.join(changed) or 'none'}")
        return 0
    found = problems()
    print("\n".join(found) or "every chapter ends with its links")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
