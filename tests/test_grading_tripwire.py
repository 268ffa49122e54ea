"""Review 34c, A8/A13/A14: a learner's cell that replaces a function the grader's verdict passes through (the review
replaced `IPython.display.display` and turned every kernel verdict into "passed") leaves the grader's cell with
no verdict (0 points). The seal takes a fingerprint before the learner's first cell; each grader cell names what the
learner's code replaced or added since.
Fast: grading/runner.py's fingerprint in this process, with a stand-in seal (the full grading run of such a
submission: test_a_replaced_display_voids_every_verdict, below)."""

from __future__ import annotations

import csv
import functools
import importlib.util
import json
import subprocess
import sys
import weakref

import IPython.display
import nbformat
import pytest
import torch

from tests.escapes import DISPLAY_HOOK, IOPUB_HOOK, REGISTER_HOOK
from utils.course.grade import TAMPERED, _replaced
from utils.course.labs import LABS_DIR, REPO_ROOT


@pytest.fixture
def runner():
    spec = importlib.util.spec_from_file_location("_runner_tripwire", REPO_ROOT / "grading" / "runner.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    finder = module._SealFinder({}, module.fingerprint())
    sys.meta_path.insert(0, finder)
    yield module
    sys.meta_path.remove(finder)


def test_nothing_replaced_is_nothing_named(runner):
    assert runner.replaced_since_seal() == []


def test_a_replaced_display_is_named(runner, monkeypatch):
    shown = IPython.display.display

    def forged(*objs, **kwargs):  # review 34c, A8: rewrites each verdict on its way out
        return shown(*objs, **kwargs)

    monkeypatch.setattr(IPython.display, "display", forged)
    assert runner.replaced_since_seal() == ["IPython.display.display"]


@pytest.mark.parametrize("how", ["partial", "class", "code", "method", "mock", "added", "weakref"])
def test_every_way_of_replacing_is_named(runner, monkeypatch, how):
    if how == "mock":  # a library object that answers whatever it is told (review s5: it passed as the library's)
        from unittest import mock

        monkeypatch.setattr(torch, "allclose", mock.MagicMock(return_value=True))
        named = "torch.allclose"
    elif how == "added":  # an attribute the class did not have, shadowing an inherited method (review s5)
        monkeypatch.setattr(torch.Tensor, "allclose", lambda self, *a, **k: True, raising=False)
        named = "torch.Tensor.allclose"
    elif how == "weakref":  # a module a scene measures with (9.3's peak; review s5: not watched)
        monkeypatch.setattr(weakref, "finalize", type("F", (), {"__init__": lambda self, *a, **k: None}))
        named = "weakref.finalize"
    elif how == "partial":  # the learner's function behind a library wrapper
        monkeypatch.setattr(torch, "allclose", functools.partial(lambda *a, **k: True))
        named = "torch.allclose"
    elif how == "class":  # an object of the learner's class
        monkeypatch.setattr(json, "dumps", type("Dumps", (), {"__call__": lambda self, *a, **k: "{}"})())
        named = "json.dumps"
    elif how == "code":  # the same function object running the learner's code
        monkeypatch.setattr(json.dumps, "__code__", (lambda *a, **k: "{}").__code__)
        named = "json.dumps"
    else:  # a class's method
        monkeypatch.setattr(torch.nn.Module, "state_dict", lambda self, *a, **k: {})
        named = "torch.nn.modules.module.Module.state_dict"
    assert named in runner.replaced_since_seal()


def test_a_library_patching_itself_is_not_named(runner, monkeypatch):
    # torch.compile's first call replaces nn.Module.__init__ with a function of torch's own files; ipykernel
    # rebinds builtins.input to a method of its kernel for each cell
    from torch._dynamo.mutation_guard import install_generation_tagging_init

    monkeypatch.setattr(torch.nn.Module, "__init__", torch.nn.Module.__init__)
    monkeypatch.setattr(torch.nn.Module, "__setstate__", torch.nn.Module.__setstate__)
    install_generation_tagging_init()
    monkeypatch.setattr("builtins.input", json.JSONDecoder().decode)
    assert runner.replaced_since_seal() == []


def test_without_the_seal_everything_is_suspect(runner):
    finder = next(f for f in sys.meta_path if type(f).__name__ == "_SealFinder")
    finder.baseline = None
    assert runner.replaced_since_seal() == ["sys.meta_path (the grader's seal)"]


@pytest.mark.parametrize(("verdict", "voided"), [
    ({"replaced": []}, False),
    ({"replaced": ["IPython.display.display"]}, True),
    ({}, True),  # the grader's cell always says; a verdict that does not was not written by it
    ({"replaced": "nothing"}, True),
])
def test_the_graders_process_voids_a_verdict_that_names_a_replacement(verdict, voided):
    assert (_replaced(verdict) is not None) == voided
    assert TAMPERED.endswith("(read the notebook by hand)")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_replaced_display_voids_every_verdict(tmp_path):
    """The review's hook in front of the untouched lab 03: before, 3.2 and 3.4 (judged in the kernel then) earned 2/2
    each for the handed-out buggy code; now every exercise scores 0 and the instructor is told to read the notebook.
    The same for a transform hook registered on the kernel's display publisher, which rewrites the verdict's record
    of what was replaced too (an instance's list: no module or class attribute changes), and for a send_multipart
    set on the kernel's IOPub thread that rewrites and re-signs the wire message (review s5)."""
    for name, cheat in (("display", DISPLAY_HOOK), ("register", REGISTER_HOOK), ("iopub", IOPUB_HOOK)):
        nb = nbformat.read(LABS_DIR / "lab03_loss_scaling.ipynb", as_version=4)
        hook = nbformat.v4.new_code_cell(cheat)
        hook.id = "display-hook"
        nb.cells.insert(1, hook)
        nbformat.write(nb, tmp_path / f"{name}_lab03_loss_scaling.ipynb")
    out = tmp_path / "grades"
    done = subprocess.run([sys.executable, "-m", "utils.course.grade", str(tmp_path), "--jobs", "1", "--time-limit",
                           "240",
                           "--csv-dir", str(out)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=800)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(out / "lab03_loss_scaling.csv", newline="") as f:
        rows = {row["submission"]: row for row in csv.DictReader(f)}
    for name, replaced in (("display", "IPython.display.display"), ("register", "<shell.display_pub>.hooks"),
                           ("iopub", "<iopub thread>.send_multipart")):
        row = rows[f"{name}_lab03_loss_scaling.ipynb"]
        assert row["total"] == "0", (name, row["notes"])
        assert all(row[f"ex 3.{i}"] == "0" for i in range(1, 6)), name
        assert replaced in row["notes"], (name, row["notes"])
        assert "voided exercises 3.1, 3.2, 3.3, 3.4, 3.5" in row["read by hand"], name
