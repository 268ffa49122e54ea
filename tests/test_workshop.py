"""docs/workshop.md's minutes table is what the data give now (committed runs' seconds, the time model, the labs'
planned minutes); a host reads figures, not typed guesses."""

from __future__ import annotations

from pathlib import Path

import pytest

from utils import workshop


def test_workshop_minutes_table_is_current() -> None:
    assert workshop.is_current(), "docs/workshop.md's minutes table is stale: run python -m utils.workshop"


def test_every_chapter_has_a_row() -> None:
    rows, headers = workshop.minutes_rows()
    from utils.chapters import CHAPTERS

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
    """Until utils.time_model lists a chapter, its GPU columns say "-" rather than fail or guess."""
    import utils.time_model

    monkeypatch.setattr(utils.time_model, "CHAPTERS", tuple(f"{i:02d}" for i in range(10)))
    rows, _ = workshop.minutes_rows()
    assert rows[-1][0] == "10" and rows[-1][3:5] == ["-", "-"]
    assert all(r[3] != "-" for r in rows[:-1])
