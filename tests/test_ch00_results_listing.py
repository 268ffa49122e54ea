"""Chapter 00 lists the reference results in results/: what its committed output shows must be exactly what the
files hold (issue 22: the listing showed 4 of 10 files). Regenerate chapter 00's outputs after the other chapters'
(`make outputs ONLY=00`) when this fails."""

from __future__ import annotations

from pathlib import Path

import nbformat

from utils.course.results import reference_summary
from utils.lessons.tables import format_table

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "00_setup_and_environment.ipynb"
HEADERS = ["device", "capability", "torch", "size", "chapters", "date"]


def _cell(nb, cell_id: str):
    (cell,) = [c for c in nb.cells if c.get("id") == cell_id]
    return cell


def test_the_listing_of_results_matches_the_files() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    namespace: dict = {}
    exec(compile(_cell(nb, "b1a00006").source, f"<{NOTEBOOK.name}:results_by_device>", "exec"), namespace)  # noqa: S102
    listing = _cell(nb, "a83a8987")
    shown = [o["data"]["text/markdown"] for o in listing.outputs if o.get("output_type") == "display_data"]
    printed = "".join(o.get("text", "") for o in listing.outputs if o.get("output_type") == "stream")
    summary = reference_summary()
    assert shown == [format_table(namespace["results_by_device"](summary), HEADERS)], (
        "chapter 00's listing of results/ differs from the files: regenerate its outputs (make outputs ONLY=00)")
    devices = sorted({row[0] for row in summary})
    assert f"{len(summary)} reference runs from {len(devices)} device(s): {', '.join(devices)}." in printed


def test_results_by_device_groups_every_run_once() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    namespace: dict = {}
    exec(compile(_cell(nb, "b1a00006").source, "<results_by_device>", "exec"), namespace)  # noqa: S102
    summary = [["GPU A", "8.0", "2.13.0", "full", "2026-01-02", "01"],
               ["GPU A", "8.0", "2.13.0", "full", "2026-01-01", "00"],
               ["CPU", "", "2.13.0", "quick", "2026-01-01", "05"]]
    rows = namespace["results_by_device"](summary)
    assert rows == [["CPU", "", "2.13.0", "quick", "1: 05", "2026-01-01"],
                    ["GPU A", "8.0", "2.13.0", "full", "2: 00, 01", "2026-01-01 to 2026-01-02"]]
