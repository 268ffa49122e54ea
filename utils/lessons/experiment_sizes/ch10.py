"""Chapter 10's sizes (capstone II: beyond one GPU).

The one measured experiment is FSDP2 on 2 gloo processes, always on the CPU (an MLP stack, `utils.lessons.fsdp_demo`);
the rest of the chapter is the ledger (`utils.ledger.plan`), bytes computed for 7B and 70B models, no tensor allocated.
So chapter 10 puts nothing on a GPU: `footprints` is empty and `work` lists no GPU work.
"""

from __future__ import annotations

from utils.lessons.sizes import TIERS, pick
from utils.lessons.time_model import Work

# FSDP2 on gloo processes (CPU): width and depth of the MLP stack.
FSDP_WIDTH = pick(32, {t: 128 for t in TIERS}, tiny=16)
FSDP_DEPTH = pick(3, {t: 4 for t in TIERS}, tiny=2)


def footprints(tier: int) -> dict[str, int]:
    """Predicted peak bytes of each full-size GPU experiment of chapter 10 on a GPU of `tier` GiB: none (the FSDP2
    run is on CPU processes, the rest is arithmetic)."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    return {}


def work(tier: int) -> list[Work]:
    """Chapter 10's full-size GPU work (utils.lessons.time_model): none; its 2-process gloo run is a fixed cost."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    return []
