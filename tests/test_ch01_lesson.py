"""Chapter 01's lesson code, taken from the notebook's own cells, against its packaged twin in utils.lessons.estimate:
the block formula, the whole-GPT formula and the fake-tensor tracer must give the same bytes on many shapes, and
the Korthikanti block must measure as the chapter explains."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from utils.ledger.gpt import PRESETS, TransformerShape, transformer_activation_bytes
from utils.ledger.plan import will_it_fit
from utils.lessons.estimate import estimate_memory
from utils.lessons.measure import saved_activation_bytes
from utils.lessons.models import GPT, Block, GPTConfig, gpt_batch

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "01_where_the_memory_goes.ipynb"


def lesson(*names: str) -> dict:
    """Exec the notebook's cells that define `names` (each such cell holds only definitions) and return them."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    namespace = {"torch": torch, "nn": nn, "F": F, "math": math, "GPT": GPT, "GPTConfig": GPTConfig}
    for name in names:
        marker = (f"def {name}(", f"class {name}(")
        cells = [c for c in nb.cells if c.cell_type == "code" and any(m in c.source for m in marker)]
        assert len(cells) == 1, f"{name} must be defined in exactly one cell of {NOTEBOOK.name}"
        exec(compile(cells[0].source, f"<{NOTEBOOK.name}:{name}>", "exec"), namespace)  # noqa: S102
    return namespace


SHAPES = [(n_layer, d, h, t, v) for n_layer, d, h, t, v in [
    (1, 8, 1, 1, 2), (2, 64, 4, 64, 256), (3, 48, 4, 24, 70), (4, 96, 12, 17, 1000), (12, 768, 12, 1024, 50257),
    (32, 4096, 32, 4096, 32000), (80, 8192, 64, 4096, 128256), (5, 40, 5, 333, 7)]]


@pytest.mark.parametrize("shape", SHAPES)
def test_notebook_formula_equals_utils_estimate(shape):
    ns = lesson("block_terms", "gpt_activation_bytes")
    n_layer, d, h, t, v = shape
    for batch in (1, 3, 8):
        for precision in ("fp32", "bf16-mixed", "fp16-mixed", "bf16"):
            for attention in ("sdpa", "eager"):
                for checkpointing in (False, True):
                    ours = ns["gpt_activation_bytes"](n_layer, d, h, t, v, batch, precision=precision,
                                                      attention=attention, checkpointing=checkpointing)
                    packaged = transformer_activation_bytes(TransformerShape(n_layer, d, h, t, v), batch,
                                                            precision=precision, attention=attention,
                                                            checkpointing=checkpointing)
                    assert ours == packaged, (shape, batch, precision, attention, checkpointing)


@pytest.mark.parametrize(("cfg", "batch", "precision"), [
    (GPTConfig(n_layer=2, d_model=32, n_head=4, seq_len=16, vocab_size=50), 2, "fp32"),
    (GPTConfig(n_layer=1, d_model=24, n_head=3, seq_len=9, vocab_size=11, attention="eager"), 3, "bf16-mixed"),
    (GPTConfig(n_layer=3, d_model=48, n_head=4, seq_len=24, vocab_size=70), 1, "fp16-mixed"),
])
def test_notebook_tracer_equals_utils_estimate(cfg, batch, precision):
    ns = lesson("traced_saved_bytes")
    traced = ns["traced_saved_bytes"](cfg, batch, precision)
    shape = TransformerShape(cfg.n_layer, cfg.d_model, cfg.n_head, cfg.seq_len, cfg.vocab_size)
    assert traced == transformer_activation_bytes(shape, batch, precision=precision, attention=cfg.attention)
    model = GPT(cfg)
    inputs = tuple(x.contiguous() for x in gpt_batch(cfg, batch))
    packaged = estimate_memory(model, inputs, precision=precision).activations
    # utils' tracer runs a whole training step (twice); under FP16 autocast it counts a few bytes of scalars more.
    assert abs(traced - packaged) <= (0 if precision != "fp16-mixed" else 64)
    if precision == "fp32":
        assert traced == saved_activation_bytes(model, *inputs)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_block_terms_match_a_measured_block(attention):
    ns = lesson("block_terms", "saved_by_module")
    b, t, d, h = 2, 12, 40, 5
    block = Block(GPTConfig(n_layer=1, d_model=d, n_head=h, seq_len=t, attention=attention))
    x = torch.randn(b, t, d, requires_grad=True)
    found = ns["saved_by_module"](block, x)
    assert sum(nb for tensors in found.values() for *_, nb in tensors) == saved_activation_bytes(block, x)
    assert sum(ns["block_terms"](b, t, d, h, attention=attention).values()) == saved_activation_bytes(block, x)
    assert "(the block itself)" not in found and set(found) >= {"ln1", "ln2", "attn", "mlp.1"}
    forward_output = block(x)
    assert isinstance(forward_output, torch.Tensor), "the module hooks leave the block's output alone"


def test_korthikanti_block_is_the_formula_plus_the_explained_terms():
    ns = lesson("MegatronBlock", "korthikanti_bytes")
    s, b, h, a = 32, 2, 64, 4
    torch.manual_seed(0)
    block = ns["MegatronBlock"](h, a, fused_dropout=True).half()
    measured = saved_activation_bytes(block, torch.randn(s, b, h, dtype=torch.float16, requires_grad=True))
    stats = 2 * 2 * s * b * 2  # two LayerNorms' mean and 1/std, FP16 on the CPU
    assert measured == ns["korthikanti_bytes"](s, b, h, a) + stats + s * s


def test_chapter_exercise_1_has_answers():
    """Exercise 1 of the chapter: no batch of the 7B stand-in fits an H100 in BF16 mixed precision with AdamW;
    pure BF16 does at batch >= 1, with and without checkpointing; SGD makes BF16 mixed fit with checkpointing."""
    for batch in (1, 2, 4):
        for ck in (False, True):
            assert not will_it_fit("7B", batch, 4096, precision="bf16-mixed", gpu="H100", checkpointing=ck).fits
    assert will_it_fit("7B", 1, 4096, precision="bf16", gpu="H100").fits
    largest_ck = max(b for b in (1, 2, 4, 8, 16, 32, 64)
                     if will_it_fit("7B", b, 4096, precision="bf16", gpu="H100", checkpointing=True).fits)
    assert largest_ck > 1
    assert will_it_fit("7B", 1, 4096, precision="bf16-mixed", optimizer="sgd", gpu="H100", checkpointing=True).fits
    assert PRESETS["7B"].n_params * 16 > 79 * 2**30


def test_chapter_exercise_2_has_an_answer():
    ns = lesson("block_terms")
    crossing = None
    for t in range(16, 20000, 16):
        terms = ns["block_terms"](1, t, 768, 12, attention="eager")
        quadratic = t * t + 4 * 12 * t * t
        if quadratic > sum(terms.values()) - quadratic:
            crossing = t
            break
    assert crossing is not None and 64 < crossing < 4096


def _top_level_assignments(tree):
    """Assignment targets of a cell outside any function or class body."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                yield from (n for n in ast.walk(target) if isinstance(n, ast.Name))
        stack.extend(ast.iter_child_nodes(node))


def test_no_cell_keeps_a_graph_alive_under_underscore():
    """Issue 12, bug 2: `by_hook, _ = saved_bytes_by_hook(model, x, y)` kept the loss, and so its whole graph, alive
    for the rest of the notebook (IPython never overwrites a `_` the user assigned). No top-level `_ =` at all."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        tree = ast.parse(cell.source)
        names = [n.id for n in _top_level_assignments(tree)]
        assert "_" not in names, f"cell {index} binds `_` at the top level: {cell.source[:80]!r}"


def test_c07_is_judged_on_the_attention_core_not_the_diluted_whole_model():
    """Review s12 01.1: C07 ("attention activation memory grows with the square of sequence length") was judged on
    the whole GPT's slope, which the linear terms dilute. It is judged on the attention core's bytes now: quadratic
    with eager attention, linear with SDPA, and steeper than the whole model's slope printed beside it."""
    import json
    import re
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "notebooks" / "01_where_the_memory_goes.ipynb"
    nb = json.loads(path.read_text())
    out = "".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/markdown", ""))
                  for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", []))
    found = re.search(r"attention core's saved bytes vs sequence length \(T = \d+ to \d+\): eager ([\d.]+), SDPA "
                      r"([\d.]+); the whole GPT's eager slope over the last two lengths: ([\d.]+) -> (\w+)", out)
    eager, sdpa, whole = (float(found.group(k)) for k in (1, 2, 3))
    assert eager >= 1.8 > whole and abs(sdpa - 1) < 0.05 and found.group(4) == "depends"


def test_chapter_exercise_1c_answer_states_will_it_fits_ledger():
    """Answer 1(c)'s typed GiB (review s8 F5) are will_it_fit's parts for the 7B stand-in on an H100 with checkpointing:
    plain SGD's peak (weights and gradients so far, checkpointed inputs, the recomputed block) and the margins."""
    text = "".join("".join(c.source) for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "markdown")
    answer = " ".join(text[text.index("(c) Only plain SGD fits"):].split()[:80])
    gib = 2**30

    def report(optimizer: str):
        return will_it_fit("7B", 1, 4096, precision="bf16-mixed", optimizer=optimizer, gpu="H100", checkpointing=True)

    sgd = report("sgd")
    parts = sgd.parts
    expected = [f"by +{sgd.margin / gib:.1f} GiB", f"({parts['weights'] / gib:.1f} GiB)",
                f"({parts['gradients'] / gib:.1f} GiB)",
                f"({parts['saved activations'] / gib:.2f} GiB)", f"({parts['recomputed block'] / gib:.2f} GiB)",
                f": {sgd.estimate.total / gib:.1f} GiB", f"misses by {-report('sgd-momentum').margin / gib:.1f} GiB",
                f"AdamW misses by {-report('adamw').margin / gib:.1f} GiB"]
    assert [e for e in expected if e not in answer] == [], answer
