"""The planner's errors found against the outside world (the real steps are in tests/test_real_steps.py): each test
here fails on the ledger before the fix."""

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from utils.ledger.architectures import HF_CONFIGS, shape_of_model
from utils.ledger.budget import GIB, REPORTED_GIB, usable_budget
from utils.ledger.gpt import sdpa_attention, shape_of, transformer_activation_bytes
from utils.ledger.plan import Choice, plan, step_moments
from utils.lessons.estimate import estimate_memory, hf_model_on_meta, traced_memory
from utils.lessons.measure import saved_activation_bytes
from utils.lessons.models import GPT, GPTConfig, gpt_batch

LLAMA3 = shape_of_model("Llama-3-8B", 4096)


def test_with_several_gpus_sharding_comes_before_8_bit_adamw():
    """Sharding keeps AdamW's arithmetic exact; 8-bit AdamW changes it. Llama-3-8B on 8 x H100 (full fine-tuning):
    the plan shards (ZeRO-1 already fits) with 32-bit AdamW, where it used to answer 8-bit AdamW + ZeRO-2."""
    p = plan(LLAMA3, usable_budget(int(REPORTED_GIB["H100 (80 GB)"] * GIB)), 32, n_gpus=8, allow_lora=False,
             allow_offload=False)
    assert p.fits and p.choice.optimizer == "adamw" and p.choice.sharding != "none"
    labels = [reason for reason, _ in p.history]
    assert not any("8-bit" in label for label in labels)


def test_the_interleaved_schedule_needs_micro_batches_divisible_by_stages():
    """Megatron-LM refuses the interleaved schedule when the micro-batches do not divide by the stages (with fewer
    micro-batches than stages the ledger counted 11.39 GiB where the schedule holds less)."""
    with pytest.raises(ValueError, match="accumulation"):
        Choice(precision="bf16", pipeline_stages=4, pipeline_chunks=2, accumulation=2)
    with pytest.raises(ValueError, match="accumulation"):
        Choice(precision="bf16", pipeline_stages=4, pipeline_chunks=2, accumulation=6)
    Choice(precision="bf16", pipeline_stages=4, pipeline_chunks=2, accumulation=8)  # fine
    Choice(precision="bf16", pipeline_stages=4, accumulation=2)  # 1F1B: fewer in flight, modelled


def test_sdpa_kernel_by_capability_and_dtype():
    """BF16 below compute capability 8.0 (a T4, a V100): flash needs 8.0 and the memory-efficient kernel takes BF16
    only from 8.0, so SDPA runs its math kernel, which keeps the T x T probabilities."""
    assert sdpa_attention("bf16-mixed", (7, 5)) == sdpa_attention("bf16", (7, 0)) == "sdpa-math"
    assert sdpa_attention("fp16-mixed", (7, 5)) == sdpa_attention("fp32", (7, 5)) == "sdpa"
    assert sdpa_attention("bf16-mixed", (8, 0)) == sdpa_attention("bf16", (9, 0)) == "sdpa"
    assert sdpa_attention("bf16") == "sdpa"  # a CPU
    with pytest.raises(TypeError, match="capability"):
        sdpa_attention("bf16", "7.5")


def test_the_math_kernels_bytes_are_measured():
    """The math kernel's saved tensors, measured with the CPU's math backend forced (FP32, where the CPU keeps the
    dtype): the probabilities c.b.h.T^2 and the scaled q and k (2c.n.d) instead of the log-sum-exp."""
    cfg = GPTConfig(n_layer=2, d_model=64, n_head=2, seq_len=128, vocab_size=256)
    torch.manual_seed(0)
    model = GPT(cfg)
    x, y = gpt_batch(cfg, 1)

    def loss() -> torch.Tensor:
        return F.cross_entropy(model(x).flatten(0, 1), y.flatten())

    fused = saved_activation_bytes(loss)
    with sdpa_kernel(SDPBackend.MATH):
        math = saved_activation_bytes(loss)
    shape = shape_of(cfg)
    predicted = transformer_activation_bytes(shape, 1, attention="sdpa-math") - transformer_activation_bytes(shape, 1)
    assert math - fused == predicted == 2 * (4 * 2 * 128**2 + 2 * 4 * 128 * 64 - 4 * 2 * 128)


@pytest.mark.parametrize(("d_model", "n_head", "seq_len", "batch"), [(64, 2, 128, 1), (64, 4, 64, 4), (128, 4, 32, 2)])
def test_the_math_kernels_bytes_in_bf16_are_measured(d_model: int, n_head: int, seq_len: int, batch: int) -> None:
    """In BF16 (a T4's torch.amp) the math kernel first casts q, k and v to FP32 (attention.cpp's `query_acc`, on
    every device): measured under CPU autocast with the math backend forced against the fused kernel, at three
    shapes, the difference is the ledger's, and a planned T4 step (Choice.capability) counts it."""
    cfg = GPTConfig(n_layer=1, d_model=d_model, n_head=n_head, seq_len=seq_len, vocab_size=256)
    torch.manual_seed(0)
    model = GPT(cfg)
    x, y = gpt_batch(cfg, batch)

    def forward(backend: SDPBackend) -> int:
        def run() -> torch.Tensor:
            with sdpa_kernel([backend]), torch.autocast("cpu", dtype=torch.bfloat16):
                return model(x, y)
        return saved_activation_bytes(run)

    measured = forward(SDPBackend.MATH) - forward(SDPBackend.FLASH_ATTENTION)
    shape = shape_of(cfg)
    predicted = (transformer_activation_bytes(shape, batch, precision="bf16-mixed", attention="sdpa-math")
                 - transformer_activation_bytes(shape, batch, precision="bf16-mixed"))
    assert measured == predicted
    t4, a10g = (step_moments(shape, Choice(precision="bf16-mixed", micro_batch=batch, capability=cap))
                for cap in ((7, 5), (8, 6)))
    assert {m: sum(t4[m].values()) - sum(a10g[m].values()) for m in t4}["loss backward"] == measured
    assert plan(shape, 10**9, batch, capability=(7, 5)).choice.capability == (7, 5)
    with pytest.raises(TypeError, match="capability"):
        Choice(capability=(7,))


def test_an_apple_gpu_plans_with_the_math_kernel_in_every_precision():
    """An Apple GPU trains with SDPA's math kernel whatever the dtype (attention.cpp, v2.13.0): the planner counts
    it there (chapter 09's budgeted run overran its budget under the simulated Apple GPU before), not on a CPU."""
    assert {Choice(precision=p, device="mps").attention for p in ("fp32", "bf16-mixed", "bf16")} == {"sdpa-math"}
    assert Choice(precision="bf16", device="cpu", capability=(7, 5)).attention == "sdpa"  # a CPU's flash kernel
    assert "Apple GPU" in Choice(device="mps").describe()
    shape = shape_of(GPTConfig(n_layer=2, d_model=64, n_head=4, seq_len=64, vocab_size=256))
    assert plan(shape, 10**9, 4, device="mps").choice.device == "mps"
    with pytest.raises(ValueError, match="device"):
        Choice(device="tpu")


def test_traced_memory_builds_two_layers_and_equals_the_full_trace():
    """The fast traced estimate builds the model with one layer and with two (not its 32) and extrapolates: the same
    bytes as the full trace, part by part."""
    small = {"num_hidden_layers": 3, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
             "intermediate_size": 176, "vocab_size": 512, "max_position_embeddings": 32}
    config = HF_CONFIGS["Llama-3-8B"] | small

    class LossOf(torch.nn.Module):
        def __init__(self, m: torch.nn.Module) -> None:
            super().__init__()
            self.m = m

        def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            return self.m(input_ids=ids, labels=labels, use_cache=False).loss

    ids = torch.zeros(2, 32, dtype=torch.long, device="meta")
    for kwargs in ({"precision": "bf16"}, {"precision": "bf16-mixed", "checkpointing": True}):
        full = estimate_memory(LossOf(hf_model_on_meta(config)), (ids, ids), **kwargs)
        assert traced_memory(config, 2, 32, **kwargs) == full
    with pytest.raises(TypeError, match="config"):
        traced_memory("Llama-3-8B", 1, 32)
    with pytest.raises(TypeError, match="num_hidden_layers"):
        traced_memory({"hidden_size": 64}, 1, 32)
