"""The planner's ledger on real architectures (issue 25): `utils.ledger.plan` takes a
`utils.ledger.architectures.ArchitectureShape` with the same API as a TransformerShape, and its lines are the
architecture's own (grouped-query LoRA counts, the gated MLP's matrices for NF4, Hugging Face's FP32 log-probabilities,
the 128k-vocabulary logits)."""

from dataclasses import replace

import pytest

from utils.ledger.architectures import (
    ARCHITECTURES,
    ArchitectureShape,
    activation_bytes,
    lora_parameters_of,
    parameter_tensors,
    shape_of_model,
)
from utils.ledger.budget import GIB, gpu_budget
from utils.ledger.plan import (
    CHUNK_LOSS_TENSORS,
    NF4_BYTES_PER_PARAM,
    Choice,
    block_parameters,
    costs,
    host_memory_of,
    line_maxima,
    lora_parameters,
    memory_of,
    plan,
    step_moments,
)

LLAMA3 = shape_of_model("Llama-3-8B", 4096)
N = LLAMA3.n_params  # 8,030,261,248


def test_pure_bf16_lines_are_the_architectures():
    choice = Choice(precision="bf16")
    parts, loss = line_maxima(LLAMA3, choice), step_moments(LLAMA3, choice)["loss backward"]
    steps = 4 * parameter_tensors(LLAMA3.arch)  # AdamW's step counter per tensor
    assert (parts["weights"], parts["gradients"], parts["optimizer states"]) == (2 * N, 2 * N, 4 * N + steps)
    assert loss["saved activations"] == activation_bytes(LLAMA3.arch, 1, 4096, "bf16")
    # the loss's backward holds two FP32 gradients of 4,096 x 128,256 (2.1 GB each) beside the log-probabilities
    assert loss["logits gradient (FP32)"] == 2 * 4 * 4096 * 128_256 and loss["gradients"] == 0
    assert block_parameters(LLAMA3) == LLAMA3.arch.layer_parameters == 218_112_000


def test_checkpointing_keeps_each_layers_input_and_the_recomputed_block():
    plain = step_moments(LLAMA3, Choice(precision="bf16-mixed"))["loss backward"]
    ck = line_maxima(LLAMA3, Choice(precision="bf16-mixed", checkpointing=True))
    ck["saved activations"] = step_moments(LLAMA3, Choice(precision="bf16-mixed", checkpointing=True))[
        "loss backward"]["saved activations"]
    assert ck["saved activations"] == activation_bytes(LLAMA3.arch, 1, 4096, "bf16-mixed", checkpointing=True)
    one, two = (activation_bytes(replace(LLAMA3.arch, n_layer=k), 1, 4096, "bf16-mixed") for k in (1, 2))
    assert ck["recomputed block"] == two - one
    assert ck["saved activations"] + ck["recomputed block"] < plain["saved activations"] / 5


def test_the_chunked_loss_removes_the_largest_activation_at_8192_tokens():
    """Llama-3-8B at 8,192 tokens: the FP32 log-probabilities (4.2 GB) leave, and backward holds one chunk's logits
    and their gradients (and the hidden states' FP32 gradient) instead of two whole logits gradients."""
    long = shape_of_model("Llama-3-8B", 8192)
    whole = step_moments(long, Choice(precision="bf16", checkpointing=True))["loss backward"]
    chunked = step_moments(long, Choice(precision="bf16", checkpointing=True, chunked_loss=1024))["loss backward"]
    assert whole["saved activations"] - chunked["saved activations"] == 4 * 8192 * 128_256
    # one chunk's tensors, the hidden states the chunks' checkpoints keep (BF16 here) and their FP32 gradient
    assert chunked["logits gradient (FP32)"] == int(CHUNK_LOSS_TENSORS * 4 * 1024 * 128_256) + \
        (2 + 4) * 8192 * 4096
    assert sum(chunked.values()) < sum(whole.values()) - 8e9
    assert round(4 * 8192 * 128_256 / 1e9, 1) == 4.2


def test_lora_and_qlora_count_the_architectures_matrices():
    choice = Choice(lora_rank=16)
    trainable = lora_parameters(LLAMA3, 16)
    assert trainable == lora_parameters_of(LLAMA3.arch, 16) == 13_631_488  # GQA: k and v are 1,024 wide
    parts = line_maxima(LLAMA3, choice)
    assert parts["weights"] == 2 * N + 4 * trainable
    adapters = 4 * 2 * 32  # A and B of q, k, v and o in 32 layers: a step counter each
    assert parts["gradients"] == 4 * trainable and parts["optimizer states"] == 8 * trainable + 4 * adapters
    q = line_maxima(LLAMA3, replace(choice, quantize_base=True))
    matrices = 32 * LLAMA3.matrix_parameters
    assert q["weights"] == int(NF4_BYTES_PER_PARAM * matrices + 2 * (N - matrices) + 4 * trainable)
    assert q["dequantized matrix (NF4)"] == 2 * 4096 * 14336  # the gated MLP's matrix, not 4 d^2
    assert parts["LoRA intermediates"] == 32 * 4 * 4096 * 16 * 4
    mixtral = shape_of_model("Mixtral-8x7B", 4096)
    mlp = line_maxima(mixtral, Choice(lora_rank=8, lora_targets="attention+mlp"))
    assert mlp["LoRA intermediates"] == 32 * (4 + 3 * 2) * 4096 * 8 * 4  # a token passes its 2 experts' adapters


def test_sharding_offload_and_costs_use_the_architectures_counts():
    zero3 = memory_of(LLAMA3, Choice(precision="bf16-mixed", sharding="zero3", n_gpus=8))
    assert zero3["gathered blocks (ZeRO-3)"] == 2 * 2 * LLAMA3.arch.layer_parameters
    offload = Choice(precision="bf16-mixed", offload_optimizer=True, offload_parameters=True)
    assert memory_of(LLAMA3, offload)["weights"] == 2 * 2 * 128_256 * 4096  # the embedding is the largest block
    host = host_memory_of(LLAMA3, offload)
    assert host["FP32 master weights"] == 4 * N  # stage3.py's FP32 partitions: not pinned
    # stage3.py's pinned BF16 buffers (grad_partitions_flat_buffer, in the model's dtype; the flat BF16 weights):
    # 2N = 14.96 GiB each, rounded up to 16
    assert host["BF16 weights (parameter offload)"] == host["BF16 gradient partitions"] == 16 * GIB
    lora8 = Choice(lora_rank=16, sharding="zero2", n_gpus=8)
    assert costs(LLAMA3, lora8)["communication bytes"] == pytest.approx(2 * 7 / 8 * 4 * 13_631_488)


# DeepSpeed v0.19.5, deepspeed/runtime/zero/stage_1_and_2.py (ZeRO-Offload), line by line: what the ledger must count
HEAD = 128_256 * 4096  # Llama-3-8B's largest parameter (embed_tokens and lm_head, untied): 525,336,576 elements
BUCKET = 500_000_000  # zero/config.py's reduce_bucket_size default


def test_zero_offload_counts_deepspeeds_buffers_around_the_largest_parameter():
    """The review s5 reading of stage_1_and_2.py: `temp_grad_buffer_for_gpu_offload = torch.zeros(largest_param_numel,
    dtype=self.dtype)` on the GPU for the whole run (L588-590); a parameter with more elements than the bucket is
    reduced in place (`extra_large_param_to_reduce`, L1197-1203), so its gradient lives beside the bucket; at the
    last micro-batch `accumulated_grad.data.double().norm(2)` (L1561) makes an FP64 copy of each gradient in turn,
    and `_has_inf_or_nan` (L2460-2465, review s6) holds an FP32 copy, two boolean masks, their OR and its FP32 copy:
    11 B per element at once."""
    one = Choice(precision="bf16-mixed", checkpointing=True, offload_optimizer=True)
    moments = step_moments(LLAMA3, replace(one, accumulation=32))
    backward = moments["first layer's backward"]
    assert backward["offload staging buffer"] == 2 * HEAD and backward["gradient norm and overflow check"] == 11 * HEAD
    assert backward["gradients"] == 2 * (BUCKET + LLAMA3.arch.layer_parameters + HEAD)  # 525M > 5e8: beside it
    assert moments["optimizer step"]["gradient norm and overflow check"] == 0  # a backward transient
    seven = step_moments(shape_of_model("Llama-2-7B", 4096), one)["first layer's backward"]
    assert seven["gradients"] == 2 * (BUCKET + block_parameters(shape_of_model("Llama-2-7B", 4096)))  # 131M < 5e8
    # host: FP32 master 4, FP32 gradient 4, Adam 8, the BF16 copy that stages the update 2 (L492-504), and with
    # accumulation a BF16 buffer per parameter (`buffer_to_accumulate_to_in_cpu`, L1498-1502) 2; all but Adam's
    # moments pinned (offload_config.py: pin_memory=True), each block rounded up to a power of two by torch's
    # CachingHostAllocator (review s6): 32 GiB for an FP32 copy of 8.03B parameters, 16 for a BF16 one
    alone, accumulating = host_memory_of(LLAMA3, one), host_memory_of(LLAMA3, replace(one, accumulation=32))
    assert alone == {"FP32 master weights": 32 * GIB, "FP32 gradient buffer": 32 * GIB, "optimizer states": 8 * N,
                     "BF16 weights (staging the update)": 16 * GIB, "offload staging buffer": GIB}
    per_parameter = accumulating["BF16 gradient accumulation"]  # each parameter's buffer rounded on its own
    assert 2 * N < per_parameter < 2 * N * 1.2 and sum(accumulating.values()) == sum(alone.values()) + per_parameter
    # the bus (copy_grads_in_partition, L1623-1642): one micro-batch sends the FP32 gradients (4) and takes the
    # weights (2); m micro-batches send BF16 gradients m times, bring the running sum up m - 1 times, then as one
    assert costs(LLAMA3, one)["PCIe bytes"] == 6 * N
    assert costs(LLAMA3, replace(one, accumulation=32))["PCIe bytes"] == (4 * 32 + 4) * N
    # ZeRO-2 shards the host state and the bus (each rank copies its partition's gradients, L1716-1727, and weights,
    # L2315); the GPU buffers stay whole on every rank
    sharded = replace(one, sharding="zero2", n_gpus=4)
    assert memory_of(LLAMA3, sharded)["offload staging buffer"] == 2 * HEAD
    assert host_memory_of(LLAMA3, sharded)["FP32 master weights"] == 8 * GIB  # 4N / 4 = 7.5 GiB, pinned: 8
    assert costs(LLAMA3, sharded)["PCIe bytes"] == 6 * N / 4


def test_plans_for_real_models_on_the_gpus_workshops_rent():
    a10g = gpu_budget("A10G")
    # Llama-3-8B: ZeRO-Offload's host ledger (157 GiB with pinned rounding) and parameter offload's (152) exceed a
    # 128 GiB host, and on the GPU ZeRO-Offload's norm and overflow check of the head does not fit an A10G anyway
    lora = plan(LLAMA3, a10g, 32, host_bytes=128 * GIB, chunked_loss=1024)
    assert lora.fits and lora.choice.lora_rank
    assert [s.split(":")[0] for s in lora.steps if "skipped" in s] == ["optimizer offload skipped",
                                                                        "parameter offload skipped"]
    zero_offload = Choice(precision="bf16-mixed", checkpointing=True, accumulation=32, offload_optimizer=True,
                          chunked_loss=1024)
    assert sum(memory_of(LLAMA3, zero_offload).values()) > a10g
    assert 156 * GIB < sum(host_memory_of(LLAMA3, zero_offload).values()) < 158 * GIB
    # parameter offload is tried on its own host ledger: a host between the two ledgers trains it fully
    between = plan(LLAMA3, a10g, 32, host_bytes=154 * GIB, chunked_loss=1024)
    assert between.fits and between.choice.offload_parameters
    # with 256 GiB of host RAM the weights go to the host too: parameter offload fits
    big_host = plan(LLAMA3, a10g, 32, host_bytes=256 * GIB, chunked_loss=1024)
    assert big_host.fits and big_host.choice.offload_parameters and not big_host.choice.lora_rank
    assert plan(shape_of_model("Mixtral-8x7B", 4096), gpu_budget("A100 80GB"), 32, host_bytes=256 * GIB,
                chunked_loss=1024).choice.quantize_base
    seventy = plan(shape_of_model("Llama-2-70B", 4096), gpu_budget("T4"), 32, host_bytes=256 * GIB)
    assert not seventy.fits and "nothing tried fits" in seventy.steps[-1]


def test_bad_shapes_are_named():
    with pytest.raises(TypeError, match="shape"):
        memory_of(ARCHITECTURES["Llama-3-8B"], Choice())  # an Architecture needs its sequence length
    with pytest.raises(ValueError, match="fused_qkv"):
        lora_parameters(LLAMA3, 8, fused_qkv=True)
    with pytest.raises(TypeError, match="shape"):
        plan("Llama-3-8B", GIB, 8)
    assert isinstance(LLAMA3, ArchitectureShape) and LLAMA3.name == "Llama-3-8B"
