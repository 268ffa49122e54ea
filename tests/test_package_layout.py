"""The package's shape (issue 38): its import graph has no cycle, and the ledger (utils/ledger/, the arithmetic of
what a training step keeps) imports no torch and nothing above it, so it runs where torch cannot (the course
website's planner page runs it in the reader's browser) and the estimator and the chapters build on it.

The graph counts every import, function-level ones included: those hid the cycle estimate -> plan -> architectures
-> estimate before."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
UTILS = ROOT / "utils"
# What the ledger may import besides the standard library and itself: the argument checks, which import torch only
# to check a tensor (inside that one function).
LEDGER_MAY_IMPORT = {"utils.validate"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(UTILS.rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of the package that `path` imports, anywhere in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in modules else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {m for m in _imports(path, modules) if m in modules and m != name} for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of `graph` (module names, the first repeated at the end), or [] if there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return []

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_of_the_package_is_acyclic() -> None:
    graph = _graph()
    assert len(graph) > 40 and "utils.ledger.plan" in graph
    cycle = _cycle(graph)
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_the_package_lists_its_two_halves_and_their_base_and_nothing_else() -> None:
    """A newcomer reading utils/ sees where a lesson's twin lives (lessons/), where grading lives (course/), the
    torch-free ledger and the shared argument checks; no module is left at the top."""
    top = sorted(p.name for p in UTILS.iterdir() if p.name != "__pycache__")
    assert top == ["__init__.py", "course", "ledger", "lessons", "validate.py"], top
    for package in ("course", "ledger", "lessons"):
        doc = ast.get_docstring(ast.parse((UTILS / package / "__init__.py").read_text()))
        assert doc and len(doc.split()) > 30, f"utils/{package}/__init__.py should say what the package is for"
    for path in sorted(UTILS.rglob("*.py")):
        if path.name != "__init__.py" or path.parent != UTILS:
            assert ast.get_docstring(ast.parse(path.read_text())) or path.stat().st_size == 0, \
                f"{path.relative_to(ROOT)} opens with no docstring saying what it is for"


def test_the_learners_library_never_imports_the_course_machinery() -> None:
    graph = _graph()
    crossing = [(m, d) for m, deps in graph.items() if m.startswith("utils.lessons") for d in deps
                if d.startswith("utils.course")]
    assert not crossing, f"utils.lessons imports utils.course: {crossing}"


def test_the_ledger_imports_only_the_standard_library_and_itself() -> None:
    modules = _modules()
    ledger = [name for name in modules if name.startswith("utils.ledger")]
    assert {"utils.ledger.plan", "utils.ledger.gpt", "utils.ledger.architectures", "utils.ledger.budget"} <= set(ledger)
    for name in ledger:
        for imported in _imports(modules[name], modules):
            top = imported.split(".")[0]
            allowed = (top in sys.stdlib_module_names or imported.startswith("utils.ledger")
                       or imported in LEDGER_MAY_IMPORT or top == "__future__")
            assert allowed, f"{name} imports {imported}: the ledger imports the standard library and itself only"


@pytest.mark.parametrize("blocked", [("torch", "numpy", "matplotlib", "IPython", "ipywidgets")])
def test_the_ledger_plans_where_torch_cannot_be_imported(blocked: tuple[str, ...]) -> None:
    """Imported and run in a Python where importing torch (and numpy, matplotlib, IPython) fails: a plan for a
    preset and for a real architecture, with its figure's numbers."""
    code = f"""
import sys
for name in {blocked!r}:
    sys.modules[name] = None  # `import torch` now raises ImportError
import utils.ledger.plan as planner
from utils.ledger.architectures import shape_of_model
from utils.ledger.budget import gpu_budget
from utils.ledger.gpt import PRESETS
for shape in (PRESETS["7B"], shape_of_model("Llama-3-8B", 4096)):
    p = planner.plan(shape, gpu_budget("A100 80GB"), 8)
    bars = planner.figure_bars(p)
    assert p.fits and bars["steps"] and bars["budget_gib"] > 0, p.describe()
print(sorted(m for m in sys.modules if m.split(".")[0] in {blocked!r} and sys.modules[m] is not None))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_one_call_of_the_ledger_validates_its_arguments_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """`memory_of(shape, choice)` checks its two arguments at the boundary, and nothing below it checks again (the
    Choice checked its own fields when it was made); before, one call ran over a hundred checks, nine layers deep."""
    import importlib

    import utils.validate as validate
    from utils.ledger.architectures import shape_of_model
    from utils.ledger.gpt import PRESETS
    from utils.ledger.plan import Choice, memory_of

    calls: list[tuple[str, str]] = []

    def counting(name: str) -> Any:
        check = getattr(validate, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            calls.append((name, args[0]))
            return check(*args, **kwargs)

        return counted

    for module in ("gpt", "architectures", "plan", "setups", "budget", "parallel"):
        mod = importlib.import_module(f"utils.ledger.{module}")
        for name in ("check_int", "check_choice", "check_instance", "check_bool", "check_number"):
            if hasattr(mod, name):
                monkeypatch.setattr(mod, name, counting(name))
    choices = [Choice(precision=p, checkpointing=ck, micro_batch=2, optimizer=o)
               for p in ("fp32", "bf16-mixed", "bf16") for ck in (False, True) for o in ("adamw", "adamw8bit")]
    choices += [Choice(precision="bf16", lora_rank=16, quantize_base=True), Choice(sharding="zero3", n_gpus=8),
                Choice(precision="bf16-mixed", offload_optimizer=True), Choice(tensor_parallel=2, pipeline_stages=2)]
    for shape in (PRESETS["7B"], shape_of_model("Llama-3-8B", 4096)):
        for choice in choices:
            calls.clear()
            memory_of(shape, choice)
            assert calls == [("check_instance", "shape"), ("check_instance", "choice")], (choice.describe(), calls)
