"""Reference results shown beside a run, the summary chapter 00 lists, and device folders that always exist."""

from __future__ import annotations

import pytest

from utils.course import results
from utils.lessons.env import device_info


def test_save_prints_reference_figures_beside_this_run(monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.setenv("COURSE_RECORD", "1")
    info = device_info("cpu")
    ref = results.Run("05_gradient_checkpointing")
    ref.figure("saved MiB", 12.5, "MiB")
    ref.claim("C20", "slope 0.5", "holds")
    ref.save(root=tmp_path, info=info)
    monkeypatch.setenv("COURSE_RECORD", "0")
    mine = results.Run("05_gradient_checkpointing")
    mine.figure("saved MiB", 11.0, "MiB")
    mine.figure("only here", 3)
    capsys.readouterr()
    assert mine.save(root=tmp_path, info=info) is None
    out = capsys.readouterr().out
    assert "Reference results beside this run" in out and "12.5 MiB" in out and "11 MiB" in out
    assert f"{info.name} (an earlier run of this device, quick," in out
    rows = results.reference_summary(tmp_path)
    assert rows == [[info.name, "", ref.to_json(info)["torch"], "quick", ref.to_json(info)["date"], "05"]]
    assert "slope 0.5" in results.claims_ledger(tmp_path)


def test_device_slug_never_empty() -> None:
    assert results.device_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    slug = results.device_slug("Ｔ４・ＧＰＵ")  # full-width letters: no ASCII at all
    assert slug.startswith("device-") and len(slug) > 7
    with pytest.raises(TypeError, match="name"):
        results.device_slug(None)
    with pytest.raises(ValueError, match="name"):
        results.device_slug("  ")


def test_a_verdict_judged_by_an_earlier_criterion_is_marked_in_the_ledger(monkeypatch, tmp_path) -> None:
    """Review s14 R4: a GPU run saved before a chapter changed how it judges a claim (chapter 01's C07 moved from the
    whole GPT to the attention core) showed its old verdict as if today's cell had judged it."""
    from utils.course.verdicts.ch01 import c07

    monkeypatch.setenv("COURSE_RECORD", "1")
    info = device_info("cpu")
    run = results.Run("01_where_the_memory_goes")
    run.claim("C07", "slopes today", *c07(1.9, 1.0))  # today's criterion
    run.claim("C06", "ratio 4.0", "holds", "criterion: holds if an older sentence says so")  # no chapter's today
    run.save(root=tmp_path, info=info)
    rows = {line.split("|")[1].strip(): line for line in results.claims_ledger(tmp_path).splitlines()
            if line.startswith("| C0")}
    assert results.EARLIER not in rows["C07"] and "| depends" in rows["C07"]
    assert f"holds ({results.EARLIER}: chapter 01 judges it otherwise now; re-run it there)" in rows["C06"]
    assert results.EARLIER in results.claims_summary(tmp_path, width=200)
