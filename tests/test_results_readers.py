"""Writers and readers of results/ tied (issue 21 bug 3, issue 27): every file `make gpu-check` and `make outputs`
write is read back by every reader (chapter 00's reference summary, each chapter's reference results, the claims
ledger of `make claims`, `make report`), and a damaged file is named, said what is wrong with, and skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from utils.course import gpu_check, results
from utils.course.chapters import CHAPTERS
from utils.course.chapters import main as chapters_main
from utils.course.gpu_check import ChapterResult
from utils.lessons.env import DeviceInfo, capability_gates, device_info

REPO = Path(__file__).resolve().parents[1]
CHAPTER_NAMES = [f"{c.number}_{c.slug}" for c in CHAPTERS]


def _gpu_info(name: str, capability: tuple[int, int]) -> DeviceInfo:
    cpu = device_info("cpu")
    return DeviceInfo("cuda", name, capability, capability_gates(capability), 16 * 2**30, 15 * 2**30,
                      cpu.torch_version, "12.8", cpu.python_version, cpu.cpu_count, cpu.transformer_engine)


def _record(chapter: str, root: Path, info: DeviceInfo) -> Path:
    """What a chapter notebook writes under COURSE_RECORD=1 (make outputs, make gpu-check): Run.save."""
    run = results.Run(chapter, config={"size": "quick"})
    run.figure("peak_MiB", 12.5, "MiB")
    run.figure("table", {"a": [1, 2]})
    run.claim("C01", "16.0 bytes/param", "holds")
    path = run.save(root=root, info=info)
    assert path is not None
    return path


def _write_everything(root: Path, monkeypatch) -> None:
    """make outputs (the CPU reference, every chapter) and make gpu-check (a simulated T4: its chapters' runs, then
    gpu_check.json and gpu_check.md) into `root`."""
    from simulated_gpu import setup_cell_source

    monkeypatch.setenv("COURSE_RECORD", "1")
    for chapter in CHAPTER_NAMES:
        _record(chapter, root, device_info("cpu"))
    t4 = _gpu_info("Tesla T4 (simulated on CPU)", (7, 5))

    def fake_run_chapter(path, **kwargs):  # the kernel's part: the notebook records its run
        _record(path.stem, root, t4)
        return ChapterResult(path.name, True, "every cell ran", 1.0, 2**20, 2**21)

    monkeypatch.setattr(gpu_check, "run_chapter", fake_run_chapter)
    ok, _ = gpu_check.check(["00", "05"], size="tiny", results_root=root, prelude=setup_cell_source("t4"),
                            run_estimator=False)
    assert ok


def test_every_reader_reads_every_file_the_writers_write(tmp_path, monkeypatch, capsys):
    _write_everything(tmp_path, monkeypatch)
    folder = tmp_path / "tesla-t4-simulated-on-cpu"
    assert {p.name for p in folder.iterdir()} == {"00_setup_and_environment.json", "05_gradient_checkpointing.json",
                                                  "gpu_check.json", "gpu_check.md"}
    capsys.readouterr()
    rows = results.reference_summary(tmp_path)  # chapter 00
    assert len(rows) == len(CHAPTER_NAMES) + 2 and {r[1] for r in rows} == {"", "7.5"}
    for chapter in CHAPTER_NAMES:  # Run.save's comparison and chapters 04/08
        runs = results.reference_results(chapter, tmp_path)
        assert [r["chapter"] for r in runs] == [chapter] * len(runs) and runs
    ledger = results.claims_ledger(tmp_path)
    assert ledger.count("16.0 bytes/param") == len(CHAPTER_NAMES) + 2
    assert "Skipped" not in capsys.readouterr().out
    # make claims and make report (python -m utils.course.chapters --matrix, then python -m utils.course.results
    # --claims)
    chapters_main(["--matrix"])
    chapters_main(["--by-device"])  # what make report prints: readable in a 100-column terminal
    results.main(["--claims", "--root", str(tmp_path), "--out", str(tmp_path / "ledger")])
    out, err = capsys.readouterr()
    assert err == "" and "Skipped" not in out and "C01" in out
    written = (tmp_path / "ledger" / "claims-ledger.md").read_text()
    assert written.count("16.0 bytes/param") == len(CHAPTER_NAMES) + 2


def test_a_gpu_check_summary_in_results_no_longer_breaks_chapter_00(tmp_path):
    """The file make gpu-check wrote before (no "chapter" key) made reference_summary raise KeyError."""
    folder = tmp_path / "tesla-t4"
    folder.mkdir()
    (folder / "gpu_check.json").write_text(json.dumps({"device": {"name": "Tesla T4", "capability": [7, 5]},
                                                       "tier": 16, "size": "full", "passed": True}))
    assert results.reference_summary(tmp_path) == []
    assert "not yet measured" in results.claims_ledger(tmp_path)


DAMAGED = {
    "empty object": ("{}", "has no 'chapter'"),
    "broken JSON": ('{"chapter": ', "is not valid JSON"),
    "a list": ("[1, 2]", "holds a list"),
    "no device name": (json.dumps({"chapter": "05_gradient_checkpointing", "device": {}, "torch": "2.13",
                                   "size": "full", "date": "2026-01-01"}), "'device' has no 'name'"),
    "claims without ids": (json.dumps({"chapter": "05_gradient_checkpointing", "device": {"name": "X"},
                                       "torch": "2.13", "size": "full", "date": "2026-01-01", "claims": [{}]}),
                           "'claims'"),
    "not UTF-8": (b"\xff\xfe\x00", "cannot be read"),
}


@pytest.mark.parametrize("kind", sorted(DAMAGED))
def test_damaged_files_are_named_and_skipped_with_one_line(kind, tmp_path, monkeypatch, capsys):
    content, what = DAMAGED[kind]
    monkeypatch.setenv("COURSE_RECORD", "1")
    good = _record("05_gradient_checkpointing", tmp_path, _gpu_info("NVIDIA H100", (9, 0)))
    bad = tmp_path / "broken-gpu" / "05_gradient_checkpointing.json"
    bad.parent.mkdir()
    bad.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ValueError, match="path") as info:
        results.read_run(bad)
    assert str(bad) in str(info.value) and what in str(info.value)
    capsys.readouterr()
    assert [r[0] for r in results.reference_summary(tmp_path)] == ["NVIDIA H100"]
    assert [r["device"]["name"] for r in results.reference_results("05_gradient_checkpointing", tmp_path)] == [
        "NVIDIA H100"]
    assert "16.0 bytes/param" in results.claims_ledger(tmp_path)
    lines = [line for line in capsys.readouterr().out.splitlines() if "Skipped" in line]
    assert len(lines) == 3 and all(str(bad) in line and what in line for line in lines)
    assert good.exists()
    # Run.save compares with the references: the damaged file is skipped there too
    monkeypatch.setenv("COURSE_RECORD", "0")
    results.Run("05_gradient_checkpointing").save(root=tmp_path, info=device_info("cpu"))
    assert sum("Skipped" in line for line in capsys.readouterr().out.splitlines()) == 1


def test_read_run_bad_path():
    with pytest.raises(TypeError, match="path"):
        results.read_run(None)
    with pytest.raises(ValueError, match="path .*missing.json cannot be read"):
        results.read_run("missing.json")


def test_run_messages_name_the_argument():
    run = results.Run("01_where_the_memory_goes")
    with pytest.raises(TypeError, match="claim_id"):
        run.claim({}, "1", "holds")
    with pytest.raises(TypeError, match="note"):
        run.claim("C01", "1", "holds", note=None)
    with pytest.raises(TypeError, match="name"):
        run.figure({1}, 1)
    with pytest.raises(TypeError, match="value"):
        run.figure("x", {1})
    with pytest.raises(TypeError, match="unit"):
        run.figure("x", 1, unit=None)
    with pytest.raises(ValueError, match="name"):
        run.figure(" ", 1)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the parent without a real GPU")
def test_every_reader_skips_rather_than_raises_on_the_committed_results(capsys):
    results.reference_summary()
    results.claims_ledger()
    assert "Skipped" not in capsys.readouterr().out, "a committed results/ file is damaged"


@pytest.mark.parametrize(("content", "what"), [("", "no claims table"), ("# claims\n\nno table\n", "no claims table"),
                                               (b"\xff\xfe", "cannot be read")])
def test_load_claims_names_a_damaged_claims_file(tmp_path, content, what):
    path = tmp_path / "claims.md"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ValueError, match=what) as info:
        results.load_claims(path)
    assert str(path) in str(info.value)
    with pytest.raises(ValueError, match="missing.md"):
        results.load_claims(tmp_path / "missing.md")
    with pytest.raises(TypeError, match="path"):
        results.load_claims(None)


def test_make_reports_matrix_fits_a_100_column_terminal():
    from utils.course.chapters import CHAPTERS, support_by_device

    text = support_by_device()
    assert max(len(line) for line in text.splitlines()) <= 100
    assert all(f"{c.number} {c.title}" in text for c in CHAPTERS) and "H100 (compute capability 9.0)" in text
