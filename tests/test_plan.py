import pytest

from utils.estimate import PRESETS, TransformerShape, transformer_memory
from utils.plan import Choice, lora_parameters, memory_of, plan

SEVEN = TransformerShape(32, 4096, 32, 2048, 32000)
GIB = 2**30


def test_memory_of_matches_the_estimator_for_plain_choices():
    shape = PRESETS["1.3B"]
    for precision in ("fp32", "bf16-mixed", "bf16"):
        est = transformer_memory(shape, 2, precision=precision, checkpointing=True)
        parts = memory_of(shape, Choice(precision=precision, micro_batch=2, checkpointing=True))
        assert parts["parameters"] == est.params and parts["gradients"] == est.grads
        assert parts["activations"] == est.activations
        assert abs(parts["optimizer states"] - est.optimizer_states) <= 4 * (12 * shape.n_layer + 5)  # step counters


def test_sharding_and_offload_divide_the_right_parts():
    base = memory_of(SEVEN, Choice(precision="bf16-mixed"))
    z1 = memory_of(SEVEN, Choice(precision="bf16-mixed", sharding="zero1", n_gpus=8))
    z3 = memory_of(SEVEN, Choice(precision="bf16-mixed", sharding="zero3", n_gpus=8))
    assert z1["optimizer states"] == base["optimizer states"] // 8 and z1["gradients"] == base["gradients"]
    assert z3["parameters"] == base["parameters"] // 8 and z3["gradients"] == base["gradients"] // 8
    assert memory_of(SEVEN, Choice(offload_optimizer=True))["optimizer states"] == 0


def test_lora_counts():
    assert lora_parameters(SEVEN, 16) == 32 * 4 * 16 * 8192  # 16.8M: q, k, v, o of a 7B
    parts = memory_of(SEVEN, Choice(precision="bf16-mixed", lora_rank=16))
    assert parts["parameters"] == 2 * SEVEN.n_params + 4 * lora_parameters(SEVEN, 16)


def test_plan_seven_b_on_24_gib_needs_lora_and_explains_itself():
    p = plan(SEVEN, 24 * GIB, 32)
    assert p.fits and p.choice.lora_rank == 16 and p.choice.checkpointing
    assert p.choice.micro_batch * p.choice.accumulation == 32
    assert len(p.steps) >= 6 and "does not fit" in p.steps[0] and p.steps[-1].endswith("fits in 24.0 GiB")
    assert len(p.history) == len(p.steps) and p.history[-1][1] == p.total and p.history[0][1] > 24 * GIB


def test_plan_prefers_sharding_over_lora_with_gpus_and_stops_early():
    p = plan(SEVEN, 80 * GIB, 64, n_gpus=8)
    assert p.fits and p.choice.lora_rank == 0 and p.choice.sharding != "none"
    small = plan(PRESETS["125M"], 80 * GIB, 8)
    assert small.fits and small.choice.precision == "fp32" and len(small.steps) == 1


def test_plan_that_cannot_fit_says_so():
    p = plan(PRESETS["70B"], 1 * GIB, 1)
    assert not p.fits and "nothing tried fits" in p.steps[-1]


def test_bad_arguments():
    with pytest.raises(ValueError, match="precision"):
        Choice(precision="fp8")
    with pytest.raises(ValueError, match="sharding needs"):
        Choice(sharding="zero3")
    with pytest.raises(ValueError, match="micro_batch"):
        Choice(micro_batch=0)
    with pytest.raises(ValueError, match="lora_rank"):
        Choice(lora_rank=-1)
    with pytest.raises(TypeError, match="shape"):
        memory_of("7B", Choice())
    with pytest.raises(TypeError, match="choice"):
        memory_of(SEVEN, {})
    with pytest.raises(ValueError, match="budget_bytes"):
        plan(SEVEN, 0, 1)
    with pytest.raises(ValueError, match="effective_batch"):
        plan(SEVEN, GIB, 0)
