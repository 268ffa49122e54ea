"""Chapters carry the outputs of a real run, made from their current code (make outputs keeps them fresh)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from utils.course import outputs

CHAPTERS = sorted(outputs.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name[:2])
def test_chapter_outputs_are_current(path: Path) -> None:
    found = outputs.problems(path)
    assert not found, "\n".join(found)
    meta = nbformat.read(path, as_version=4).metadata["course"]["outputs"]
    assert meta["size"] == "quick" and meta["device"] and meta["torch"]
    first = next(c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code" and c.outputs)
    assert "Running locally on" in first.outputs[0].get("text", ""), "the first output says the device"


def test_labs_and_solutions_carry_no_outputs() -> None:
    for folder in ("labs", "solutions"):
        for path in sorted((outputs.REPO_ROOT / folder).glob("*.ipynb")):
            nb = nbformat.read(path, as_version=4)
            assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), path.name


@pytest.mark.slow
def test_an_edited_code_cell_makes_outputs_stale_until_regenerated(tmp_path: Path) -> None:
    path = tmp_path / "99_demo.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    assert "no recorded outputs" in outputs.problems(path)[0]
    outputs.execute(path)
    assert outputs.problems(path) == []
    assert nbformat.read(path, as_version=4).cells[0].outputs[0]["text"] == "42\n"
    edited = nbformat.read(path, as_version=4)
    edited.cells[0].source = "print(6 * 9)"
    nbformat.write(edited, path)
    assert "code changed" in outputs.problems(path)[0]
    outputs.execute(path)
    assert outputs.problems(path) == []


def test_paths_are_scrubbed_from_outputs() -> None:
    root = str(outputs.REPO_ROOT)
    scrubbed = outputs._scrub({"text": [f"{root}/results/x.json", root]}, [(root + "/", ""), (root, ".")])
    assert scrubbed == {"text": ["results/x.json", "."]}


def test_only_must_name_a_chapter() -> None:
    assert outputs.main(["--check", "--only", "77"]) == 2


def test_progress_bar_frames_are_stored_as_a_terminal_shows_them() -> None:
    """Issue 37: tqdm's frames ('\\r'-separated, often in separate stream outputs) were stored one per output, and the
    website showed every frame as a line. Stored outputs keep what a terminal shows: each bar's last frame."""
    from utils.course.outputs import as_a_terminal_shows, collapse_streams

    frames = [{"output_type": "stream", "name": "stdout", "text": "\rtiming:   9%|#  | 4/44"},
              {"output_type": "stream", "name": "stdout", "text": "\rtiming: 100%|###| 44/44\n"},
              {"output_type": "stream", "name": "stderr", "text": "a warning\n"},
              {"output_type": "stream", "name": "stdout", "text": "done\n"}]
    merged = collapse_streams(frames)
    assert [o["text"] for o in merged] == ["timing: 100%|###| 44/44\n", "a warning\n", "done\n"]
    assert as_a_terminal_shows("a\rb\nc\n") == "b\nc\n"
