import pytest
import torch

from utils.lessons.measure import saved_activation_bytes
from utils.lessons.models import GPT, GPTConfig, cnn, gpt_batch, mlp


def test_gpt_trains_and_attentions_agree():
    torch.manual_seed(0)
    eager = GPT(GPTConfig(attention="eager"))
    sdpa = GPT(GPTConfig(attention="sdpa"))
    sdpa.load_state_dict(eager.state_dict())
    x, y = gpt_batch(eager.cfg, 4)
    assert torch.allclose(eager(x), sdpa(x), atol=1e-5)
    opt = torch.optim.AdamW(sdpa.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        loss = sdpa(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]


def test_eager_attention_saves_more_and_checkpointing_saves_less():
    cfg = GPTConfig(seq_len=64)
    x, y = gpt_batch(cfg, 2)
    sizes = {}
    for attention in ("eager", "sdpa"):
        for ckpt in (False, True):
            torch.manual_seed(0)
            model = GPT(GPTConfig(seq_len=64, attention=attention, checkpointing=ckpt))
            sizes[attention, ckpt] = saved_activation_bytes(model, x, y)
    assert sizes["eager", False] > sizes["sdpa", False] > sizes["sdpa", True]
    assert sizes["eager", True] < sizes["eager", False]


def test_other_models_and_bad_configs():
    assert mlp(8, 16, 4, depth=3)(torch.randn(2, 8)).shape == (2, 4)
    assert cnn(4, 3, 8)(torch.randn(2, 3, 8, 8)).shape == (2, 3)
    with pytest.raises(ValueError, match="divisible"):
        GPTConfig(d_model=10, n_head=4)
    with pytest.raises(ValueError, match="attention"):
        GPTConfig(attention="flash")
    with pytest.raises(ValueError, match="n_layer"):
        GPTConfig(n_layer=0)
    with pytest.raises(ValueError, match="dropout"):
        GPTConfig(dropout=1.0)
    with pytest.raises(TypeError, match="cfg"):
        GPT({"n_layer": 2})
    with pytest.raises(ValueError, match="seq_len"):
        GPT(GPTConfig(seq_len=8))(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="batch"):
        gpt_batch(GPTConfig(), 0)
    with pytest.raises(ValueError, match="depth"):
        mlp(depth=0)
    with pytest.raises(ValueError, match="channels"):
        cnn(channels=0)
