"""The setups people run (utils.ledger.setups), against the bytes per parameter their sources state."""

import pytest

from utils.ledger.setups import SETUPS, activation_offload_bytes, model_state_bytes


@pytest.mark.parametrize("setup, plain, replicated, sharded", [
    ("megatron fp16 params + fp16 grads", 20, 4, 16),   # Megatron-LM README: 20 | 4 + 16/d
    ("megatron bf16 params + fp32 grads", 18, 6, 12),   # 18 | 6 + 12/d
    ("megatron fp32 params + fp32 grads", 16, 8, 8),    # 16 | 8 + 8/d
    ("deepspeed zero-2 bf16", 18, 2, 16),               # 18 | 2 + 16/N
])
def test_megatron_and_deepspeed(setup, plain, replicated, sharded):
    assert model_state_bytes(1, setup) == plain
    for d in (2, 8, 64):
        assert model_state_bytes(10**6, setup, n_gpus=d, sharded=True) == pytest.approx(
            10**6 * (replicated + sharded / d))


def test_single_gpu_setups():
    assert model_state_bytes(1, "bf16 weights + fp32 adam") == 12  # QLoRA's baseline
    assert model_state_bytes(1, "frozen fp32 base") == 4
    assert model_state_bytes(1, "bf16 adapters + fp32 adam") == 12
    assert model_state_bytes(1, "bf16 weights + fp32 adam", paged=True) == 4
    assert model_state_bytes(8, "megatron bf16 params + fp32 grads", n_gpus=8, sharded=True, paged=True) == \
        8 * (6 + 4 / 8)
    assert set(SETUPS) >= {"deepspeed zero-2 bf16", "frozen bf16 base"}


def test_activation_offload():
    assert activation_offload_bytes(100, 32, offload=False) == {"gpu": 3200, "host": 0}
    assert activation_offload_bytes(100, 32, offload=True) == {"gpu": 100, "host": 3200}


def test_bad_arguments():
    with pytest.raises(ValueError, match="setup"):
        model_state_bytes(1, "fsdp")
    with pytest.raises(ValueError, match="paged"):
        model_state_bytes(1, "frozen fp32 base", paged=True)
    with pytest.raises(ValueError, match="n_params"):
        model_state_bytes(0, "frozen fp32 base")
    with pytest.raises(TypeError, match="offload"):
        activation_offload_bytes(1, 1, offload="yes")


def test_the_planner_reads_its_bytes_per_parameter_from_the_setups(monkeypatch):
    """utils.ledger.plan's model-state lines are the setups' (one table of bytes per parameter in the course)."""
    from dataclasses import replace

    from utils.ledger import setups
    from utils.ledger.architectures import parameter_tensors, shape_of_model
    from utils.ledger.plan import PRECISION_SETUPS, Choice, line_maxima

    shape = shape_of_model("Llama-3-8B", 4096)
    n = shape.n_params

    def states(choice):  # the model-state lines, less AdamW's 4-byte step counter per tensor (not a per-param byte)
        parts = line_maxima(shape, choice)
        steps = 4 * parameter_tensors(shape.arch) / (8 if choice.sharding in ("zero1", "zero2", "zero3") else 1)
        return parts["weights"] + parts["gradients"] + parts["optimizer states"] - steps

    for precision, name in PRECISION_SETUPS.items():
        assert states(Choice(precision=precision)) == model_state_bytes(n, name)
    for name, stage in (("megatron bf16 params + fp32 grads", "zero1"), ("megatron fp16 params + fp16 grads", "zero1"),
                        ("deepspeed zero-2 bf16", "zero2")):  # the distributed optimizer / ZeRO-2 shard as stated
        choice = Choice(precision="bf16", setup=name, sharding=stage, n_gpus=8)
        assert states(choice) == pytest.approx(model_state_bytes(n, name, n_gpus=8, sharded=True), abs=8)
    assert states(Choice(precision="bf16", setup="bf16 weights + fp32 adam")) == 12 * n  # QLoRA's baseline
    before = states(Choice(precision="bf16"))
    monkeypatch.setitem(setups.SETUPS, "pure bf16 (adamw in bf16)",
                        replace(SETUPS["pure bf16 (adamw in bf16)"], moments=8))
    assert states(Choice(precision="bf16")) == before + 4 * n  # edit the table, and the planner follows


def test_a_choice_names_only_full_training_setups():
    from utils.ledger.plan import Choice

    with pytest.raises(ValueError, match="setup"):
        Choice(setup="frozen bf16 base")
    with pytest.raises(ValueError, match="setup"):
        Choice(setup="deepspeed zero-2 bf16", lora_rank=8)
    assert "setup: deepspeed zero-2 bf16" in Choice(precision="bf16", setup="deepspeed zero-2 bf16").describe()
