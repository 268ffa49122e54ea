"""Chapter 04's verdict functions: criteria on both sides, "needs GPU" without Tensor Cores, bad input named."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from utils.course.verdicts.ch04 import c16, c17, c18, c19

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "04_automatic_mixed_precision.ipynb"


def test_c16_is_tighter_than_a_relative_gap() -> None:
    fp32 = [2.86, 2.92, 2.89, 2.86, 2.87]  # seed spread about 0.025
    assert c16(fp32, [v + 0.0002 for v in fp32]).verdict == "holds"
    # 1.5% apart passed the old 25% relative criterion; it is outside this seed spread
    assert c16(fp32, [v * 1.015 for v in fp32]).verdict == "fails"
    assert c16(fp32, [math.inf, *fp32[1:]]).verdict == "fails"
    with pytest.raises(ValueError, match="fp32_final"):
        c16([2.0], [2.0])
    with pytest.raises(TypeError, match="fp32_final"):
        c16("2.0", [2.0])


def test_tensor_core_claims_need_a_gpu_and_say_where_they_are_judged() -> None:
    for judged in (c17(0.5, 0.4, has_tensor_cores=False), c19(2.5, has_tensor_cores=False)):
        assert judged.verdict == "needs GPU"
        assert "needs a CUDA GPU with Tensor Cores" in judged.note and "section 11" in judged.note
    assert c17(0.5, 0.4, has_tensor_cores=True).verdict == "holds"
    assert c17(0.9, 0.4, has_tensor_cores=True).verdict == "partly"
    assert c19(2.5, has_tensor_cores=True).verdict == "holds"
    assert c19(1.0, has_tensor_cores=True).verdict == "fails"
    with pytest.raises(TypeError, match="has_tensor_cores"):
        c19(2.0, has_tensor_cores=1)
    with pytest.raises(TypeError, match="memory_ratio"):
        c17("0.5", 0.5, has_tensor_cores=True)


def test_c18() -> None:
    cpu = {"matmul": "bfloat16", "softmax": "bfloat16", "layer_norm": "bfloat16", "loss": "float32"}
    assert c18(cpu).verdict == "partly"
    assert c18(cpu | {"softmax": "float32", "layer_norm": "float32"}).verdict == "holds"
    with pytest.raises(ValueError, match="out_dtypes"):
        c18({"matmul": "bfloat16"})


def test_the_chapter_judges_every_claim_with_these_functions() -> None:
    code = "\n".join("".join(c["source"]) for c in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
                     if c["cell_type"] == "code")
    for cid, fn in (("C16", "c16"), ("C17", "c17"), ("C18", "c18"), ("C19", "c19")):
        assert f'run.claim("{cid}"' in code and f"*{fn}(" in code, cid
