"""Chapter 09's planner widget: its function runs for every model (the real architectures and the GPT stand-ins),
GPU and host RAM it offers, and the host RAM slider changes the plan (ZeRO-Offload needs 20 B/param of host RAM)."""

import json
from dataclasses import replace
from pathlib import Path

import matplotlib.pyplot as plt
import nbformat
import pytest
from notebook_lessons import chapter09_panel

from utils.ledger.architectures import ARCHITECTURES, shape_of_model
from utils.ledger.budget import GIB, REPORTED_GIB, usable_budget
from utils.ledger.gpt import PRESETS
from utils.ledger.plan import costs_table, plan
from utils.lessons.plan_runs import plan_figure
from utils.lessons.tables import format_table

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "09_capstone_fit_a_model.ipynb"


@pytest.fixture(scope="module")
def plan_report():
    namespace = chapter09_panel(plan_figure, lambda rows, headers: print(format_table(rows, headers)))
    return namespace["plan_report"], namespace["MODELS"]


MODELS = [*ARCHITECTURES, *(f"GPT {name} (stand-in)" for name in PRESETS)]


CASES = [(m, g) for m in MODELS for g in ("T4 (16 GB)", "A100 (80 GB)")] + \
    [("Llama-3-8B", g) for g in REPORTED_GIB if g not in ("T4 (16 GB)", "A100 (80 GB)")]  # every model, every GPU


@pytest.mark.parametrize("model, gpu", CASES)
def test_the_widget_plans_every_model(plan_report, model, gpu, capsys):
    report, offered = plan_report
    assert offered == MODELS
    fig = report(model, 4096, gpu, 32, 128, True, True, True)
    plt.close(fig)
    out = capsys.readouterr().out
    assert "| cost" in out and "GiB per GPU" in out
    assert len(fig.axes[0].get_yticks()) >= 1


def test_the_widgets_first_picture_is_llama_3_8b_planned_with_lora_after_offload_is_skipped(plan_report, capsys):
    """What section 7's prose reads from the panel's first output."""
    report, _ = plan_report
    fig = report("Llama-3-8B", 4096, "A10G (24 GB)", 32, 128, True, True, True)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    plt.close(fig)
    assert "+ chunked linear-cross-entropy" in labels and not any("offload" in label for label in labels)
    assert any(label.startswith("LoRA rank 16") for label in labels)
    out = capsys.readouterr().out
    assert "LoRA r=16 on attention, BF16 base" in out and "(fits)" in out
    # the reading's "about 1,510 GiB of activations" is printed, not only drawn (review s4: only in the snapshot)
    assert "top bar, full fine-tuning in FP32, whole batch at once: 1,724 GiB, saved activations 1,509 GiB of it" in out
    # reviews s5-s6: ZeRO-Offload's host ledger is 20 B/param with accumulation (DeepSpeed v0.19.5), pinned blocks
    # rounded up to powers of two
    for skipped in ("optimizer offload skipped: its host ledger needs 157 GiB of host RAM, more than the 128 GiB",
                    "parameter offload skipped: its host ledger needs 152 GiB of host RAM, more than the 128 GiB"):
        assert skipped in out
    p = plan(shape_of_model("Llama-3-8B", 4096), usable_budget(int(REPORTED_GIB["A10G (24 GB)"] * GIB)), 32,
             host_bytes=128 * GIB, chunked_loss=1024)
    first = dict(p.history_parts)["full fine-tuning in FP32, whole batch at once"]
    assert round(first["saved activations"] / GIB, -1) == 1510  # "about 1,510 GiB of activations"
    assert first["saved activations"] > 0.85 * sum(first.values())
    prose = " ".join("".join("".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"]).split())
    assert "its host ledger needs 157 GiB, parameter offload's 152, more than the host's 128, and LoRA carries" in prose


@pytest.mark.parametrize("gpu", ["L40S (48 GB)", "A40 (48 GB)", "RTX A6000 (48 GB)"])
def test_qloras_claim_a_70b_fine_tunes_on_one_48_gb_gpu(gpu):
    """QLoRA (Dettmers et al. 2023): a 65B model fine-tunes on a single 48 GB GPU. The panel offers the 48 GB cards,
    so the chapter's claim can be checked in it: Llama-2-70B and the 65B stand-in at 512 tokens plan to QLoRA."""
    for shape in (shape_of_model("Llama-2-70B", 512), replace(PRESETS["65B"], seq_len=512)):
        p = plan(shape, usable_budget(int(REPORTED_GIB[gpu] * GIB)), 16, host_bytes=64 * GIB)
        assert p.fits and p.choice.quantize_base and p.choice.lora_rank, p.steps[-3:]
    assert "H200 (141 GB)" in REPORTED_GIB


def test_host_ram_changes_the_plan(plan_report, capsys):
    report, _ = plan_report
    plt.close(report("Llama-3-8B", 4096, "A10G (24 GB)", 32, 16, True, False, True))
    small = capsys.readouterr().out
    plt.close(report("Llama-3-8B", 4096, "A10G (24 GB)", 32, 256, True, False, True))
    large = capsys.readouterr().out
    assert "offload skipped" in small and "host RAM" in small
    assert "offload skipped" not in large and "host RAM:" in large


def test_plan_figure_one_bar_per_step_and_the_budget_as_printed():
    p = plan(PRESETS["7B"], usable_budget(int(REPORTED_GIB["A10G (24 GB)"] * GIB)), 32, host_bytes=128 * GIB)
    fig = plan_figure(p, "t")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()][0].startswith("full fine-tuning")
    assert len(ax.get_yticks()) == len(p.history_parts) == len(p.history)
    assert f"{p.budget / GIB:.1f} GiB" in ax.get_xlabel()
    fig.canvas.draw()
    legend = fig.legends[0]
    assert legend.get_window_extent().y1 < ax.xaxis.label.get_window_extent().y0 + 1  # below the axis label
    plt.close(fig)
    rows, headers = costs_table(PRESETS["7B"], p.choice)
    assert headers == ["cost", "per optimizer step"] and len(rows) == 4
    with pytest.raises(TypeError, match="p"):
        plan_figure("plan")


def test_the_panel_and_its_figure_are_seen_together_in_a_1400_x_900_window(plan_report):
    """Issue 37 item 5: the controls stand beside the output, and the first picture with its printed lines and cost
    table fits under the panel's title in a 900-pixel-high window (JupyterLab's inline figures at 100 dpi)."""
    from utils.lessons.widgets import Panel

    nb = nbformat.read(NOTEBOOK, as_version=4)
    source = next(c.source for c in nb.cells if c.cell_type == "code" and "def plan_report" in c.source)
    assert "beside=True" in source and '"gpus"' not in source  # one GPU: the multi-GPU panel is chapter 10's
    report, _ = plan_report
    fig = report("Llama-3-8B", 4096, "A10G (24 GB)", 32, 128, True, True, True)
    width, height = fig.get_size_inches() * 100
    plt.close(fig)
    lines_and_table = 4 * 22 + 7 * 30  # the printed lines and the 6-row cost table, about 30 px a row
    assert height + lines_and_table < 900 - 180  # JupyterLab's bars, the panel's title and the cell's margins
    # beside the controls' column (about 310 px) JupyterLab scales a wider figure down to the output's width;
    # tests/test_lab_flow_browser.py sees the panel, figure included, fit one 1,400 x 900 screen
    assert width <= 800
    panel = Panel(lambda n: str(n), {"n": __import__("utils.lessons.widgets", fromlist=["slider"]).slider(2, 1, 3)},
                  beside=True)
    row = panel.widget.children[-1]
    assert type(row).__name__ == "HBox" and row.children[-1] is panel.output
    assert panel.controls["n"] in row.children[0].children
    with pytest.raises(TypeError, match="beside"):
        Panel(lambda n: n, {"n": __import__("utils.lessons.widgets", fromlist=["slider"]).slider(2, 1, 3)},
              beside="yes")


def test_the_panels_labels_are_whole_and_its_text_wraps_at_words():
    """Issue 37 (review item 10): the label column was 110 px, and "sequences per step" showed as "sequences per...";
    JupyterLab broke the printed plan mid-word ("N / F4"). tests/test_lab_flow_browser.py sees both in Chromium."""
    from ipywidgets import Checkbox

    from utils.lessons.widgets import WORD_WRAP_CSS, Panel, dropdown, log2_slider

    controls = {"model": dropdown(["a", "b"], "a", "model"), "seq": log2_slider(32, 0, 8, "sequences per step"),
                "lora": Checkbox(value=True, description="allow LoRA")}
    panel = Panel(lambda model, seq, lora: "x", controls, beside=True)
    assert {c.style.description_width for c in controls.values()} == {f"{len('sequences per step') + 1}ch"}
    column = panel.widget.children[-1].children[0]
    assert column.layout.width == f"calc({len('sequences per step') + 1}ch + 170px)" == column.layout.flex[4:]
    for beside in (True, False):  # every panel's printed text wraps between words
        panel = Panel(lambda model, seq, lora: "x", controls, beside=beside)
        assert "course-panel" in panel.widget._dom_classes
        style = [w for w in panel.widget.children if getattr(w, "value", "") == WORD_WRAP_CSS]
        assert len(style) == 1 and style[0].layout.display == "none"
    assert ".course-panel .jp-OutputArea-output pre" in WORD_WRAP_CSS and "word-break: normal" in WORD_WRAP_CSS


def test_a_ledger_line_has_one_colour_in_every_plans_figure():
    """Review 37c: chapter 09's "optimizer states" bar had chapter 10's "gradients" colour (colours followed the order
    the lines appeared in each plan)."""
    def colours(p) -> dict[str, tuple]:
        fig = plan_figure(p, "t")
        legend = fig.legends[0]
        found = {t.get_text(): tuple(h.get_facecolor()) for t, h in zip(legend.get_texts(), legend.legend_handles,
                                                                         strict=True)}
        plt.close(fig)
        return found

    from utils.ledger.architectures import shape_of_model

    # chapter 09's planner and chapter 10's layout panel, as they first open
    single = colours(plan(shape_of_model("Llama-3-8B", 4096), usable_budget(int(REPORTED_GIB["A10G (24 GB)"] * GIB)),
                          32, allow_lora=True, allow_offload=True, host_bytes=128 * GIB, chunked_loss=1024,
                          capability=(8, 6)))
    sharded = colours(plan(shape_of_model("Llama-2-70B", 4096), usable_budget(80 * GIB), 16, n_gpus=8,
                           allow_lora=False, allow_offload=False, host_bytes=128 * GIB, capability=(9, 0)))
    shared = set(single) & set(sharded)
    assert {"weights", "gradients", "optimizer states"} <= shared
    assert all(single[k] == sharded[k] for k in shared), {k: (single[k], sharded[k]) for k in shared}
    assert len(set(single.values())) == len(single)  # no two lines of one figure alike
