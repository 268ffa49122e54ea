"""Labs from solutions: `python -m utils.labs` (make labs) writes labs/ from solutions/.

In a solution notebook, an exercise is a code cell with metadata
`{"course": {"exercise": "1.2", "task": "what to do", "points": 1}}` whose answer sits between
`### BEGIN SOLUTION` and `### END SOLUTION` inside a function body; the next code cell is its check
(tag "check", metadata `{"course": {"check": "1.2"}}`). The lab replaces each answer with
`raise NotImplementedError("Exercise 1.2: what to do")` and clears outputs; nothing else changes.
The lab records a hash of what was written, so a lab edited since (a learner's work) is not overwritten
without --force. `--check` exits 1 when a lab is missing, stale or has no solution.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import sys
from pathlib import Path

import nbformat
from nbformat import NotebookNode

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
REPO_ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS_DIR, LABS_DIR = REPO_ROOT / "solutions", REPO_ROOT / "labs"


class LabError(ValueError):
    """A solution notebook that cannot be turned into a lab, or a lab that must not be overwritten."""


def course_metadata(cell: NotebookNode) -> dict:
    """A cell's course metadata (exercise, task, points, check), or {}."""
    return cell.get("metadata", {}).get("course", {})


def strip_solution(source: str, exercise: str, task: str) -> str:
    """Replace every BEGIN/END SOLUTION block of a cell's source with a NotImplementedError."""
    out, inside, indent = [], False, ""
    for number, line in enumerate(source.splitlines(), start=1):
        stripped = line.strip()
        if stripped == BEGIN:
            if inside:
                raise LabError(f"exercise {exercise}: line {number} opens a solution inside another")
            indent = line[: len(line) - len(line.lstrip())]
            if not indent:
                raise LabError(f"exercise {exercise}: the solution block at line {number} must sit inside a "
                               "function body, so that the lab's cell still runs and its check says 'not attempted'")
            out.append(f"{indent}raise NotImplementedError({json.dumps(f'Exercise {exercise}: {task}')})")
            inside = True
        elif stripped == END:
            if not inside:
                raise LabError(f"exercise {exercise}: line {number} closes a solution that was never opened")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise LabError(f"exercise {exercise}: a solution block is never closed")
    return "\n".join(out)


def content_hash(nb: NotebookNode) -> str:
    """A hash of what a learner edits: each cell's type, source and metadata."""
    cells = [[c.cell_type, c.source, c.get("metadata", {})] for c in nb.cells]
    return hashlib.sha256(json.dumps(cells, sort_keys=True).encode()).hexdigest()


def make_lab(solution: NotebookNode, name: str) -> NotebookNode:
    """The lab for a solution notebook: answers replaced, outputs and execution counts cleared."""
    lab = copy.deepcopy(solution)
    exercises = []
    for index, cell in enumerate(lab.cells):
        meta = course_metadata(cell)
        has_block = cell.cell_type == "code" and BEGIN in cell.source
        if "exercise" in meta:
            if not has_block:
                raise LabError(f"{name}: exercise {meta['exercise']} (cell {index}) has no {BEGIN} block")
            if not meta.get("task"):
                raise LabError(f"{name}: exercise {meta['exercise']} (cell {index}) needs metadata course.task")
            following = next((c for c in lab.cells[index + 1:] if c.cell_type == "code"), None)
            if following is None or course_metadata(following).get("check") != meta["exercise"]:
                raise LabError(f"{name}: exercise {meta['exercise']} must be followed by its check cell "
                               f"(metadata course.check = {meta['exercise']!r})")
            cell.source = strip_solution(cell.source, meta["exercise"], meta["task"])
            exercises.append(meta["exercise"])
        elif has_block:
            raise LabError(f"{name}: cell {index} has a solution block but no metadata course.exercise")
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            cell.metadata.pop("execution", None)
    if len(set(exercises)) != len(exercises):
        raise LabError(f"{name}: exercise ids repeat: {exercises}")
    lab.metadata["course"] = {"lab": name, "generated_from": f"solutions/{name}.ipynb"}
    lab.metadata["course"]["generated_sha256"] = content_hash(lab)
    return lab


def _expected_labs(solutions_dir: Path) -> dict[str, NotebookNode]:
    return {p.stem: make_lab(nbformat.read(p, as_version=4), p.stem) for p in sorted(solutions_dir.glob("*.ipynb"))}


def check_labs(solutions_dir: Path = SOLUTIONS_DIR, labs_dir: Path = LABS_DIR) -> list[str]:
    """Problems that make labs/ differ from what `make labs` would write (empty: in sync)."""
    problems = []
    expected = _expected_labs(solutions_dir)
    for name, lab in expected.items():
        path = labs_dir / f"{name}.ipynb"
        if not path.exists():
            problems.append(f"labs/{name}.ipynb is missing: run `make labs`")
        elif path.read_text(encoding="utf-8") != nbformat.writes(lab) + "\n":
            problems.append(f"labs/{name}.ipynb is out of date with solutions/{name}.ipynb: run `make labs`")
    for path in sorted(labs_dir.glob("*.ipynb")):
        if path.stem not in expected:
            problems.append(f"labs/{path.name} has no solutions/{path.name}: remove it or add the solution")
    return problems


def write_labs(solutions_dir: Path = SOLUTIONS_DIR, labs_dir: Path = LABS_DIR, *, force: bool = False) -> list[str]:
    """Write every lab; refuse (LabError) to overwrite one edited since it was generated, unless force."""
    labs_dir.mkdir(parents=True, exist_ok=True)
    messages, refused = [], []
    for name, lab in _expected_labs(solutions_dir).items():
        path = labs_dir / f"{name}.ipynb"
        text = nbformat.writes(lab) + "\n"
        if path.exists():
            if path.read_text(encoding="utf-8") == text:
                messages.append(f"labs/{name}.ipynb is up to date")
                continue
            current = nbformat.read(path, as_version=4)
            recorded = current.metadata.get("course", {}).get("generated_sha256")
            if recorded != content_hash(current) and not force:
                refused.append(f"labs/{name}.ipynb was edited since it was generated (its cells no longer match "
                               "the hash recorded in its metadata); not overwritten. Use --force to replace it.")
                continue
        path.write_text(text, encoding="utf-8")
        messages.append(f"wrote labs/{name}.ipynb")
    if refused:
        raise LabError("\n".join(messages + refused))
    return messages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate labs/ from solutions/.")
    parser.add_argument("--check", action="store_true", help="only report whether labs/ is in sync")
    parser.add_argument("--force", action="store_true", help="overwrite labs edited since they were generated")
    parser.add_argument("--solutions", type=Path, default=SOLUTIONS_DIR)
    parser.add_argument("--labs", type=Path, default=LABS_DIR)
    args = parser.parse_args(argv)
    try:
        if args.check:
            problems = check_labs(args.solutions, args.labs)
            print("\n".join(problems) if problems else "labs/ is in sync with solutions/")
            return 1 if problems else 0
        print("\n".join(write_labs(args.solutions, args.labs, force=args.force)))
    except LabError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
