"""Issue 34: the grading kernel only produces answers; the grader compares them in its own process.

- every exercise passes when its solution's answers are recorded (as the grading kernel does) and the checks are
  replayed on them (as the grader's process does); those whose checks judge what the code does to the objects it is
  handed (SCENES) send the outcome of a scene (utils.course.scenes) run in the answer process;
- a scene module holds no reference and imports no check module;
- the answers travel as plain data (utils/course/checks/wire.py), never as the learner's objects;
- the sealed check module a grading kernel imports holds no reference, and the helpers a lab hands out still work;
- a verdict renders in the notebook's font, wrapped between words.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from utils.course.checks import wire
from utils.course.grade import answers_sent, combine, lab_check_imports
from utils.course.labs import LABS_DIR, hidden_path, lab_exercises, read_notebook
from utils.course.labs import course_metadata as _course

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from lab_helpers import solution_namespace  # noqa: E402


def _runner():
    spec = importlib.util.spec_from_file_location("_runner_under_test", ROOT / "grading" / "runner.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _record_and_replay(runner, ns: dict, exercise, hidden: str | None, modules: tuple) -> tuple[dict, dict, dict]:
    """The kernel's run with recorders (its verdict), the grader's replay on what it sent (its verdict), and the
    records. As in grading: an answer process forked before the check runs answers the learner's calls and scenes."""
    sent: list[dict] = []
    answers = runner.AnswerProcess(runner._learner_functions(ns, exercise.check), None)
    recorder = runner.Recorder(exercise.id, "n", "m", sent.append, answers)
    try:
        kernel = runner.evaluate(dict(ns), exercise.id, exercise.points, exercise.check, hidden, None,
                                 on_part=recorder.on_part, prepare=recorder.prepare)
        recorder.flush()
    finally:
        answers.close()
    # as the grader reads them: from the executed notebook, JSON objects as nbformat's NotebookNode
    outputs = [nbformat.from_dict({"data": {"application/vnd.gpu-memory-course.check+json": json.loads(json.dumps(m))}})
               for m in sent]
    spec, records = answers_sent(outputs, exercise.id, "n")
    return kernel, runner.replay(exercise.id, exercise.points, exercise.check, hidden, spec or {}, records,
                                 modules), records


# The exercises whose checks judge what the learner's code does to the objects it is handed (a model's gradients, a
# scaler's state, the trials of a search, a run's peak): each observes a scene (utils.course.checks.core.observe).
SCENES = ("1.5", "3.2", "3.4", "4.3", "5.1", "5.4", "5.6", "6.1", "6.3", "6.5", "7.3", "7.4", "7.5", "9.3", "9.5")
# Every exercise's solution earning full marks through the replay is proven end to end by
# tests/test_grade.py::test_every_solution_earns_full_marks_and_every_lab_none; REPLAY_ALL=1 runs it here, in-process.
ALL = __import__("os").environ.get("REPLAY_ALL") == "1"
LABS = sorted(p.name for p in LABS_DIR.glob("lab*.ipynb")
              if ALL or any(e.startswith(f"{int(p.name[3:5])}.") for e in SCENES))


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("lab", LABS, ids=lambda n: n[3:5])
def test_a_scene_exercise_is_judged_in_the_graders_process(lab: str, monkeypatch) -> None:
    """Each SCENES exercise's solution passes in the kernel and in the grader's replay on the outcomes its scenes
    sent (so no verdict of the kernel's decides it), and it did send scenes; with REPLAY_ALL=1, every other
    exercise's solution also passes the replay."""
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    runner = _runner()
    nb = read_notebook(LABS_DIR / lab)
    name = _course(nb)["lab"]
    hidden = hidden_path(name)
    ns = solution_namespace(lab)
    for exercise in lab_exercises(nb, name):
        if exercise.by_hand or not (ALL or exercise.id in SCENES):
            continue
        kernel, replayed, records = _record_and_replay(runner, ns, exercise, str(hidden) if hidden.exists() else None,
                                                       tuple(lab_check_imports(nb)))
        assert kernel["status"] == "passed", (exercise.id, kernel["message"])
        assert replayed["status"] == "passed", (exercise.id, replayed["message"])
        assert combine(kernel, replayed, exercise.points)["points"] == exercise.points
        scenes = {item["scene"] for items in records.values() for item in items if "scene" in item}
        assert bool(scenes) == (exercise.id in SCENES), (exercise.id, scenes)


_KEPT: list = []  # what the wrong answers below leave alive


def _leaves_a_gradient(right):
    def wrong(model, opt, batches):
        history = right(model, opt, batches)
        model(batches[0][0]).sum().backward()  # a .grad left on every parameter
        return history
    return wrong


def _leaves_a_hook(right):
    def wrong(model, opt, batches):
        got = right(model, opt, batches)
        model[0].register_forward_hook(lambda *_: None)  # a hook left on the model
        return got
    return wrong


def _keeps_a_graph(right):
    def wrong(model, train, val, steps):
        losses = right(model, train, val, steps)
        _KEPT.append(model(*val))  # a validation loss kept with its graph
        return losses
    return wrong


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("exercise, lab, name, spoil", [
    ("1.5", "lab01_where_the_memory_goes.ipynb", "train_with_validation", _keeps_a_graph),
    ("7.3", "lab07_memory_profiling.ipynb", "train_and_log", _leaves_a_gradient),
    ("7.5", "lab07_memory_profiling.ipynb", "train_with_features", _leaves_a_hook)])
def test_what_a_loop_leaves_alive_is_judged_in_the_graders_process(exercise, lab, name, spoil, monkeypatch) -> None:
    """A loop that logs the right floats but leaves a graph, a gradient or a hook alive fails when graded: the
    check reads what the loop left on the objects it was handed, so the scene reads it where the loop ran (these
    three once replayed on returned values alone, and passed)."""
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    runner = _runner()
    nb = read_notebook(next(LABS_DIR.glob(lab.replace(".ipynb", "*.ipynb"))))
    hidden = hidden_path(_course(nb)["lab"])
    ns = solution_namespace(lab)
    ns[name] = spoil(ns[name])
    found = next(e for e in lab_exercises(nb, _course(nb)["lab"]) if e.id == exercise)
    kernel, replayed, _ = _record_and_replay(runner, ns, found, str(hidden), tuple(lab_check_imports(nb)))
    assert kernel["status"] == "failed" and replayed["status"] == "failed", (kernel["message"], replayed["message"])
    assert combine(kernel, replayed, found.points)["points"] == 0


def _blind_decoder(blocks, x, memory, pad_mask):
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):  # hides what is saved from the meter
        for block in blocks:
            x = block(x, memory, pad_mask=pad_mask)
    return x


def _blind_block(block, x):
    torch._C._autograd._push_saved_tensors_default_hooks(lambda t: t, lambda t: t)
    try:
        return block(x)
    finally:
        torch._C._autograd._pop_saved_tensors_default_hooks()


class _OwnHooks(torch.autograd.graph.saved_tensors_hooks):
    pass


def _blind_vit(vit, images):
    with _OwnHooks(lambda t: t, lambda t: t):
        return vit(images)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_plain_forward_that_blinds_the_meter_scores_zero(monkeypatch) -> None:
    """Review s15's red team: no checkpoint at all, under the learner's own saved-tensor hook (which takes
    precedence over the meter's, so the meter counts nothing), earned full marks on 5.1, 5.4 and 5.6. A hook set
    by the learner's code (the class, a subclass, or torch's C function) now fails the check; torch's checkpoint
    still sets its own."""
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    runner = _runner()
    nb = read_notebook(next(LABS_DIR.glob("lab05_*.ipynb")))
    name = _course(nb)["lab"]
    ns = {**solution_namespace("lab05_gradient_checkpointing.ipynb"), "checkpoint_decoder": _blind_decoder,
          "checkpointed_forward": _blind_block, "vit_forward": _blind_vit}
    for exercise in (e for e in lab_exercises(nb, name) if e.id in ("5.1", "5.4", "5.6")):
        kernel, replayed, _ = _record_and_replay(runner, ns, exercise, str(hidden_path(name)),
                                                 tuple(lab_check_imports(nb)))
        assert "from your code" in kernel["message"], (exercise.id, kernel["message"])
        assert combine(kernel, replayed, exercise.points)["points"] == 0


def _hidden_big_forward(model, micro_batches):
    """6.1 without accumulation: one forward of the whole batch with the embedding's hooks taken off, then a 1-row
    forward for a counter to see (review s15's red team, A3)."""
    import torch.nn.functional as F

    emb = model.get_input_embeddings()
    hooks = dict(emb._forward_hooks)
    emb._forward_hooks.clear()
    try:
        batch = {key: torch.cat([mb[key] for mb in micro_batches]) for key in micro_batches[0]}
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        t = batch["labels"][:, 1:]
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), t.flatten(), ignore_index=-100, label_smoothing=0.1,
                               reduction="sum")
        (loss / (t != -100).sum()).backward()
    finally:
        emb._forward_hooks.update(hooks)
    with torch.no_grad():
        emb(micro_batches[0]["input_ids"][:1])


def _forward_by_method(model, micro_batches, weights):
    """6.5 without accumulation, the first layer run by `.forward` (no hooks), then each micro-batch through it for
    the counters (review s15's second red team, V3)."""
    x, y = torch.cat([x for x, _ in micro_batches]), torch.cat([y for _, y in micro_batches])
    torch.nn.functional.cross_entropy(model[1:](model[0].forward(x)), y, weight=weights, ignore_index=-100).backward()
    with torch.no_grad():
        for xb, _ in micro_batches:
            model[0](xb)


def _one_big_batch(model, micro_batches, weights):
    """6.5 without accumulation: the big-batch backward itself (A4)."""
    x, y = torch.cat([x for x, _ in micro_batches]), torch.cat([y for _, y in micro_batches])
    torch.nn.functional.cross_entropy(model(x), y, weight=weights, ignore_index=-100).backward()


class _LazyGradScaler:
    """3.2 answered by torch.amp.GradScaler behind the exercise's interface (the check's own reference wrapper),
    built after the factory returns, at the scene's first use (A5)."""

    def __init__(self, kw):
        self.kw, self.made = kw, None

    def __getattr__(self, name):
        from utils.course.checks.ch03 import _GradScalerReference

        self.made = self.made or _GradScalerReference(**self.kw)
        return getattr(self.made, name)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("exercise, lab, name, cheat", [
    ("6.1", "lab06_gradient_accumulation.ipynb", "accumulate", _hidden_big_forward),
    ("6.5", "lab06_gradient_accumulation.ipynb", "accumulate_weighted", _one_big_batch),
    ("6.5", "lab06_gradient_accumulation.ipynb", "accumulate_weighted", _forward_by_method),
    ("3.2", "lab03_loss_scaling.ipynb", "Scaler", lambda **kw: _LazyGradScaler(kw))])
def test_a_counter_taken_off_or_a_library_behind_a_factory_scores_zero(exercise, lab, name, cheat,
                                                                        monkeypatch) -> None:
    """Review s15's red team: a forward the counter did not see (6.1), no accumulation at all (6.5), and
    torch.amp.GradScaler built after a factory function returned (3.2) each earned full marks; each scores 0."""
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    runner = _runner()
    nb = read_notebook(next(LABS_DIR.glob(lab.replace(".ipynb", "*.ipynb"))))
    name_of_lab = _course(nb)["lab"]
    ns = {**solution_namespace(lab), name: cheat}
    found = next(e for e in lab_exercises(nb, name_of_lab) if e.id == exercise)
    kernel, replayed, _ = _record_and_replay(runner, ns, found, str(hidden_path(name_of_lab)),
                                             tuple(lab_check_imports(nb)))
    assert combine(kernel, replayed, found.points)["points"] == 0, (kernel["message"], replayed["message"])


def _unmetered(right):
    def wrong(*args):
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():  # the peak meter (a dispatch mode) sees nothing of the run
            return right(*args)
    return wrong


def _popped(right):
    def wrong(*args):
        meter = torch._C._pop_torch_dispatch_stack(None)  # torch's C function under _disable_current_modes (V2)
        try:
            return right(*args)
        finally:
            torch._C._push_on_torch_dispatch_stack(meter)
    return wrong


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("exercise, name, hide, named", [
    ("9.3", "finetune", _unmetered, "_disable_current_modes"), ("9.5", "chunked_loss", _unmetered,
                                                                 "_disable_current_modes"),
    ("9.5", "chunked_loss", _popped, "_pop_torch_dispatch_stack")])
def test_a_run_hidden_from_the_peak_meter_scores_zero(exercise, name, hide, named, monkeypatch) -> None:
    """Review s15's red team, A2: the colleague's buggy script (9.3) and the full loss (9.5), run with torch's
    dispatch modes switched off so that the scene's peak meter saw nothing, earned full marks; switching the modes
    off from the learner's code now fails the check."""
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    runner = _runner()
    nb = read_notebook(next(LABS_DIR.glob("lab09_*.ipynb")))
    lab = _course(nb)["lab"]
    ns = solution_namespace("lab09_capstone_fit_a_model.ipynb")
    ns[name] = hide(ns[name])
    found = next(e for e in lab_exercises(nb, lab) if e.id == exercise)
    kernel, replayed, _ = _record_and_replay(runner, ns, found, str(hidden_path(lab)), tuple(lab_check_imports(nb)))
    assert f"{named} from your code" in kernel["message"], kernel["message"]
    assert combine(kernel, replayed, found.points)["points"] == 0


def test_a_scene_module_holds_no_reference_and_imports_no_check() -> None:
    """What runs beside the learner's code while grading (utils/course/scenes/) names no reference, truth or
    expected value, and imports nothing from the check modules (which would bring them into that process)."""
    import ast

    folder = ROOT / "utils" / "course" / "scenes"
    modules = sorted(folder.glob("ch*.py"))
    assert modules
    for path in modules:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)] + [
            a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        assert not [m for m in imported if m and m.startswith(("utils.course.checks", "grading"))], (path, imported)
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
            n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        suspect = [n for n in names if "truth" in n.lower() or n.lower().startswith(("reference", "expect", "check_"))]
        assert not suspect, (path, suspect)


def test_combine_takes_the_lower_of_kernel_and_grader() -> None:
    passed = {"status": "passed", "points": 1.0, "message": ""}
    failed = {"status": "failed", "points": 0.0, "message": "expected 3, got 4"}
    kernel = {"status": "passed", "points": 2.0, "public": passed, "hidden": passed, "hidden_max": 1.0, "message": ""}
    assert combine(kernel, {"public": passed, "hidden": failed}, 2.0)["points"] == 1.0
    assert combine({**kernel, "hidden": failed}, {"public": passed, "hidden": passed}, 2.0)["points"] == 1.0
    assert combine({**kernel, "void": True}, {"public": passed, "hidden": passed}, 2.0)["points"] == 0.0
    assert combine({**kernel, "status": "over memory cap", "points": 0.0}, {"public": passed}, 2.0)["points"] == 0.0


def test_answers_sent_keep_the_first_message_for_each_place() -> None:
    mime = "application/vnd.gpu-memory-course.check+json"
    real = {"kind": "records", "exercise": "7.1", "nonce": "n", "part": "public", "arg": "0", "start": 0,
            "items": [{"value": 1}]}
    forged = {**real, "items": [{"value": 99}]}
    later = {**real, "start": 1, "items": [{"value": 2}]}
    other_run = {**later, "nonce": "x", "start": 2}
    spec, records = answers_sent([{"data": {mime: m}} for m in (real, forged, later, other_run)], "7.1", "n")
    assert records[("public", "0")] == [{"value": 1}, {"value": 2}] and spec is None


@pytest.mark.parametrize("value", [None, ..., True, 3, 2**70, -0.0, math.inf, "x", [1, (2, 3)], {"a": {4: 5.5}},
                                   torch.float16, torch.Size([2, 3]), torch.arange(6).reshape(2, 3).t(),
                                   torch.tensor(2.5, dtype=torch.bfloat16), torch.zeros(0, 4)])
def test_plain_answers_travel_unchanged(value) -> None:
    back = wire.decode(nbformat.from_dict({"v": json.loads(json.dumps(wire.encode(value)))})["v"])
    if isinstance(value, torch.Tensor):
        assert back.dtype == value.dtype and torch.equal(back, value)
    else:
        assert back == value and type(back) is type(value)


def test_an_object_of_the_learners_is_not_an_answer() -> None:
    from utils.course.checks.core import CheckFailed, expect_equal

    class Yes:
        def __eq__(self, other: object) -> bool:
            return True

        __ne__ = lambda self, other: False  # noqa: E731

    with pytest.raises(wire.Unplain):
        wire.encode(Yes())
    with pytest.raises(CheckFailed, match="plain data"):
        expect_equal(Yes(), 3, "the bytes")
    with pytest.raises(ValueError):
        wire.decode({"dataclass": "os:system", "fields": []})  # only the course's own value classes are built


def test_the_sealed_module_holds_no_reference() -> None:
    from utils.course.checks import ch03, ch05, ch07

    runner = _runner()
    imports = lab_check_imports(read_notebook(next(LABS_DIR.glob("lab07_*.ipynb"))))
    sealed = runner.sealed_module(ch07, imports["utils.course.checks.ch07"])
    assert set(sealed.check_read_run.__globals__) == {"__builtins__"}
    assert "run_truth" not in vars(sealed) and "reference_kept_loss_bytes" not in vars(sealed)
    trainer = sealed.BudgetedTrainer
    reachable = {n for f in vars(trainer).values() if hasattr(f, "__globals__") for n in f.__globals__}
    assert not {n for n in reachable if "truth" in n or n.startswith(("reference", "check_", "expect_"))}, reachable
    loss, _ = sealed.llama_kept_loss({"vocab": 50, "d_model": 16, "n_layer": 1, "n_head": 2, "n_kv_head": 1,
                                      "ffn_hidden": 24}, 6)
    assert loss.requires_grad  # a handed-out helper still works
    stack = runner.sealed_module(ch05, ["make_stack", "check_schedule"]).make_stack(2, 8)
    assert len(stack) == 2
    counts = runner.sealed_module(ch03, ["binade_counts", "LLAMA8B_LAYERS"])
    assert counts.binade_counts(counts.LLAMA8B_LAYERS, -40, 8).shape[1] == 8


def test_a_verdict_renders_in_the_notebooks_font_wrapped_between_words() -> None:
    from utils.course.checks.core import Verdict

    page = Verdict("3.3", "failed", "expected scale_window(lo=-64, holds=3) = 12, got 13", 0.0, 2.0).html()
    assert "<pre" not in page and "monospace" not in page and "pre-wrap" not in page
    assert "word-break:normal" in page and "overflow-wrap:break-word" in page and "font-family:inherit" in page
    assert "NOT YET" in page and "lo=-64, holds=3" in page


def test_a_prediction_left_as_handed_out_replays_as_not_attempted(monkeypatch) -> None:
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    spec = {"0": {"value": wire.encode(...)}, "1": {"value": wire.encode(...)}, "2": {"function": True}}
    verdict = _runner().replay("0.4", 2.0, "check_new_storage_bytes(prediction, reasoning, new_storage_bytes)", None,
                               spec, {("public", "2"): [{"raised": "NotImplementedError", "message": "0.4"}] * 9},
                               ("utils.course.checks.warmup",))
    assert verdict["status"] == "not attempted", verdict
    assert "is still `...`" in verdict["message"] or "NotImplementedError" in verdict["message"], verdict
