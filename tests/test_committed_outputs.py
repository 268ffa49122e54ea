"""Committed chapter outputs carry no stderr: no library noise, warnings or tracebacks for a learner to read as a
broken install (utils.lessons.quiet drops the known noise where the course imports torchao or runs the profiler)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem[:2])
def test_no_stderr_or_errors_in_committed_outputs(path: Path) -> None:
    nb = json.loads(path.read_text(encoding="utf-8"))
    found = []
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                text = "".join(out["text"]) if isinstance(out["text"], list) else out["text"]
                found.append(f"cell {i}: stderr {text.strip()[:160]!r}")
            elif out.get("output_type") == "error":
                found.append(f"cell {i}: {out.get('ename')}: {str(out.get('evalue'))[:160]}")
    assert not found, f"{path.name}: " + "; ".join(found)
