"""Every claim verdict is computed: each registered verdict function gives different verdicts on its examples
from both sides of its criterion, and no chapter types a verdict as a string literal."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from utils.course.verdicts import VERDICTS, Judged, all_judges

ROOT = Path(__file__).resolve().parent.parent
JUDGES = all_judges()


def test_some_judges_are_registered() -> None:
    assert JUDGES, "no verdict function is registered under utils/course/verdicts/"


def _judge_id(j) -> str:
    return f"{j.claim_id}-{j.fn.__module__.rsplit('.', 1)[-1]}-{j.fn.__name__}"


@pytest.mark.parametrize("judge", JUDGES, ids=_judge_id)
def test_verdict_depends_on_the_measurement(judge) -> None:
    results = [judge(**example) for example in judge.examples]
    for r in results:
        assert isinstance(r, Judged) and r.verdict in VERDICTS, r
        assert "criterion" in r.note, f"{judge.claim_id}: the note must state the criterion: {r.note!r}"
    assert len({r.verdict for r in results}) >= 2, (
        f"{judge.claim_id}: examples on both sides of the criterion gave one verdict: {results}")


_LITERAL = re.compile(r"""["'](holds|fails|partly|depends|needs GPU)["']""")


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.stem[:2])
def test_no_chapter_types_a_verdict(path: Path) -> None:
    nb = json.loads(path.read_text(encoding="utf-8"))
    for i, cell in enumerate(nb["cells"]):
        src = "".join(cell["source"])
        if cell["cell_type"] == "code" and "run.claim(" in src:
            found = _LITERAL.findall(src)
            assert not found, f"{path.name} cell {i} types verdicts {found}: use a utils.course.verdicts function"


def test_c27_says_not_measured_when_scaled_mm_fails_on_a_gpu():
    """Issue 33, bug 8: when `_scaled_mm` raises on a GPU the claim was not measured; "depends" would judge it."""
    from utils.course.verdicts.ch08 import c27

    verdict = c27(None, "H100", error="RuntimeError: x")
    assert verdict.verdict == "not measured" and "RuntimeError: x" in verdict.note
