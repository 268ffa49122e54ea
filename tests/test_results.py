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
