"""Chapter 10's exercise answers and the reading of its panel's first picture follow from the same calls the panel
makes (utils.plan.plan with the layout's tensor and pipeline degrees)."""
import json
from pathlib import Path

import pytest

from utils.architectures import shape_of_model
from utils.budget import REPORTED_GIB, usable_budget
from utils.parallel import pipeline_layers_held
from utils.plan import plan

GIB = 2**30
NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "10_beyond_one_gpu.ipynb"


def _text(start: str) -> str:
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    text = next(src for src in ("".join(c["source"]) for c in cells) if start in src)
    return text[text.index(start):]


def _answer(start: str) -> str:
    return _text(start).split("*(Answer:", 1)[1].split(")*", 1)[0]


def _layout(model, seq, gpu, batch, replicas, t, p, lora=False):
    """The panel's call (layout_report): offload off, the chunked loss on."""
    return plan(shape_of_model(model, seq), usable_budget(int(REPORTED_GIB[gpu] * GIB)), batch, n_gpus=replicas,
                allow_lora=lora, allow_offload=False, chunked_loss=1024, tensor_parallel=t, pipeline_stages=p)


def _exercise_one(n_gpus: int):
    return _layout("Llama-3-8B", 4096, "A10G (24 GB)", 32, n_gpus, 1, 1)


def test_exercise_one_answer_is_the_fewest_gpus_the_panel_fits():
    fewest = next(n for n in range(1, 65) if _exercise_one(n).fits)
    p = _exercise_one(fewest)
    assert p.choice.sharding == "zero3" and p.choice.optimizer == "adamw8bit"
    answer = _answer("With the panel: Llama-3-8B")
    assert answer.strip().startswith(f"{fewest} GPUs")
    assert f"{p.choice.micro_batch} x {p.choice.accumulation}" in answer
    assert f"{p.total / GIB:.1f} GiB" in answer
    assert not _exercise_one(fewest - 1).fits and f"{_exercise_one(fewest - 1).total / GIB:.1f} GiB" in answer
    exact = next(n for n in range(1, 65) if _exercise_one(n).fits and _exercise_one(n).choice.optimizer == "adamw")
    assert f"fit from {exact} GPUs on" in answer
    assert _exercise_one(fewest + 1).choice.micro_batch == 2 and f"from {fewest + 1} GPUs on" in answer


def test_exercise_three_interleaved_answer():
    held = pipeline_layers_held(80, 8, schedule="interleaved", chunks=4)
    assert f"= {held:g}" in _answer("with 8 stages and 4 interleaved chunks")


@pytest.mark.parametrize("replicas, t, p, total, how", [
    (1, 8, 1, None, "does not fit"), (2, 8, 1, 63.5, ("zero3", "adamw8bit")), (4, 8, 1, 66.7, ("zero2", "adamw")),
    (1, 8, 2, 59.7, ("none", "adamw8bit"))])
def test_the_panels_first_picture_and_its_ways_out_are_what_the_reading_says(replicas, t, p, total, how):
    reading = _text("Read the first picture (Llama-2-70B")
    plan_ = _layout("Llama-2-70B", 4096, "H100 (80 GB)", 16, replicas, t, p)
    if total is None:
        assert not plan_.fits
        bars = [round(x / GIB) for _, x in plan_.history]
        assert [f"{b:,}" for b in (bars[0], bars[2], bars[4])] == ["1,451", "357", "188"]
        assert f"8-bit AdamW to {round(plan_.total / GIB)} GiB" in reading
        assert f"{plan_.budget / GIB:.1f} GiB budget" in reading
        for b in ("1,451", "357", "188"):
            assert b in reading
    else:
        assert plan_.fits and (plan_.choice.sharding, plan_.choice.optimizer) == how
        assert f"{plan_.total / GIB:.1f} GiB" in reading and round(plan_.total / GIB, 1) == total
