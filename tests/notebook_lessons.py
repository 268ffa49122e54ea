"""The lesson functions a chapter writes in its notebook, run outside it: the tests that tie a notebook's lesson
code to its packaged twin in utils/ (chapters 09 and 10) exec these beside the package and compare them."""

import ast
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat


def exec_lesson(notebook: Path, names: tuple[str, ...], namespace: dict) -> dict:
    """Exec the top-level functions `names` of `notebook`'s code cells into `namespace` (which holds what they use)
    and return it; fails when the notebook no longer defines one of them."""
    found = {}
    for cell in nbformat.read(notebook, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:  # a cell with IPython magics holds no lesson function
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in names:
                found[node.name] = ast.get_source_segment(cell.source, node)
    assert set(found) == set(names), f"missing in the notebook: {set(names) - set(found)}"
    for source in found.values():
        exec(compile(source, str(notebook), "exec"), namespace)  # noqa: S102
    return namespace


CHAPTER09 = Path(__file__).resolve().parents[1] / "notebooks" / "09_capstone_fit_a_model.ipynb"


def chapter09_panel(plan_figure: Callable[..., Any], show_table: Callable[..., Any]) -> dict:
    """Chapter 09's planner panel function (`plan_report`, with `model_shape` and `MODELS`) exec'd from the notebook
    beside the packaged ledger, with the caller's `plan_figure` and `show_table` (a real drawing, or a stub that
    records): the namespace, whose "plan_report" is the panel's function."""
    from utils.ledger.architectures import ARCHITECTURES, shape_of_model
    from utils.ledger.budget import CAPABILITY, GIB, REPORTED_GIB, usable_budget
    from utils.ledger.gpt import PRESETS
    from utils.ledger.plan import costs_table, plan

    for cell in nbformat.read(CHAPTER09, as_version=4).cells:
        if cell.cell_type == "code" and "def plan_report" in cell.source:
            tree = ast.parse(cell.source)
            functions = ("model_shape", "plan_report")
            wanted = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in functions
                      or isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "MODELS" for t in n.targets)]
            namespace = {"plan": plan, "PRESETS": PRESETS, "ARCHITECTURES": ARCHITECTURES, "GPU_CAPABILITY": CAPABILITY,
                         "shape_of_model": shape_of_model, "usable_budget": usable_budget,
                         "REPORTED_GIB": REPORTED_GIB, "GIB": GIB, "plan_figure": plan_figure,
                         "costs_table": costs_table, "show_table": show_table}
            exec(compile("\n\n".join(ast.get_source_segment(cell.source, n) for n in wanted), str(CHAPTER09), "exec"),
                 namespace)  # noqa: S102
            return namespace
    raise AssertionError("no plan_report in chapter 09")


def folded_answer(notebook: Path, start: str) -> str:
    """The answer, in the chapter's folded "Answers" block, of the exercise whose question contains `start`."""
    text = next(src for src in ("".join(c.source) for c in nbformat.read(notebook, as_version=4).cells)
                if "## Exercises" in src)
    exercises = text[text.index("## Exercises"):]
    number = re.findall(r"\n(\d+)\. ", exercises[:exercises.index(start)])[-1]
    fold = exercises[exercises.index("<summary>Answers</summary>"):exercises.index("</details>")]
    return re.split(r"\n\n(?=\d+\. )", fold.split(f"\n\n{number}. ", 1)[1])[0]


def gated_mlp(d: int, residual: bool = False) -> Any:
    """Llama's MLP without its norm, w2(silu(w1(x)) * w3(x)) with hidden width 4d and no biases (plus x when
    `residual`): the module chapter 00's exercise 2 and chapter 05's exercise 2 ask about."""
    import torch
    from torch import nn

    class GatedMLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w1, self.w3 = nn.Linear(d, 4 * d, bias=False), nn.Linear(d, 4 * d, bias=False)
            self.w2 = nn.Linear(4 * d, d, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))
            return x + out if residual else out

    return GatedMLP()
