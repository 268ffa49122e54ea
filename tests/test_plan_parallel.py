"""Tensor, sequence and pipeline parallelism as terms of the planner's one ledger (issue 25): per layer the ledger
follows Korthikanti et al. 2022 (arXiv:2205.05198) Table 2's structure, and the pipeline stages hold what
utils.ledger.parallel.pipeline_layers_held says (section 4.2.3)."""

from dataclasses import replace

import pytest

from utils.ledger.architectures import shape_of_model
from utils.ledger.gpt import TransformerShape
from utils.ledger.parallel import pipeline_layers_held
from utils.ledger.plan import (
    Choice,
    costs,
    costs_table,
    line_maxima,
    memory_of,
    plan,
    replicated_layer_bytes,
    state_share,
)

GPT3 = TransformerShape(96, 12288, 96, 2048, 51200)  # GPT-3 175B's shape (Korthikanti's Table 3), 2,048 tokens


def layer_bytes(shape, choice):
    """One layer's saved activations per GPU under `choice` (the ledger's lines at two layers minus at one)."""
    ledger = memory_of if choice.tensor_parallel > 1 or choice.pipeline_stages > 1 else line_maxima  # (the same lines)
    two, one = (ledger(replace(shape, n_layer=k), choice)["saved activations"] for k in (2, 1))
    return two - one


def test_tensor_parallel_layer_is_korthikantis_without_dropout_masks():
    """Pure BF16, SDPA (no s x s scores kept, as under selective recomputation), no dropout: a layer keeps
    sbh (8 + 24/t) (Korthikanti's 10 + 24/t less the 2 sbh of dropout masks) and, with sequence parallelism,
    sbh x 32/t (34/t less the masks); plus the small per-token statistics the formula leaves out."""
    s, h = 2048, 12288
    for t in (2, 4, 8):
        tp = layer_bytes(GPT3, Choice(precision="bf16", tensor_parallel=t))
        sp = layer_bytes(GPT3, Choice(precision="bf16", tensor_parallel=t, sequence_parallel=True))
        assert tp == pytest.approx(s * h * (8 + 24 / t), rel=2e-3)
        assert sp == pytest.approx(s * h * 32 / t, rel=2e-3)
    whole = layer_bytes(GPT3, Choice(precision="bf16"))
    assert whole == pytest.approx(s * h * 32, rel=2e-3)
    assert replicated_layer_bytes(GPT3, 1, "bf16") == 8 * s * h + 8 * s  # LayerNorms' inputs, stats, outputs


def test_a_real_layers_replicated_part_and_its_recomputation():
    """Hugging Face's RMSNorm keeps its FP32 up-cast input and the normalized tensor, and each column-parallel matrix
    its own input (under autocast a BF16 copy each for q, k, v, gate and up): 16, 24 and 26 d per token (an outside
    review's hooks on a real LlamaDecoderLayer), plus an FP32 rsqrt per norm. Without sequence parallelism the
    recomputed layer keeps that part whole on every rank."""
    llama = shape_of_model("Llama-2-70B", 4096)
    for precision, per_token in (("bf16", 16), ("fp32", 24), ("bf16-mixed", 26)):
        assert replicated_layer_bytes(llama, 1, precision) == 4096 * (per_token * 8192 + 8)
    ck = Choice(precision="bf16-mixed", checkpointing=True, tensor_parallel=8)
    whole = line_maxima(llama, replace(ck, tensor_parallel=1))["recomputed block"]
    replicated = replicated_layer_bytes(llama, 1, "bf16-mixed")
    assert memory_of(llama, ck)["recomputed block"] == int(replicated + (whole - replicated) / 8)
    assert memory_of(llama, replace(ck, sequence_parallel=True))["recomputed block"] == int(whole / 8)


def test_checkpointed_layers_keep_their_input_split_only_by_sequence_parallelism():
    ck = Choice(precision="bf16", checkpointing=True, tensor_parallel=8)
    assert layer_bytes(GPT3, ck) == 2 * 2048 * 12288  # Korthikanti's full recomputation: 2 sbh
    assert layer_bytes(GPT3, replace(ck, sequence_parallel=True)) == 2 * 2048 * 12288 // 8


@pytest.mark.parametrize("stages, chunks, accumulation", [(4, 1, 8), (4, 1, 2), (4, 2, 8), (8, 3, 16)])
def test_the_first_pipeline_stage_holds_what_the_schedule_keeps_in_flight(stages, chunks, accumulation):
    """A small vocabulary keeps the first stage the most loaded: its activations are held layers x one layer's."""
    shape = TransformerShape(48, 1024, 16, 1024, 256)
    choice = Choice(precision="bf16", accumulation=accumulation, pipeline_stages=stages, pipeline_chunks=chunks)
    per_layer = layer_bytes(shape, Choice(precision="bf16"))
    held = pipeline_layers_held(48, stages, schedule="1f1b" if chunks == 1 else "interleaved", chunks=chunks)
    held *= min(stages, accumulation) / stages  # fewer micro-batches than stages: fewer in flight
    assert memory_of(shape, choice)["saved activations"] == int(per_layer * held + 8 * 1024)
    if chunks == 1 and accumulation >= stages:
        assert held == 48  # 1F1B: L layers' worth whatever p is


def test_model_states_and_costs_divide_as_the_layout_says():
    llama = shape_of_model("Llama-2-70B", 4096)
    whole = line_maxima(llama, Choice(precision="bf16"))
    t8 = memory_of(llama, Choice(precision="bf16", tensor_parallel=8))
    assert t8["weights"] == pytest.approx(whole["weights"] / 8, rel=1e-6)
    p4 = Choice(precision="bf16", pipeline_stages=4, accumulation=8)
    outer = llama.n_params - 80 * llama.block_parameters
    assert state_share(llama, p4) == pytest.approx((20 * llama.block_parameters + outer / 2) / llama.n_params)
    c = costs(llama, Choice(precision="bf16", tensor_parallel=8, accumulation=4))
    assert c["tensor-parallel bytes"] == pytest.approx(4 * 2 * 7 / 8 * 4096 * 8192 * 2 * 80 * 4)
    assert costs(llama, p4)["pipeline bytes"] == 2 * 4096 * 8192 * 2 * 8
    assert costs(llama, replace(p4, pipeline_chunks=2))["pipeline bytes"] == 2 * costs(llama, p4)["pipeline bytes"]
    rows, _ = costs_table(llama, replace(p4, tensor_parallel=8))
    assert [r[0] for r in rows][2:4] == ["tensor-parallel traffic per GPU", "pipeline traffic per GPU"]


def test_plan_keeps_a_model_parallel_layout_and_skips_offload():
    p = plan(shape_of_model("Llama-2-70B", 4096), 70 * 2**30, 32, tensor_parallel=8, host_bytes=2**40)
    assert all(c.tensor_parallel == 8 for c in [p.choice]) and not p.choice.offload_optimizer
    assert not any("offload" in step for step in p.steps)


def test_bad_layouts_are_named():
    with pytest.raises(ValueError, match="sequence_parallel"):
        Choice(sequence_parallel=True)
    with pytest.raises(ValueError, match="pipeline_chunks"):
        Choice(pipeline_chunks=2)
    with pytest.raises(ValueError, match="tensor_parallel"):
        Choice(precision="bf16", tensor_parallel=2, offload_optimizer=True)
    with pytest.raises(ValueError, match="pipeline_stages"):
        memory_of(TransformerShape(10, 64, 4, 32, 100), Choice(pipeline_stages=4))
    with pytest.raises(TypeError, match="tensor_parallel"):
        plan(GPT3, 2**30, 8, tensor_parallel=2.0)
