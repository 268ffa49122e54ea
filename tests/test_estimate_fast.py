"""estimate_memory_fast (trace one block and two, extrapolate) equals the full trace exactly."""

import pytest
import torch
from torch import nn

from utils.ledger.architectures import HF_CONFIGS
from utils.lessons.estimate import estimate_memory, estimate_memory_fast, hf_model_on_meta
from utils.lessons.models import GPT, GPTConfig, gpt_batch


@pytest.mark.parametrize("kwargs", [{}, {"precision": "bf16-mixed"}, {"checkpointing": True},
                                    {"precision": "bf16-mixed", "checkpointing": True}, {"optimizer": "sgd"},
                                    {"precision": "bf16"}])
def test_fast_equals_full_on_the_course_gpt(kwargs):
    cfg = GPTConfig(n_layer=5, d_model=64, n_head=4, seq_len=32, vocab_size=256)
    torch.manual_seed(0)
    model = GPT(cfg)
    x, y = gpt_batch(cfg, 2)
    assert estimate_memory_fast(model, (x, y), **kwargs) == estimate_memory(model, (x, y), **kwargs)
    assert len(model.blocks) == 5  # the model is restored


def test_fast_equals_full_on_a_hugging_face_llama():
    class LossOf(nn.Module):
        def __init__(self, m: nn.Module) -> None:
            super().__init__()
            self.m = m

        def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            return self.m(input_ids=ids, labels=labels, use_cache=False).loss

    small = {"num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
             "intermediate_size": 176, "vocab_size": 512, "max_position_embeddings": 32}
    model = LossOf(hf_model_on_meta(HF_CONFIGS["Llama-3-8B"], **small))
    ids = torch.zeros(1, 32, dtype=torch.long, device="meta")
    for kwargs in ({"precision": "bf16"}, {"precision": "bf16", "checkpointing": True}):
        assert estimate_memory_fast(model, (ids, ids), **kwargs) == estimate_memory(model, (ids, ids), **kwargs)


def test_unlike_blocks_fall_back_to_the_full_trace():
    class Uneven(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8, bias=False)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                x = layer(x)
            return x.sum()

    model, x = Uneven(), torch.randn(4, 8)
    assert estimate_memory_fast(model, x) == estimate_memory(model, x)
    with pytest.raises(TypeError, match="model"):
        estimate_memory_fast("gpt", x)
