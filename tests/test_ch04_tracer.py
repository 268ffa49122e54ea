"""Chapter 04's dispatcher tracer stands in the notebook (section 2); its packaged twin, `utils.lessons.amp_trace`, must
give the same table. The notebook cell is executed here as written and compared with the package on the same runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from utils.lessons import amp_trace
from utils.lessons.models import GPT, GPTConfig, gpt_batch

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "04_automatic_mixed_precision.ipynb"
TRACER_CELL = "c4tracer"


def notebook_tracer() -> dict:
    """The namespace of the notebook's tracer cell, executed with the names the chapter's setup cell imports."""
    cells = {c.get("id"): c for c in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]}
    assert TRACER_CELL in cells, f"chapter 04 has no cell {TRACER_CELL!r} (the tracer)"
    from collections import Counter

    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    ns = {"torch": torch, "Counter": Counter, "TorchDispatchMode": TorchDispatchMode, "tree_flatten": tree_flatten,
          "SKIP": amp_trace.SKIP}
    exec(compile("".join(cells[TRACER_CELL]["source"]), "chapter04-tracer", "exec"), ns)  # noqa: S102
    return ns


def test_the_tracer_cell_is_short() -> None:
    cells = {c.get("id"): c for c in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]}
    code = [ln for ln in "".join(cells[TRACER_CELL]["source"]).splitlines()
            if ln.strip() and not ln.strip().startswith(('"""', "#"))]
    assert len(code) <= 25, f"the tracer in the notebook should stay about 15 lines of code, has {len(code)}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, None], ids=["bf16", "fp16", "plain"])
def test_notebook_and_package_trace_the_same_table(dtype) -> None:
    ns = notebook_tracer()
    cfg = GPTConfig(n_layer=1, d_model=32, n_head=4, seq_len=16, vocab_size=64, attention="eager")
    torch.manual_seed(0)
    model = GPT(cfg)
    x, y = gpt_batch(cfg, 2)

    def step() -> None:
        model(x, y).backward()
        model.zero_grad()

    from_notebook = ns["op_dtypes"](step, "cpu", dtype)
    from_package = amp_trace.op_dtypes(step, device_type="cpu", dtype=dtype)
    assert from_notebook == from_package
    assert any(op == "addmm" for op, *_ in from_package)


def test_both_see_promotion_and_local_fp32_regions() -> None:
    ns = notebook_tracer()
    h, f, w = torch.randn(4, 8).bfloat16(), torch.randn(4, 8), torch.randn(8, 8)

    def probes() -> None:
        torch.cat([h, f])
        torch.addcmul(f, h, h)
        with torch.autocast("cpu", enabled=False):
            h.float() @ w

    table = amp_trace.op_dtypes(probes)
    assert ns["op_dtypes"](probes) == table
    assert ("cat", "float32", "float32", 1) in table  # cast up by autocast's CPU promote list
    assert ("addcmul", "bfloat16+float32", "float32", 1) in table  # widest input type
    assert ("mm", "float32", "float32", 1) in table  # autocast off inside the region


def test_the_tracer_sees_cuda_autocast_without_a_gpu() -> None:
    """CUDA autocast's kernels run on fake CUDA tensors (shapes and dtypes, no data), so the tracer can be checked
    against CUDA's policy here: `torch.autocast("cuda")` refuses to switch on without a GPU, the switch underneath
    (`torch.set_autocast_enabled`) does not. What the tracer sees must agree with the CUDA category the chapter reads
    from this torch's autocast_mode.h."""
    import re

    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode

    ns = notebook_tracer()
    header = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
    if not header.exists():
        pytest.skip("this torch build ships no C++ headers")
    text = header.read_text()
    fp32_ops = set(re.findall(r"_\((\w+)", re.search(r"#define AT_FORALL_FP32\(_\)(.*?)\n\n", text, re.S).group(1)))
    assert {"layer_norm", "native_layer_norm", "nll_loss"} <= fp32_ops
    before = (torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"))
    with FakeTensorMode():
        x, w = torch.randn(4, 8, device="cuda"), torch.randn(8, 8, device="cuda")
        torch.set_autocast_enabled("cuda", True)
        torch.set_autocast_dtype("cuda", torch.bfloat16)
        try:
            mode = ns["OpDtypes"]()
            with mode:
                y = x @ w
                F.softmax(y, -1)
                F.layer_norm(y, (8,))
                torch.addcmul(x, y, y)
                F.cross_entropy(y, torch.zeros(4, dtype=torch.long, device="cuda"))
        finally:
            torch.set_autocast_enabled("cuda", before[0])
            torch.set_autocast_dtype("cuda", before[1])
    seen = {op: outs for op, _, outs in mode.seen}
    assert seen["mm"] == "bfloat16"  # lower precision
    assert seen["_softmax"] == "float32" and seen["native_layer_norm"] == "float32"  # CUDA's FP32 list
    assert seen["addcmul"] == "float32"  # promote: the widest input (x is FP32)
    # cross_entropy is on no CUDA list: it passes its input's dtype to log_softmax, which FP32_SET_OPT_DTYPE then keeps
    # (LossNLL.cpp), so the log-probabilities stay BF16 and only nll_loss runs in FP32, as the H100 run traced it
    assert seen["_log_softmax"] == "bfloat16" and seen["nll_loss_forward"] == "float32"
