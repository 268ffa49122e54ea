"""Parallelism beyond data parallel, as ledger terms: the activation bytes per GPU of a GPT-style layer under
tensor parallelism, sequence parallelism, selective or full recomputation, and pipeline schedules.

Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", arXiv:2205.05198
(https://arxiv.org/abs/2205.05198), section 4 and Table 2: with s tokens per sequence, b sequences per
micro-batch, h hidden size, a heads and t tensor-parallel ranks, one layer saves (16-bit activations, 1-byte
dropout masks, eager attention)

    no parallelism                      sbh (34 + 5as/h)
    tensor parallel                     sbh (10 + 24/t + 5as/(ht))
    tensor + sequence parallel          sbh (34/t + 5as/(ht))
    tensor parallel + selective recomp. sbh (10 + 24/t)
    tensor + sequence + selective       sbh (34/t)
    full recomputation                  2 sbh  (the layer's input only)

Pipeline parallelism over p stages: under 1F1B the first stage keeps p micro-batches in flight, each through L/p
layers, so it holds L layers' activations whatever p is (section 4.2.3); the interleaved schedule with m model
chunks per stage holds L (1 + (p - 1)/(p m)) layers' worth.

The same paper's section 6.1 / Figure 7 reads each technique as a percentage of the tensor-parallel baseline
(its Equation 2): `fraction_of_tensor_parallel`. Its Appendix A counts the FLOPs of one iteration (matrix
multiplications only): model FLOPs 72 B L s h^2 (1 + s/(6h) + v/(12 h L)) (Equation 7), and hardware FLOPs,
which add what is recomputed: with selective recomputation 72 B L s h^2 (1 + s/(3h) + v/(12 h L)) (Equation 8,
which counts the attention matrix and attention over values of forward and backward twice); full recomputation
re-runs every layer's forward, 24 B L s h^2 (1 + s/(6h)) more, i.e. 96 B L s h^2 (1 + s/(6h) + v/(16 h L))
(Narayanan et al. 2021, arXiv:2104.04473, Equation 3): `iteration_flops`; MFU and HFU divide them by
time x GPUs x peak: `flops_utilization`. The paper's text was read from its arXiv v1 PDF as stored in
github.com/danielvegamyhre/ml-scalability-and-performance-reading-group, session_9/.
"""

from __future__ import annotations

from utils.validate import check_bool, check_choice, check_int, check_number

RECOMPUTE = ("none", "selective", "full")
SCHEDULES = ("1f1b", "interleaved")


def layer_activation_bytes(s: int, b: int, h: int, a: int, *, t: int = 1, sequence_parallel: bool = False,
                           recompute: str = "none") -> float:
    """Bytes one transformer layer saves for backward per GPU (Korthikanti et al., Table 2), in bytes."""
    for name, value in (("s", s), ("b", b), ("h", h), ("a", a), ("t", t)):
        check_int(name, value, minimum=1)
    check_bool("sequence_parallel", sequence_parallel)
    check_choice("recompute", recompute, RECOMPUTE)
    if sequence_parallel and t == 1:
        raise ValueError("sequence_parallel needs t > 1 (it splits the tensor-parallel region's rest over t)")
    return _layer_activation_bytes(s, b, h, a, t=t, sequence_parallel=sequence_parallel, recompute=recompute)


def _layer_activation_bytes(s: int, b: int, h: int, a: int, *, t: int = 1, sequence_parallel: bool = False,
                           recompute: str = "none") -> float:
    if recompute == "full":
        return 2 * s * b * h / (t if sequence_parallel else 1)
    attention = 0.0 if recompute == "selective" else 5 * a * s / (h * t)
    linear = 34 / t if sequence_parallel else 10 + 24 / t
    return s * b * h * (linear + attention)


def pipeline_layers_held(n_layer: int, stages: int, *, schedule: str = "1f1b", chunks: int = 1) -> float:
    """Layers' worth of activations the first pipeline stage holds at its peak (section 4.2.3): 1F1B keeps
    `stages` micro-batches in flight through n_layer/stages layers each (= n_layer); the interleaved schedule
    with `chunks` model chunks per stage holds n_layer (1 + (stages - 1)/(stages x chunks))."""
    check_int("n_layer", n_layer, minimum=1)
    check_int("stages", stages, minimum=1)
    check_choice("schedule", schedule, SCHEDULES)
    check_int("chunks", chunks, minimum=1)
    if n_layer % stages:
        raise ValueError(f"n_layer ({n_layer}) must be divisible by stages ({stages})")
    if schedule == "1f1b":
        if chunks != 1:
            raise ValueError("chunks > 1 is the interleaved schedule: pass schedule='interleaved'")
        return float(n_layer)
    return n_layer * (1 + (stages - 1) / (stages * chunks))


def activation_bytes_per_gpu(s: int, b: int, h: int, a: int, n_layer: int, *, t: int = 1, p: int = 1,
                             sequence_parallel: bool = False, recompute: str = "none", schedule: str = "1f1b",
                             chunks: int = 1) -> float:
    """The first pipeline stage's activation bytes (the most loaded GPU): one layer's bytes times the layers'
    worth it holds (the embedding and output layers aside)."""
    check_int("p", p, minimum=1)
    per_layer = layer_activation_bytes(s, b, h, a, t=t, sequence_parallel=sequence_parallel, recompute=recompute)
    return per_layer * pipeline_layers_held(n_layer, p, schedule=schedule, chunks=chunks)



def fraction_of_tensor_parallel(s: int, b: int, h: int, a: int, *, t: int) -> dict[str, float]:
    """Activation memory of each technique as a fraction of the tensor-parallel baseline (Korthikanti et al.,
    Equation 2, section 6.1 / Figure 7): keys "sequence_parallel", "selective" (with tensor parallelism alone),
    "sequence_parallel+selective" and "full" (full recomputation, 2sbh). Dimensionless (bytes over bytes). The
    number of layers and the pipeline schedule multiply every technique alike, so these per-layer ratios are also
    the first pipeline stage's; the paper's extra embedding/output terms (section 4.3, < 0.01%) and its output-
    tensor deallocation (Appendix B, which its Figure 7 includes) are not in them."""
    check_int("t", t, minimum=2)  # sequence parallelism needs a tensor-parallel group
    baseline = layer_activation_bytes(s, b, h, a, t=t)  # checks the arguments; the rest trusts them
    settings = {"sequence_parallel": {"sequence_parallel": True}, "selective": {"recompute": "selective"},
                "sequence_parallel+selective": {"sequence_parallel": True, "recompute": "selective"},
                "full": {"recompute": "full"}}
    return {name: _layer_activation_bytes(s, b, h, a, t=t, **kw) / baseline for name, kw in settings.items()}


def iteration_flops(batch: int, n_layer: int, s: int, h: int, vocab: int, *, recompute: str = "none") -> float:
    """FLOPs of one training iteration (forward + backward of `batch` sequences of `s` tokens; GEMMs only, 4h MLP),
    Korthikanti et al. Appendix A: recompute="none" gives the model FLOPs (Equation 7, the numerator of MFU);
    "selective" the hardware FLOPs with selective recomputation as its Equation 8 counts them, 12 B s^2 h more
    per layer (the attention matrix and attention over values of forward and backward again: the paper's Table 5
    HFU and its 2.7% / 1.6% follow Equation 8, though its prose names only the extra forward, 4 B s^2 h);
    "full" with full recomputation (one more forward of every layer: 96 B L s h^2 (1 + s/(6h) + v/(16 h L)))."""
    for name, value in (("batch", batch), ("n_layer", n_layer), ("s", s), ("h", h), ("vocab", vocab)):
        check_int(name, value, minimum=1)
    check_choice("recompute", recompute, RECOMPUTE)
    # one layer's forward: QKV 6 + output projection 2 + MLP 16 (x B s h^2); scores 2 + over values 2 (x B s^2 h)
    layer_forward = 24 * batch * s * h * h + 4 * batch * s * s * h
    logits_forward = 2 * batch * s * h * vocab
    flops = 3 * (n_layer * layer_forward + logits_forward)  # backward = 2 x forward
    if recompute == "selective":
        flops += n_layer * 12 * batch * s * s * h  # Equation 8: 72 B L s h^2 (1 + s/(3h) + v/(12 h L))
    elif recompute == "full":
        flops += n_layer * layer_forward
    return float(flops)


def flops_utilization(flops: float, seconds: float, gpus: int, peak_flops_per_gpu: float) -> float:
    """FLOPs per iteration / (iteration seconds x GPUs x each GPU's peak FLOP/s), as a fraction (PaLM's MFU with
    model FLOPs, HFU with hardware FLOPs; Korthikanti et al. section 6.3)."""
    check_number("flops", flops, positive=True)
    check_number("seconds", seconds, positive=True)
    check_int("gpus", gpus, minimum=1)
    check_number("peak_flops_per_gpu", peak_flops_per_gpu, positive=True)
    return flops / (seconds * gpus * peak_flops_per_gpu)
