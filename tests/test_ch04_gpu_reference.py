"""Chapter 04 shows a committed GPU run's C17/C19 verdicts when results/ holds one, and says so when it does not.

The notebook cell is executed as written, against a temporary results folder."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from utils.course import results
from utils.course.verdicts.ch04 import c19

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "04_automatic_mixed_precision.ipynb"
CELL = "c4gpuref"


def _run_cell(monkeypatch: pytest.MonkeyPatch, root: Path, is_cuda: bool) -> tuple[str, list]:
    monkeypatch.setattr(results, "RESULTS_DIR", root)
    shown: list = []
    printed: list = []
    cells = {c.get("id"): c for c in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]}
    ns = {"reference_results": results.reference_results, "info": SimpleNamespace(is_cuda=is_cuda),
          "show_table": lambda rows, headers: shown.append((rows, headers)), "print": printed.append, "c19": c19,
          "claim_precision": "bf16 autocast"}
    exec(compile("".join(cells[CELL]["source"]), "chapter04-gpuref", "exec"), ns)  # noqa: S102
    return " ".join(map(str, printed)), shown


def test_a_committed_gpu_run_is_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "nvidia-h100-80gb-hbm3"
    folder.mkdir()
    run = {"chapter": "04_automatic_mixed_precision", "size": "full", "torch": "2.13.0", "date": "2026-11-23",
           "device": {"name": "NVIDIA H100 80GB HBM3", "type": "cuda", "capability": [9, 0]}, "figures": {},
           "claims": [{"id": "C17", "measured": "peak memory x0.80, step time x0.45", "verdict": "partly", "note": ""},
                      {"id": "C19", "measured": "2.2x", "verdict": "holds", "note": ""},
                      {"id": "C16", "measured": "-", "verdict": "holds", "note": ""}]}
    (folder / "04_automatic_mixed_precision.json").write_text(json.dumps(run))
    cpu = tmp_path / "amd-epyc"
    cpu.mkdir()
    (cpu / "04_automatic_mixed_precision.json").write_text(json.dumps(
        run | {"device": {"name": "AMD EPYC", "type": "cpu", "capability": None}}))
    text, shown = _run_cell(monkeypatch, tmp_path, is_cuda=False)
    assert text == "" and len(shown) == 1
    rows = shown[0][0]
    assert [(r[0], r[2], r[4]) for r in rows] == [("NVIDIA H100 80GB HBM3", "C17", "partly"),
                                                  ("NVIDIA H100 80GB HBM3", "C19", "holds")]


def test_without_a_gpu_run_the_chapter_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text, shown = _run_cell(monkeypatch, tmp_path, is_cuda=False)
    assert not shown and "No GPU run of chapter 04 is committed" in text
    text, _ = _run_cell(monkeypatch, tmp_path, is_cuda=True)
    assert "judged on it" in text


def test_the_h100_precision_runs_are_read_from_their_saved_curves() -> None:
    """Review s4: the cell said the H100 run's curves were not saved (they were) and its criterion, a tenth of the
    largest final loss, hid BF16 autocast ending 43x above FP32 under a conclusion that torch.amp trains like FP32."""
    root = Path(__file__).resolve().parent.parent
    run = json.loads((root / "results" / "nvidia-h100-80gb-hbm3" / "04_automatic_mixed_precision.json").read_text())
    finals = {p: v["final_loss"] for p, v in run["figures"]["precision_comparison"]["value"].items()}
    curves = run["figures"]["precision_curves"]["value"]
    nb = json.loads((root / "notebooks" / "04_automatic_mixed_precision.ipynb").read_text())
    out = "".join("".join(o.get("text", "")) for c in nb["cells"] if c["cell_type"] == "code"
                  for o in c.get("outputs", []))
    ratio = finals["bf16 autocast"] / finals["fp32"]
    assert f"bf16 autocast {finals['bf16 autocast']:.4f} ({ratio:.2g}x FP32), still falling at its last step" in out
    assert curves["tf32"][-1] > 1.5 * min(curves["tf32"]) and f"diverged (lowest {min(curves['tf32']):.3g}" in out
    assert "were not saved" not in out
    prose = " ".join(" ".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown").split())
    assert 10 < ratio < 100 and "BF16 autocast ended tens of times above FP32's final loss, still falling" in prose
    assert "and TF32 diverged" in prose


def test_c19_is_also_judged_against_the_same_runs_tf32_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """Review s12 04.2: the H100's C19 "holds" (3.94x) compares BF16 autocast with IEEE FP32; against the same run's
    TF32 row (a process started with the TF32 override), the speed-up is 1.47x: "partly". The cell prints both."""
    root = Path(__file__).resolve().parent.parent / "results"
    saved = json.loads((root / "nvidia-h100-80gb-hbm3" / "04_automatic_mixed_precision.json").read_text())
    steps = {p: v["step_ms"] for p, v in saved["figures"]["precision_comparison"]["value"].items()}
    text, shown = _run_cell(monkeypatch, root, is_cuda=False)
    speedup = steps["tf32"] / steps["bf16 autocast"]
    assert 1.2 <= speedup < 2 and shown
    assert f"TF32 / bf16 autocast = {speedup:.2f}x -> C19 partly" in text
