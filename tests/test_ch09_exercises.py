"""Chapter 09's exercise answers follow from the same calls the widget makes (its multi-GPU exercises are chapter
10's: tests/test_ch10_exercises.py)."""
import json
from pathlib import Path

from utils.architectures import shape_of_model
from utils.budget import REPORTED_GIB, usable_budget
from utils.plan import TransformerShape, plan

GIB = 2**30
NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "09_capstone_fit_a_model.ipynb"


def _answer(start: str) -> str:
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    text = next(src for src in ("".join(c["source"]) for c in cells) if start in src)
    return text[text.index(start):].split("*(Answer:", 1)[1].split(")*", 1)[0]


def test_exercise_four_host_ram_below_the_offload_ledger_hands_the_plan_to_lora():
    """Exercise 4: Llama-3-8B on an A10G stops planning to offload below the 121 GiB its host ledger needs."""
    def at(host_gib: int):
        return plan(shape_of_model("Llama-3-8B", 4096), usable_budget(int(REPORTED_GIB["A10G (24 GB)"] * GIB)), 32,
                    host_bytes=host_gib * GIB, chunked_loss=1024)
    answer = _answer("at which host RAM does Llama-3-8B")
    with_offload, without = at(128), at(64)
    assert with_offload.choice.offload_optimizer and round(with_offload.host_total / GIB) == 121
    assert f"the {round(with_offload.host_total / GIB)} GiB" in answer and "64 GiB" in answer
    assert not without.choice.offload_optimizer and without.choice.lora_rank == 16
    assert not without.choice.quantize_base and "LoRA rank 16 on a frozen BF16 base" in answer


def test_a_small_models_plan_steps_are_in_a_unit_that_shows_them():
    """Exercise 5 reads `plan().steps` for the small GPT: its MiB-sized ledger must not print as 0.0 GiB."""
    p = plan(TransformerShape(2, 64, 2, 64, 256), 3_783_242, 4, allow_offload=False)
    assert p.steps and all("0.0 GiB" not in s and " MiB" in s for s in p.steps if "skipped" not in s)
