"""`make gpu-check` (utils/course/gpu_check.py): one line and a non-zero exit without a GPU; its GPU path under a
simulated T4 (control flow only: the figures of a simulated GPU mean nothing)."""

from __future__ import annotations

import json
import os

import nbformat
import pytest
import torch
from platform_tier import only_in_platforms
from simulated_gpu import setup_cell_source, simulated

from utils.course import gpu_check
from utils.course.gpu_check import ChapterResult, EstimateResult, chapter_notebooks, report, run_chapter


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU message is what is tested here")
def test_without_a_gpu_one_line_and_a_non_zero_exit(capsys):
    assert gpu_check.main([]) == gpu_check.NO_GPU_EXIT
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "CUDA GPU" in err


@pytest.mark.slow
@only_in_platforms
def test_gpu_path_under_a_simulated_t4(tmp_path):
    config = [{"precision": "fp32", "optimizer": "adamw", "checkpointing": False, "batch": 4}]
    with simulated("t4"):
        ok, text = gpu_check.check(["00", "02"], size="tiny", cell_timeout=240, results_root=tmp_path, record=False,
                                   prelude=setup_cell_source("t4"), validate_configs=config)
    print(text)
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in text.splitlines()
            if line.startswith("| 0")}
    assert rows == {"00_setup_and_environment.ipynb": "passed", "02_number_formats.ipynb": "passed"}
    assert "Tesla T4 (simulated on CPU)" in text and "Memory tier 16 GiB" in text
    assert "fp32, adamw, checkpointing off, batch 4" in text
    folder = tmp_path / "tesla-t4-simulated-on-cpu"
    summary = json.loads((folder / "gpu_check.json").read_text())
    assert [c["notebook"][:2] for c in summary["chapters"]] == ["00", "02"]
    for chapter in summary["chapters"]:
        assert chapter["passed"] and chapter["peak_allocated"] is not None and chapter["wall_s"] > 0
    assert summary["estimator"][0]["measured"] > 0
    assert (folder / "gpu_check.md").read_text().startswith("# gpu-check on Tesla T4")


@pytest.mark.slow
def test_a_failing_notebook_is_reported_with_its_cell(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("raise ValueError('boom')")]
    path = tmp_path / "99_broken.ipynb"
    nbformat.write(nb, path)
    result = run_chapter(path, size="tiny", cell_timeout=120, record=False, prelude=setup_cell_source("t4"),
                         keep_to=tmp_path / "executed")
    assert not result.passed and "cell 1: ValueError: boom" in result.reason
    kept = nbformat.read(tmp_path / "executed" / "99_broken.ipynb", as_version=4)
    assert any(o.get("ename") == "ValueError" for c in kept.cells for o in c.get("outputs", []))
    assert result.peak_allocated is not None  # the epilogue still ran


def test_report_marks_failures_and_estimates_off_by_more_than_5_percent():
    chapters = [ChapterResult("01_x.ipynb", True, "every cell ran", 12.0, 2**30, 2**31),
                ChapterResult("02_y.ipynb", False, "a cell ran past 60 s", 60.0)]
    estimates = [EstimateResult("fp32 a", 1000, 1040, 900), EstimateResult("fp32 b", 1000, 1100, 900)]
    assert estimates[0].passed and not estimates[1].passed
    text = report("GPU", 16, "full", chapters, estimates)
    assert "| 02_y.ipynb | FAILED" in text and "a cell ran past 60 s" in text
    assert "+4.0%" in text and "FAILED (more than 5% off)" in text
    assert "Estimator check FAILED to run: boom" in report("GPU", 80, "full", chapters, [], "boom")


def test_bad_input():
    with pytest.raises(ValueError, match="chapter"):
        chapter_notebooks(["11"])
    assert [p.name[:2] for p in chapter_notebooks(["00", "03"])] == ["00", "03"]
    with pytest.raises(ValueError, match="size"):
        run_chapter(chapter_notebooks(["00"])[0], size="huge")
    with pytest.raises(TypeError, match="cell_timeout"):
        run_chapter(chapter_notebooks(["00"])[0], cell_timeout=1.5)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
            gpu_check.check(["00"])


def test_the_parent_never_creates_a_cuda_context_nor_imports_transformer_engine(tmp_path, monkeypatch):
    """Bug 12: the device is described in a child process (here a simulated T4); every CUDA entry point of the
    parent is poisoned, and torch.cuda stays uninitialised."""
    import sys

    def poisoned(*args, **kwargs):
        raise AssertionError("gpu-check's parent process touched CUDA")

    for name in ("init", "_lazy_init", "is_available", "current_device", "device_count", "get_device_properties",
                 "get_device_name", "get_device_capability", "mem_get_info", "max_memory_allocated",
                 "memory_allocated", "set_device"):
        monkeypatch.setattr(torch.cuda, name, poisoned)
    monkeypatch.setattr("utils.lessons.env.transformer_engine_status", poisoned)
    had_te = "transformer_engine" in sys.modules
    monkeypatch.setattr(gpu_check, "run_chapter",
                        lambda path, **kw: ChapterResult(path.name, True, "every cell ran", 1.0, 1, 2))
    ok, text = gpu_check.check(["00"], size="tiny", results_root=tmp_path, prelude=setup_cell_source("t4"),
                               run_estimator=False)
    assert ok and "Tesla T4 (simulated on CPU)" in text and "Memory tier 16 GiB" in text
    assert not torch.cuda.is_initialized()
    assert ("transformer_engine" in sys.modules) == had_te
    summary = json.loads((tmp_path / "tesla-t4-simulated-on-cpu" / "gpu_check.json").read_text())
    assert summary["kind"] == "gpu_check" and summary["device"]["capability"] == [7, 5]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU message is what is tested here")
def test_without_a_usable_gpu_the_line_gives_the_drivers_remedy(capsys, monkeypatch, tmp_path):
    """Bug 6: a driver for CUDA 12.4 and a CPU-only torch: the line says which torch build to install."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4 |'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(torch.version, "cuda", None)
    assert gpu_check.main([]) == gpu_check.NO_GPU_EXIT
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert "CUDA GPU" in err and 'make lab TORCH="torch==' in err and "whl/cu126" in err


def test_a_child_that_cannot_start_torch_is_one_line(capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("the child process failed (exit code 1): ImportError: libcudart.so.13")

    monkeypatch.setattr(gpu_check, "query_device", broken)
    assert gpu_check.main([]) == gpu_check.NO_GPU_EXIT
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "libcudart" in err


def test_report_shows_the_time_models_prediction_for_reference_gpus():
    rows = [ChapterResult("04_automatic_mixed_precision.ipynb", True, "every cell ran", 250.0, 1, 2)]
    text = report("Tesla T4", 16, "full", rows, [])
    line = next(t for t in text.splitlines() if t.startswith("| 04_"))
    assert "time model s" in text and line.split("|")[4].strip().isdigit()
    assert gpu_check.predicted_wall("NVIDIA L4", 24, "04") == "-"  # not a reference GPU: no prediction
    assert gpu_check.predicted_wall("Tesla T4", 16, "00").isdigit()  # chapter 00 has a work list (issue 33)
    assert "device peak GiB (nvidia-smi, sampled)" in text and "a lower bound of the true peak" in text


def test_a_stopped_run_keeps_what_it_measured_and_a_time_limit_reports_what_did_not_run(tmp_path, monkeypatch):
    """A lease can end mid-run: the summary is written after each chapter, and chapters past --time-limit are
    listed as not run rather than missing."""
    calls = []

    def fake_run(path, **kw):
        calls.append(path.name[:2])
        if len(calls) == 2:
            raise KeyboardInterrupt  # the run is stopped during the second chapter
        return ChapterResult(path.name, True, "every cell ran", 1.0, 1, 2)

    monkeypatch.setattr(gpu_check, "run_chapter", fake_run)
    with pytest.raises(KeyboardInterrupt):
        gpu_check.check(["00", "01", "02"], size="tiny", results_root=tmp_path, prelude=setup_cell_source("t4"),
                        run_estimator=False)
    path = tmp_path / "tesla-t4-simulated-on-cpu" / "gpu_check.json"
    summary = json.loads(path.read_text())
    assert [c["notebook"][:2] for c in summary["chapters"]] == ["00"]
    assert summary["complete"] is False and summary["passed"] is False

    calls.clear()
    ok, text = gpu_check.check(["00", "01"], size="tiny", results_root=tmp_path, prelude=setup_cell_source("t4"),
                               run_estimator=False, time_limit_s=1e-9)
    assert not ok and calls == [] and text.count("not run: the 1e-09 s time limit had passed") == 2
    summary = json.loads(path.read_text())
    assert summary["complete"] is True and [c["passed"] for c in summary["chapters"]] == [False, False]
    with pytest.raises(ValueError, match="time_limit_s"):
        gpu_check.check(["00"], time_limit_s=0)
