import pytest
import torch

from utils.lessons.amp_trace import op_dtypes
from utils.lessons.models import GPT, GPTConfig, gpt_batch
from utils.lessons.timing import count_flops
from utils.lessons.underflow import cast_outcomes


def test_cast_outcomes_fp16_and_scale():
    x = torch.tensor([1e-9, 1e-6, 1e-3, 1.0, 1e5, 0.0])
    out = cast_outcomes(x, torch.float16)
    assert out.count == 5
    assert (out.zero, out.subnormal, out.overflow, out.normal) == (0.2, 0.2, 0.2, 0.4)
    scaled = cast_outcomes(x, torch.float16, scale=1024.0)
    assert scaled.zero == 0.0 and scaled.overflow == 0.2
    assert cast_outcomes(x, torch.bfloat16).zero == 0.0
    e4m3 = cast_outcomes(torch.tensor([1000.0, 1.0]), torch.float8_e4m3fn)
    assert e4m3.overflow == 0.5  # saturated at 448
    assert cast_outcomes(torch.zeros(3)).count == 0
    with pytest.raises(ValueError, match="dtype"):
        cast_outcomes(x, torch.float32)
    with pytest.raises(ValueError, match="scale"):
        cast_outcomes(x, scale=0)
    with pytest.raises(TypeError, match="values"):
        cast_outcomes(torch.arange(3))


def test_op_dtypes_discovers_autocast_policy():
    cfg = GPTConfig(n_layer=1, d_model=32, seq_len=16, vocab_size=50)
    model = GPT(cfg)
    x, y = gpt_batch(cfg, 2)
    table = op_dtypes(lambda: model(x, y).backward(), dtype=torch.bfloat16)
    by_op = {}
    for op, _ins, outs, _ in table:
        by_op.setdefault(op, set()).add(outs)
    assert "bfloat16" in by_op["addmm"] or "bfloat16" in by_op.get("mm", set())
    assert by_op["native_layer_norm"] == {"float32"}  # its input is the FP32 residual stream
    plain = op_dtypes(lambda: model(x, y), dtype=None)
    assert all("bfloat16" not in o for _, _, o, _ in plain)
    with pytest.raises(ValueError, match="device_type"):
        op_dtypes(lambda: None, device_type="mps")
    with pytest.raises(ValueError, match="dtype"):
        op_dtypes(lambda: None, dtype=torch.float32)
    with pytest.raises(TypeError, match="fn"):
        op_dtypes(None)


def test_count_flops():
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    assert count_flops(lambda: a @ b) == 2 * 8 * 16 * 4
    with pytest.raises(TypeError, match="fn"):
        count_flops(3)
