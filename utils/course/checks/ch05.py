"""Checks for lab 05 (gradient checkpointing). The `expect_*` helpers run cases; the grader's hidden cases
(grading/hidden/ch05.py) call them with other shapes, depths, budgets and seeds."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from utils.course.checks.core import (
    CheckFailed,
    Verdict,
    answered,
    expect_equal,
    expect_reasoning,
    guarded,
    observe,
    run_check,
)
from utils.course.scenes.ch05 import (  # the lab's classes and builders, importable from here as before
    CrossBlock,  # noqa: F401
    DropPath,  # noqa: F401
    MLPBlock,
    TinyViT,
    ViTBlock,  # noqa: F401
    checkpointed_decoder_scene,
    fixed_checkpoint_scene,
    make_decoder,  # noqa: F401
    make_stack,
    vit_checkpoint_scene,
)
from utils.lessons.measure import saved_activation_bytes

# The saved-tensor hooks the checks' meter is made of (utils.lessons.measure.SavedTensorCounter): torch's checkpoint
# sets its own, but one set by the learner's code takes precedence over the meter's and hides what is saved (review
# s15's red team: three plain forwards under an identity hook earned full marks on 5.1, 5.4 and 5.6).
METER_HOOKS = (torch.autograd.graph.saved_tensors_hooks, torch._C._autograd._push_saved_tensors_default_hooks)


# 5.1 -------------------------------------------------------------------------------------------------------------
def plain_decoder(blocks: nn.ModuleList, x: torch.Tensor, memory: torch.Tensor, pad_mask: torch.Tensor
                  ) -> torch.Tensor:
    """The decoder run without checkpointing: the check's reference for the gradients."""
    for block in blocks:
        x = block(x, memory, pad_mask=pad_mask)
    return x


def expect_checkpointed_decoder(checkpoint_decoder: Callable,
                                cases: Sequence[tuple[int, int, int, int, int, bool]]) -> None:
    """cases: (blocks n, batch, target tokens, memory tokens, width, memory requires grad). Every block is
    checkpointed: the run keeps each block's input x and, at most, the memory once; the gradients (of the
    parameters, of x and of the memory where it trains) are the plain run's. The run happens in a scene
    (utils.course.scenes.ch05), once with the learner's function and once with the plain decoder."""
    fn = guarded(checkpoint_decoder, plain_decoder, direct=METER_HOOKS)
    for n, b, t, s, d, trains in cases:
        got = observe(checkpointed_decoder_scene, fn, n, b, t, s, d, trains)
        want = checkpointed_decoder_scene(plain_decoder, n, b, t, s, d, trains)
        what = f"{n} blocks, batch {b}, {t} target and {s} memory tokens, width {d}, memory " + (
            "trained" if trains else "frozen")
        limit = n * want["x_bytes"] + want["memory_bytes"]
        if got["saved"] > limit:
            raise CheckFailed(f"at most {limit:,} saved bytes ({what}: each block's input x, and the memory once)",
                              f"{got['saved']:,}", "run EVERY block under checkpoint(block, x, memory, "
                              "pad_mask=pad_mask, use_reentrant=False): a checkpointed block keeps only its inputs.")
        if got["output"] != "ok":
            raise CheckFailed(f"an output of shape {(b, t, d)}", got["output"], "return the last block's output.")
        for name, grad in want["grads"].items():
            mine = got["grads"].get(name)
            if mine is None or not torch.allclose(mine, grad, atol=1e-5, rtol=1e-4):
                raise CheckFailed(f"the plain forward's gradient for {name} ({what})", "a different or missing "
                                  "gradient", "pass memory and pad_mask on to every block (pad_mask by keyword: "
                                  "checkpoint(..., pad_mask=pad_mask, use_reentrant=False)).")
        for name in ("x", "memory"):
            mine, grad = got[f"{name}_grad"], want[f"{name}_grad"]
            if (mine is None) != (grad is None) or (mine is not None and not torch.allclose(mine, grad, atol=1e-5,
                                                                                            rtol=1e-4)):
                raise CheckFailed(f"the plain run's gradient of {name} ({what})", "a different or missing one",
                                  "the memory's gradient flows through every block's keys and values: pass it as an "
                                  "input of the checkpointed call, not detached.")


def check_checkpoint_decoder(checkpoint_decoder: Callable) -> Verdict:
    """Exercise 5.1: checkpoint a cross-attention decoder: blocks with two inputs and a keyword-only mask."""
    return run_check("5.1", lambda: expect_checkpointed_decoder(checkpoint_decoder, [
        (3, 2, 5, 7, 8, False), (2, 1, 4, 6, 16, True)]), points=1)


# 5.2 -------------------------------------------------------------------------------------------------------------
PREDICT_CASE = (64, 8, 16, 8)  # depth, hidden multiplier, tokens, width
# A stack so narrow that what each block keeps per token beside its activations (LayerNorm's mean and 1/std) moves
# the optimum: a count from c = 2 + 2 x mult alone answers 12 segments here, the measured optimum is 18 (review s14
# R19: the exercise asks to measure, and a formula passed every case).
NARROW_CASE = (30, 2, 4, 2)


def segment_lengths(depth: int, k: int) -> list[int]:
    """The chapter's split (run_segments): k segments, the first depth mod k of them one block longer."""
    size, extra = divmod(depth, k)
    return [size + (1 if i < extra else 0) for i in range(k)]


def freed_peak(lengths: Sequence[int], segment_bytes: Callable[[int], int], input_bytes: int) -> int:
    """A step's activation peak when backward frees each checkpoint once its segment is done: while segment j
    (1-based from the input) is recomputed, j checkpoints are alive plus that segment's saved bytes."""
    return max(j * input_bytes + segment_bytes(n) for j, n in enumerate(lengths, 1))


def peak_bytes(depth: int, mult: int, tokens: int, d: int, k: int, _segments: dict | None = None) -> int:
    """The chapter's count of a k-segment step's activation peak, each segment's saved bytes measured on a CPU."""
    x = torch.randn(tokens, d)
    cache = {} if _segments is None else _segments

    def segment_bytes(n: int) -> int:
        if n not in cache:
            cache[n] = saved_activation_bytes(make_stack(n, d, mult), x)
        return cache[n]

    return freed_peak(segment_lengths(depth, k), segment_bytes, x.nbytes)


def best_segments(depth: int, mult: int, tokens: int, d: int) -> tuple[int, list[int]]:
    segments: dict[int, int] = {}  # saved bytes by segment length (segments of equal length save the same)
    peaks = [peak_bytes(depth, mult, tokens, d, k, segments) for k in range(1, depth + 1)]
    return 1 + min(range(depth), key=peaks.__getitem__), peaks


def expect_optimal_segments(optimal_segments: Callable, cases: Sequence[tuple[int, int, int, int]]) -> None:
    """cases: (depth, mult, tokens, width): the learner's measured optimum must be within 2% of the true minimum."""
    optimal_segments = guarded(optimal_segments, best_segments, peak_bytes, segment_peaks, block_saved_bytes_meta,
                               freed_peak)
    for depth, mult, tokens, d in cases:
        got = optimal_segments(depth, mult, tokens, d)
        if isinstance(got, bool) or not isinstance(got, int) or not 1 <= got <= depth:
            raise CheckFailed(f"an int from 1 to {depth}", repr(got), "return the number of segments k.")
        best, peaks = best_segments(depth, mult, tokens, d)
        if peaks[got - 1] > 1.02 * peaks[best - 1]:
            raise CheckFailed(f"k near {best} for depth {depth}, hidden multiplier {mult} (peak within 2% of the "
                              f"minimum, {peaks[best - 1]:,} B)", f"k = {got} (peak {peaks[got - 1]:,} B)",
                              "split as the chapter's run_segments does (the first depth mod k segments one block "
                              "longer); backward frees each checkpoint once its segment is done, so while segment j "
                              "is recomputed only j checkpoints are alive: the peak is the largest of j x the "
                              "input's bytes + segment j's saved bytes; take the k with the smallest peak.")


# 5.2's prediction: a 32-block stack of the chapter's block with an 8x hidden layer at width 4,096 (2 x 8 x 4096^2
# weights a block: 8.6 billion parameters in all) at 8,192 tokens, FP32 activations. Measured on the meta device.
PREDICT_BIG = (32, 8, 8192, 4096)  # depth, hidden multiplier, tokens, width


def block_saved_bytes_meta(mult: int, tokens: int, d: int) -> int:
    """What one MLPBlock(d, mult) saves for backward at `tokens` tokens: measured on the meta device (no memory)."""
    with torch.device("meta"):
        block = MLPBlock(d, mult)
        x = torch.randn(tokens, d)
    return saved_activation_bytes(block, x)


def segment_peaks(depth: int, mult: int, tokens: int, d: int) -> list[int]:
    """Peak bytes for k = 1..depth segments, checkpoints freed in backward (`freed_peak`), blocks measured on meta."""
    per_block, x_bytes = block_saved_bytes_meta(mult, tokens, d), tokens * d * 4
    return [freed_peak(segment_lengths(depth, k), lambda n: n * per_block, x_bytes) for k in range(1, depth + 1)]


def predicted_segments_truth() -> dict[str, float]:
    peaks = segment_peaks(*PREDICT_BIG)
    best = 1 + min(range(len(peaks)), key=peaks.__getitem__)
    return {"segments": best, "peak_gib": peaks[best - 1] / 2**30}


def check_optimal_segments(prediction: dict, reasoning: str, optimal_segments: Callable) -> Verdict:
    """Exercise 5.2: predict the best segment count and its peak for an 8.6B-parameter stack at 8,192 tokens (no
    laptop runs it), then measure the optimum of small stacks."""

    def body() -> None:
        guess = answered(prediction, "prediction")
        if not isinstance(guess, dict) or set(guess) != {"segments", "peak_gib"} \
                or isinstance(guess["segments"], bool) or not isinstance(guess["segments"], int) \
                or isinstance(guess["peak_gib"], bool) or not isinstance(guess["peak_gib"], int | float):
            raise CheckFailed("prediction as {'segments': an int, 'peak_gib': a number}", repr(guess))
        expect_reasoning(reasoning, "5.2")
        depth = PREDICT_BIG[0]
        peaks, truth = segment_peaks(*PREDICT_BIG), predicted_segments_truth()
        k = guess["segments"]
        if not 1 <= k <= depth or peaks[k - 1] > 1.05 * min(peaks):
            raise CheckFailed(f"a segment count whose peak is within 5% of the smallest ({min(peaks) / 2**30:.2f} GiB)",
                              f"k = {k}" + (f" (peak {peaks[k - 1] / 2**30:.2f} GiB)" if 1 <= k <= depth else ""),
                              "count what one block saves in units of its input (c); with the chapter's split, "
                              "the peak is the worst segment j: j checkpoints (the later ones are freed by then) + "
                              "c x its length. A count that keeps all k checkpoints alive puts the optimum too far.")
        if abs(guess["peak_gib"] - truth["peak_gib"]) > 0.05 * truth["peak_gib"]:
            raise CheckFailed(f"the best peak within 5% of {truth['peak_gib']:.2f} GiB", repr(guess["peak_gib"]),
                              "one input is 8,192 x 4,096 FP32 values; at the best k the peak is the worst "
                              "segment's: j checkpoints + that segment's saved bytes.")
        expect_optimal_segments(optimal_segments, [PREDICT_CASE, (16, 4, 8, 8), NARROW_CASE])

    return run_check("5.2", body, points=2)


# 5.3 -------------------------------------------------------------------------------------------------------------
def schedule_peak(schedule: Sequence[int], block_bytes: int, input_bytes: int) -> int:
    """Peak of a schedule (segment lengths in order; all but the last checkpointed), checkpoints freed in backward:
    the largest, over the segments j = 1, 2, ..., of j checkpoints + segment j's blocks."""
    return freed_peak(schedule, lambda n: n * block_bytes, input_bytes)


def best_recompute(depth: int, block_bytes: int, input_bytes: int, budget: int) -> int | None:
    """The fewest recomputed blocks of any schedule within the budget (None if none fits). With k segments, segment j
    may hold at most cap(j) = (budget - j x input_bytes) // block_bytes blocks; the last takes as many as it may."""
    best = None
    for k in range(1, depth + 1):
        caps = [(budget - j * input_bytes) // block_bytes for j in range(1, k + 1)]
        if caps[-1] < 1:
            break  # caps fall with j: more segments only lower them
        last = min(caps[-1], depth - (k - 1))
        if sum(caps[:-1]) >= depth - last and (best is None or depth - last < best):
            best = depth - last
    return best


def expect_schedule(plan_schedule: Callable, cases: Sequence[tuple[int, int, int, int]]) -> None:
    """cases: (depth, block_bytes, input_bytes, budget)."""
    plan_schedule = guarded(plan_schedule, best_recompute, schedule_peak)
    for depth, block_bytes, input_bytes, budget in cases:
        got = plan_schedule(depth, block_bytes, input_bytes, budget)
        best = best_recompute(depth, block_bytes, input_bytes, budget)
        what = f"plan_schedule(depth={depth}, block_bytes={block_bytes:,}, input_bytes={input_bytes:,}, " \
               f"budget={budget:,})"
        if best is None:
            if got is not None:
                raise CheckFailed(f"{what} = None (no schedule fits)", repr(got),
                                  "one block per segment needs depth inputs + one block at the last segment.")
            continue
        if not isinstance(got, list | tuple) or not got or not all(isinstance(s, int) and s >= 1 for s in got) \
                or sum(got) != depth:
            raise CheckFailed(f"{what}: a list of positive segment lengths summing to {depth}", repr(got))
        peak = schedule_peak(got, block_bytes, input_bytes)
        if peak > budget:
            raise CheckFailed(f"{what}: a peak within the budget", f"a peak of {peak:,} B",
                              "peak = the largest, over segments j = 1, 2, ..., of j x input_bytes + its length x "
                              "block_bytes (the later checkpoints are freed by the time segment j is recomputed).")
        recompute = depth - got[-1]
        if recompute > best:
            raise CheckFailed(f"{what}: {best} recomputed blocks or fewer", f"{recompute} recomputed",
                              "the last segment is never recomputed: make it as long as the budget allows at its "
                              "position, and cover the rest with earlier segments, which may be longer (fewer "
                              "checkpoints are alive when they are recomputed).")


def check_schedule(plan_schedule: Callable) -> Verdict:
    """Exercise 5.3: the schedule that fits a budget with the least recomputation, proven on a real stack."""

    def body() -> None:
        expect_schedule(plan_schedule, [(12, 1000, 100, 3000), (10, 1000, 400, 4400), (10, 1000, 400, 3400),
                                        (8, 500, 50, 4000), (10, 1000, 100, 500)])
        depth, tokens, d = 10, 8, 8  # a real run: the schedule's measured peak fits its budget
        x = torch.randn(tokens, d)
        block_bytes = saved_activation_bytes(make_stack(1, d), x)
        budget = 3 * block_bytes + 4 * x.nbytes
        schedule = guarded(plan_schedule, best_recompute, schedule_peak)(depth, block_bytes, x.nbytes, budget)
        measured = freed_peak(schedule, lambda n: saved_activation_bytes(make_stack(n, d), x), x.nbytes)
        if measured > budget:
            raise CheckFailed(f"a measured peak within {budget:,} B", f"{measured:,} B")

    return run_check("5.3", body, points=2)


# 5.4 -------------------------------------------------------------------------------------------------------------
def expect_fixed_checkpoint(checkpointed_forward: Callable, cases: Sequence[tuple[int, int, float, int, bool]]
                            ) -> None:
    """cases: (tokens, width, dropout p, seed, whether the step evaluates between forward and backward). A block
    with dropout and BatchNorm: gradients equal the plain run's, running statistics updated once, only the input
    saved, whatever mode the block is in when backward recomputes. The step runs in a scene
    (utils.course.scenes.ch05), once with the learner's function and once with the plain block, and the two are
    compared."""
    for tokens, d, p, seed, evaluates in cases:
        got = observe(fixed_checkpoint_scene, guarded(checkpointed_forward, direct=METER_HOOKS), tokens, d, p, seed,
                      evaluates)
        want = fixed_checkpoint_scene(lambda block, x: block(x), tokens, d, p, seed, evaluates)
        if got["output"].startswith("the backward raised"):
            where = " after a validation forward in eval mode" if evaluates else ""
            raise CheckFailed(f"a backward that runs{where}",
                              got["output"], "torch's checkpoint compares what the recomputation saves with what the "
                              "forward saved: the recomputation runs the block in whatever mode it is in at backward; "
                              "put back the modes the forward ran in (module.training), and restore them after.")
        if got["output"] != "ok":
            raise CheckFailed(f"an output of shape {(tokens, d)}", got["output"], "return the block's output.")
        for name, grad in want["grads"].items():
            mine = got["grads"].get(name)
            if mine is None or not torch.allclose(mine, grad, atol=1e-5, rtol=1e-4):
                raise CheckFailed(f"the plain forward's gradient for {name} (dropout {p}, {tokens} tokens"
                                  + (", a validation forward in eval mode before the backward)" if evaluates else ")"),
                                  "a different or missing gradient",
                                  "the recomputation runs the block in whatever mode it is in at backward: put back "
                                  "the modes the forward ran in (module.training) for it, and restore them after."
                                  if evaluates else
                                  "the recomputation must draw the same dropout mask: checkpoint's preserve_rng_state.")
        for name in ("running_mean", "running_var"):
            if not torch.allclose(got[name], want[name], atol=1e-6):
                raise CheckFailed(f"BatchNorm's {name} updated once, as without checkpointing",
                                  "updated twice (forward and recomputation)",
                                  "during the recomputation, stop BatchNorm from updating its statistics, and "
                                  "restore it afterwards.")
        got_n, want_n = got["num_batches_tracked"], want["num_batches_tracked"]
        if got_n != want_n:
            raise CheckFailed(f"BatchNorm's num_batches_tracked = {want_n} after one step, as without checkpointing",
                              f"{got_n}", "the recomputation is a second forward in training mode: momentum 0 keeps "
                              "the running mean and variance but still counts the batch: put the count back "
                              "after the recomputation.")
        if got["saved"] > got["input_bytes"] + 4 * d * 4:
            raise CheckFailed(f"a checkpointed block that saves only its input ({got['input_bytes']:,} B)",
                              f"{got['saved']:,} B", "keep the checkpoint: fix it, do not remove it.")


def check_fixed_checkpoint(checkpointed_forward: Callable) -> Verdict:
    """Exercise 5.4: fix a checkpointed block that breaks dropout's randomness, BatchNorm's statistics, and the
    forward's mode when the step evaluates before its backward."""
    return run_check("5.4", lambda: expect_fixed_checkpoint(checkpointed_forward, [(16, 8, 0.5, 0, False),
                                                                                   (32, 16, 0.2, 1, True)]),
                     points=3)



# 5.5 -------------------------------------------------------------------------------------------------------------
MODES = ("none", "activation", "full")  # least recomputation first


class SwiGLUBlock(nn.Module):
    """A Llama-style MLP sub-block: x + down(silu(gate(h)) * up(h)) with h = RMSNorm(x), no biases. `mode` chooses
    what is recomputed: nothing, only the elementwise silu(g) * u (selective), or the whole block (full)."""

    def __init__(self, d: int, ffn: int) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(d)
        self.gate, self.up = nn.Linear(d, ffn, bias=False), nn.Linear(d, ffn, bias=False)
        self.down = nn.Linear(ffn, d, bias=False)

    def _body(self, x: torch.Tensor, selective: bool) -> torch.Tensor:
        h = self.norm(x)
        g, u = self.gate(h), self.up(h)
        if selective:
            p = checkpoint(lambda a, b: torch.nn.functional.silu(a) * b, g, u, use_reentrant=False)
        else:
            p = torch.nn.functional.silu(g) * u
        return x + self.down(p)

    def forward(self, x: torch.Tensor, mode: str = "none") -> torch.Tensor:
        if mode == "full":
            return checkpoint(self._body, x, False, use_reentrant=False)
        return self._body(x, mode == "activation")


def swiglu_truth(tokens: int, d: int, ffn: int, mode: str) -> int:
    """The FP32 bytes autograd saves for one SwiGLUBlock, measured on the meta device (exact, no memory)."""
    with torch.device("meta"):
        block = SwiGLUBlock(d, ffn)
        x = torch.randn(tokens, d, requires_grad=True)
    return saved_activation_bytes(lambda t: block(t, mode), x)


def cheapest_mode_truth(tokens: int, d: int, ffn: int, budget: int) -> str | None:
    return next((m for m in MODES if swiglu_truth(tokens, d, ffn, m) <= budget), None)


def expect_swiglu(swiglu_saved_bytes: Callable, choose_mode: Callable, cases: Sequence[tuple[int, int, int, int]]
                  ) -> None:
    """cases: (tokens, d_model, ffn_hidden, budget in bytes for choose_mode)."""
    # a formula, never a meter: measuring a re-typed block (on the meta device, at any size) would skip the exercise
    # (review s14b R14), so the course's meter and autograd's saved-tensor hooks are refused as well
    targets = (swiglu_truth, cheapest_mode_truth, SwiGLUBlock, saved_activation_bytes,
               torch.autograd.graph.saved_tensors_hooks)
    swiglu_saved_bytes, choose_mode = guarded(swiglu_saved_bytes, *targets), guarded(choose_mode, *targets)
    for tokens, d, ffn, budget in cases:
        for mode in MODES:
            expect_equal(swiglu_saved_bytes(tokens, d, ffn, mode), swiglu_truth(tokens, d, ffn, mode),
                         f"swiglu_saved_bytes(tokens={tokens}, d_model={d}, ffn_hidden={ffn}, mode={mode!r})",
                         hint={"none": "RMSNorm keeps its input, 1/rms per token and the normalised x (before its "
                                       "weight); gate and up share their input h; silu keeps g, the product keeps "
                                       "silu(g) and u, down keeps the product: 3d + 1 + 4f floats per token.",
                               "activation": "recomputing only silu(g) * u drops silu(g): the checkpoint keeps its "
                                             "inputs g and u, which exist anyway.",
                               "full": "a checkpointed block keeps only its input."}[mode])
        expect_equal(choose_mode(tokens, d, ffn, budget), cheapest_mode_truth(tokens, d, ffn, budget),
                     f"choose_mode(tokens={tokens}, d_model={d}, ffn_hidden={ffn}, budget={budget:,})",
                     hint="the least recomputation that fits: 'none', then 'activation', then 'full'; None if even "
                     "'full' does not fit.")


LLAMA_MLP = (8192, 4096, 14336)  # one Llama-3-8B MLP sub-block at 8,192 tokens


def check_swiglu(swiglu_saved_bytes: Callable, choose_mode: Callable) -> Verdict:
    """Exercise 5.5: checkpointing's accounting carried to a Llama SwiGLU MLP, full and selective, and a choice
    under a budget, up to a Llama-3-8B sub-block at 8,192 tokens (measured on the meta device)."""

    def body() -> None:
        expect_swiglu(swiglu_saved_bytes, choose_mode, [(8, 16, 40, 5000), (*LLAMA_MLP, 2 * 10**9)])

    return run_check("5.5", body, points=2)


# 5.6 -------------------------------------------------------------------------------------------------------------
def reference_vit_forward(vit: TinyViT, images: torch.Tensor) -> torch.Tensor:
    x = vit.embed(images)
    for block in vit.blocks:
        state = block.drop_path.generator.get_state()

        def run(h: torch.Tensor, block: nn.Module = block, state: torch.Tensor = state) -> torch.Tensor:
            block.drop_path.generator.set_state(state)  # the forward and its recomputation draw the same masks
            return block(h)

        x = checkpoint(run, x, use_reentrant=False)
    return vit.classify(x)


def expect_vit_checkpoint(vit_forward: Callable, cases: Sequence[tuple[int, int, int, int, float, int, int]]
                          ) -> None:
    """cases: (image size, patch, width, depth, drop-path rate, batch, seed). The learner's checkpointed forward
    must give a plain forward's gradients (same drop-path draws) while saving about one input per block. The step
    runs in a scene (utils.course.scenes.ch05): with the learner's forward, with the plain forward (gradients and
    generator states) and with the reference's checkpointed one (the bytes it saves)."""
    vit_forward = guarded(vit_forward, reference_vit_forward, direct=METER_HOOKS)
    for image, patch, d, depth, p, batch, seed in cases:
        case = (image, patch, d, depth, p, batch, seed)
        got = observe(vit_checkpoint_scene, vit_forward, *case)
        want = vit_checkpoint_scene(lambda vit, images: vit(images), *case)
        what = f"{depth} blocks, drop-path {p}, batch {batch}, {image}x{image} images in {patch}x{patch} patches"
        if got["output"] != "ok":
            raise CheckFailed(f"logits of shape {(batch, 10)}", got["output"])
        if got["frozen_grad"]:
            raise CheckFailed("the frozen patch embedding left frozen (no gradient)", "a gradient")
        for name, mine in got["grads"].items():
            if mine is None:
                raise CheckFailed(f"a gradient for {name} ({what})", "None",
                                  "a reentrant checkpoint whose inputs do not require grad (the frozen patch "
                                  "embedding's output) gives its block no parameter gradients: "
                                  "use_reentrant=False.")
            grad = want["grads"].get(name)
            if grad is None or not torch.allclose(mine, grad, atol=1e-5, rtol=1e-4):
                raise CheckFailed(f"the plain forward's gradient for {name} ({what})", "a different gradient",
                                  "the recomputation must draw the same drop-path decisions as the forward; "
                                  "preserve_rng_state replays torch's default generators only: which generator "
                                  "does DropPath draw from?")
        if len(got["generators"]) != len(want["generators"]) or not all(
                torch.equal(mine, state) for mine, state in zip(got["generators"], want["generators"], strict=True)):
            raise CheckFailed(f"each block's drop-path generator where a plain step leaves it ({what})",
                              "another state", "the next step must draw what a run without checkpoints "
                              "draws: do not re-seed the generator, replay its state.")
        limit = vit_checkpoint_scene(reference_vit_forward, *case)["saved"]
        if got["saved"] > limit + 1024:
            raise CheckFailed(f"a checkpointed forward that saves about one input per block ({limit:,} B in all)",
                              f"{got['saved']:,} B", "keep a checkpoint per block: fix it, do not remove it.")


def check_vit_checkpoint(vit_forward: Callable) -> Verdict:
    """Exercise 5.6: fix a colleague's checkpointed ViT fine-tuning forward (frozen embedding, stochastic depth)."""
    return run_check("5.6", lambda: expect_vit_checkpoint(vit_forward, [(16, 4, 32, 4, 0.3, 8, 0),
                                                                      (8, 2, 16, 3, 0.5, 4, 1)]), points=2)
