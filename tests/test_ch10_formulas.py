"""Chapter 10's formulas are written in the notebook; utils.ledger.plan and utils.ledger.parallel package them. These
tests exec the notebook's functions and check that they give the same bytes as the packaged ones on many inputs (the
pattern of tests/test_ch09_ledger.py), so the lesson and the planner never drift apart."""

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from notebook_lessons import exec_lesson

import utils.ledger.parallel as parallel
import utils.ledger.plan as planner
from utils.ledger.architectures import ARCHITECTURES, ArchitectureShape, shape_of_model
from utils.ledger.gpt import TransformerShape
from utils.ledger.plan import Choice, block_parameters
from utils.validate import check_bool, check_choice, check_instance, check_int

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "10_beyond_one_gpu.ipynb"
LESSON = ("zero_bytes_per_gpu", "layer_activation_bytes", "replicated_layer_bytes", "pipeline_layers_held",
          "state_share", "with_layers", "model_parallel_terms", "model_parallel_traffic")


@pytest.fixture(scope="module")
def lesson() -> dict:
    """The notebook's lesson functions, exec'd from the cells' source."""
    namespace = {"replace": replace, "Choice": Choice, "TransformerShape": TransformerShape,
                 "ArchitectureShape": ArchitectureShape, "block_parameters": block_parameters, "planner": planner,
                 "check_bool": check_bool, "check_choice": check_choice, "check_instance": check_instance,
                 "check_int": check_int}
    return exec_lesson(NOTEBOOK, LESSON, namespace)


gpt_shapes = st.builds(
    lambda layers, heads, head_dim, seq, vocab: TransformerShape(layers, heads * head_dim, heads, seq, vocab),
    st.sampled_from([4, 8, 16, 24, 32, 48]), st.integers(1, 32), st.sampled_from([16, 64, 128]),
    st.sampled_from([64, 512, 2048]), st.sampled_from([256, 32000, 128256]))
real_shapes = st.builds(lambda name, seq: shape_of_model(name, seq), st.sampled_from(sorted(ARCHITECTURES)),
                        st.sampled_from([512, 2048, 4096]))


@st.composite
def layouts(draw, shape):
    layers = shape.n_layer
    stages = draw(st.sampled_from([p for p in (1, 2, 4, 8) if layers % p == 0]))
    chunks = draw(st.sampled_from([m for m in (1, 2) if layers % (stages * m) == 0])) if stages > 1 else 1
    t = draw(st.sampled_from([1, 2, 4, 8]))
    if t == stages == 1:
        t = 2
    accumulation = draw(st.sampled_from([1, 2, 4, 8, 16]))
    if chunks > 1 and accumulation % stages:
        accumulation = stages * 2
    lora = draw(st.sampled_from([0, 0, 16]))
    n_gpus = draw(st.sampled_from([1, 4]))
    return Choice(precision=draw(st.sampled_from(["fp32", "bf16-mixed", "bf16"])), checkpointing=draw(st.booleans()),
                  micro_batch=draw(st.integers(1, 4)), accumulation=accumulation, lora_rank=lora,
                  quantize_base=bool(lora) and draw(st.booleans()),
                  sharding=draw(st.sampled_from(["none", "zero1", "zero3"])) if n_gpus > 1 else "none",
                  n_gpus=n_gpus, tensor_parallel=t, sequence_parallel=t > 1 and draw(st.booleans()),
                  pipeline_stages=stages, pipeline_chunks=chunks,
                  chunked_loss=draw(st.sampled_from([0, 1024])))


@st.composite
def shape_and_layout(draw):
    shape = draw(st.one_of(gpt_shapes, real_shapes))
    return shape, draw(layouts(shape))


@settings(max_examples=250, deadline=None, derandomize=True)
@given(case=shape_and_layout())
def test_the_notebooks_model_parallel_ledger_equals_utils_plan(lesson, case):
    shape, choice = case
    parts = planner.line_maxima(shape, choice)
    assert lesson["model_parallel_terms"](shape, choice, parts) == planner.memory_of(shape, choice)
    assert lesson["state_share"](shape, choice) == planner.state_share(shape, choice)
    traffic = lesson["model_parallel_traffic"](shape, choice)
    packaged = planner.costs(shape, choice)
    assert traffic == {k: packaged[k] for k in ("tensor-parallel bytes", "pipeline bytes") if k in packaged}
    for precision in ("fp32", "bf16-mixed", "bf16"):
        assert lesson["replicated_layer_bytes"](shape, choice.micro_batch, precision) == \
            planner.replicated_layer_bytes(shape, choice.micro_batch, precision)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(s=st.integers(1, 32768), b=st.integers(1, 64), h=st.integers(1, 16384), a=st.integers(1, 128),
       t=st.sampled_from([1, 2, 4, 8, 16]), sp=st.booleans(), recompute=st.sampled_from(parallel.RECOMPUTE),
       layers=st.sampled_from([8, 24, 32, 80, 96]), stages=st.sampled_from([1, 2, 4, 8]), chunks=st.integers(1, 4),
       n=st.integers(1, 10**12), stage=st.integers(0, 3), gpus=st.integers(1, 1024),
       accounting=st.sampled_from(["zero-paper", "torch.amp"]))
def test_the_notebooks_formulas_equal_the_packaged_ones(lesson, s, b, h, a, t, sp, recompute, layers, stages, chunks,
                                                         n, stage, gpus, accounting):
    sp = sp and t > 1
    assert lesson["layer_activation_bytes"](s, b, h, a, t=t, sequence_parallel=sp, recompute=recompute) == \
        parallel.layer_activation_bytes(s, b, h, a, t=t, sequence_parallel=sp, recompute=recompute)
    assert lesson["pipeline_layers_held"](layers, stages) == parallel.pipeline_layers_held(layers, stages)
    assert lesson["pipeline_layers_held"](layers, stages, schedule="interleaved", chunks=chunks) == \
        parallel.pipeline_layers_held(layers, stages, schedule="interleaved", chunks=chunks)
    assert lesson["zero_bytes_per_gpu"](n, stage, gpus, accounting) == planner.zero_bytes_per_gpu(n, stage, gpus,
                                                                                                  accounting)


def test_the_notebooks_functions_refuse_bad_input_like_utils(lesson):
    shape = TransformerShape(4, 64, 4, 64, 256)
    with pytest.raises(ValueError, match="sequence_parallel"):
        lesson["layer_activation_bytes"](64, 1, 64, 4, t=1, sequence_parallel=True)
    with pytest.raises(ValueError, match="n_layer"):
        lesson["pipeline_layers_held"](10, 4)
    with pytest.raises(ValueError, match="chunks"):
        lesson["pipeline_layers_held"](8, 4, chunks=2)
    with pytest.raises(TypeError, match="parts"):
        lesson["model_parallel_terms"](shape, Choice(tensor_parallel=2), [])
    with pytest.raises(TypeError, match="choice"):
        lesson["state_share"](shape, {})
    with pytest.raises(ValueError, match="precision"):
        lesson["replicated_layer_bytes"](shape, 1, "fp16")
    with pytest.raises(ValueError, match="stage"):
        lesson["zero_bytes_per_gpu"](10, 4, 2)
