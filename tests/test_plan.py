import math

import pytest

from utils.ledger.budget import GIB, usable_budget
from utils.ledger.gpt import PRESETS, TransformerShape, transformer_activation_bytes
from utils.ledger.plan import (
    Choice,
    costs,
    line_maxima,
    lora_parameters,
    memory_of,
    optimizer_state_bytes_per_param,
    parameter_tensor_sizes,
    plan,
    step_moments,
    zero_bytes_per_gpu,
)

SEVEN = TransformerShape(32, 4096, 32, 2048, 32000)


def test_the_ledger_of_plain_choices_is_chapter_01s_formula_plus_backwards_transients():
    shape = PRESETS["1.3B"]
    n = shape.n_params
    for precision, size in (("fp32", 4), ("bf16-mixed", 4), ("bf16", 2)):
        choice = Choice(precision=precision, micro_batch=2, checkpointing=True)
        parts = line_maxima(shape, choice)
        assert parts["weights"] == size * n and parts["gradients"] == size * n
        steps = 4 * len(parameter_tensor_sizes(shape, choice))  # AdamW's step counter per tensor
        assert parts["optimizer states"] == 2 * size * n + steps
        saved = transformer_activation_bytes(shape, 2, precision=precision, checkpointing=True)
        if precision == "bf16":
            saved += 2 * 2 * shape.seq_len * shape.vocab_size  # FP32 logits for the loss
        assert step_moments(shape, choice)["loss backward"]["saved activations"] == saved
        # the loss's backward: the gradients of the log-probabilities and of the logits, both FP32
        assert parts["logits gradient (FP32)"] == 2 * 4 * 2 * shape.seq_len * shape.vocab_size
        assert parts["recomputed block"] > 0
    assert line_maxima(shape, Choice(micro_batch=2))["recomputed block"] == 0


def test_optimizer_states_match_torchaos_measured_bytes():
    assert optimizer_state_bytes_per_param("adamw", 4) == 8
    assert optimizer_state_bytes_per_param("adamw", 2) == 4
    assert math.isclose(optimizer_state_bytes_per_param("adamw8bit"), 2.03125)
    assert math.isclose(optimizer_state_bytes_per_param("adamw4bit"), 1.0625)


def test_sharding_and_offload_divide_the_right_parts():
    base = line_maxima(SEVEN, Choice(precision="bf16-mixed"))
    z1 = line_maxima(SEVEN, Choice(precision="bf16-mixed", sharding="zero1", n_gpus=8))
    z2 = line_maxima(SEVEN, Choice(precision="bf16-mixed", sharding="zero2", n_gpus=8))
    z3 = line_maxima(SEVEN, Choice(precision="bf16-mixed", sharding="zero3", n_gpus=8))
    n = SEVEN.n_params
    # ZeRO-1/2 under torch.amp as DeepSpeed's BF16 mode keeps it: BF16 weights on every rank, the FP32 master with
    # Adam's moments sharded (12/8 B/param), FP32 gradients whole (ZeRO-1) or sharded (ZeRO-2): 4.0 B/param at 8
    assert z1["weights"] == 2 * n and z1["gradients"] == base["gradients"]
    assert abs(z1["optimizer states"] - 12 * n / 8) < 2**20 and abs(z2["gradients"] - 4 * n / 8) <= 1
    assert abs(sum(z2[k] for k in ("weights", "gradients", "optimizer states")) / n - 4.0) < 0.001
    assert z3["weights"] == base["weights"] // 8 and z3["gradients"] == base["gradients"] // 8
    assert z3["gathered blocks (ZeRO-3)"] == 4 * (12 * 4096**2 + 13 * 4096)
    off = line_maxima(SEVEN, Choice(precision="bf16-mixed", offload_optimizer=True))
    assert off["optimizer states"] == 0 and off["weights"] == 2 * SEVEN.n_params
    both = line_maxima(SEVEN, Choice(precision="bf16-mixed", offload_optimizer=True, offload_parameters=True))
    assert both["weights"] < GIB


def test_zero_paper_and_torch_amp_accounting():
    n = 10**9
    assert zero_bytes_per_gpu(n, 0, 8) == zero_bytes_per_gpu(n, 0, 8, "torch.amp") == 16 * n
    assert zero_bytes_per_gpu(n, 1, 8) == (2 + 2 + 12 / 8) * n
    assert zero_bytes_per_gpu(n, 1, 8, "torch.amp") == (4 + 4 + 8 / 8) * n
    assert zero_bytes_per_gpu(n, 2, 64) == (2 + 14 / 64) * n
    assert zero_bytes_per_gpu(n, 3, 64) == zero_bytes_per_gpu(n, 3, 64, "torch.amp") == 16 / 64 * n


def test_lora_counts_and_targets():
    assert lora_parameters(SEVEN, 16) == 32 * 4 * 16 * 8192  # 16.8M: q, k, v, o of a 7B
    assert lora_parameters(SEVEN, 16, fused_qkv=True) == 32 * 16 * (4 * 4096 + 2 * 4096)
    assert lora_parameters(SEVEN, 16, "attention+mlp") == 32 * 16 * (8 * 4096 + 10 * 4096)
    parts = memory_of(SEVEN, Choice(precision="bf16-mixed", lora_rank=16))
    assert parts["weights"] == 2 * SEVEN.n_params + 4 * lora_parameters(SEVEN, 16)
    q = memory_of(SEVEN, Choice(precision="bf16-mixed", lora_rank=16, quantize_base=True))
    assert q["weights"] < parts["weights"] / 3


def test_usable_budget_and_costs():
    assert usable_budget(int(22.5 * GIB)) == int((22.5 * GIB - 576 * 2**20) * 0.9)
    assert usable_budget(100) == 0
    c = costs(SEVEN, Choice(precision="bf16-mixed", checkpointing=True, offload_optimizer=True))
    # ZeRO-Offload with one micro-batch: the FP32 gradients down (4 B/param), the BF16 weights up (2)
    assert c["PCIe bytes"] == 6 * SEVEN.n_params and math.isclose(c["recompute %"], 100 / 3)
    ddp = costs(SEVEN, Choice(precision="bf16-mixed", n_gpus=8))["communication bytes"]
    z3 = costs(SEVEN, Choice(precision="bf16-mixed", sharding="zero3", n_gpus=8))["communication bytes"]
    assert math.isclose(ddp, 2 * 7 / 8 * 4 * SEVEN.n_params) and math.isclose(z3, 3 * 7 / 8 * 4 * SEVEN.n_params)
    assert math.isclose(z3 / ddp, 1.5)  # the ZeRO paper's 3 vs 2 times the model at equal widths (section 7.2.2)


def test_plan_seven_b_on_an_a10g_trains_fully_with_offload_and_explains_itself():
    budget = usable_budget(int(22.5 * GIB))
    p = plan(SEVEN, budget, 32, host_bytes=256 * GIB)  # a host with the RAM that offload needs (144 GiB)
    assert p.fits and p.choice.lora_rank == 0 and p.choice.offload_optimizer and p.choice.checkpointing
    assert p.choice.micro_batch * p.choice.accumulation == 32
    assert "does not fit" in p.steps[0] and p.steps[-1].endswith(f"fits in {budget / GIB:.1f} GiB")
    assert len(p.history) == len(p.steps) and p.history[-1][1] == p.total and p.history[0][1] > budget
    lora = plan(SEVEN, budget, 32, allow_offload=False)
    assert lora.fits and lora.choice.lora_rank == 16 and not lora.choice.quantize_base
    t4 = plan(SEVEN, usable_budget(int(14.7 * GIB)), 32, allow_offload=False)
    assert t4.fits and t4.choice.quantize_base  # QLoRA on a T4


def test_plan_prefers_sharding_over_lora_with_gpus_and_stops_early():
    p = plan(SEVEN, 40 * GIB, 64, n_gpus=8)  # 8-bit AdamW alone needs about 65 GiB
    assert p.fits and p.choice.lora_rank == 0 and p.choice.sharding != "none"
    small = plan(PRESETS["163M"], 80 * GIB, 8)
    assert small.fits and small.choice.precision == "fp32" and len(small.steps) == 1


def test_plan_that_cannot_fit_says_so():
    p = plan(PRESETS["65B"], 1 * GIB, 1)
    assert not p.fits and "nothing tried fits" in p.steps[-1]


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"precision": "fp8"}, "precision"),
        ({"checkpointing": "no"}, "checkpointing"),
        ({"checkpointing": 1}, "checkpointing"),
        ({"micro_batch": 0}, "micro_batch"),
        ({"micro_batch": True}, "micro_batch"),
        ({"accumulation": 1.5}, "accumulation"),
        ({"lora_rank": -1}, "lora_rank"),
        ({"optimizer": "lion"}, "optimizer"),
        ({"lora_targets": "all"}, "lora_targets"),
        ({"quantize_base": "yes"}, "quantize_base"),
        ({"sharding": "zero4"}, "sharding"),
        ({"n_gpus": 0}, "n_gpus"),
        ({"offload_optimizer": "no"}, "offload_optimizer"),
        ({"sharding": "zero3"}, "sharding needs"),
        ({"quantize_base": True}, "quantize_base"),
        ({"offload_parameters": True, "precision": "bf16"}, "offload_parameters"),
        ({"offload_optimizer": True}, "offload"),
    ],
)
def test_choice_refuses_bad_fields_by_name(kwargs, name):
    with pytest.raises((TypeError, ValueError), match=name):
        Choice(**kwargs)


def test_functions_refuse_bad_arguments_by_name():
    cases = [
        (lambda: memory_of("7B", Choice()), "shape"),
        (lambda: memory_of(SEVEN, {}), "choice"),
        (lambda: plan(SEVEN, 0, 1), "budget_bytes"),
        (lambda: plan(SEVEN, True, 1), "budget_bytes"),
        (lambda: plan(SEVEN, GIB, 0), "effective_batch"),
        (lambda: plan(SEVEN, GIB, 1, lora_rank=0), "lora_rank"),
        (lambda: plan(SEVEN, GIB, 1, n_gpus=0), "n_gpus"),
        (lambda: plan(SEVEN, GIB, 1, allow_lora="no"), "allow_lora"),
        (lambda: plan("7B", GIB, 1), "shape"),
        (lambda: lora_parameters(SEVEN, -1), "rank"),
        (lambda: lora_parameters(SEVEN, 0), "rank"),
        (lambda: lora_parameters(None, 4), "shape"),
        (lambda: lora_parameters(SEVEN, 4, "mlp"), "targets"),
        (lambda: usable_budget(-1), "reported_bytes"),
        (lambda: usable_budget(GIB, fragmentation=float("nan")), "fragmentation"),
        (lambda: optimizer_state_bytes_per_param("adam9bit"), "optimizer"),
        (lambda: optimizer_state_bytes_per_param("adamw", 3), "param_bytes"),
        (lambda: zero_bytes_per_gpu(10, 4, 8), "stage"),
        (lambda: zero_bytes_per_gpu(10, 1, 8, "megatron"), "accounting"),
        (lambda: zero_bytes_per_gpu(10, 1, 0), "n_gpus"),
        (lambda: costs(SEVEN, Choice(), pcie_gb_per_s=0), "pcie_gb_per_s"),
    ]
    for call, name in cases:
        with pytest.raises((TypeError, ValueError), match=name):
            call()
