"""Chapter 08's claim verdicts: C13 (FP8 ranges), C27 (FP8 throughput on Hopper), C28 (FP8 halves memory)."""

from __future__ import annotations

from utils.course.verdicts import Judged, judge, verdict
from utils.validate import check_number, check_str

C13_CRITERION = "holds if the largest finite E4M3 value is 448 and E5M2's 57,344, each within 1%"


@judge("C13", criterion=C13_CRITERION, examples=[
    {"e4m3_max": 448.0, "e5m2_max": 57344.0},
    {"e4m3_max": 240.0, "e5m2_max": 57344.0},  # float8_e4m3fnuz: the AMD variant's range
])
def c13(e4m3_max: float, e5m2_max: float) -> Judged:
    """C13 from the formats' largest finite values (torch.finfo)."""
    e4m3_max = check_number("e4m3_max", e4m3_max, positive=True)
    e5m2_max = check_number("e5m2_max", e5m2_max, positive=True)
    ok = abs(e4m3_max / 448 - 1) <= 0.01 and abs(e5m2_max / 57344 - 1) <= 0.01
    return verdict("holds" if ok else "fails", C13_CRITERION, f"E4M3 max {e4m3_max:g}, E5M2 max {e5m2_max:g}")


C27_CRITERION = ("a claim about training steps: holds if a timed FP8 training step reaches at least 1.6x BF16's "
                 "throughput on the GPU; from FP8 matmuls (torch._scaled_mm) alone, partly if they reach 1.1x BF16's "
                 "at some size (what the GEMMs allow, not what a step gains) and fails below 1.1x")


@judge("C27", criterion=C27_CRITERION, examples=[
    {"best_ratio": 1.9, "device": "H100", "step_ratio": 1.7},
    {"best_ratio": 1.9, "device": "H100"},
    {"best_ratio": 1.3, "device": "L4"},
    {"best_ratio": 0.9, "device": "L4"},
    {"best_ratio": None, "device": "CPU"},
    {"best_ratio": None, "device": "H100", "error": "RuntimeError: unsupported"},
])
def c27(best_ratio: float | None, device: str, error: str = "", step_ratio: float | None = None) -> Judged:
    """C27 from the best FP8 / BF16 matmul throughput ratio over sizes (None: not measured on `device`) and, where
    one was timed, a training step's FP8 / BF16 throughput ratio (the claim's own measure)."""
    check_str("device", device)
    check_str("error", error, non_empty=False)
    if best_ratio is None:
        if error:  # issue 33, bug 8: not "depends" (no condition makes it hold): the measurement failed
            return verdict("not measured", C27_CRITERION, f"the FP8 GPU ({device}) is there, but torch._scaled_mm "
                           f"failed on it, so nothing was timed: {error}")
        return verdict("needs GPU", C27_CRITERION,
                       f"{device} has no FP8 Tensor Cores: needs compute capability 8.9+ (L4, L40S, H100); chapter "
                       "08, sections 6 and 7, times torch._scaled_mm against BF16 and "
                       "Transformer Engine's steps")
    ratio = check_number("best_ratio", best_ratio, positive=True)
    if step_ratio is not None:
        step = check_number("step_ratio", step_ratio, positive=True)
        name = "holds" if step >= 1.6 else "partly" if step >= 1.1 else "fails"
        return verdict(name, C27_CRITERION, f"a training step {step:.2f}x BF16's throughput on {device} (matmuls "
                       f"alone up to {ratio:.2f}x)")
    name = "partly" if ratio >= 1.1 else "fails"
    return verdict(name, C27_CRITERION, f"best FP8/BF16 {ratio:.2f}x on {device}, matmuls alone: no training step "
                   "was timed, and a step also casts, computes amaxes and runs non-GEMM ops")


C28_CRITERION = ("holds if every measured FP8/BF16 byte ratio (a stored tensor, what a Linear saves for backward) "
                 "is at most 0.55; partly if a stored tensor halves but a layer's saved bytes do not; fails if "
                 "not even a stored tensor halves")


@judge("C28", criterion=C28_CRITERION, examples=[
    {"tensor_ratio": 0.5, "saved_ratios": {"FP8 operands saved": 0.5}},
    {"tensor_ratio": 0.5, "saved_ratios": {"torchao eager": 1.0}},
    {"tensor_ratio": 1.0, "saved_ratios": {}},
])
def c28(tensor_ratio: float, saved_ratios: dict[str, float]) -> Judged:
    """C28 from FP8/BF16 byte ratios: one stored tensor, and the bytes each measured Linear saves for backward."""
    tensor_ratio = check_number("tensor_ratio", tensor_ratio, positive=True)
    if not isinstance(saved_ratios, dict):
        raise TypeError(f"saved_ratios must be a dict of layer -> FP8/BF16 saved-bytes ratio, "
                        f"got {type(saved_ratios).__name__}")
    for key, value in saved_ratios.items():
        check_number(f"saved_ratios[{key!r}]", value, positive=True)
    detail = f"a stored tensor x{tensor_ratio:.2f}" + "".join(f"; {k} x{v:.2f}" for k, v in saved_ratios.items())
    if tensor_ratio > 0.55:
        return verdict("fails", C28_CRITERION, detail)
    if all(v <= 0.55 for v in saved_ratios.values()):
        return verdict("holds", C28_CRITERION, detail)
    return verdict("partly", C28_CRITERION, detail + " (weights, gradients and optimizer states keep their "
                   "precision in every case)")
