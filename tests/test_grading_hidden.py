"""The held-out cases (grading/hidden/chNN.py) and the grader's runner: their shape, their isolation from the
learner's side, and the memory cap, in this process (no kernels)."""

import ast
import importlib.util
import re
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from utils.course.checks.core import _run_check as run_check
from utils.course.labs import hidden_exercises, lab_exercises, read_notebook

ROOT = Path(__file__).resolve().parent.parent
HIDDEN = sorted((ROOT / "grading" / "hidden").glob("ch*.py"))


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"_test_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    return module


def lab_for(path: Path) -> Path:
    number = path.stem.removeprefix("ch")
    matches = sorted((ROOT / "solutions").glob(f"lab{number}_*.ipynb"))
    assert len(matches) == 1, f"{path.name}: no solution notebook {number}_*.ipynb"
    return matches[0]


@pytest.mark.parametrize("path", HIDDEN, ids=[p.stem for p in HIDDEN])
def test_each_hidden_file_maps_checked_exercises_to_functions(path):
    module = load(path)
    assert isinstance(module.HIDDEN, dict) and module.HIDDEN, f"{path.name}: HIDDEN must be a non-empty dict"
    solution = lab_for(path)
    checked = {e.id for e in lab_exercises(read_notebook(solution), solution.stem) if not e.by_hand}
    assert set(module.HIDDEN) <= checked, f"{path.name}: no checked exercise {set(module.HIDDEN) - checked}"
    assert all(callable(f) for f in module.HIDDEN.values())
    # the guide reads the ids statically: HIDDEN must be a dict literal with string keys
    assert hidden_exercises(solution.stem) == set(module.HIDDEN), f"{path.name}: write HIDDEN as a dict literal"


def test_nothing_on_the_learners_side_imports_the_hidden_cases():
    assert not (ROOT / "grading" / "__init__.py").exists() and not (ROOT / "grading" / "hidden" / "__init__.py"
                                                                     ).exists()
    pattern = re.compile(r"^\s*(from|import)\s+grading\b|grading[/.]hidden", re.M)
    for path in sorted((ROOT / "labs").glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            assert not pattern.search(cell.source), f"{path.name} refers to the hidden cases"
    for path in sorted((ROOT / "utils").rglob("*.py")):
        tree = ast.parse(path.read_text())
        imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
        for node in imports:
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            assert not any(n == "grading" or n.startswith("grading.") for n in names), f"{path} imports grading"


def test_the_lab_00_solution_passes_its_held_out_cases_and_a_tuned_answer_does_not():
    hidden = load(ROOT / "grading" / "hidden" / "ch00.py").HIDDEN

    def right(fn, x):
        y = fn(x)
        return 0 if y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr() else y.untyped_storage().nbytes()

    def tuned(fn, x):
        y = fn(x)
        return 0 if y.data_ptr() == x.data_ptr() else y.numel() * y.element_size()

    assert run_check("0.4", lambda: hidden["0.4"](1, "r", right), 1.0).status == "passed"
    verdict = run_check("0.4", lambda: hidden["0.4"](1, "r", tuned), 1.0)
    assert verdict.status == "failed" and "lambda t: t[1:]" in verdict.message


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="address-space caps need Linux /proc")
def test_the_memory_cap_stops_a_big_allocation_and_is_lifted_after():
    import resource

    runner = load(ROOT / "grading" / "runner.py")
    before = resource.getrlimit(resource.RLIMIT_AS)
    with runner.memory_cap(64) as cap:
        assert isinstance(cap, int) and cap < runner.vm_size_bytes() + 65 * 2**20
        small = torch.zeros(1024, 1024)  # 4 MiB: fits
        with pytest.raises(RuntimeError, match="allocate"):
            torch.empty(2**28)  # 1 GiB of address space: over the cap
        with pytest.raises(MemoryError):
            bytearray(2**30)
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    assert small.numel() == 2**20 and torch.empty(2**28).numel() == 2**28  # lifted: address space only


def test_the_runner_scores_public_and_held_out_halves(monkeypatch):
    """evaluate() in this process, with a namespace standing in for the learner's kernel."""
    runner = load(ROOT / "grading" / "runner.py")
    hidden = str(ROOT / "grading" / "hidden" / "ch00.py")
    from utils.course.checks.warmup import check_format_bytes

    def good(n):
        value, unit = n, 0
        while value >= 1024 and unit < 4:
            value, unit = value / 1024, unit + 1
        return f"{n} B" if unit == 0 else f"{value:.2f} {['B', 'KiB', 'MiB', 'GiB', 'TiB'][unit]}"

    def strict(n):  # > where >= belongs: passes the public cases only
        value, unit = n, 0
        while value > 1024 and unit < 4:
            value, unit = value / 1024, unit + 1
        return f"{n} B" if unit == 0 else f"{value:.2f} {['B', 'KiB', 'MiB', 'GiB', 'TiB'][unit]}"

    for fn, points, status in [(good, 2.0, "passed"), (strict, 1.0, "partial")]:
        namespace = {"check_format_bytes": check_format_bytes, "format_bytes": fn}
        verdict = runner.evaluate(namespace, "0.3", 2.0, "check_format_bytes(format_bytes)", hidden, None)
        assert (verdict["points"], verdict["status"], verdict["hidden_max"]) == (points, status, 1.0), verdict
    namespace = {"check_format_bytes": check_format_bytes}
    verdict = runner.evaluate(namespace, "0.3", 2.0, "check_format_bytes(format_bytes)", hidden, None)
    assert verdict["status"] == "error" and "NameError" in verdict["message"]
    verdict = runner.evaluate({}, "0.3", 2.0, "x = 1", hidden, None)
    assert verdict["status"] == "error" and "grader setup failed" in verdict["message"]
