"""Chapter 01 cites the committed H100 run in its prose (the CUDA context outside the allocator, the estimator's
check): the figures it types must be the ones results/ holds, so a new GPU run cannot leave them stale unnoticed."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
H100 = ROOT / "results" / "nvidia-h100-80gb-hbm3"


def _prose() -> str:
    nb = json.loads((ROOT / "notebooks" / "01_where_the_memory_goes.ipynb").read_text(encoding="utf-8"))
    return " ".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown").replace("\n", " ")


def test_the_h100_figures_chapter_01_cites_are_the_committed_ones() -> None:
    prose = _prose()
    figures = json.loads((H100 / "01_where_the_memory_goes.json").read_text())["figures"]
    context = figures["gpu_counter: in use outside the allocator: CUDA context (+ other processes)"]["value"]
    assert f"measured {round(context / 2**20)} MiB outside the allocator" in prose
    check = json.loads((H100 / "gpu_check.json").read_text())["estimator"]
    passed = sum(e["passed"] for e in check)
    assert f"met it on {passed} of {len(check)} configurations" in prose
    high = sorted(100 * e["error"] for e in check if e["config"].startswith("bf16-mixed") and e["error"] > 0.01)
    quoted = re.search(r"came out ([\d.]+)% and ([\d.]+)% high", prose)
    assert quoted and [float(v) for v in quoted.groups()] == [round(v, 1) for v in high]
