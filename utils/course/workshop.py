"""The minutes table of docs/workshop.md, from measurements and the time model, never typed.

For each chapter: the minutes its committed run took on the CPU that made the outputs (`course.outputs.seconds` in the
notebook, written by `make outputs`), the minutes `utils.lessons.time_model` predicts at full size on a T4 and on an
H100 (a prediction: FLOPs at assumed sustained rates, the measured per-op host overhead and the chapter's fixed costs),
with the lower bound beside it (the matmul FLOPs at the datasheet peak, which no run beats), the minutes each real GPU
run of `make gpu-check` took at full size (results/<gpu>/gpu_check.json: the check of the prediction), and the minutes
its lab's exercises are planned to take (the labs' metadata, as in docs/instructors.md). `make outputs` and `make labs`
leave it stale; `python -m utils.course.workshop` rewrites it, and a test fails while the document and the data
disagree.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from utils.lessons.tables import format_table
from utils.validate import check_instance

REPO_ROOT = Path(__file__).resolve().parents[2]
DOC = REPO_ROOT / "docs" / "workshop.md"
START, END = "<!-- minutes-table:start (python -m utils.course.workshop) -->", "<!-- minutes-table:end -->"


def _minutes(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return "< 0.1" if seconds < 3 else f"{seconds / 60:.1f}"  # 0.0 would read as "no time at all"


def gpu_runs(results: Path = REPO_ROOT / "results") -> list[tuple[str, dict[str, float]]]:
    """(column header, {chapter number: wall seconds}) of each committed `make gpu-check` run at full size."""
    results = Path(check_instance("results", results, (str, Path)))
    runs = []
    for path in sorted(Path(results).glob("*/gpu_check.json")):
        try:
            run = json.loads(path.read_text(encoding="utf-8"))
            walls = {c["notebook"][:2]: float(c["wall_s"]) for c in run["chapters"] if c["wall_s"] > 0}
            name, torch_version, size = run["device"]["name"], run["torch"], run["size"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: not a gpu-check summary ({exc})") from exc
        if size == "full" and walls:
            runs.append((f"{name}, min (measured: make gpu-check, torch {torch_version})", walls))
    return runs


def minutes_rows() -> tuple[list[list[str]], list[str]]:
    """One row per chapter: title, CPU minutes (measured), T4 and H100 compute minutes (predicted), the minutes of
    each committed GPU run (measured), lab minutes."""
    from utils.course.labs import lab_exercises, read_notebook
    from utils.lessons.time_model import CHAPTERS, GPUS, chapter_work, datasheet_bound_seconds, predicted_seconds

    measured = gpu_runs()
    rows, devices = [], set()
    for path in sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        outputs = nb["metadata"].get("course", {}).get("outputs", {})
        devices.add(outputs.get("device", "?"))
        number = path.name[:2]
        title = next((line.lstrip("# ").split("·", 1)[-1].split(":", 1)[0].strip() for c in nb["cells"]
                      if c["cell_type"] == "markdown" for line in "".join(c["source"]).splitlines()
                      if line.startswith("# ")), path.stem)
        predicted = []
        for gpu, tier in (("T4", 16), ("H100", 80)):
            if number not in CHAPTERS:  # a chapter the time model does not know yet: no prediction, not a guess
                predicted.append("-")
                continue
            works = chapter_work(number, tier)
            predicted.append(f"{_minutes(predicted_seconds(works, GPUS[gpu], chapter=number))} "
                             f"(≥ {_minutes(datasheet_bound_seconds(works, GPUS[gpu]))})")
        labs = sorted((REPO_ROOT / "labs").glob(f"lab{number}_*.ipynb"))
        lab_minutes = "-"
        if labs:
            exercises = lab_exercises(read_notebook(labs[0]), labs[0].stem)
            auto = sum(e.minutes or 0 for e in exercises if e.check is not None)
            by_hand = sum(e.minutes or 0 for e in exercises if e.check is None)
            lab_minutes = f"{auto:.0f}" + (f" + {by_hand:.0f} challenge" if by_hand else "")
        rows.append([number, title, _minutes(outputs.get("seconds")), *predicted,
                     *(_minutes(walls.get(number)) for _, walls in measured), lab_minutes])
    device = ", ".join(sorted(devices))
    headers = ["ch", "chapter", f"CPU run, min (measured: one `make outputs` run, {device})",
               "T4, min (predicted; ≥ bound)", "H100, min (predicted; ≥ bound)", *(h for h, _ in measured),
               "lab, min (planned)"]
    return rows, headers


def table_markdown() -> str:
    rows, headers = minutes_rows()
    return f"{START}\n{format_table(rows, headers)}\n{END}"


def write(doc: Path = DOC) -> bool:
    """Rewrite the table between the markers of `doc`; returns whether anything changed."""
    doc = Path(check_instance("doc", doc, (str, Path)))
    text = doc.read_text(encoding="utf-8")
    if START not in text or END not in text:
        raise ValueError(f"doc {doc}: no '{START}' ... '{END}' markers")
    head, rest = text.split(START, 1)
    new = head + table_markdown() + rest.split(END, 1)[1]
    if new != text:
        doc.write_text(new, encoding="utf-8")
    return new != text


def is_current(doc: Path = DOC) -> bool:
    """Whether `doc`'s table is what the data give now."""
    doc = Path(check_instance("doc", doc, (str, Path)))
    return table_markdown() in doc.read_text(encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Rewrite docs/workshop.md's minutes table from the data.")
    parser.add_argument("--check", action="store_true", help="exit 1 if the table is stale")
    args = parser.parse_args(argv)
    if args.check:
        ok = is_current()
        print("docs/workshop.md's minutes table is current" if ok else
              "docs/workshop.md's minutes table is stale: run python -m utils.course.workshop")
        return 0 if ok else 1
    print("docs/workshop.md " + ("updated" if write() else "already current"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
