"""A plan as chapter 09's planner panel shows it, without torch: the lines the panel prints, its figure's bars and its
costs table, for a model (a real architecture, a GPT stand-in or a Hugging Face config's fields), a GPU, a sequence
length, a batch, a GPU count, host RAM and the techniques allowed.

The course website's planner page (docs/planner.md, built by utils/course/planner_page.py) runs this in the reader's
browser with Pyodide; chapter 09 writes its panel's function in the notebook, and tests/test_book.py checks in Chromium
that the page prints the panel's lines for the same inputs.
"""

from __future__ import annotations

import json
from typing import Any

from utils.ledger.architectures import ARCHITECTURES, ArchitectureShape, from_hf_config, shape_of_model
from utils.ledger.budget import CAPABILITY, GIB, REPORTED_GIB, usable_budget
from utils.ledger.gpt import PRESETS, TransformerShape
from utils.ledger.plan import Plan, costs_table, figure_bars, plan
from utils.validate import check_bool, check_choice, check_int, check_str

MODELS = list(ARCHITECTURES) + [f"GPT {name} (stand-in)" for name in PRESETS]  # real models, then the course's
CHUNK_TOKENS = 1024  # the chunked loss's chunk, as chapter 09's panel sets it


def _model_shape(model: str, seq_len: int, config: str = "") -> ArchitectureShape | TransformerShape:
    """The shape the planner takes: `config` (a Hugging Face config.json's text) read at `seq_len` when given, else a
    real architecture at `seq_len`, or one of the course's GPT stand-ins (whose sequence length is fixed)."""
    if config.strip():
        try:
            fields = json.loads(config)
        except ValueError as exc:
            raise ValueError(f"config is not JSON: {exc}") from None
        if not isinstance(fields, dict):
            raise ValueError("config must be a JSON object (the fields of a Hugging Face config.json)")
        name = fields.get("_name_or_path")
        return ArchitectureShape(from_hf_config(fields), seq_len, name if isinstance(name, str) and name else
                                 "your config")
    if model in ARCHITECTURES:
        return shape_of_model(model, seq_len)
    return PRESETS[model.removeprefix("GPT ").removesuffix(" (stand-in)")]


def plan_report(model: str, seq_len: int, gpu: str, effective_batch: int, host_gib: int, allow_offload: bool,
                allow_lora: bool, chunked_loss: bool, n_gpus: int = 1, config: str = "") -> dict[str, Any]:
    """The plan for these inputs as the page shows it: {"title", "fits", "model" (what was planned: parameters,
    layers, width, vocabulary, and the sequence length a GPT stand-in fixes), "lines" (what chapter 09's panel prints,
    line for line), "costs" (headers and rows), "bars" (`utils.ledger.plan.figure_bars`)}. `effective_batch` is the
    sequences each GPU trains per optimizer step, and the host's RAM holds every GPU's process (as `plan` has it)."""
    check_choice("model", model, tuple(MODELS))
    check_int("seq_len", seq_len, minimum=1)
    check_choice("gpu", gpu, tuple(REPORTED_GIB))
    check_int("effective_batch", effective_batch, minimum=1)
    check_int("host_gib", host_gib, minimum=1)
    for name, flag in (("allow_offload", allow_offload), ("allow_lora", allow_lora), ("chunked_loss", chunked_loss)):
        check_bool(name, flag)
    check_int("n_gpus", n_gpus, minimum=1)
    check_str("config", config, non_empty=False)
    shape = _model_shape(model, seq_len, config)
    p = plan(shape, usable_budget(int(REPORTED_GIB[gpu] * GIB)), effective_batch, n_gpus=n_gpus,
             allow_lora=allow_lora, allow_offload=allow_offload, host_bytes=host_gib * GIB,
             chunked_loss=CHUNK_TOKENS if chunked_loss else 0, capability=CAPABILITY[gpu])
    name = shape.name if isinstance(shape, ArchitectureShape) and config.strip() else model
    verdict = "fits" if p.fits else "does NOT fit"
    gpus = f"{n_gpus} x {gpu}" if n_gpus > 1 else gpu
    rows, headers = costs_table(shape, p.choice)
    fixed = f" (a stand-in's sequence length is fixed: {shape.seq_len:,} tokens)" if shape.seq_len != seq_len else ""
    model = (f"{name}: {shape.n_params / 1e9:.2f} billion parameters, {shape.n_layer} layers, width "
             f"{shape.d_model:,}, vocabulary {shape.vocab_size:,}{fixed}")
    return {"title": f"{name}, {shape.seq_len:,} tokens, on {gpus}: one bar per step of the plan ({verdict})",
            "fits": p.fits, "model": model, "lines": _lines(p, host_gib), "costs": {"headers": headers, "rows": rows},
            "bars": figure_bars(p)}


def _lines(p: Plan, host_gib: int) -> list[str]:
    (first_label, first), *_ = p.history_parts
    verdict = "fits" if p.fits else "does NOT fit"
    lines = [f"{p.choice.describe()}: {p.total / GIB:.1f} of {p.budget / GIB:.1f} GiB per GPU ({verdict})",
             f"top bar, {first_label}: {sum(first.values()) / GIB:,.0f} GiB, saved activations "
             f"{first['saved activations'] / GIB:,.0f} GiB of it"]
    lines += [step for step in p.steps if "skipped" in step or "nothing tried" in step]
    if p.host_parts:
        lines.append(f"host RAM: {p.host_total / GIB:.0f} GiB per GPU process of the host's {host_gib} GiB")
    return lines


def page_options() -> dict[str, Any]:
    """What the page's controls offer, their first values (chapter 09's panel's), and the GPT stand-ins' fixed
    sequence lengths."""
    return {"models": MODELS, "gpus": list(REPORTED_GIB),
            "fixed_seq_len": {f"GPT {name} (stand-in)": shape.seq_len for name, shape in PRESETS.items()},
            "first": {"model": "Llama-3-8B", "seq_len": 4096, "gpu": "A10G (24 GB)", "effective_batch": 32,
                      "host_gib": 128, "allow_offload": True, "allow_lora": True, "chunked_loss": True, "n_gpus": 1}}
