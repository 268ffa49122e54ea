"""docs/workshop.md's minutes table is what the data give now (committed runs' seconds, the time model, the labs'
planned minutes); a host reads figures, not typed guesses."""

from __future__ import annotations

from pathlib import Path

import pytest

from utils.course import workshop


def test_workshop_minutes_table_is_current() -> None:
    assert workshop.is_current(), "docs/workshop.md's minutes table is stale: run python -m utils.course.workshop"


def test_every_chapter_has_a_row() -> None:
    rows, headers = workshop.minutes_rows()
    from utils.course.chapters import CHAPTERS

    assert [r[0] for r in rows] == [c.number for c in CHAPTERS] == [f"{i:02d}" for i in range(11)]
    assert "measured" in headers[2] and "predicted" in headers[3]


def test_write_needs_the_markers(tmp_path: Path) -> None:
    doc = tmp_path / "w.md"
    doc.write_text("no markers here")
    with pytest.raises(ValueError, match="markers"):
        workshop.write(doc)
    doc.write_text(f"before\n{workshop.START}\nold\n{workshop.END}\nafter")
    assert workshop.write(doc) and workshop.is_current(doc)
    assert doc.read_text().startswith("before\n") and doc.read_text().endswith("\nafter")


def test_a_chapter_the_time_model_does_not_know_gets_no_prediction(monkeypatch) -> None:
    """Until utils.lessons.time_model lists a chapter, its GPU columns say "-" rather than fail or guess."""
    import utils.lessons.time_model

    monkeypatch.setattr(utils.lessons.time_model, "CHAPTERS", tuple(f"{i:02d}" for i in range(10)))
    rows, _ = workshop.minutes_rows()
    assert rows[-1][0] == "10" and rows[-1][3:5] == ["-", "-"]
    assert all(r[3] != "-" for r in rows[:-1])


def test_the_prose_on_the_h100_run_follows_its_numbers() -> None:
    """docs/workshop.md names which chapters the time model got within a third, over-predicted and under-predicted
    on the committed H100 run; the sets must be what the numbers give."""
    import re

    from utils.lessons.time_model import GPUS, chapter_work, predicted_seconds

    runs = dict(workshop.gpu_runs())
    walls = next(w for h, w in runs.items() if h.startswith("NVIDIA H100 80GB HBM3"))
    ratio = {ch: predicted_seconds(chapter_work(ch, 80), GPUS["H100"], chapter=ch) / s for ch, s in walls.items()}
    text = workshop.DOC.read_text(encoding="utf-8").replace("\n", " ")

    def named(after: str) -> set[str]:  # the chapter numbers listed right after `after` ("03, 04 and 05")
        listed = re.match(r"\s*((?:\d\d(?:,\s*|\s+and\s+)?)+)", text[text.index(after) + len(after):])
        return set(re.findall(r"\d\d", listed.group(1)))

    within = {c for c, r in ratio.items() if abs(r - 1) < 1 / 3}
    assert named("The prediction was within a third for chapters") == within
    assert named("about twice the measured time for chapter") == {c for c, r in ratio.items() if r > 4 / 3}
    under = named("well under it for chapters")
    assert under == {c for c, r in ratio.items() if r < 2 / 3}
    low, high = re.search(r"\(([\d.]+) to ([\d.]+) times less\)", text[text.index("well under it"):]).groups()
    assert f"{min(1 / ratio[c] for c in under):.1f}" == low and f"{max(1 / ratio[c] for c in under):.0f}" == high


def test_a_damaged_gpu_check_summary_is_named(tmp_path) -> None:
    import pytest

    (tmp_path / "some-gpu").mkdir()
    (tmp_path / "some-gpu" / "gpu_check.json").write_text('{"device": {}}')
    with pytest.raises(ValueError, match="some-gpu/gpu_check.json"):
        workshop.gpu_runs(tmp_path)
