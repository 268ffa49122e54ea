"""The allocator model (utils/lessons/allocator_model.py, chapter 07) against the real CUDA caching allocator: where a
committed GPU run of chapter 07 measured the fragmentation sequence in a child process on the GPU, the model's
figures for the same sequence and setting must be the GPU's, to the MiB (results/<gpu>/07_memory_profiling.json)."""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent.parent / "results"


def gpu_runs() -> list[dict]:
    runs = []
    for path in sorted(RESULTS.glob("*/07_memory_profiling.json")):
        run = json.loads(path.read_text(encoding="utf-8"))
        if run["device"].get("type") == "cuda":
            runs.append(run)
    return runs


def test_the_model_gives_the_real_allocators_fragmentation_figures() -> None:
    runs = gpu_runs()
    assert any(r["device"]["name"] == "NVIDIA H100 80GB HBM3" for r in runs), "the committed H100 run is missing"
    compared = 0
    for run in runs:
        figures = run["figures"]
        for key, measured in figures.items():
            if not key.startswith("fragmentation_gpu_"):
                continue
            modelled = figures[key.replace("_gpu_", "_model_")]["value"]
            assert modelled == measured["value"], (run["device"]["name"], key, modelled, measured["value"])
            compared += 1
    assert compared >= 2  # the default allocator and expandable segments
