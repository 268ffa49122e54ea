"""Chapter 07's claim verdicts: C26 (`torch.cuda.empty_cache()` frees memory for your own tensors)."""

from __future__ import annotations

from utils.course.verdicts import Judged, judge, verdict
from utils.validate import check_int

C26_CRITERION = ("holds if empty_cache() lowers allocated memory (the bytes your tensors hold); fails if allocated "
                 "stays where it was (it can only return cached, unused segments: reserved falls instead)")


@judge("C26", criterion=C26_CRITERION, examples=[
    {"allocated_before": 64 << 20, "allocated_after": 64 << 20, "reserved_before": 320 << 20,
     "reserved_after": 64 << 20},
    {"allocated_before": 320 << 20, "allocated_after": 64 << 20, "reserved_before": 320 << 20,
     "reserved_after": 64 << 20},
    {"on_cuda": False},
])
def c26(allocated_before: int = 0, allocated_after: int = 0, reserved_before: int = 0, reserved_after: int = 0,
        on_cuda: bool = True) -> Judged:
    """C26 from allocated and reserved bytes measured just before and after `torch.cuda.empty_cache()`."""
    if not isinstance(on_cuda, bool):
        raise TypeError(f"on_cuda must be a bool, got {type(on_cuda).__name__}")
    if not on_cuda:
        return verdict("needs GPU", C26_CRITERION,
                       "needs CUDA's caching allocator: chapter 07, section 8 (cell [49]), measures allocated and "
                       "reserved around empty_cache() on a CUDA GPU (a model of the allocator shows the mechanism, "
                       "not the verdict)")
    for name, value in (("allocated_before", allocated_before), ("allocated_after", allocated_after),
                        ("reserved_before", reserved_before), ("reserved_after", reserved_after)):
        check_int(name, value, minimum=0)
    mib = 2**20
    detail = (f"allocated {allocated_before / mib:.0f} -> {allocated_after / mib:.0f} MiB, reserved "
              f"{reserved_before / mib:.0f} -> {reserved_after / mib:.0f} MiB")
    if allocated_after < allocated_before:
        return verdict("holds", C26_CRITERION, detail)
    if reserved_after < reserved_before:
        return verdict("fails", C26_CRITERION, detail + ": it released cache, not tensors")
    return verdict("fails", C26_CRITERION, detail + ": it released no tensor, and here no cache either (no cached "
                   "segment was free of live blocks)")
