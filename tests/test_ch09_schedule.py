"""The planner's costs follow the schedule its ledger holds (issue 25, errors 1 and 4), and the ledger's autocast
cache line is what autocast really keeps alive under checkpointing (chapter 09, the 7B walk-through)."""

import math
import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from utils.ledger.gpt import TransformerShape
from utils.ledger.plan import (
    Choice,
    activation_terms,
    block_parameters,
    costs,
    line_maxima,
    lora_parameters,
    memory_of,
    step_moments,
)
from utils.lessons.estimate import checkpointed
from utils.lessons.models import GPT, GPTConfig, gpt_batch

SEVEN = TransformerShape(32, 4096, 32, 2048, 32000)


def test_sharded_gradients_are_reduced_after_every_micro_batch():
    """7B, 8 GPUs, 32 micro-batches: ZeRO-2 about 777 GB per GPU and step (issue 25); ZeRO-3 about 2,260 GB at the
    gradients' FP32 width (issue 25's 1,130 GB counts its collectives in BF16)."""
    kw = {"precision": "bf16-mixed", "n_gpus": 8, "accumulation": 32}
    z2 = costs(SEVEN, Choice(sharding="zero2", **kw))["communication bytes"]
    z3 = costs(SEVEN, Choice(sharding="zero3", **kw))["communication bytes"]
    ddp = costs(SEVEN, Choice(**kw))["communication bytes"]
    assert math.isclose(z2, 777e9, rel_tol=0.01) and math.isclose(z3, 2 * 1130e9, rel_tol=0.01)
    assert math.isclose(ddp, 2 * 7 / 8 * 4 * SEVEN.n_params)  # no_sync: once per step, full gradients kept
    assert memory_of(SEVEN, Choice(**kw))["gradients"] == 8 * memory_of(SEVEN, Choice(sharding="zero2", **kw))[
        "gradients"]  # the shard that forces the per-micro-batch reduce-scatter


def test_offload_moves_gradients_over_pcie_every_micro_batch():
    one = costs(SEVEN, Choice(precision="bf16-mixed", accumulation=1, offload_optimizer=True))["PCIe bytes"]
    many = costs(SEVEN, Choice(precision="bf16-mixed", accumulation=32, offload_optimizer=True))["PCIe bytes"]
    # DeepSpeed v0.19.5's ZeRO-Offload: alone, the FP32 gradients down (4) and the weights up (2); with 32
    # micro-batches, BF16 gradients down 32 times, the running sum up 31 times, the FP32 sum down, the weights up
    assert one == 6 * SEVEN.n_params and many == (32 * 2 + 31 * 2 + 4 + 2) * SEVEN.n_params
    params = costs(SEVEN, Choice(precision="bf16-mixed", accumulation=8, offload_optimizer=True,
                                 offload_parameters=True))["PCIe bytes"]
    # stage3.py: each micro-batch's gradient partition down and up (4), the FP32 sum down at the last (4); the
    # weights up in forward and in backward of every micro-batch (4)
    assert params == (4 * 8 + 4 + 4 * 8) * SEVEN.n_params


def test_zero3_with_parameter_offload_counts_the_blocks_in_use_once():
    kw = {"precision": "bf16-mixed", "offload_optimizer": True, "offload_parameters": True}
    alone = memory_of(SEVEN, Choice(**kw))
    sharded = memory_of(SEVEN, Choice(sharding="zero3", n_gpus=8, **kw))
    assert "gathered blocks (ZeRO-3)" not in sharded
    assert sharded["weights"] == alone["weights"] == 2 * 2 * max(block_parameters(SEVEN), 32000 * 4096)


def test_lora_gradients_cost_what_the_ledger_keeps():
    for precision in ("bf16", "bf16-mixed"):
        choice = Choice(precision=precision, lora_rank=16, n_gpus=8)
        trainable = lora_parameters(SEVEN, 16)
        assert line_maxima(SEVEN, choice)["gradients"] == 4 * trainable
        assert math.isclose(costs(SEVEN, choice)["communication bytes"], 2 * 7 / 8 * 4 * trainable)


class _Casts(TorchDispatchMode):
    """Weak references to the BF16 copies that autocast makes of FP32 leaf parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[weakref.ref] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        src = args[0] if args else None
        if (func is torch.ops.aten._to_copy.default and out.dtype == torch.bfloat16 and src.dtype == torch.float32
                and src.is_leaf and src.requires_grad):
            self.refs.append(weakref.ref(out))
        return out

    def alive_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (r() for r in self.refs) if t is not None)


@pytest.mark.parametrize("cache_enabled", [True, False])
def test_checkpointing_leaves_autocasts_weight_copies_in_its_cache(cache_enabled):
    cfg = GPTConfig(n_layer=2, d_model=64, n_head=4, seq_len=32, vocab_size=128)
    torch.manual_seed(0)
    model = GPT(cfg)
    x, _ = gpt_batch(cfg, 2)
    casts = _Casts()
    with checkpointed(model), torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=cache_enabled):
        with casts:
            out = model(x)
        at_forward_end = casts.alive_bytes()
    head = 2 * cfg.vocab_size * cfg.d_model  # outside the checkpointed blocks: saved for backward anyway
    blocks = 2 * cfg.n_layer * (12 * cfg.d_model**2 + 9 * cfg.d_model)
    assert at_forward_end == head + (blocks if cache_enabled else 0)
    assert casts.alive_bytes() == head  # the region has exited: the cache is gone
    del out


def test_the_ledger_counts_the_cache_where_it_sets_the_peak():
    """Under torch.amp with checkpointing, autocast's BF16 copies of every block's weights live until the forward's
    region exits: the forward's end holds them beside the saved activations and the loss's logits; backward's
    transients (the recomputed block, the loss's two gradients) come after, and the peak is the larger moment."""
    shape = TransformerShape(32, 4096, 32, 2048, 32000)
    terms = activation_terms(shape, 1, "bf16-mixed", True)
    copies = 2 * 32 * (12 * 4096**2 + 9 * 4096)
    assert terms["autocast weight cache"] == copies
    for batch in (1, 64):
        moments = step_moments(shape, Choice(precision="bf16-mixed", checkpointing=True, micro_batch=batch))
        end, loss = moments["forward's end"], moments["loss backward"]
        assert end["autocast weight cache"] == copies and loss["autocast weight cache"] == 0
        assert end["saved activations"] == loss["saved activations"]
    moments = step_moments(shape, Choice(precision="bf16-mixed", checkpointing=True))
    assert sum(moments["forward's end"].values()) > sum(moments["loss backward"].values())  # 13 GB of copies
    assert activation_terms(shape, 1, "bf16-mixed", False)["autocast weight cache"] == 0  # saved already
    assert activation_terms(shape, 1, "bf16", True)["autocast weight cache"] == 0  # BF16 weights: no copies


def test_the_host_ledger_of_offload():
    """Issue 25 error 2 and reviews s5-s6: ZeRO-Offload of a 7B model needs 20 B/param of host RAM, about 144 GiB once
    torch rounds DeepSpeed's pinned blocks up to powers of two."""
    from utils.ledger.budget import GIB
    from utils.ledger.plan import host_memory_of

    off = Choice(precision="bf16-mixed", checkpointing=True, accumulation=32, offload_optimizer=True)
    host = host_memory_of(SEVEN, off)
    assert host["FP32 master weights"] == host["FP32 gradient buffer"] == 32 * GIB  # 25 GiB, pinned
    assert host["optimizer states"] == 8 * SEVEN.n_params  # DeepSpeedCPUAdam's moments: not pinned
    assert 140 * GIB < sum(host.values()) < 150 * GIB
    # with accumulation, ZeRO-Offload's BF16 copy of the weights and BF16 gradient sums (2 + 2, DeepSpeed v0.19.5);
    # parameter offload (stage3.py): BF16 gradient partitions and BF16 weights (2 + 2), no staging buffer
    both = host_memory_of(SEVEN, Choice(precision="bf16-mixed", accumulation=32, offload_optimizer=True,
                                        offload_parameters=True))
    assert sum(both.values()) == 16 * SEVEN.n_params + 2 * 16 * GIB  # two pinned BF16 buffers of 12.5 GiB
    assert host_memory_of(SEVEN, Choice(precision="bf16-mixed")) == {}
    sharded = host_memory_of(SEVEN, Choice(precision="bf16-mixed", offload_optimizer=True, sharding="zero2",
                                           n_gpus=8))
    assert sharded["FP32 master weights"] == 4 * GIB  # 3.1 GiB per rank, pinned


def test_plan_skips_offload_plans_that_exceed_host_ram(monkeypatch):
    import utils.ledger.plan as plan_module
    from utils.ledger.budget import GIB, usable_budget
    from utils.ledger.plan import plan

    budget = usable_budget(int(22.5 * GIB))
    small_host = plan(SEVEN, budget, 32, host_bytes=24 * GIB)
    assert small_host.fits and not small_host.choice.offload_optimizer and small_host.choice.lora_rank == 16
    assert any("offload skipped" in s and "host RAM" in s for s in small_host.steps)
    big_host = plan(SEVEN, budget, 32, host_bytes=256 * GIB)
    assert big_host.choice.offload_optimizer and big_host.host_total <= 256 * GIB
    # the default is this machine's RAM
    monkeypatch.setattr(plan_module, "host_ram_bytes", lambda: 16 * GIB)
    assert not plan(SEVEN, budget, 32).choice.offload_optimizer
    monkeypatch.setattr(plan_module, "host_ram_bytes", lambda: 2**40)
    assert plan(SEVEN, budget, 32).choice.offload_optimizer
    # a 65B-class model on a 48 GB GPU: parameter offload needs about a TB of host RAM
    from utils.ledger.gpt import PRESETS

    big = plan(PRESETS["65B"], usable_budget(48 * 2**30), 32, host_bytes=256 * GIB)
    assert not big.choice.offload_optimizer and not big.choice.offload_parameters
    with pytest.raises(TypeError, match="host_bytes"):
        plan(SEVEN, budget, 32, host_bytes="lots")
