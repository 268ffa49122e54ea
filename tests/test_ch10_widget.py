"""Chapter 10's layout panel: its function runs for every model and layout it offers, lays the layout's GPUs out as
the caption says, and stands beside its controls (the chapter's panel, like chapter 09's, fits a 1,400 x 900 window)."""

import ast
from pathlib import Path

import matplotlib.pyplot as plt
import nbformat
import pytest

from utils.ledger.architectures import ARCHITECTURES, shape_of_model
from utils.ledger.budget import GIB, REPORTED_GIB, usable_budget
from utils.ledger.gpt import PRESETS
from utils.ledger.plan import costs_table, plan
from utils.lessons.plan_runs import plan_figure
from utils.lessons.tables import format_table

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "10_beyond_one_gpu.ipynb"


@pytest.fixture(scope="module")
def panel_source():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    return next(c.source for c in nb.cells if c.cell_type == "code" and "def layout_report" in c.source)


@pytest.fixture(scope="module")
def layout_report(panel_source):
    tree = ast.parse(panel_source)
    functions = ("model_shape", "layout_plan", "layout_report")
    wanted = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in functions
              or isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "MODELS" for t in n.targets)]
    namespace = {"plan": plan, "PRESETS": PRESETS, "ARCHITECTURES": ARCHITECTURES, "shape_of_model": shape_of_model,
                 "usable_budget": usable_budget, "REPORTED_GIB": REPORTED_GIB, "GIB": GIB, "plan_figure": plan_figure,
                 "costs_table": costs_table, "show_table": lambda rows, headers: print(format_table(rows, headers))}
    exec(compile("\n\n".join(ast.get_source_segment(panel_source, n) for n in wanted), str(NOTEBOOK), "exec"),
         namespace)
    return namespace["layout_report"]


@pytest.mark.parametrize("model", [*ARCHITECTURES, "GPT 7B (stand-in)"])
@pytest.mark.parametrize("t, p", [(1, 1), (8, 1), (4, 4)])
def test_the_panel_lays_out_every_model(layout_report, model, t, p, capsys):
    fig = layout_report(model, 4096, "H100 (80 GB)", 16, 2, t, p, False)
    plt.close(fig)
    out = capsys.readouterr().out
    assert f"{2 * t * p} GPUs (2 replicas x t {t} x p {p})" in out and "| cost" in out


def test_the_panel_stands_beside_its_controls_and_opens_on_llama_2_70b(panel_source, layout_report, capsys):
    assert "beside=True" in panel_source and '"Llama-2-70B"' in panel_source
    fig = layout_report("Llama-2-70B", 4096, "H100 (80 GB)", 16, 1, 8, 1, False)
    width, height = fig.get_size_inches() * 100
    plt.close(fig)
    assert 270 + width < 1100 and height + 300 < 720
    assert "does NOT fit" in capsys.readouterr().out


@pytest.mark.parametrize("layout", [("Llama-2-70B", 4096, "H100 (80 GB)", 16, 1, 8, 1, False),
                                    ("Llama-3-8B", 4096, "A10G (24 GB)", 32, 6, 1, 1, False),
                                    ("Llama-3-8B", 2048, "T4 (16 GB)", 8, 1, 1, 1, True)])
def test_the_panel_reports_the_plan_of_layout_plan(layout_report, panel_source, layout, capsys):
    """The figures chapter 10 prints beside the panel come from `layout_plan`, the function the panel's report calls:
    the report's caption is that plan's."""
    layout_plan = layout_report.__globals__["layout_plan"]
    p = layout_plan(*layout)
    plt.close(layout_report(*layout))
    assert f"{p.choice.describe()}: {p.total / GIB:.1f} of {p.budget / GIB:.1f} GiB per GPU" in capsys.readouterr().out
    assert "p = layout_plan(model, seq_len, gpu," in panel_source
