import json
from pathlib import Path

import ipywidgets as widgets
import matplotlib.pyplot as plt
import pytest

from utils.course import results
from utils.course.results import Run, claims_ledger, device_slug, load_claims, recording_enabled, reference_results
from utils.lessons.env import device_info
from utils.lessons.tables import format_table
from utils.lessons.widgets import Panel, dropdown, log2_slider, slider


def test_format_table():
    text = format_table([("a", 1.23456789), ("bb|c", 2)], ["name", "value"])
    lines = text.splitlines()
    assert lines[0].startswith("| name") and "1.235" in text and "bb\\|c" in text
    assert len({len(line) for line in lines}) == 1
    with pytest.raises(ValueError, match="rows\\[0\\]"):
        format_table([(1, 2, 3)], ["a", "b"])
    with pytest.raises(TypeError, match="headers"):
        format_table([], "ab")
    with pytest.raises(ValueError, match="headers"):
        format_table([], [])


def test_claims_file_matches_the_shared_list():
    claims = load_claims()
    assert list(claims) == [f"C{i:02d}" for i in range(1, 31)]
    shared = Path(__file__).resolve().parents[2] / "shared" / "claims.md"
    if shared.exists():
        assert load_claims(shared) == claims


def test_device_slug():
    assert device_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    with pytest.raises(ValueError, match="name"):
        device_slug("  ")


def test_recording_only_for_real_gpu_runs(monkeypatch):
    info = device_info()
    monkeypatch.delenv("COURSE_RECORD", raising=False)
    enabled, why = recording_enabled(info)
    assert enabled == (info.is_cuda and results.experiment_size() == "full")
    monkeypatch.setenv("COURSE_RECORD", "yes")
    with pytest.raises(ValueError, match="COURSE_RECORD"):
        recording_enabled(info)


def test_run_save_and_read_back(monkeypatch, tmp_path, capsys):
    run = Run("01_where_the_memory_goes", config={"batch": 4})
    assert run.figure("peak_bytes", 1234, "B") == 1234
    line = run.claim("C01", measured="16.0 bytes/param", verdict="holds", note="before activations")
    assert line.startswith("C01 (FP32 training with Adam") and "holds" in line
    monkeypatch.setenv("COURSE_RECORD", "0")
    assert run.save(root=tmp_path) is None
    assert "Not saved" in capsys.readouterr().out
    monkeypatch.setenv("COURSE_RECORD", "1")
    path = run.save(root=tmp_path)
    assert str(tmp_path) not in capsys.readouterr().out, "printed paths are relative (no machine paths)"
    saved = json.loads(path.read_text())
    assert saved["figures"]["peak_bytes"] == {"value": 1234, "unit": "B"}
    assert saved["device"]["name"] == device_info().name and saved["torch"]
    assert reference_results("01_where_the_memory_goes", root=tmp_path)[0]["config"] == {"batch": 4}
    ledger = claims_ledger(tmp_path)
    assert "16.0 bytes/param" in ledger and "not yet measured" in ledger


def test_run_bad_arguments():
    with pytest.raises(ValueError, match="chapter"):
        Run("chapter one")
    with pytest.raises(TypeError, match="config"):
        Run("01_x", config=[1])
    run = Run("01_x")
    with pytest.raises(ValueError, match="claim_id"):
        run.claim("C99", "1", "holds")
    with pytest.raises(ValueError, match="verdict"):
        run.claim("C01", "1", "maybe")
    with pytest.raises(TypeError, match="measured"):
        run.claim("C01", 16.0, "holds")
    with pytest.raises(TypeError):
        run.figure("x", object())
    with pytest.raises(ValueError, match="chapter"):
        reference_results("x")


def test_panel_calls_the_plain_function_on_every_change():
    calls = []

    def area(width, height):
        calls.append((width, height))
        if width == 0:
            raise ValueError("width must be positive")
        return width * height

    w, h = slider(2, 0, 10, description="width"), dropdown([1, 3, 5], description="height")
    panel = Panel(area, {"width": w, "height": h}, title="area")
    assert panel.last_result == 2 and panel.runs == 1
    h.value = 5
    assert panel.last_result == 10 and calls[-1] == (2, 5)
    w.value = 0
    assert panel.last_result is None and panel.last_error == "ValueError: width must be positive"
    assert isinstance(panel.widget, widgets.VBox)


def test_panel_shows_figures_and_closes_them():
    def plot(n):
        fig, ax = plt.subplots()
        ax.plot(range(n))
        return fig

    before = set(plt.get_fignums())
    panel = Panel(plot, {"n": slider(3, 1, 5)})
    assert isinstance(panel.last_result, plt.Figure)
    assert set(plt.get_fignums()) == before, "the panel closes the figures it showed"


def test_panel_builds_figures_with_interactive_mode_off():
    """In a control's callback the inline backend's automatic redraws (interactive mode) raced with the figure's
    display: chapter 09's plan figure came out blank or half drawn in JupyterLab after a change. The panel calls its
    function with interactive mode off, and restores it."""
    import matplotlib

    seen = []

    def plot(n):
        seen.append(matplotlib.is_interactive())
        fig, ax = plt.subplots()
        ax.plot(range(n))
        return fig

    was = matplotlib.is_interactive()
    plt.ion()
    try:
        panel = Panel(plot, {"n": slider(3, 1, 5)})
        panel.controls["n"].value = 4
        assert seen == [False, False] and matplotlib.is_interactive()
    finally:
        plt.interactive(was)


def test_widget_helpers_bad_input():
    with pytest.raises(TypeError, match="fn"):
        Panel(None, {"a": slider(1, 0, 2)})
    with pytest.raises(ValueError, match="controls"):
        Panel(lambda: 1, {})
    with pytest.raises(TypeError, match="controls\\['a'\\]"):
        Panel(lambda a: a, {"a": widgets.Button()})
    with pytest.raises(ValueError, match="power of two"):
        log2_slider(3, 0, 4)
    assert log2_slider(4, 0, 4).options[-1] == 16
    with pytest.raises(ValueError, match="options"):
        dropdown([])


def test_slider_dropdown_and_plot_bad_input():
    from utils.lessons.plots import memory_bar

    with pytest.raises(ValueError, match="value must lie"):
        slider(9, 0, 4)
    with pytest.raises(TypeError, match="low"):
        slider(1, 0.5, 4)
    with pytest.raises(ValueError, match="step"):
        slider(1, 0, 4, step=0)
    with pytest.raises(ValueError, match="value must be one of the options"):
        dropdown(["a", "b"], value="c")
    with pytest.raises(TypeError, match="options"):
        dropdown("ab")
    assert dropdown({"x": 1, "y": 2}, value=2).value == 2
    with pytest.raises(TypeError, match="parts"):
        memory_bar([1, 2])
    with pytest.raises(ValueError, match="parts"):
        memory_bar({"a": -1})
    with pytest.raises(ValueError, match="capacity"):
        memory_bar({"a": 1}, capacity=0)
    with pytest.raises(ValueError, match="unit"):
        memory_bar({"a": 1}, unit=0)
    with pytest.raises(TypeError, match="title"):
        memory_bar({"a": 1}, title=3)
    fig = memory_bar({"a": 2**20, "b": 2**21}, capacity=2**22, unit=2**20, unit_name="MiB")
    assert "MiB" in fig.axes[0].get_xlabel()
    plt.close(fig)


def test_format_table_bad_input():
    with pytest.raises(TypeError, match="headers"):
        format_table([(1,)], "a")
    with pytest.raises(ValueError, match="headers"):
        format_table([], [])
    with pytest.raises(ValueError, match="rows\\[0\\]"):
        format_table([(1, 2)], ["a"])
