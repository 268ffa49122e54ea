"""The planner offers chunked linear-cross-entropy (issue 25): the logits lines shrink by what
utils.lessons.chunked_loss measures, and a plan that needs it finds it."""

from dataclasses import replace

import pytest

from utils.ledger.budget import GIB
from utils.ledger.gpt import TransformerShape
from utils.ledger.plan import CHUNK_LOSS_TENSORS, Choice, memory_of, plan, step_moments

# A Llama-3-8B-like GPT stand-in: 128,256 vocabulary at 8,192 tokens
BIG_VOCAB = TransformerShape(32, 4096, 32, 8192, 128256)


def test_chunked_loss_removes_the_fp32_logits():
    plain = step_moments(BIG_VOCAB, Choice(precision="bf16-mixed", checkpointing=True))["loss backward"]
    chunked = step_moments(BIG_VOCAB, Choice(precision="bf16-mixed", checkpointing=True, chunked_loss=1024))[
        "loss backward"]
    logits = 4 * 8192 * 128256
    assert round(logits / GIB, 1) == 3.9  # 3.9 GiB (4.2 GB) of FP32 logits for one 8,192-token sequence
    assert plain["saved activations"] - chunked["saved activations"] == logits
    assert plain["logits gradient (FP32)"] == 2 * logits  # the log-probabilities' gradient and the logits'
    assert chunked["logits gradient (FP32)"] == int(CHUNK_LOSS_TENSORS * 4 * 1024 * 128256) + \
        (4 + 4) * 8192 * BIG_VOCAB.d_model  # one chunk's tensors, the FP32 hidden states and their gradient
    assert sum(chunked.values()) < sum(plain.values())


def test_plan_offers_it_only_when_asked():
    shape = replace(BIG_VOCAB, n_layer=2, d_model=1024, n_head=8)
    need = sum(memory_of(shape, Choice(precision="bf16-mixed", checkpointing=True, chunked_loss=512)).values())
    without = plan(shape, need, 1, allow_lora=False, allow_offload=False)
    offered = plan(shape, need, 1, allow_lora=False, allow_offload=False, chunked_loss=512)
    assert offered.fits and offered.choice.chunked_loss == 512
    assert not without.choice.chunked_loss
    assert any("chunked" in step for step in offered.steps)
    with pytest.raises(ValueError, match="chunked_loss"):
        plan(shape, need, 1, chunked_loss=-1)
    with pytest.raises(ValueError, match="chunked_loss"):
        Choice(chunked_loss=-5)
