"""Chapter 09's exercise answers follow from the same calls the widget makes (its multi-GPU exercises are chapter
10's: tests/test_ch10_exercises.py)."""
import ast
import json
import re
import warnings
from pathlib import Path
from unittest import mock

import pytest
import torch
from notebook_lessons import exec_lesson, folded_answer

from utils.ledger.architectures import shape_of_model
from utils.ledger.budget import REPORTED_GIB, usable_budget
from utils.ledger.plan import Choice, TransformerShape, plan
from utils.lessons.experiment_sizes.ch09 import HF_BATCH, HF_LAYERS, HF_SEQ, HF_STEPS, HF_WIDTH
from utils.lessons.sizes import experiment_size, memory_fraction_in_force

GIB = 2**30
NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "09_capstone_fit_a_model.ipynb"


def _answer(start: str) -> str:
    return folded_answer(NOTEBOOK, start)


def test_exercise_four_mistral_trains_fully_with_zero_offload_where_llama_3_8b_could_not():
    """Exercise 4 (review s14b R13: the Llama-3-8B question was answered by the chapter's own cell): Mistral-7B on an
    A10G, 4,096 tokens, 32 sequences, the panel's call: ZeRO-Offload at 256 GiB of host RAM (its host ledger, and the
    GPU ledger that fits), LoRA at 128, and the head four times smaller than Llama-3's."""
    def at(host_gib: int):
        return plan(shape_of_model("Mistral-7B", 4096), usable_budget(int(REPORTED_GIB["A10G (24 GB)"] * GIB)), 32,
                    host_bytes=host_gib * GIB, chunked_loss=1024)
    answer = " ".join(_answer("256 GiB on the slider").split())
    small, big = at(128), at(256)
    assert big.fits and big.choice.offload_optimizer and not big.choice.offload_parameters
    assert answer.startswith(f"256 GiB on the slider (the host ledger needs {round(big.host_total / GIB)})")
    assert f"fits at {big.choice.micro_batch} x {big.choice.accumulation} with {big.total / GIB:.1f} GiB" in answer
    assert small.choice.lora_rank and not small.choice.offload_optimizer and "at 128, LoRA" in answer
    mistral, llama = shape_of_model("Mistral-7B", 4096), shape_of_model("Llama-3-8B", 4096)
    assert (mistral.vocab_size, llama.vocab_size) == (32_000, 128_256) and "a quarter of Llama-3's 128,256" in answer


def test_a_small_models_plan_steps_are_in_a_unit_that_shows_them():
    """Exercise 5 reads `plan().steps` for the small GPT: its MiB-sized ledger must not print as 0.0 GiB."""
    p = plan(TransformerShape(2, 64, 2, 64, 256), 3_783_242, 4, allow_offload=False)
    assert p.steps and all("0.0 GiB" not in s and " MiB" in s for s in p.steps if "skipped" not in s)


def _assigned(name: str, in_cell_with: str = "") -> str:
    """The notebook's top-level assignments to `name` (in the cell holding `in_cell_with`), in order, as source."""
    found = []
    for cell in json.loads(NOTEBOOK.read_text())["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] != "code" or in_cell_with not in src:
            continue
        found += [ast.get_source_segment(src, node) for node in ast.parse(src).body
                  if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets)]
    assert found, f"no assignment to {name} in the notebook"
    return "\n".join(found)


@pytest.mark.skipif(torch.cuda.is_available() or experiment_size() != "quick",
                    reason="the answer states the quick-size run on a CPU")
def test_exercise_three_at_40_percent_the_run_the_answer_states():
    """Exercise 3 (review s2, chapter 09, item 5): the answer states what the run at 40% shows, not "run it to see".
    The plan is the ledger's; the run is the notebook's own `run_in_budget` (section 6), at the quick size here."""
    import torch.nn.functional as F
    from peft import LoraConfig, get_peft_model
    from transformers import GPT2Config, GPT2LMHeadModel

    from utils.lessons.env import default_device, device_info
    from utils.lessons.measure import step_peak
    from utils.lessons.plan_runs import make_optimizer

    device = default_device()
    ns = {"torch": torch, "F": F, "mock": mock, "warnings": warnings, "GPT2Config": GPT2Config,
          "GPT2LMHeadModel": GPT2LMHeadModel, "LoraConfig": LoraConfig, "get_peft_model": get_peft_model,
          "make_optimizer": make_optimizer, "step_peak": step_peak,
          "memory_fraction_in_force": memory_fraction_in_force,
          "info": device_info(), "device": device, "MIB": 2**20, "HF_LAYERS": HF_LAYERS, "HF_WIDTH": HF_WIDTH,
          "HF_SEQ": HF_SEQ, "HF_BATCH": HF_BATCH, "no_compile": lambda fn=None, **_: fn or (lambda f: f)}
    exec(_assigned("hf_cfg") + "\n" + _assigned("ids", "def run_in_budget"), ns)  # noqa: S102
    exec_lesson(NOTEBOOK, ("build", "reserved_room", "run_in_budget"), ns)
    full_peak, *_ = ns["run_in_budget"](Choice(micro_batch=HF_BATCH), None, 0, 0)
    budget = full_peak * 4 // 10
    chosen = plan(TransformerShape(HF_LAYERS, HF_WIDTH, 4, HF_SEQ, 256), budget, HF_BATCH, allow_offload=False,
                  capability=None, device=device.type)
    peak, status, losses, _ = ns["run_in_budget"](chosen.choice, budget, 0, HF_STEPS)
    answer = " ".join(_answer("Run section 6 with the budget at 40%").split())
    assert chosen.choice.optimizer == "adamw8bit" and chosen.choice.accumulation == HF_BATCH
    assert chosen.history[-2][1] > budget >= chosen.total  # accumulation alone no longer fits; + 8-bit AdamW does
    margin = 100 * (budget - chosen.total) / budget
    assert f"({chosen.history[-2][1]:,} B against a {budget:,} B budget)" in answer
    assert f"a ledger of {chosen.total:,} B, {margin:.1f}% under the budget" in answer
    assert status == "ran" and peak <= budget and losses[-1] < losses[0]
    stated = re.search(r"the run measures ([\d,]+) B, inside the budget, and learns \(loss ([\d.]+) -> ([\d.]+)\)",
                       answer)
    assert stated, answer  # the figures of the run on the machine that wrote the answer; another CPU's BF16 kernels
    assert abs(int(stated.group(1).replace(",", "")) / peak - 1) < 0.02  # may round a little differently
    assert abs(float(stated.group(2)) - losses[0]) < 0.02 and abs(float(stated.group(3)) - losses[-1]) < 0.02
