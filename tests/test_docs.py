"""The project's documents: licence and project files present, every relative link resolves, glossary terms
linked at their first use in each chapter, and one units convention in the chapters' prose."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

from utils.course import glossary

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _documents() -> list[tuple[Path, str]]:
    docs = [(p, p.read_text(encoding="utf-8")) for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]]
    for folder in ("notebooks", "labs", "solutions"):
        for path in sorted((ROOT / folder).glob("*.ipynb")):
            nb = nbformat.read(path, as_version=4)
            docs.append((path, "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")))
    return docs


def test_project_files_exist() -> None:
    for name in ("LICENSE", "CITATION.cff", "CHANGELOG.md", ".github/ISSUE_TEMPLATE/bug-report.yml",
                 ".devcontainer/devcontainer.json", "docs/glossary.md"):
        assert (ROOT / name).is_file(), name
    assert "MIT License" in (ROOT / "LICENSE").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "MIT" in readme and "CC BY 4.0" in readme, "README states the licences of code and of prose/figures"
    devcontainer = json.loads((ROOT / ".devcontainer/devcontainer.json").read_text())
    assert "notebooks/00_setup_and_environment.ipynb" in json.dumps(devcontainer)
    assert "chapter 00" in (ROOT / ".github/ISSUE_TEMPLATE/bug-report.yml").read_text().lower()


def test_every_relative_link_resolves() -> None:
    anchors = {t.anchor for t in glossary.terms()} | {
        glossary.github_anchor(line.lstrip("#")) for line in glossary.GLOSSARY.read_text().splitlines()
        if line.startswith("#")}
    broken = []
    for path, text in _documents():
        for target in _LINK.findall(text):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            file_part, _, anchor = target.partition("#")
            # my-labs/ holds the learner's copies, made by `make lab` from labs/ (a fresh clone has none yet)
            if file_part.startswith("../my-labs/"):
                file_part = file_part.replace("../my-labs/", "../labs/", 1)
            resolved = (path.parent / file_part).resolve()
            if not resolved.exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
            elif anchor and resolved == glossary.GLOSSARY.resolve() and anchor not in anchors:
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such glossary entry)")
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name[:2])
def test_glossary_terms_linked_at_first_use(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    missing = glossary.unlinked_terms([c.source for c in nb.cells if c.cell_type == "markdown"], glossary.terms())
    assert not missing, f"run `python -m utils.course.glossary --apply`; not linked: {missing}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name[:2])
def test_units_convention_in_prose(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    found = [s for c in nb.cells if c.cell_type == "markdown" for s in glossary.unit_problems(c.source)]
    assert not found, "computed bytes are KiB/MiB/GiB; GB only for marketed GPU sizes and GB/s:\n" + "\n".join(found)


def test_linker_leaves_code_links_headings_and_math_alone() -> None:
    terms = [glossary.Term("ULP", "ulp", ("ULP",)), glossary.Term("Binade", "binade", ("binade",))]
    cells = ["# ULP and binade\n", "`ULP` [ULP](x.md) $ULP$ and then ULP, a binade."]
    out = glossary.link_first_uses(cells, terms)
    assert out[0] == cells[0]
    assert out[1] == ("`ULP` [ULP](x.md) $ULP$ and then [ULP](../docs/glossary.md#ulp), "
                      "a [binade](../docs/glossary.md#binade).")
    assert glossary.unlinked_terms(out, terms) == []


def test_unit_problems() -> None:
    assert glossary.unit_problems("The step peaks at 3.2 GB here.") == ["The step peaks at 3.2 GB here."]
    assert glossary.unit_problems("A 16 GB T4 shows 14.7 GiB; HBM3 moves 3,350 GB/s.") == []


def test_github_workflow_runs_the_courses_ci() -> None:
    """A public course's pushes are tested: the workflow runs .ci/run (make test) with the CPU build of torch."""
    import yaml

    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "test.yml").read_text())
    job = workflow["jobs"]["test"]
    steps = " ".join(str(step.get("run", "")) for step in job["steps"])
    assert "bash .ci/run" in steps
    assert "whl/cpu" in job["env"]["TORCH"]
    assert True in workflow or "on" in workflow  # YAML 1.1 reads the key `on` as True


def test_every_glossary_entry_has_an_explicit_lowercase_anchor() -> None:
    """JupyterLab keeps a heading's case in its id, so the chapters' lowercase links need `<a id>` anchors (issue 37):
    every entry has one, matching the anchor the chapters link, and a stale one is replaced, not duplicated."""
    from utils.course import glossary

    text = glossary.GLOSSARY.read_text(encoding="utf-8")
    assert glossary.with_explicit_anchors(text) == text
    for term in glossary.terms():
        assert f'<a id="{term.anchor}"></a>\n### {term.name}\n' in text, term.name
    stale = '<a id="old"></a>\n### Loss scale\nx\n'
    assert glossary.with_explicit_anchors(stale) == '<a id="loss-scale"></a>\n### Loss scale\nx\n'
