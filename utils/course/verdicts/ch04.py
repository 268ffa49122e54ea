"""Chapter 04's claim verdicts (automatic mixed precision): C16, C17, C18, C19 (C03 is chapter 01's: one criterion,
judged once; chapter 04 measures what that verdict leaves open, the peak).

Each function takes what the chapter measured and returns a `Judged` whose note states the criterion. C17 and C19
are about Tensor Cores: without them (a CPU, an Apple GPU) the verdict is "needs GPU" and the note says what the
claim needs and which cell of chapter 04 judges it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from utils.course.verdicts import Judged, judge, verdict

_JUDGED_IN = "chapter 04, section 11 (the claims cell), from section 5's GPT runs"


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    return float(value)


C16_CRITERION = ("holds when every BF16-autocast run without a loss scaler ends finite and, seed by seed, within "
                 "the FP32 runs' seed-to-seed standard deviation of the FP32 final loss; fails otherwise")


@judge("C16", criterion=C16_CRITERION,
       examples=[{"fp32_final": [2.50, 2.60, 2.55], "bf16_final": [2.51, 2.59, 2.55]},
                 {"fp32_final": [2.50, 2.60, 2.55], "bf16_final": [2.70, 2.80, 2.75]},
                 {"fp32_final": [2.50, 2.60, 2.55], "bf16_final": [math.nan, 2.60, 2.55]}])
def c16(fp32_final: Sequence[float], bf16_final: Sequence[float]) -> Judged:
    """C16 (BF16 needs no loss scaling) from final losses of FP32 and unscaled BF16-autocast runs, one per seed."""
    if not all(isinstance(v, Sequence) and not isinstance(v, str) for v in (fp32_final, bf16_final)):
        raise TypeError("fp32_final and bf16_final must be sequences of final losses, one per seed")
    if len(fp32_final) < 2 or len(fp32_final) != len(bf16_final):
        raise ValueError("fp32_final and bf16_final must have the same length, at least 2 seeds")
    fp32 = [_number("fp32_final", v) for v in fp32_final]
    bf16 = [_number("bf16_final", v) for v in bf16_final]
    spread = statistics.stdev(fp32)
    if not all(math.isfinite(v) for v in bf16):
        return verdict("fails", C16_CRITERION, "a BF16 run without a scaler ended non-finite")
    gap = max(abs(b - f) for b, f in zip(bf16, fp32, strict=True))
    name = "holds" if gap <= spread else "fails"
    return verdict(name, C16_CRITERION, f"largest per-seed gap {gap:.2g} against a seed spread of {spread:.2g} "
                   f"over {len(fp32)} seeds")


C17_CRITERION = ("on a GPU with Tensor Cores: holds when the mixed-precision step's peak memory is at most 0.55x "
                 "FP32's and its step time at most 0.55x; partly when one of the two is; fails when neither is")


@judge("C17", criterion=C17_CRITERION,
       examples=[{"memory_ratio": 0.5, "time_ratio": 0.5, "has_tensor_cores": True},
                 {"memory_ratio": 0.8, "time_ratio": 0.4, "has_tensor_cores": True},
                 {"memory_ratio": 0.8, "time_ratio": 0.9, "has_tensor_cores": True},
                 {"memory_ratio": 0.75, "time_ratio": 2.9, "has_tensor_cores": False}])
def c17(memory_ratio: float, time_ratio: float, has_tensor_cores: bool) -> Judged:
    """C17 (mixed precision halves memory and doubles throughput): ratios mixed / FP32 of peak memory and step
    time, measured on one device."""
    mem, t = _number("memory_ratio", memory_ratio), _number("time_ratio", time_ratio)
    if not isinstance(has_tensor_cores, bool):
        raise TypeError(f"has_tensor_cores must be a bool, got {type(has_tensor_cores).__name__}")
    if not has_tensor_cores:
        return verdict("needs GPU", C17_CRITERION,
                       f"needs a CUDA GPU with Tensor Cores (FP16 from capability 7.0, BF16 from 8.0); judged in "
                       f"{_JUDGED_IN}; here memory x{mem:.2f}, step time x{t:.2f} say nothing about Tensor Cores")
    met = (mem <= 0.55) + (t <= 0.55)
    return verdict(("fails", "partly", "holds")[met], C17_CRITERION, f"memory x{mem:.2f}, step time x{t:.2f}")


C18_CRITERION = ("holds when matmuls come out in the half type and softmax, layer norm and the loss in FP32 when "
                 "given half-precision inputs; partly when matmuls and the loss do but softmax or layer norm keep "
                 "the half type; fails otherwise")


@judge("C18", criterion=C18_CRITERION,
       examples=[{"out_dtypes": {"matmul": "bfloat16", "softmax": "float32", "layer_norm": "float32",
                                 "loss": "float32"}},
                 {"out_dtypes": {"matmul": "bfloat16", "softmax": "bfloat16", "layer_norm": "bfloat16",
                                 "loss": "float32"}},
                 {"out_dtypes": {"matmul": "float32", "softmax": "float32", "layer_norm": "float32",
                                 "loss": "float32"}}])
def c18(out_dtypes: Mapping[str, str]) -> Judged:
    """C18 (autocast's op policy) from the output dtypes of a matmul, softmax, layer norm and a loss, each run under
    autocast with half-precision inputs."""
    if not isinstance(out_dtypes, Mapping):
        raise TypeError(f"out_dtypes must be a mapping op -> dtype name, got {type(out_dtypes).__name__}")
    missing = {"matmul", "softmax", "layer_norm", "loss"} - set(out_dtypes)
    if missing:
        raise ValueError(f"out_dtypes must name matmul, softmax, layer_norm and loss; missing {sorted(missing)}")
    half = out_dtypes["matmul"] in ("bfloat16", "float16")
    if half and all(out_dtypes[k] == "float32" for k in ("softmax", "layer_norm", "loss")):
        name = "holds"
    elif half and out_dtypes["loss"] == "float32":
        name = "partly"
    else:
        name = "fails"
    return verdict(name, C18_CRITERION, ", ".join(f"{k} -> {v}" for k, v in out_dtypes.items()))


C19_CRITERION = ("on a GPU with Tensor Cores: holds when FP32's step time over the mixed-precision step time is at "
                 "least 2; partly between 1.2 and 2 (faster, less than claimed); fails below 1.2")


@judge("C19", criterion=C19_CRITERION,
       examples=[{"speedup": 2.4, "has_tensor_cores": True}, {"speedup": 1.5, "has_tensor_cores": True},
                 {"speedup": 1.0, "has_tensor_cores": True}, {"speedup": 0.3, "has_tensor_cores": False}])
def c19(speedup: float, has_tensor_cores: bool) -> Judged:
    """C19 (2-3x speed-up on Tensor Core GPUs) from FP32 step time / mixed-precision step time."""
    s = _number("speedup", speedup)
    if not isinstance(has_tensor_cores, bool):
        raise TypeError(f"has_tensor_cores must be a bool, got {type(has_tensor_cores).__name__}")
    if not has_tensor_cores:
        return verdict("needs GPU", C19_CRITERION,
                       f"needs a CUDA GPU with Tensor Cores and a model large enough to be compute-bound; judged in "
                       f"{_JUDGED_IN}; the {s:.2f}x measured here is not a Tensor Core figure")
    name = "holds" if s >= 2 else "partly" if s >= 1.2 else "fails"
    return verdict(name, C19_CRITERION, f"measured {s:.2f}x" + (" (above the claimed 3x)" if s > 3 else ""))
