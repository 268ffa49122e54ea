"""Chapter 05: full sizes fit every GPU tier; tiny is the smallest; lab 05's checks reject planted wrong answers
and the hidden cases catch an answer tuned to the public ones."""

import importlib
import importlib.util
import math
from pathlib import Path

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from utils.course.checks import ch05
from utils.lessons.sizes import TIERS, tier_budget

ROOT = Path(__file__).resolve().parent.parent


def sizes(monkeypatch, size):
    monkeypatch.setenv("COURSE_SIZE", size)
    import utils.lessons.experiment_sizes.ch05 as mod
    return importlib.reload(mod)


@pytest.mark.parametrize("tier", TIERS)
def test_every_full_size_experiment_fits_the_tier(tier):
    from utils.lessons.experiment_sizes.ch05 import footprints

    for name, nbytes in footprints(tier).items():
        assert 0 < nbytes <= tier_budget(tier), (tier, name, nbytes / 2**30)


def test_full_size_has_llm_like_token_counts(monkeypatch):
    full = sizes(monkeypatch, "full")
    assert full.WIDTH >= 768 and full.TOKENS >= 2048 and full.OPT_DEPTH == 64
    tiny = sizes(monkeypatch, "tiny")
    tiny_tokens, tiny_depth = tiny.WIDTH * tiny.TOKENS, max(tiny.DEPTHS)  # reload mutates the same module
    quick = sizes(monkeypatch, "quick")
    assert tiny_tokens < quick.WIDTH * quick.TOKENS and tiny_depth < max(quick.DEPTHS)


def test_footprints_bad_tier():
    from utils.lessons.experiment_sizes.ch05 import footprints

    with pytest.raises(ValueError, match="tier"):
        footprints(12)


def test_optimum_is_sqrt_cn_for_the_chapter_block():
    # c ~ 10 for the chapter's block (mult 4): the measured optimum at N = 64 is within the flat floor around 25
    best, peaks = ch05.best_segments(64, 4, 8, 8)
    assert abs(best - math.sqrt(10 * 64)) <= 8
    assert peaks[7] > 1.1 * peaks[best - 1]  # sqrt(N) = 8 is clearly worse


def test_schedule_planner_model():
    assert ch05.schedule_peak([3, 3, 4], 100, 10) == max(10 + 300, 20 + 300, 30 + 400)
    assert ch05.best_recompute(10, 100, 10, 10**6) == 0
    assert ch05.best_recompute(10, 100, 10, 99) is None


def first_block_plain(blocks, x, memory, pad_mask):
    for i, block in enumerate(blocks):
        x = block(x, memory, pad_mask=pad_mask) if i == 0 else checkpoint(block, x, memory, pad_mask=pad_mask,
                                                                            use_reentrant=False)
    return x


def memory_detached(blocks, x, memory, pad_mask):
    for block in blocks:
        x = checkpoint(lambda h, b=block: b(h, memory.detach(), pad_mask=pad_mask), x, use_reentrant=False)
    return x


def closure(blocks, x, memory, pad_mask):  # honest: memory read from the closure, not passed as an input
    for block in blocks:
        x = checkpoint(lambda h, b=block: b(h, memory, pad_mask=pad_mask), x, use_reentrant=False)
    return x


def reentrant(blocks, x, memory, pad_mask):
    for block in blocks:
        x = checkpoint(block, x, memory, pad_mask=pad_mask, use_reentrant=True)
    return x


def test_wrong_answers_fail_public_checks(monkeypatch):
    monkeypatch.setenv("COURSE_CHECKS_STRICT", "0")
    assert ch05.check_checkpoint_decoder(first_block_plain).status == "failed"
    assert ch05.check_checkpoint_decoder(ch05.plain_decoder).status == "failed"
    assert ch05.check_checkpoint_decoder(memory_detached).status == "failed"
    assert ch05.check_checkpoint_decoder(reentrant).status != "passed"
    assert ch05.check_checkpoint_decoder(closure).status == "passed"
    hidden()["5.1"](closure)
    assert ch05.check_fixed_checkpoint(
        lambda b, x: checkpoint(b, x, use_reentrant=False, preserve_rng_state=False)).status == "failed"
    assert ch05.check_fixed_checkpoint(lambda b, x: checkpoint(b, x, use_reentrant=False)).status == "failed"
    assert ch05.check_schedule(lambda d, b, i, budget: [d]).status == "failed"
    assert ch05.check_optimal_segments(..., ..., None).status == "not attempted"


def hidden():
    spec = importlib.util.spec_from_file_location("hidden05", ROOT / "grading" / "hidden" / "ch05.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.HIDDEN


def test_hidden_cases_catch_an_answer_tuned_to_the_public_ones():
    def tuned(blocks, x, memory, pad_mask):  # keeps the memory's gradient only where the public case trains it
        memory = memory if x.shape[-1] == 16 else memory.detach()
        for block in blocks:
            x = checkpoint(block, x, memory, pad_mask=pad_mask, use_reentrant=False)
        return x

    assert ch05.check_checkpoint_decoder(tuned).status == "passed"
    with pytest.raises(ch05.CheckFailed):
        hidden()["5.1"](tuned)
    assert set(hidden()) == {"5.1", "5.2", "5.3", "5.4", "5.5", "5.6"}


def test_block_saves_about_ten_inputs():
    from utils.lessons.measure import saved_activation_bytes

    x = torch.randn(8, 16)
    c = saved_activation_bytes(ch05.make_stack(1, 16), x) / x.nbytes
    assert 10 <= c < 11


def _quiet_recomputation(restore_count: bool):
    """checkpointed_forward with the chapter's remedies: the RNG preserved, BatchNorm's momentum 0 during the
    recomputation, and (restore_count) its batch count put back; the modes left as they are at backward."""
    from torch import nn
    from torch.utils.checkpoint import checkpoint

    def checkpointed_forward(block, x):
        norms = [m for m in block.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        calls = {"n": 0}

        def run(inp):
            calls["n"] += 1
            if calls["n"] == 1:
                return block(inp)
            saved = [(m.momentum, m.num_batches_tracked.clone()) for m in norms]
            for m in norms:
                m.momentum = 0.0
            try:
                return block(inp)
            finally:
                for m, (momentum, count) in zip(norms, saved, strict=True):
                    m.momentum = momentum
                    if restore_count:
                        m.num_batches_tracked.copy_(count)

        return checkpoint(run, x, use_reentrant=False, preserve_rng_state=True)

    return checkpointed_forward


def test_lab05_momentum_zero_fix_fails_on_num_batches_tracked(monkeypatch):
    """Exercise 5.4: momentum 0 during the recomputation keeps the running mean and variance but still counts the
    batch twice; the check tests num_batches_tracked, the chapter's symptom."""
    from utils.course.checks.ch05 import check_fixed_checkpoint

    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    verdict = check_fixed_checkpoint(_quiet_recomputation(restore_count=False))
    assert verdict.status == "failed" and "num_batches_tracked" in verdict.message


def test_lab05_the_chapters_two_fixes_fail_when_the_step_evaluates_before_backward(monkeypatch):
    """Exercise 5.4: the chapter's remedies (preserve the RNG, keep BatchNorm's statistics and count) pass a plain
    step but not one that runs a validation forward in eval mode between forward and backward: the recomputation
    must run in the forward's modes; the lab's solution does, on public and held-out cases."""
    import nbformat

    from utils.course.checks.ch05 import check_fixed_checkpoint

    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    verdict = check_fixed_checkpoint(_quiet_recomputation(restore_count=True))
    assert verdict.status == "failed" and "eval mode" in verdict.message and "backward raised" in verdict.message
    nb = nbformat.read(ROOT / "solutions" / "lab05_gradient_checkpointing.ipynb", as_version=4)
    ns: dict = {}
    exec(next(c.source for c in nb.cells if c.cell_type == "code" and "import" in c.source), ns)  # noqa: S102
    exec(next(c.source for c in nb.cells if c.metadata.get("course", {}).get("exercise") == "5.4"), ns)  # noqa: S102
    assert check_fixed_checkpoint(ns["checkpointed_forward"]).status == "passed"
    hidden()["5.4"](ns["checkpointed_forward"])


def test_lab05_swiglu_formula_without_rmsnorm_statistics_fails(monkeypatch):
    """Exercise 5.5: forgetting RMSNorm's 1/rms per token and its normalised x fails, with a hint naming them."""
    from utils.course.checks.ch05 import check_swiglu

    def short(tokens, d, f, mode):
        return 4 * tokens * {"none": d + 4 * f, "activation": d + 3 * f, "full": d}[mode]

    def choose(tokens, d, f, budget):
        return next((m for m in ("none", "activation", "full") if short(tokens, d, f, m) <= budget), None)

    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    verdict = check_swiglu(short, choose)
    assert verdict.status == "failed" and "1/rms" in verdict.message


def test_lab05_swiglu_measured_on_a_retyped_block_fails(monkeypatch):
    """Review s14b R14: exercise 5.5 asks for a formula; re-typing the block the exercise shows and measuring it on
    the meta device (any size, no memory) passed. The meter and saved-tensor hooks are now refused in that call."""
    from torch.utils.checkpoint import checkpoint

    from utils.course.checks.ch05 import check_swiglu
    from utils.lessons.measure import saved_activation_bytes

    class Retyped(torch.nn.Module):  # the learner's own copy of the block the exercise prints
        def __init__(self, d, f):
            super().__init__()
            self.norm = torch.nn.RMSNorm(d)
            self.gate, self.up = torch.nn.Linear(d, f, bias=False), torch.nn.Linear(d, f, bias=False)
            self.down = torch.nn.Linear(f, d, bias=False)

        def _body(self, x, selective):
            h = self.norm(x)
            g, u = self.gate(h), self.up(h)
            if selective:
                p = checkpoint(lambda a, b: torch.nn.functional.silu(a) * b, g, u, use_reentrant=False)
            else:
                p = torch.nn.functional.silu(g) * u
            return x + self.down(p)

        def forward(self, x, mode):
            if mode == "full":
                return checkpoint(self._body, x, False, use_reentrant=False)
            return self._body(x, mode == "activation")

    def measured(tokens, d, f, mode):
        with torch.device("meta"):
            block, x = Retyped(d, f), torch.randn(tokens, d, requires_grad=True)
        return saved_activation_bytes(lambda t: block(t, mode), x)

    def choose(tokens, d, f, budget):
        return next((m for m in ("none", "activation", "full") if measured(tokens, d, f, m) <= budget), None)

    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    assert measured(64, 8, 24, "none") == ch05.swiglu_truth(64, 8, 24, "none")  # the meter agrees with the truth...
    verdict = check_swiglu(measured, choose)
    assert verdict.status == "failed" and "saved_activation_bytes" in verdict.message, verdict.message  # ...refused


def _all_alive_optimum(depth, mult, tokens, width):  # the old count: all k checkpoints alive to the end
    from utils.lessons.measure import saved_activation_bytes

    x = torch.randn(tokens, width)
    per_block = saved_activation_bytes(ch05.make_stack(1, width, mult), x)
    peaks = {k: k * x.nbytes + math.ceil(depth / k) * per_block for k in range(1, depth + 1)}
    return min(peaks, key=peaks.get)


def _measured_optimum(depth, mult, tokens, width):  # a correct measurement for 5.2's second half
    from utils.lessons.measure import saved_activation_bytes

    x = torch.randn(tokens, width)
    per_block = saved_activation_bytes(ch05.make_stack(1, width, mult), x)

    def peak(k):
        size, extra = divmod(depth, k)
        lengths = [size + 1] * extra + [size] * (k - extra)
        return max(j * x.nbytes + n * per_block for j, n in enumerate(lengths, 1))

    return min(range(1, depth + 1), key=peak)


def test_lab05_prediction_is_for_a_stack_no_laptop_runs(monkeypatch):
    """Exercise 5.2: the meta-device block count equals a real measurement at a small size, c is 18 at the graded
    size, and the graded optimum is 25 segments at 5.375 GiB (checkpoints freed in backward); the all-alive answer
    (32 segments, 6.25 GiB), sqrt(c*N) = 24 with the all-alive peak, or sqrt(N), fails."""
    from utils.lessons.measure import saved_activation_bytes

    x = torch.randn(16, 8)
    assert ch05.block_saved_bytes_meta(8, 16, 8) == saved_activation_bytes(ch05.make_stack(1, 8, 8), x)
    depth, mult, tokens, d = ch05.PREDICT_BIG
    assert depth == 32 and 2 * mult * d * d * depth > 8e9 and tokens == 8192
    assert 18 <= ch05.block_saved_bytes_meta(mult, tokens, d) / (tokens * d * 4) < 18.01
    truth = ch05.predicted_segments_truth()
    assert truth["segments"] == 25 and abs(truth["peak_gib"] - 5.375) < 0.01
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    words = "a block saves eighteen inputs; while segment j is recomputed j checkpoints are alive plus its blocks"
    assert ch05.check_optimal_segments(truth, words, _measured_optimum).status == "passed"
    assert ch05.check_optimal_segments({"segments": 24, "peak_gib": 5.5}, words, _measured_optimum).status == "passed"
    for wrong in ({"segments": 32, "peak_gib": 6.25}, {"segments": 24, "peak_gib": 7.5},
                  {"segments": 6, "peak_gib": 14.25}, {"segments": 25, "peak_gib": 61 * 0.125}):
        assert ch05.check_optimal_segments(wrong, words, _measured_optimum).status == "failed", wrong
    assert ch05.check_optimal_segments(truth, words, _all_alive_optimum).status == "failed"
    assert ch05.check_optimal_segments(truth, words, _closed_form_optimum).status == "failed"  # review s14 R19


def _closed_form_optimum(depth, mult, tokens, width):
    """5.2 without measuring: c = 2 + 2 x mult inputs a block, the chapter's split and freed checkpoints."""
    c = 2 + 2 * mult

    def peak(k):
        size, extra = divmod(depth, k)
        lengths = [size + 1] * extra + [size] * (k - extra)
        return max(j + n * c for j, n in enumerate(lengths, 1))

    return min(range(1, depth + 1), key=peak)


def _vit_forward(reentrant=False, replay=True, per_block=True, eval_mode=False, reseed=False, default_rng=False):
    def forward(vit, images):
        if eval_mode:
            vit.eval()
        x = vit.embed(images)
        for i, block in enumerate(vit.blocks):
            if reseed:
                block.drop_path.generator.manual_seed(i)
            if default_rng:
                block.drop_path.generator = torch.default_generator
            state = block.drop_path.generator.get_state()

            def run(h, block=block, state=state):
                if replay:
                    block.drop_path.generator.set_state(state)
                return block(h)

            x = checkpoint(run, x, use_reentrant=reentrant) if per_block else run(x)
        return vit.classify(x)

    return forward


# the colleague's reentrant checkpoint is one of the planted bugs: torch warns that it will train nothing (as
# chapter 05's section on reentrancy shows), which is the point, not noise in the test run
@pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad=True:UserWarning")
def test_lab05_vit_checkpoint_catches_each_bug(monkeypatch):
    """Exercise 5.6: the colleague's code, each half-fix (the flag alone, trusting preserve_rng_state with the
    blocks' own generators, re-seeding them, drawing from torch's default generator), removing the checkpoints and
    switching drop path off all fail; the fix passes the public and held-out cases (review s9 S8: the old exercise's
    fixes were two flags the chapter had shown)."""
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    fixed = _vit_forward()
    assert ch05.check_vit_checkpoint(fixed).status == "passed"
    hidden()["5.6"](fixed)
    for wrong, says in ((_vit_forward(reentrant=True, replay=False), "use_reentrant"),
                        (_vit_forward(reentrant=True), "use_reentrant"), (_vit_forward(replay=False), "generator"),
                        (_vit_forward(per_block=False), "one input per block"), (_vit_forward(eval_mode=True), ""),
                        (_vit_forward(reseed=True), "generator"), (_vit_forward(default_rng=True), "")):
        verdict = ch05.check_vit_checkpoint(wrong)
        assert verdict.status == "failed" and says in verdict.message, verdict
