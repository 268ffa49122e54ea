"""Issue 25 error 4: attention dropout's saved tensors are in the analytic activation formula (eager attention)."""

import pytest
import torch

from utils.ledger.gpt import shape_of, transformer_activation_bytes, transformer_memory
from utils.lessons.measure import saved_activation_bytes
from utils.lessons.models import GPT, GPTConfig, gpt_batch


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_eager_attention_dropout_is_counted_exactly(precision, checkpointing):
    measured, predicted = {}, {}
    for p in (0.0, 0.1):
        cfg = GPTConfig(n_layer=2, d_model=64, n_head=4, seq_len=32, vocab_size=100, attention="eager", dropout=p,
                        checkpointing=checkpointing)
        torch.manual_seed(0)
        model = GPT(cfg).train()
        x, y = gpt_batch(cfg, 3)

        def step(model=model, x=x, y=y):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision != "fp32"):
                return model(x, y)

        measured[p] = saved_activation_bytes(step)
        predicted[p] = transformer_activation_bytes(shape_of(cfg), 3, precision=precision, attention="eager",
                                                    checkpointing=checkpointing, dropout=p)
    # what dropout adds is exact; the whole is within the formula's few scalars (as without dropout)
    assert measured[0.1] - measured[0.0] == predicted[0.1] - predicted[0.0]
    assert abs(measured[0.1] - predicted[0.1]) <= 64
    assert (predicted[0.1] > predicted[0.0]) != checkpointing  # checkpointing keeps only the blocks' inputs


def test_dropout_arguments():
    shape = shape_of(GPTConfig(n_layer=2, d_model=64, n_head=4, seq_len=32, vocab_size=100))
    assert transformer_memory(shape, 2, attention="eager", dropout=0.1).activations > \
        transformer_memory(shape, 2, attention="eager").activations
    with pytest.raises(ValueError, match="dropout"):
        transformer_activation_bytes(shape, 2, dropout=0.1)  # SDPA under dropout: not modelled
    with pytest.raises(TypeError, match="dropout"):
        transformer_activation_bytes(shape, 2, attention="eager", dropout="0.1")
    with pytest.raises(ValueError, match="dropout"):
        transformer_activation_bytes(shape, 2, attention="eager", dropout=1.0)
