"""Every chapter ends with clickable links to its lab and to the previous and next chapters, and they resolve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from utils.course import navigation

ROOT = Path(__file__).resolve().parent.parent


def test_every_chapter_ends_with_its_links() -> None:
    assert not navigation.problems(), "run python -m utils.course.navigation --apply"


@pytest.mark.parametrize("chapter", sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem[:2])
def test_links_resolve(chapter: Path) -> None:
    text = navigation.navigation_markdown(chapter)
    targets = re.findall(r"\]\(([^)]+)\)", text)
    # my-labs/ is the learner's copy, made by `make lab` from labs/ (absent from a fresh clone): its link resolves
    # to the lab it copies
    made = [t.replace("../my-labs/", "../labs/") for t in targets]
    assert targets and all((chapter.parent / t).resolve().exists() for t in made), targets
    assert "lab" in text


def test_practise_opens_the_learners_copy() -> None:
    """Issue 34: the lab link opens my-labs/ (git ignores it), not labs/ (generated and tracked: work there dirtied
    git and broke `make test`'s lab-sync check)."""
    text = navigation.navigation_markdown(ROOT / "notebooks" / "03_loss_scaling.ipynb")
    first = re.findall(r"\]\(([^)]+)\)", text)[0]
    assert first == "../my-labs/lab03_loss_scaling.ipynb", first
    assert "make reset-lab N=03" in text


def test_unknown_chapter_is_named() -> None:
    with pytest.raises(ValueError, match="chapter"):
        navigation.navigation_markdown(Path("notebooks/99_missing.ipynb"))
