"""Chapter 10's exercise answers and the reading of its panel's first picture follow from the same calls the panel
makes (utils.ledger.plan.plan with the layout's tensor and pipeline degrees)."""
import json
import re
from pathlib import Path

import pytest
from notebook_lessons import folded_answer

from utils.ledger.architectures import shape_of_model
from utils.ledger.budget import REPORTED_GIB, usable_budget
from utils.ledger.parallel import pipeline_layers_held
from utils.ledger.plan import plan

GIB = 2**30
NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "10_beyond_one_gpu.ipynb"


def _text(start: str) -> str:
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    text = next(src for src in ("".join(c["source"]) for c in cells) if start in src)
    return text[text.index(start):]


def _outputs(start: str) -> str:
    """The committed outputs (printed text and Markdown tables) of the code cell whose source contains `start`."""
    cell = next(c for c in json.loads(NOTEBOOK.read_text())["cells"]
                if c["cell_type"] == "code" and start in "".join(c["source"]))
    return "\n".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/markdown", ""))
                     for o in cell.get("outputs", []))


def _row(out: str, first: str) -> list[str]:
    """The cells of the printed table row whose first cell is `first`."""
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == first:
            return cells
    raise AssertionError(f"no printed row {first!r} in:\n{out}")


def _answer(start: str) -> str:
    return folded_answer(NOTEBOOK, start)


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
    # "at", not "from ... on": at 9 GPUs the exact AdamW takes the place of 8-bit AdamW, with a micro-batch of 1 again
    assert _exercise_one(fewest + 1).choice.micro_batch == 2
    assert f"at {fewest + 1} GPUs the micro-batch widens to 2" in " ".join(answer.split())


def test_exercise_three_interleaved_answer():
    """Review s14b R17: the exercise was one call of `pipeline_layers_held`; it now asks for the fewest chunks that
    bring the first stage within 10% of 1F1B, among the divisors of a stage's 10 layers."""
    one_f_one_b = pipeline_layers_held(80, 8)
    held = {v: pipeline_layers_held(80, 8, schedule="interleaved", chunks=v) for v in (1, 2, 5, 10)}
    within = [v for v, h in held.items() if h <= 1.1 * one_f_one_b]
    assert within == [10]
    answer = " ".join(_answer("many chunks per stage").split())
    assert answer.startswith("10 chunks of one layer") and f"= {held[10]:g} layers' worth" in answer
    assert f"5 chunks hold {held[5]:g} ({held[5] / one_f_one_b - 1:.1%} above)" in answer


@pytest.mark.parametrize("replicas, t, p, total, how", [
    (1, 8, 1, None, "does not fit"), (2, 8, 1, 63.5, ("zero3", "adamw8bit")), (4, 8, 1, 66.7, ("zero2", "adamw")),
    (1, 8, 2, 59.7, ("none", "adamw8bit"))])
def test_the_panels_first_picture_and_its_ways_out_are_what_the_reading_says(replicas, t, p, total, how):
    reading = " ".join(_text("Read the first picture (Llama-2-70B").split())
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


def test_the_reading_quotes_the_figures_the_run_printed():
    """Review s3, E10-1: the reading's figures were drawn only by the panel, whose committed output a reader without a
    kernel saw as "(run the notebook to use its controls)". The cell before the reading prints them with the panel's
    function; each figure the reading quotes is a printed one (this failed on the notebook without that cell)."""
    out, reading = _outputs("first_view = layout_plan("), _text("Read the first picture (Llama-2-70B")
    reading = " ".join(reading.split())
    first = _layout("Llama-2-70B", 4096, "H100 (80 GB)", 16, 1, 8, 1)
    printed = {step: _row(out, step)[1] for step, _ in first.history}
    assert list(printed.values()) == [f"{x / GIB:,.0f}" for _, x in first.history]
    steps = list(printed.values())
    assert f"about {steps[0]} GiB per GPU" in reading and f"checkpointing takes it to {steps[2]} GiB" in reading
    assert f"accumulation to {steps[4]}," in reading and f"8-bit AdamW to {steps[-1]} GiB" in reading
    assert f"plan budget of an H100 (80 GB): {first.budget / GIB:.1f} GiB per GPU" in out and not first.fits
    assert f"over the {first.budget / GIB:.1f} GiB budget" in reading
    ways_out = (("2 replicas x t 8", (2, 8, 1), "2 replicas (16 GPUs) with ZeRO-3 and 8-bit"),
                ("4 replicas x t 8", (4, 8, 1), "4 replicas (32 GPUs) with ZeRO-2 and AdamW's"),
                ("1 replica x t 8 x p 2", (1, 8, 2), "2 pipeline stages (16 GPUs) and 8-bit"))
    for label, (replicas, t, p), quoted in ways_out:
        plan_ = _layout("Llama-2-70B", 4096, "H100 (80 GB)", 16, replicas, t, p)
        row = _row(out, label)
        assert row[1] == str(replicas * t * p) and row[5] == f"{plan_.total / GIB:.1f}" and row[6] == "fits"
        after = reading.split(quoted, 1)[1]
        assert re.match(rf"[^;.]*?, {re.escape(row[5])} GiB", after), (label, after[:80])


def test_exercise_one_answer_is_recorded_by_the_run_not_printed():
    """E10-1: exercise 1's figures are computed with the panel's function by the notebook's last code cell and
    recorded in results/ (`exercise_answers`) by the run that made the committed outputs, without printing them in
    the open (review s12: a chapter must not print its exercises' answers); the folded answer quotes them."""
    fewest = next(n for n in range(1, 65) if _exercise_one(n).fits)
    p, short = _exercise_one(fewest), _exercise_one(fewest - 1)
    exact = next(n for n in range(1, 65) if _exercise_one(n).fits and _exercise_one(n).choice.optimizer == "adamw")
    assert "Exercise 1 (answer)" not in _outputs("exercise_1 = {n: layout_plan(")
    saved = json.loads((NOTEBOOK.parent.parent / "results" / "amd-epyc" / "10_beyond_one_gpu.json").read_text())
    assert saved["figures"]["exercise_answers"]["value"]["exercise_1"] == {
        "fewest_gpus": fewest, "sharding": p.choice.sharding, "optimizer": p.choice.optimizer,
        "micro_batch": p.choice.micro_batch, "GiB": round(p.total / GIB, 1),
        "one_fewer_GiB": round(short.total / GIB, 1), "exact_from_gpus": exact,
        "next_micro_batch": _exercise_one(fewest + 1).choice.micro_batch}
