"""Chapter 09's ledger is written in the notebook; utils.ledger.plan packages it. These tests exec the notebook's
functions and check that they give the same bytes as utils.ledger.plan's on many inputs, so the two never drift
apart."""

import ast
from dataclasses import replace
from pathlib import Path

import nbformat
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from notebook_lessons import exec_lesson

import utils.ledger.budget as budget
import utils.ledger.plan as packaged
from utils.ledger.gpt import TransformerShape, transformer_activation_bytes
from utils.ledger.plan import LORA_TARGETS, OPTIMIZERS, Choice
from utils.validate import check_bool, check_choice, check_instance, check_int, check_number

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "09_capstone_fit_a_model.ipynb"
LESSON = (
    "usable_budget",
    "optimizer_state_bytes_per_param",
    "activation_terms",
    "block_parameters",
    "memory_of",
    "step_moments",
    "peak_moment",
    "lora_parameters",
    "costs",
)


@pytest.fixture(scope="module")
def lesson() -> dict:
    """The notebook's lesson functions, exec'd from the cells' source."""
    namespace = {
        "TransformerShape": TransformerShape,
        "transformer_activation_bytes": transformer_activation_bytes,
        "replace": replace,
        "Choice": Choice,
        "OPTIMIZERS": OPTIMIZERS,
        "LORA_TARGETS": LORA_TARGETS,
        "check_bool": check_bool,
        "check_choice": check_choice,
        "check_instance": check_instance,
        "check_int": check_int,
        "check_number": check_number,
        "optimizer_state_overhead": packaged.optimizer_state_overhead,
        "MIB": 2**20,
        "GIB": 2**30,
        "REDUCE_BUCKET": notebook_constant("REDUCE_BUCKET"),
    }
    return exec_lesson(NOTEBOOK, LESSON, namespace)


def notebook_constant(name: str) -> object:
    """The value a top-level `name = <literal>` of the notebook's code cells assigns."""
    for cell in nbformat.read(NOTEBOOK, as_version=4).cells:
        if cell.cell_type == "code":
            for node in ast.parse(cell.source).body:
                if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [name]:
                    return ast.literal_eval(node.value)
    raise AssertionError(f"the notebook assigns no {name}")


def test_the_notebooks_gradient_bucket_is_deepspeeds_default():
    assert notebook_constant("REDUCE_BUCKET") == packaged.REDUCE_BUCKET_ELEMENTS == 500_000_000


shapes = st.builds(
    lambda layers, heads, head_dim, seq, vocab: TransformerShape(layers, heads * head_dim, heads, seq, vocab),
    st.integers(1, 96),
    st.integers(1, 64),
    st.sampled_from([8, 16, 64, 128]),
    st.sampled_from([1, 64, 512, 2048, 8192]),
    st.sampled_from([256, 32000, 50257, 128256]),
)


@st.composite
def choices(draw):
    lora = draw(st.sampled_from([0, 0, 4, 16, 64]))
    n_gpus = draw(st.sampled_from([1, 2, 8, 64]))
    sharding = draw(st.sampled_from(["none", "zero1", "zero2", "zero3"])) if n_gpus > 1 else "none"
    precision = draw(st.sampled_from(["fp32", "bf16-mixed", "bf16"]))
    offload = not lora and precision != "fp32" and draw(st.booleans())
    return Choice(
        precision=precision,
        checkpointing=draw(st.booleans()),
        micro_batch=draw(st.integers(1, 32)),
        accumulation=draw(st.integers(1, 8)),
        optimizer=draw(st.sampled_from(OPTIMIZERS)),
        lora_rank=lora,
        lora_targets=draw(st.sampled_from(LORA_TARGETS)),
        quantize_base=bool(lora) and draw(st.booleans()),
        sharding=sharding,
        n_gpus=n_gpus,
        offload_optimizer=offload,
        offload_parameters=offload and draw(st.booleans()),
        capability=draw(st.sampled_from([None, (7, 5), (8, 0), (9, 0)])),  # a T4 counts BF16 math attention
        device=draw(st.sampled_from(["cuda", "cuda", "mps", "cpu"])),  # an Apple GPU: math attention always
    )


@settings(max_examples=300, deadline=None, derandomize=True)
@given(shape=shapes, choice=choices())
def test_the_notebooks_ledger_and_costs_equal_utils_plan(lesson, shape, choice):
    assert lesson["step_moments"](shape, choice) == packaged.step_moments(shape, choice)
    assert lesson["memory_of"](shape, choice) == packaged.memory_of(shape, choice)
    assert lesson["costs"](shape, choice) == packaged.costs(shape, choice)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    shape=shapes,
    rank=st.integers(1, 256),
    targets=st.sampled_from(LORA_TARGETS),
    fused=st.booleans(),
    reported=st.integers(1, 200 * 2**30),
)
def test_the_notebooks_formulas_equal_utils_plan(lesson, shape, rank, targets, fused, reported):
    assert lesson["lora_parameters"](shape, rank, targets, fused) == packaged.lora_parameters(
        shape, rank, targets, fused
    )
    assert lesson["usable_budget"](reported) == budget.usable_budget(reported)
    assert lesson["block_parameters"](shape) == packaged.block_parameters(shape)
    for optimizer in OPTIMIZERS:
        for size in (2, 4):
            assert lesson["optimizer_state_bytes_per_param"](
                optimizer, size
            ) == packaged.optimizer_state_bytes_per_param(optimizer, size)
    for regime in ("fp32", "bf16-mixed", "bf16", "offload", "bf16-base", "nf4-base"):
        for ck in (False, True):
            assert lesson["activation_terms"](shape, 2, regime, ck) == packaged.activation_terms(shape, 2, regime, ck)


def test_the_notebooks_functions_refuse_bad_input_like_utils(lesson):
    shape = TransformerShape(2, 64, 4, 64, 256)
    with pytest.raises(ValueError, match="rank"):
        lesson["lora_parameters"](shape, -1)
    with pytest.raises(TypeError, match="choice"):
        lesson["memory_of"](shape, {})
