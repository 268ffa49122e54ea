"""Lab 07's checks: the solutions pass the public and the hidden cases; answers tuned to the public cases, or
with the classic mistakes, fail; an untouched lab says "not attempted"."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import nbformat
import pytest
import torch

from utils.checks import ch07
from utils.checks.core import CheckFailed

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _lenient(monkeypatch):
    monkeypatch.setenv("COURSE_CHECKS_STRICT", "0")  # these tests look at failing verdicts on purpose


def _hidden():
    spec = importlib.util.spec_from_file_location("hidden_ch07", ROOT / "grading" / "hidden" / "ch07.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.HIDDEN


def _namespace(path: Path) -> dict:
    """Run every code cell of a notebook that defines the answers (not the checks, not the challenge)."""
    ns: dict = {}
    for cell in nbformat.read(path, as_version=4).cells:
        meta = cell.metadata.get("course", {})
        skip = "check" in meta or "answer" in meta or "BudgetedTrainer(300" in cell.source
        if cell.cell_type == "code" and not skip:
            try:
                exec(cell.source, ns)  # noqa: S102
            except NotImplementedError:
                pass
    return ns


ARGS = {"7.1": ("read_summary",), "7.2": ("prediction", "reasoning", "measure_kept_graph"), "7.3": ("train_and_log",),
        "7.4": ("largest_batch_oom_safe",), "7.5": ("train_with_features",)}
CHECKS = {"7.1": ch07.check_read_summary, "7.2": ch07.check_kept_graph, "7.3": ch07.check_leak_fixed,
          "7.4": ch07.check_oom_safe_search, "7.5": ch07.check_features_fixed}


def test_solutions_pass_public_and_hidden():
    ns = _namespace(ROOT / "solutions" / "lab07_memory_profiling.ipynb")
    hidden = _hidden()
    assert set(hidden) == set(CHECKS)
    for ex, check in CHECKS.items():
        args = [ns[a] for a in ARGS[ex]]
        verdict = check(*args)
        assert verdict.status == "passed", verdict
        assert "all" not in verdict.message.lower() or "public" in verdict.message.lower()
        hidden[ex](*args)  # raises CheckFailed on a failure


def test_untouched_lab_is_not_attempted():
    ns = _namespace(ROOT / "labs" / "lab07_memory_profiling.ipynb")
    for ex, check in CHECKS.items():
        verdict = check(*[ns[a] for a in ARGS[ex]])
        assert verdict.status == "not attempted", verdict


def test_tuned_answers_fail_hidden_cases():
    public = ch07.make_stats(700 * 2**20, 690 * 2**20, 1024 * 2**20, 120 * 2**20, 900 * 2**20, 2, 1)
    frozen = ch07.summary_truth(public)
    assert ch07.check_read_summary(lambda stats: dict(frozen)).status == "passed"
    with pytest.raises(CheckFailed):
        _hidden()["7.1"](lambda stats: dict(frozen))

    def search_for_public(step, optimizer, limit):  # answers the two public cases by heart
        return 36 if limit == 1024 else 64

    assert ch07.check_oom_safe_search(search_for_public).status == "failed"  # it never calls the step

    def search_tuned(step, optimizer, limit):  # calls the step, but returns the public answers
        step(1)
        optimizer.zero_grad(set_to_none=True)
        return 36 if limit == 1024 else 64

    assert ch07.check_oom_safe_search(search_tuned).status == "passed"
    with pytest.raises(CheckFailed):
        _hidden()["7.4"](search_tuned)
    with pytest.raises(CheckFailed):
        _hidden()["7.4"](search_for_public)


def test_classic_mistakes_fail():
    sol = _namespace(ROOT / "solutions" / "lab07_memory_profiling.ipynb")

    # 7.1: the large pool instead of 'all'
    def large_pool(stats):
        answer = sol["read_summary"](stats)
        answer["allocated"] = stats["allocated_bytes.large_pool.current"]
        return answer

    assert ch07.check_read_summary(large_pool).status == "failed"

    # 7.2: a prediction that counts the saved weight; a measurement that counts parameters
    with_weight = sol["prediction"] + 256 * 4 * 4
    assert ch07.check_kept_graph(with_weight, sol["reasoning"], sol["measure_kept_graph"]).status == "passed"  # <5%
    assert ch07.check_kept_graph(sol["prediction"] * 2, sol["reasoning"], sol["measure_kept_graph"]).status == "failed"
    assert ch07.check_kept_graph(sol["prediction"], "too short", sol["measure_kept_graph"]).status == "failed"

    def counts_parameters(loss):
        total, stack, seen = 0, [loss.grad_fn], set()
        while stack:
            node = stack.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            for name in dir(node):
                if name.startswith("_saved_"):
                    value = getattr(node, name)
                    if isinstance(value, torch.Tensor):
                        total += value.untyped_storage().nbytes()
            stack.extend(f for f, _ in node.next_functions)
        return total

    assert ch07.check_kept_graph(sol["prediction"], sol["reasoning"], counts_parameters).status == "failed"

    # 7.3: .detach() keeps tensors; validation under autograd keeps graphs
    def detached(model, opt, batches):
        history = {"train": [], "val": []}
        for x, y in batches:
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            history["train"].append(loss.detach())
            history["val"].append(torch.nn.functional.mse_loss(model(x[:2]), y[:2]).item())
        return history

    assert ch07.check_leak_fixed(detached).status == "failed"

    def grads_left(model, opt, batches):
        history = {"train": [], "val": []}
        for x, y in batches:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            history["train"].append(loss.item())
            with torch.no_grad():
                history["val"].append(torch.nn.functional.mse_loss(model(x[:2]), y[:2]).item())
        return history

    assert ch07.check_leak_fixed(grads_left).status == "failed"

    # 7.4: no finally (gradients left), exception kept, Exception caught, linear search
    def search(zero_grad_always=True, keep=False, catch=torch.OutOfMemoryError, linear=False):
        kept = []

        def largest(step, optimizer, limit):
            def fits(b):
                try:
                    step(b)
                    optimizer.zero_grad(set_to_none=True)
                    return True
                except catch as exc:
                    if keep:
                        kept.append(exc)
                    if zero_grad_always:
                        optimizer.zero_grad(set_to_none=True)
                    return False

            if linear:
                b = 0
                while b < limit and fits(b + 1):
                    b += 1
                return b
            return sol["largest_batch_oom_safe"].__wrapped__(fits, limit) if hasattr(
                sol["largest_batch_oom_safe"], "__wrapped__") else _bisect(fits, limit)

        return largest

    def _bisect(fits, limit):
        if not fits(1):
            return 0
        good, bad = 1, None
        while bad is None and good < limit:
            c = min(2 * good, limit)
            good, bad = (c, None) if fits(c) else (good, c)
        if bad is None:
            return good
        while bad - good > 1:
            mid = (good + bad) // 2
            good, bad = (mid, bad) if fits(mid) else (good, mid)
        return good

    assert ch07.check_oom_safe_search(search()).status == "passed"
    assert ch07.check_oom_safe_search(search(zero_grad_always=False)).status == "failed"
    assert ch07.check_oom_safe_search(search(keep=True)).status == "failed"
    assert ch07.check_oom_safe_search(search(linear=True)).status == "failed"
    assert ch07.check_oom_safe_search(search(catch=Exception)).status == "passed"  # public cases cannot tell ...
    with pytest.raises(CheckFailed, match="propagate"):
        _hidden()["7.4"](search(catch=Exception))  # ... the hidden ones can


def test_budgeted_trainer_rejects_bad_batches():
    trainer = ch07.BudgetedTrainer(4)
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="batch"):
            trainer.step(bad)
