"""The chapter map and what each chapter can do on a given device.

Chapter 00 shows the support of the machine it runs on; the README's support matrix is printed by
`python -m utils.course.chapters --matrix` from the same function, so the two never disagree.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from utils.lessons.env import capability_gates
from utils.lessons.tables import format_table
from utils.validate import check_choice, check_int


@dataclass(frozen=True)
class Chapter:
    number: str
    slug: str
    title: str


CHAPTERS: tuple[Chapter, ...] = (
    Chapter("00", "setup_and_environment", "Setup and environment"),
    Chapter("01", "where_the_memory_goes", "Where the memory goes"),
    Chapter("02", "number_formats", "Number formats, bit by bit"),
    Chapter("03", "loss_scaling", "Loss scaling"),
    Chapter("04", "automatic_mixed_precision", "Automatic mixed precision"),
    Chapter("05", "gradient_checkpointing", "Gradient checkpointing"),
    Chapter("06", "gradient_accumulation", "Gradient accumulation"),
    Chapter("07", "memory_profiling", "Memory profiling"),
    Chapter("08", "fp8_transformer_engine", "FP8 and Transformer Engine"),
    Chapter("09", "capstone_fit_a_model", "Fit a model on one GPU"),
    Chapter("10", "beyond_one_gpu", "Beyond one GPU"),
)

# Well-known GPUs of workshop hosts: (name, compute capability, memory in GB as sold).
REFERENCE_GPUS: tuple[tuple[str, tuple[int, int], int], ...] = (
    ("T4", (7, 5), 16),
    ("A10G", (8, 6), 24),
    ("A100", (8, 0), 80),
    ("H100", (9, 0), 80),
)


# Chapters whose lesson is not BF16 but which run BF16 autocast parts (measured in the notebooks): below 8.0 those
# parts run, emulated, so the chapter is partial there, not native.
BF16_PARTS = {
    "01": "the BF16-autocast bytes per parameter and the estimator's bf16-mixed steps",
    "09": "the BF16 LoRA/NF4 runs",
}

MPS_NOTES = {
    "00": "device table with torch.mps memory; matmul timing on the Apple GPU",
    "01": "exact bytes of every part; peak by category with MemTracker (no allocator peak on MPS)",
    "02": "every bit pattern exact; FP16/BF16 matmuls on the Apple GPU; no FP8, no TF32",
    "03": "underflow fractions and scaler equivalence exact",
    "04": "autocast('mps') op dtypes; no Tensor Core speed-up to measure",
    "05": "saved bytes exact; timings on the Apple GPU",
    "06": "gradient equality exact; DDP on 2 gloo processes (CPU)",
    "07": "torch.profiler timeline and torch.mps counters; no CUDA allocator views (snapshot, memory_stats)",
    "08": "no FP8 on MPS: FP8 emulated with torch float8 dtypes on the CPU",
    "09": "byte budget checked with the estimator; peaks with MemTracker",
    "10": "the ledger's bytes exact; FSDP2 on 2 gloo processes (CPU)",
}


def chapter_support(chapter: str, capability: tuple[int, int] | None, te_available: bool | None = None, *,
                    device: str | None = None) -> str:
    """How chapter `chapter` ("00".."10") runs at `capability` (None: no CUDA GPU).

    Returns "native", or "partial: <what is missing and why>", or "CPU: <what is measured instead>",
    or "MPS: <what runs on an Apple GPU>" when device="mps" (capability must be None then).
    `te_available` None means "unknown" (the README's matrix: Transformer Engine if installed).
    """
    numbers = [c.number for c in CHAPTERS]
    if chapter not in numbers:
        raise ValueError(f"chapter must be one of {numbers}, got {chapter!r}")
    if device is not None:
        check_choice("device", device, ("cuda", "mps", "cpu"))
    if te_available is not None and not isinstance(te_available, bool):
        raise TypeError(f"te_available must be True, False or None, got {type(te_available).__name__}")
    gates = capability_gates(capability)
    if device == "mps":
        if capability is not None:
            raise ValueError(f"an Apple GPU has no CUDA compute capability: capability must be None, got {capability}")
        return "MPS: " + MPS_NOTES[chapter]
    if device == "cuda" and capability is None:
        raise ValueError("device='cuda' needs the GPU's compute capability")
    if capability is None:
        cpu_notes = {
            "00": "device table, matmul timing and saved bytes on CPU",
            "01": "exact bytes of every part; peak by category with MemTracker",
            "02": "every bit pattern exact; no Tensor Core throughput",
            "03": "underflow fractions and scaler equivalence exact",
            "04": "op dtypes under CPU autocast; half-precision speed is not representative",
            "05": "saved bytes exact; timings labelled CPU",
            "06": "gradient equality exact; DDP on 2 gloo processes",
            "07": "torch.profiler memory timeline; no CUDA allocator",
            "08": "FP8 emulated with torch float8 dtypes; no FP8 matmul speed",
            "09": "byte budget checked with the estimator; peaks with MemTracker",
            "10": "the ledger's bytes exact; FSDP2 on 2 gloo processes",
        }
        return "CPU: " + cpu_notes[chapter]
    missing = []
    if chapter in ("02", "04") and not gates.bf16_native:
        missing.append("BF16 emulated (needs 8.0+), no TF32")
    if chapter in BF16_PARTS and not gates.bf16_native:
        missing.append(f"BF16 emulated (needs 8.0+) in {BF16_PARTS[chapter]}")
    if chapter in ("02", "08") and not gates.fp8:
        missing.append("no FP8 Tensor Cores (needs 8.9+): FP8 emulated")
    if chapter == "08" and gates.fp8 and te_available is False:
        missing.append("Transformer Engine not importable: torch._scaled_mm only")
    if chapter == "08" and gates.fp8 and te_available is None:
        return "native (Transformer Engine if installed)"
    return "partial: " + "; ".join(missing) if missing else "native"


def support_matrix() -> str:
    """The README's support matrix as a Markdown table: chapters by CPU, Apple GPU (MPS) and reference GPUs."""
    headers = ["chapter", "CPU", "Apple GPU (MPS)"] + [f"{name} ({cap[0]}.{cap[1]})" for name, cap, _ in REFERENCE_GPUS]
    rows = []
    for ch in CHAPTERS:
        row = [f"{ch.number} {ch.title}", chapter_support(ch.number, None),
               chapter_support(ch.number, None, device="mps")]
        row += [chapter_support(ch.number, cap) for _, cap, _ in REFERENCE_GPUS]
        rows.append(row)
    return format_table(rows, headers)


def support_by_device(width: int = 100) -> str:
    """The support matrix for a terminal: one block per device, a line per chapter, wrapped at `width` columns (the
    README's table is wider than any terminal: `make report` prints this)."""
    import textwrap

    check_int("width", width, minimum=60)
    devices = [("CPU", None, "cpu"), ("Apple GPU (MPS)", None, "mps")] + [
        (f"{name} (compute capability {cap[0]}.{cap[1]})", cap, "cuda") for name, cap, _ in REFERENCE_GPUS]
    indent = max(len(f"{ch.number} {ch.title}") for ch in CHAPTERS) + 4
    blocks = []
    for label, cap, device in devices:
        lines = [label]
        for ch in CHAPTERS:
            support = chapter_support(ch.number, cap, device=device) if device == "mps" else \
                chapter_support(ch.number, cap)
            lines.append(textwrap.fill(support, width, initial_indent=f"  {ch.number} {ch.title}".ljust(indent),
                                       subsequent_indent=" " * indent))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--matrix", action="store_true", help="print the README's support matrix (a wide table)")
    parser.add_argument("--by-device", action="store_true", help="the same, one block per device, 100 columns wide")
    args = parser.parse_args(argv)
    if args.by_device:
        print(support_by_device())
    elif args.matrix:
        print(support_matrix())
    else:
        print(format_table([(c.number, c.slug, c.title) for c in CHAPTERS], ["NN", "notebook", "title"]))


if __name__ == "__main__":
    main()
