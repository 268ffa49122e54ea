"""Shared by the lab tests: a chapter's held-out cases (loaded by path, as the grader does) and the namespace a
solution notebook's answer cells build."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import nbformat

ROOT = Path(__file__).resolve().parents[1]


def hidden_cases(chapter: str) -> dict[str, Any]:
    """grading/hidden/chNN.py's HIDDEN, loaded by file path (it is not importable as a package)."""
    path = ROOT / "grading" / "hidden" / f"ch{chapter}.py"
    spec = importlib.util.spec_from_file_location(f"hidden_ch{chapter}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.HIDDEN


def solution_namespace(notebook: str) -> dict[str, Any]:
    """Run a solution's code cells except its check and free-answer cells; return the names they define."""
    nb = nbformat.read(ROOT / "solutions" / notebook, as_version=4)
    ns: dict[str, Any] = {}
    for cell in nb.cells:
        course = cell.metadata.get("course", {})
        if cell.cell_type == "code" and "check" not in course and "answer" not in course:
            exec(cell.source, ns)
    return ns
