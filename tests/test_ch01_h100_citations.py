"""Chapter 01 cites the committed H100 run in its prose (the CUDA context outside the allocator, the estimator's
check): the cells print them from results/, so a new GPU run cannot leave them stale."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
H100 = ROOT / "results" / "nvidia-h100-80gb-hbm3"


def _prose() -> str:
    nb = json.loads((ROOT / "notebooks" / "01_where_the_memory_goes.ipynb").read_text(encoding="utf-8"))
    return " ".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown").replace("\n", " ")


def test_the_h100_figures_chapter_01_cites_are_printed_from_the_committed_ones() -> None:
    """Review s13 (0x.1): the context's MiB and the estimator's H100 rows were typed into the prose; the cells now
    print them from results/, and the prose reads "the line above"."""
    prose = _prose()
    nb = json.loads((ROOT / "notebooks" / "01_where_the_memory_goes.ipynb").read_text(encoding="utf-8"))
    printed = "".join("".join(o.get("text", "")) for c in nb["cells"] if c["cell_type"] == "code"
                      for o in c.get("outputs", []))
    figures = json.loads((H100 / "01_where_the_memory_goes.json").read_text())["figures"]
    context = figures["gpu_counter: in use outside the allocator: CUDA context (+ other processes)"]["value"]
    assert f"in use outside the allocator: CUDA context (+ other processes) {context / 2**20:,.1f} MiB" in printed
    assert "769 MiB" not in prose and "measured more outside the allocator" in prose
    check = json.loads((H100 / "gpu_check.json").read_text())["estimator"]
    passed = sum(e["passed"] for e in check)
    assert f"within 5% on {passed} of {len(check)} configurations" in printed
    for row in (e for e in check if abs(e["error"]) > 0.01):
        assert f"{row['config']} {row['error']:+.1%}" in printed
    assert not re.search(r"came out [\d.]+% and [\d.]+% high", prose)
