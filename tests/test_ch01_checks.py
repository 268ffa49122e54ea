"""Lab 01's checks: the solutions pass the public and the hidden cases; answers tuned to the public cases, planted
bugs and unanswered exercises do not."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import nbformat
import pytest
import torch

from utils.course.checks import ch01
from utils.course.checks.core import CheckFailed
from utils.lessons.sizes import TIERS, tier_budget

ROOT = Path(__file__).resolve().parent.parent
ARGS = {"1.1": ("adam_state_bytes",), "1.2": ("saved_bytes_through_backward",),
        "1.3": ("prediction", "reasoning", "measure_block"), "1.4": ("block_saved_bytes",),
        "1.5": ("train_with_validation",), "1.6": ("largest_batch",),
        "1.7": ("llama_plan",), "1.8": ("lora_block_saved_bytes",)}
CHECKS = {"1.1": ch01.check_adam_state_bytes, "1.2": ch01.check_saved_timeline, "1.3": ch01.check_block_prediction,
          "1.4": ch01.check_block_formula, "1.5": ch01.check_no_leak, "1.6": ch01.check_largest_batch,
          "1.7": ch01.check_llama_plan, "1.8": ch01.check_lora_block}


def hidden() -> dict:
    spec = importlib.util.spec_from_file_location("hidden_ch01", ROOT / "grading" / "hidden" / "ch01.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.HIDDEN


@pytest.fixture(scope="module")
def solution() -> dict:
    """The solution notebook's answers (its non-check code cells that define them)."""
    nb = nbformat.read(ROOT / "solutions" / "lab01_where_the_memory_goes.ipynb", as_version=4)
    namespace: dict = {}
    for cell in nb.cells:
        if cell.cell_type == "code" and "check" not in cell.metadata.get("tags", []) and (
                "import" in cell.source or "course" in cell.metadata or "_buggy" in cell.source
                or cell.source.startswith("class ")):
            exec(cell.source, namespace)  # noqa: S102
    return namespace


def test_every_exercise_has_a_public_check_and_hidden_cases():
    assert set(hidden()) == set(CHECKS) == set(ARGS)


@pytest.mark.parametrize("exercise", ["1.1", "1.2", "1.3", "1.4", "1.5", "1.8"])
def test_solution_passes_public_and_hidden(solution, exercise, monkeypatch):
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    args = [solution[a] for a in ARGS[exercise]]
    verdict = CHECKS[exercise](*args)
    assert verdict.status == "passed", str(verdict)
    assert "all passed" not in str(verdict).lower()
    hidden()[exercise](*args)


def test_design_solution_passes_public_and_hidden(solution, monkeypatch):
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    assert CHECKS["1.6"](solution["largest_batch"]).status == "passed"
    hidden()["1.6"](solution["largest_batch"])


def test_largest_batch_needs_the_optimizer_step(solution, monkeypatch):
    """Lab 1.6: an answer that models backward's start only (the old reference) fails a public and a held-out case,
    where eight or four tokens per sequence leave the optimizer step above the budget; the solution says 0 there."""
    from utils.ledger.gpt import TransformerShape, transformer_activation_bytes
    from utils.lessons.models import GPTConfig

    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)

    def backward_start_only(cfg, budget_bytes):
        shape = TransformerShape(cfg.n_layer, cfg.d_model, cfg.n_head, cfg.seq_len, cfg.vocab_size)
        fixed = 12 * shape.n_params + 4 * (2 + 12 * cfg.n_layer + 2 + 1)

        def peak(batch):
            return (fixed + transformer_activation_bytes(shape, batch, attention=cfg.attention)
                    + 8 * batch * cfg.seq_len * cfg.vocab_size)

        batch = 1
        while peak(batch + 1) <= budget_bytes:
            batch += 1
        return batch

    verdict = CHECKS["1.6"](backward_start_only)
    assert verdict.status == "failed" and "optimizer step" in str(verdict), str(verdict)
    with pytest.raises(CheckFailed, match="seq_len=4"):
        hidden()["1.6"](backward_start_only)
    short = GPTConfig(n_layer=2, d_model=128, n_head=4, seq_len=8, vocab_size=256)
    assert solution["largest_batch"](short, 13 * 2**20 // 2) == 0
    assert ch01.measured_peak(short, 1) > 13 * 2**20 // 2  # the truth: not even one sequence fits


def test_largest_batch_by_real_steps_of_its_own_fails(monkeypatch):
    """Lab 1.6 asks for a formula: a search that runs training steps of its own (its own backward passes, not the
    check's measure_step) fails the check, as the instructions say."""
    from utils.lessons.models import GPT, gpt_batch

    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)

    def by_own_steps(cfg, budget_bytes):
        model = GPT(cfg)
        x, y = gpt_batch(cfg, 1)
        model(x, y).backward()  # a real step, the first of a search by measurement
        return 1

    verdict = CHECKS["1.6"](by_own_steps)
    assert verdict.status != "passed" and "Tensor.backward" in str(verdict), str(verdict)


def test_answers_tuned_to_the_public_cases_fail_the_hidden_ones(solution, monkeypatch):
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    public = {(4, 64, 128, 4, "sdpa", "fp32"), (4, 64, 128, 4, "eager", "fp32"), (2, 32, 64, 2, "sdpa", "bf16-mixed"),
              (1, 2048, 4096, 16, "sdpa", "bf16-mixed")}
    table = {case: solution["block_saved_bytes"](*case) for case in public}

    def looked_up(*case):
        return table.get(case, 0)

    assert CHECKS["1.4"](looked_up).status == "passed"
    with pytest.raises(CheckFailed):
        hidden()["1.4"](looked_up)

    def fixed_shape(batch, seq_len, d_model, n_head):  # measures the public shapes only
        return solution["measure_block"](batch, seq_len, d_model, n_head) if (batch, seq_len) in {(6, 48), (2, 16)} \
            else 123

    assert CHECKS["1.3"](solution["prediction"], solution["reasoning"], fixed_shape).status == "passed"
    with pytest.raises(CheckFailed):
        hidden()["1.3"](solution["prediction"], solution["reasoning"], fixed_shape)


def test_planted_bugs_and_unanswered_exercises(solution, monkeypatch):
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    leak = CHECKS["1.5"](solution["train_with_validation_buggy"])
    assert leak.status == "failed" and "still alive" in leak.message
    assert CHECKS["1.3"](..., ..., solution["measure_block"]).status == "not attempted"
    far = CHECKS["1.3"](10, "a guess: the LayerNorm inputs and the Linear inputs of every token, four bytes each",
                        solution["measure_block"])
    assert far.status == "failed" and "within 5%" in far.message

    def no_copies(batch, seq_len, d_model, n_head, attention, precision):
        return solution["block_saved_bytes"](batch, seq_len, d_model, n_head, attention, "fp32") // 2

    assert CHECKS["1.4"](no_copies).status == "failed"

    def unanswered(*_args):
        raise NotImplementedError("Exercise 1.1")

    assert CHECKS["1.1"](unanswered).status == "not attempted"
    assert CHECKS["1.6"](lambda cfg, budget: True).status == "failed"


def test_full_size_footprints_fit_every_tier():
    from utils.lessons.experiment_sizes import ch01 as sizes

    for tier in TIERS:
        for name, nbytes in sizes.footprints(tier).items():
            assert 0 < nbytes <= tier_budget(tier), (tier, name, nbytes)
    with pytest.raises(ValueError, match="tier"):
        sizes.footprints(12)
    assert sizes.gpt_config("tiny").d_model <= sizes.gpt_config("quick").d_model <= sizes.gpt_config("full").d_model
    assert torch.__version__  # the module imports torch-free constants only through utils


def test_llama_plan_that_ignores_tying_fails_hidden(monkeypatch):
    """Exercise 1.7: the public cases are untied; an answer that always counts the head passes them and fails the
    held-out Llama 3.2 1B (tied)."""
    def untied_always(cfg):
        d, f, v = cfg["d_model"], cfg["ffn_hidden"], cfg["vocab"]
        kv = cfg["n_kv_head"] * d // cfg["n_head"]
        params = cfg["n_layer"] * (2 * d + 2 * d * d + 2 * d * kv + 3 * d * f) + 2 * v * d + d
        return {"params": params, "state_bytes": 16 * params, "gpus_80gb": -(-16 * params // (80 * 10**9))}

    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    assert CHECKS["1.7"](untied_always).status == "passed"
    with pytest.raises(ch01.CheckFailed):
        hidden()["1.7"](untied_always)
    mha = lambda cfg: untied_always({**cfg, "n_kv_head": cfg["n_head"]})  # noqa: E731 (k and v as wide as q)
    assert CHECKS["1.7"](mha).status == "failed"


def test_llama_gpus_are_counted_in_reported_bytes_not_the_label(solution, monkeypatch):
    """1.7 (the course's units convention): dividing by the label, 80 x 10^9 bytes, passes the public cases (2 GPUs
    either way for Llama-3-8B) and fails the held-out Llama 3 70B (15 GPUs by the label, 14 of 79.1 GiB)."""
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)

    def by_label(cfg):
        plan = solution["llama_plan"](cfg)
        return {**plan, "gpus_80gb": -(-plan["state_bytes"] // (80 * 10**9))}

    assert CHECKS["1.7"](by_label).status == "passed"
    with pytest.raises(ch01.CheckFailed, match="gpus_80gb"):
        hidden()["1.7"](by_label)
    assert ch01.GPU_80GB == int(79.1 * 2**30)


def test_the_predicted_block_is_the_formula_which_equals_the_measurement_where_it_runs():
    """1.3 and 1.4 are graded on parallel blocks no laptop holds (14 GiB saved); their truth there is the formula,
    equal to the measured bytes at every shape that runs, both attentions, FP32 and BF16 autocast."""
    for shape in [*ch01.MEASURE_SHAPES, (3, 33, 40, 5), (1, 1, 8, 2), (4, 64, 128, 4), (2, 20, 120, 6)]:
        for attention in ("sdpa", "eager"):
            for precision in ("fp32", "bf16-mixed"):
                assert ch01.block_truth(*shape, attention, precision) == ch01.parallel_block_formula(
                    *shape, attention, precision), (shape, attention, precision)
    assert ch01.block_prediction_truth() > 13 * 2**30


def _course_block_formula(b, t, d, h):
    """Chapter 01's Block (not the parallel one), FP32 SDPA, by the packaged estimator: two layers minus one."""
    from utils.ledger.gpt import TransformerShape, transformer_activation_bytes

    return (transformer_activation_bytes(TransformerShape(2, d, h, t, 64), b)
            - transformer_activation_bytes(TransformerShape(1, d, h, t, 64), b))


def test_the_parallel_layout_is_not_the_chapters_block(solution, monkeypatch):
    """1.3/1.4 transfer: the chapter's Block terms (two LayerNorms, ln outputs counted apart) fail the parallel
    block, and one BF16 copy of ln's output under autocast (the FP32 intuition) fails too."""
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    chapter = lambda b, t, d, h: _course_block_formula(b, t, d, h)  # noqa: E731
    assert CHECKS["1.3"](chapter(*ch01.PREDICT_BLOCK), solution["reasoning"], solution["measure_block"]).status \
        == "failed"
    one_cast = lambda b, t, d, h, a, p: solution["block_saved_bytes"](b, t, d, h, a, p) - (  # noqa: E731
        2 * b * t * d if p == "bf16-mixed" else 0)
    assert CHECKS["1.4"](one_cast).status == "failed"


def test_adam_state_only_for_parameters_with_a_gradient(solution, monkeypatch):
    """1.1: counting every trainable parameter (the chapter's count) fails the two-headed model; ignoring amsgrad
    fails; the held-out mixture of experts leaves experts without state."""
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)

    def every_trainable(model, batch, amsgrad):
        return sum((3 if amsgrad else 2) * p.numel() * p.element_size() + 4 for p in model.parameters()
                   if p.requires_grad)

    assert CHECKS["1.1"](every_trainable).status == "failed"
    assert CHECKS["1.1"](lambda m, b, a: solution["adam_state_bytes"](m, b, False)).status == "failed"
    torch.manual_seed(3)
    moe = ch01.TopOneMoE(6, 8, 10)
    x = torch.randn(3, 6)
    moe(x).sum().backward()
    assert sum(p.grad is None for p in moe.parameters()) >= 5 * 4  # 5+ experts untouched (4 tensors each)


def test_the_saved_timeline_starts_at_the_measurement_and_plausible_mistakes_fail(solution, monkeypatch):
    """1.2: the truth's first entry is utils.lessons.measure's total (an independent hook), it only falls and ends
    at 0; a storage saved twice is let go once; an answer that records per saved tensor, per node or only the
    forward's total fails."""
    from utils.lessons.measure import saved_activation_bytes

    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    cfg = ch01.GPTConfig(n_layer=1, d_model=16, n_head=2, seq_len=8, vocab_size=20, attention="eager")
    model = ch01.GPT(cfg)
    batch = ch01.gpt_batch(cfg, 2)
    timeline = ch01.saved_timeline_truth(model, *batch)
    assert timeline[0] == saved_activation_bytes(model, *batch) and timeline[-1] == 0
    assert all(a > b for a, b in zip(timeline, timeline[1:], strict=False))
    x = torch.randn(8, 8, requires_grad=True)
    assert ch01.saved_timeline_truth(lambda a: a[:4] * a[4:], x) == [256, 0]  # two views, one storage, one release
    answer = solution["saved_bytes_through_backward"]
    assert CHECKS["1.2"](answer).status == "passed"
    assert CHECKS["1.2"](lambda fn, *a: [saved_activation_bytes(fn, *a), 0]).status == "failed"
    assert CHECKS["1.2"](lambda fn, *a: sorted(set(answer(fn, *a)[::2]) | {0}, reverse=True)).status == "failed"

    def per_tensor(fn, *a):  # one entry per saved tensor let go, as if each were a storage of its own
        held, timeline = [0], []

        class Box:
            def __init__(self, t):
                self.t = t

        def pack(t):
            if isinstance(t._base if t._base is not None else t, torch.nn.Parameter):
                return t
            held[0] += t.untyped_storage().nbytes()
            box = Box(t)
            nbytes = t.untyped_storage().nbytes()
            import weakref
            weakref.finalize(box, lambda: (held.__setitem__(0, held[0] - nbytes), timeline.append(held[0])))
            return box

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda b: b.t if isinstance(b, Box) else b):
            out = fn(*a)
        timeline.insert(0, held[0])
        out.sum().backward()
        return timeline

    assert CHECKS["1.2"](per_tensor).status == "failed"


def test_lora_formula_equals_the_measurement_and_plausible_mistakes_fail(solution, monkeypatch):
    """1.8: the reference formula is the measurement wherever it runs; the beliefs the exercise names fail."""
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    for case in [(6, 48, 96, 4, 8), (2, 16, 32, 2, 4), (3, 33, 40, 5, 3), (1, 1, 8, 2, 1), (2, 20, 120, 6, 16)]:
        assert ch01.lora_block_truth(*case) == ch01.lora_block_formula(*case), case
    mistakes = {
        "as if fully trained": lambda b, t, d, h, r: _course_block_formula(b, t, d, h),
        "like the trainable parameters": lambda b, t, d, h, r: _course_block_formula(b, t, d, h) * 2 * r // (12 * d),
        "frozen fc1/fc2 still save inputs": lambda b, t, d, h, r: solution["lora_block_saved_bytes"](b, t, d, h, r)
        + 4 * 5 * b * t * d,
        "ln1's output dropped": lambda b, t, d, h, r: solution["lora_block_saved_bytes"](b, t, d, h, r) - 4 * b * t * d,
    }
    for name, wrong in mistakes.items():
        assert ch01.check_lora_block(wrong).status == "failed", name
    public = {(6, 48, 96, 4, 8), (2, 16, 32, 2, 4), (8, 8192, 4096, 32, 16)}
    table = {case: solution["lora_block_saved_bytes"](*case) for case in public}
    looked_up = lambda *case: table.get(case, 0)  # noqa: E731
    assert ch01.check_lora_block(looked_up).status == "passed"
    with pytest.raises(CheckFailed):
        hidden()["1.8"](looked_up)
