"""Review of issue 34, B1: while the grader runs a check, the learner's function runs where no frame or module
holds the check's expected value or reference. A recorded exercise's call is answered by a fork of the kernel made
before the checks open (plain-data arguments) or by a fork that clears its stack and the check modules first (other
arguments); a scene (a check's scenario run with the learner's code, utils.course.scenes) is answered the same way.
Fast: grading/runner.py's pieces, in this process (the full grading run: tests/test_grade.py)."""

from __future__ import annotations

import importlib.util
import inspect
import os

import pytest
import torch

from utils.course.labs import REPO_ROOT

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the answering processes are forks")


def _runner():
    spec = importlib.util.spec_from_file_location("_course_grading_runner_test", REPO_ROOT / "grading" / "runner.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def peek(*_args):
    """A cheat: the first `want` any frame on the stack holds (None where a frame holds it cleared)."""
    for info in inspect.stack():
        found = inspect.getargvalues(info.frame).locals
        if "want" in found:
            return found["want"]
    return "no want on the stack"


def test_a_recorded_call_is_answered_where_no_expected_value_is():
    runner = _runner()
    answers = runner.AnswerProcess({"0": peek}, None)  # forked now, before any check computes `want`
    try:
        def check():
            want = 1234  # noqa: F841 - what the cheat looks for
            return (answers.ask("0", peek, (1, 2.0), {}),  # plain data: the answer process
                    answers.ask("0", peek, (torch.nn.Linear(1, 1),), {}))  # a model: a fork that clears its stack

        plain, other = check()
    finally:
        answers.close()
    assert plain == {"value": "no want on the stack", "hits": []}
    assert other == {"value": None, "hits": []}  # the frame is there, its `want` is not
    assert peek() == "no want on the stack" and check.__code__.co_varnames == ("want",)


def test_a_forked_call_keeps_what_its_arguments_need_and_reports_the_watch():
    runner = _runner()
    from utils.course.checks.core import CheckFailed, guarded

    scale = 3.0
    double = runner.AnswerProcess({}, None)
    model = torch.nn.Linear(2, 2)

    def forward(x):  # the check's own callable, closing over `model` and `scale`: both stay
        return model(x) * scale

    def answer(fn):
        return fn(torch.ones(1, 2)).sum().item()

    want = answer(forward)
    reply = double.ask("0", answer, (forward,), {})
    assert reply == {"value": want, "hits": []}

    def truth(fn):
        return answer(fn)

    recorder = runner.Recorder("9.9", "nonce", "mime", lambda data: None, double)
    watched = guarded(recorder.wrap("0", lambda fn: truth(fn)), truth)
    with pytest.raises(CheckFailed, match="a call to .*truth"):
        watched(forward)


def _peek_scene(fn, case):
    """A check's scene (utils.course.checks.core.observe): the learner's answer called on the case, and the process
    it ran in."""
    return {"peek": fn(case), "pid": os.getpid()}


def reference(x):
    return 2 * x


class Scaler:
    """A learner's class whose method calls the check's reference."""

    def scaled(self, x):
        return reference(x)


def _class_scene(cls, x):
    return cls().scaled(x)


def test_a_scene_runs_where_no_expected_value_is_and_replays_by_name():
    """A check that judges what the learner's code does observes a scene: it runs in the answer process (a plain
    case) or in a fork that clears the stack (a case that is not plain data: a model), never here, and the
    grader's replay hands the check the recorded outcome of the same scene, refusing another's."""
    runner = _runner()
    from utils.course.checks.core import CheckFailed, observe, own_work

    sent = []
    answers = runner.AnswerProcess({"0": peek, "1": Scaler}, None)
    recorder = runner.Recorder("9.9", "n", "m", sent.append, answers)
    learner, scaler = recorder.wrap("0", peek), recorder.wrap("1", Scaler)
    try:
        def check():
            want = 1234  # noqa: F841 - what the cheat looks for
            return observe(_peek_scene, learner, 1), observe(_peek_scene, learner, torch.nn.Linear(1, 1))

        plain, other = check()
        assert observe(_class_scene, scaler, 1.5) == 3.0  # a class: the scene drives its instances there
        with pytest.raises(CheckFailed, match="a call to reference"), own_work(reference):
            observe(_class_scene, scaler, 1.5)  # the watch covers the whole scene of a class
    finally:
        answers.close()
    assert plain["peek"] == "no want on the stack" and plain["pid"] != os.getpid()
    assert other["peek"] is None and other["pid"] != os.getpid()  # the frame is there, its `want` is not
    recorder.flush()
    items = [i for m in sent if m["arg"] == "0" for i in m["items"]]
    assert [i["scene"] for i in items] == [f"{__name__}:_peek_scene"] * 2
    one = [items[0]]
    verdict = runner.replay("9.9", 1.0, "check_peek_scene(answer)", None, {"0": {"function": True}},
                            {("public", "0"): one}, (__name__,))
    assert verdict["status"] == "passed", verdict
    forged = [{**items[0], "scene": f"{__name__}:_class_scene"}]
    verdict = runner.replay("9.9", 1.0, "check_peek_scene(answer)", None, {"0": {"function": True}},
                            {("public", "0"): forged}, (__name__,))
    assert verdict["status"] != "passed" and "not the one the checks ask for" in verdict["message"], verdict


def check_peek_scene(answer):
    """The replay test's check: the recorded scene must say that no `want` was in reach."""
    from utils.course.checks.core import expect_equal, observe, run_check

    return run_check("9.9", lambda: expect_equal(observe(_peek_scene, answer, 1)["peek"], "no want on the stack",
                                                 "what the answer found"), points=1)


def test_a_message_that_names_out_of_memory_is_not_a_memory_cap():
    """7.4's planted CUDA out-of-memory errors and its message's OutOfMemoryError are not the grader's memory cap."""
    failed = _runner()._alloc_failure
    assert not failed("expected plan_micro_batch(...) with the step raising OutOfMemoryError above batch 7 = (6, 120)")
    assert not failed("your code raised OutOfMemoryError: CUDA out of memory (planted in forward at batch 9)")
    assert failed("your code raised RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate")
    assert failed("your code raised OutOfMemoryError: DefaultCPUAllocator: not enough memory: you tried")
    assert failed("MemoryError")


def test_a_forked_call_clears_a_checks_cells_but_keeps_its_hooks():
    """`want` read in a comprehension is a cell of the check's frame: cleared too; the check's saved-tensor hook,
    active around the call, keeps what it closes over (it counts what the learner's code saves)."""
    runner = _runner()
    answers = runner.AnswerProcess({}, None)

    def answer(x):
        (x * x).sum()
        return peek()

    def check():
        want = 7
        seen = []

        def pack(t):
            seen.append(t.numel())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            reply = answers.ask("0", answer, (torch.ones(3, requires_grad=True),), {})
        return reply, [want + i for i in range(1)]

    reply, kept = check()
    assert reply == {"value": None, "hits": []} and kept == [7]


def test_what_a_call_reaches_is_read_without_running_the_learners_code():
    """Before a fork the kernel still holds the check: reading what the call's arguments reach, or whether they hold
    tensors, must not run a __getattr__ of the learner's (it could read the check's frames)."""
    runner = _runner()
    touched = []

    class Spy:
        def __getattr__(self, name):
            touched.append(name)
            raise AttributeError(name)

        def __call__(self, x):
            return x

    spy = Spy()
    assert id(spy) in runner._reachable((spy, (1,), {}))
    assert not runner._holds_arrays(((spy, 2), {"x": spy}))
    assert touched == []


def _halve(x):
    if x == 3:
        raise ValueError("three")
    return x / 2


def test_a_batch_is_answered_as_its_single_calls_are_and_ends_at_the_first_raise():
    """core.answer_each takes a recorded function's batch to the answer process in one exchange: the same replies,
    in order, as one ask per call, recorded alike; the batch stops at the call that raises (later calls never run)."""
    runner = _runner()
    from utils.course.checks.core import answer_each

    answers = runner.AnswerProcess({"0": _halve}, None)
    sent: list[dict] = []
    recorder = runner.Recorder("9.9", "nonce", "mime", sent.append, answers)
    try:
        wrapped = recorder.wrap("0", _halve)
        assert answer_each(wrapped, [(0,), (1,), (2,)]) == [0.0, 0.5, 1.0]
        with pytest.raises(ValueError, match="three"):
            answer_each(wrapped, [(2,), (3,), (4,)])
        singles = [answers.ask("0", _halve, (x,), {}) for x in (2, 3)]
        recorder.flush()
    finally:
        answers.close()
    items = [item for message in sent for item in message["items"]]
    assert [i.get("value") for i in items] == [0.0, 0.5, 1.0, 1.0, None]  # (4,) was never asked
    assert items[-1] == {"raised": "ValueError", "message": "three"}  # recorded as a single call's reply is
    assert singles[1] == {**items[-1], "hits": []}
    assert answer_each(_halve, [(4,)]) == [2.0]  # a plain function (the learner's own kernel): plain calls


def test_a_batch_under_a_watch_reports_a_call_to_the_reference():
    """The watch the check opened around a batch is rebuilt in the answer process for the batch: an answer that
    calls the reference fails the check, as a single call's does."""
    runner = _runner()
    from utils.course.checks.core import CheckFailed, answer_each, own_work

    def reference(x):
        return x * 2

    def cheat(x):
        return reference(x)

    answers = runner.AnswerProcess({"0": cheat}, None)
    try:
        wrapped = runner.Recorder("9.9", "nonce", "mime", lambda data: None, answers).wrap("0", cheat)
        with pytest.raises(CheckFailed, match="a call to .*reference"), own_work(reference):
            answer_each(wrapped, [(1,), (2,)])
    finally:
        answers.close()
