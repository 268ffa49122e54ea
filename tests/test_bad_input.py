"""Every public function of the course rejects bad input by name: the inventory and its property tests.

INVENTORY lists each public function with a valid call and the kind of each argument. For every argument,
hypothesis draws bad values of that kind (wrong types, bools where numbers are meant, NaN and infinities,
out-of-range numbers, unknown names) and the call must raise TypeError or ValueError whose message names the
argument, within a time bound. EXEMPT lists the public names that take no checkable input, with the reason; a
test fails when a public function is in neither, so a new function cannot skip this.
Deterministic: hypothesis runs derandomized (fixed seed) with few examples per argument.
"""

from __future__ import annotations

import importlib
import inspect
import math
import pkgutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import utils

SETTINGS = settings(max_examples=12, deadline=5000, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

_junk = st.one_of(st.none(), st.text(max_size=4), st.lists(st.integers(), max_size=2), st.just(object()))
_not_int = st.one_of(st.booleans(), st.floats(allow_nan=True, allow_infinity=True), _junk)
_not_number = st.one_of(st.booleans(), _junk, st.just(float("nan")), st.just(float("inf")), st.just(-math.inf),
                        st.integers(min_value=10**400, max_value=10**401))


def _choice(allowed: set[str], *, optional: bool = False) -> st.SearchStrategy[Any]:
    """Names that are not allowed (and None, unless None means "the default")."""
    bad = [st.text(max_size=8).filter(lambda s: s not in allowed), st.integers(), st.just(["fp32"])]
    return st.one_of(*bad) if optional else st.one_of(st.none(), *bad)


KINDS: dict[str, st.SearchStrategy[Any]] = {
    "count": st.one_of(_not_int, st.integers(max_value=0)),  # an int >= 1
    "index": st.one_of(_not_int, st.integers(max_value=-1)),  # an int >= 0
    "positive": st.one_of(_not_number, st.floats(max_value=0.0, allow_nan=False), st.integers(max_value=0)),
    "fraction": st.one_of(_not_number, st.floats(min_value=1.0001, max_value=1e6), st.floats(max_value=0.0)),
    "flag": st.one_of(st.integers(), st.text(max_size=4), st.none()),  # a real bool; "no" is truthy
    "text": st.one_of(st.none(), st.integers(), st.just(""), st.just(b"bytes")),
    "module": st.one_of(_junk, st.integers()),
    "callable": st.one_of(st.none(), st.integers(), st.text(max_size=3)),
    "tensor": st.one_of(_junk, st.integers(), st.floats()),
    "path": st.one_of(st.none(), st.integers(), st.floats()),
}


_NOT_A_LIST = st.one_of(st.integers(), st.text(max_size=3), st.just([1]))  # not a list (or a dict) of dicts
_NOT_A_STR = st.one_of(st.none(), st.integers(), st.just(b"bytes"))  # where an empty str is a valid text


@dataclass
class Entry:
    """A public function: how to call it validly, and the kind of each argument to spoil."""

    call: Callable[..., Any]
    valid: Callable[[], dict[str, Any]]
    kinds: dict[str, str | st.SearchStrategy[Any]] = field(default_factory=dict)
    run_valid: bool = True  # False where a valid call starts processes or trains (its own tests cover it)


def _entries() -> dict[str, Entry]:
    from utils import validate
    from utils.course import (
        book,
        chapters,
        glossary,
        gpu_check,
        grade,
        hosted,
        kernels,
        lab_contents,
        lab_server,
        lab_sessions,
        labs,
        navigation,
        outputs,
        planner_page,
        results,
        verdicts,
        workshop,
    )
    from utils.course.verdicts import ch02 as verdicts_ch02
    from utils.ledger import architectures, budget, gpt, parallel, plan, report, setups
    from utils.lessons import (
        amp_trace,
        bitview,
        chunked_loss,
        distributed,
        env,
        estimate,
        formats,
        fsdp_demo,
        measure,
        models,
        oom,
        plan_runs,
        plots,
        profiling,
        published_peaks,
        sizes,
        tables,
        time_model,
        timing,
        underflow,
        widgets,
    )
    from utils.lessons.experiment_sizes import ch05 as sizes_ch05
    from utils.lessons.experiment_sizes import ch06 as sizes_ch06

    def _prof() -> Any:
        from torch.profiler import ProfilerActivity, profile

        from utils.lessons.quiet import native_stderr_silenced

        with native_stderr_silenced(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            torch.ones(4) * 2
        return prof

    def _allocator() -> Any:
        from utils.lessons.allocator_model import CachingAllocatorModel

        return CachingAllocatorModel(2**30)

    def _tracker() -> Any:
        tracker = measure.make_mem_tracker(model())
        with tracker:
            pass
        return tracker

    def matmul() -> torch.Tensor:
        return torch.ones(2, 2) @ torch.ones(2, 2)

    shape = gpt.TransformerShape(n_layer=2, d_model=64, n_head=4, seq_len=32, vocab_size=128)
    precisions, optimizers = {"fp32", "bf16-mixed", "fp16-mixed", "bf16"}, {"sgd", "sgd-momentum", "adam", "adamw"}

    def model() -> torch.nn.Module:
        return torch.nn.Linear(4, 4)

    def step() -> None:
        lin = torch.nn.Linear(4, 4)
        lin(torch.randn(2, 4)).sum().backward()

    dtype_bad = st.one_of(_junk, st.integers(), st.just("float16"))

    fmts = set(formats.FORMATS) if hasattr(formats, "FORMATS") else {"fp32", "fp16", "bf16"}
    footprints = {}
    for info in pkgutil.iter_modules(importlib.import_module("utils.lessons.experiment_sizes").__path__):
        module = importlib.import_module(f"utils.lessons.experiment_sizes.{info.name}")
        for fn_name in ("footprints", "work"):
            if hasattr(module, fn_name):
                footprints[f"utils.lessons.experiment_sizes.{info.name}.{fn_name}"] = Entry(
                    getattr(module, fn_name), lambda: {"tier": 16},
                    {"tier": st.one_of(st.integers().filter(lambda t: t not in sizes.TIERS), _junk, st.booleans())})
    return footprints | {
        "utils.lessons.formats.encode": Entry(formats.encode, lambda: {"x": 1.5, "fmt": "fp16"},
                                      {"fmt": _choice(fmts), "x": st.one_of(_junk, st.booleans())}),
        "utils.lessons.formats.decode": Entry(formats.decode, lambda: {"code": 0x3C00, "fmt": "fp16"},
                                      {"fmt": _choice(fmts), "code": st.one_of(_not_int, st.integers(max_value=-1),
                                                                               st.integers(min_value=2**33))}),
        "utils.lessons.formats.fields": Entry(formats.fields, lambda: {"code": 0x3C00, "fmt": "fp16"},
                                      {"fmt": _choice(fmts), "code": st.one_of(_not_int, st.integers(max_value=-1))}),
        "utils.lessons.sizes.pick": Entry(sizes.pick, lambda: {"quick": 1, "full": 2, "size": "quick"},
                                  {"size": _choice(set(sizes.SIZES), optional=True),
                                   "tier": st.one_of(st.integers().filter(lambda t: t not in sizes.TIERS),
                                                     st.text(max_size=2))}),
        "utils.lessons.sizes.tier_for_memory": Entry(sizes.tier_for_memory, lambda: {"total_bytes": 2**34},
                                             {"total_bytes": "count"}),
        "utils.lessons.sizes.tier_budget": Entry(sizes.tier_budget, lambda: {"tier": 16},
                                         {"tier": st.one_of(st.integers().filter(lambda t: t not in sizes.TIERS),
                                                            _junk)}),
        "utils.course.results.device_slug": Entry(results.device_slug, lambda: {"name": "NVIDIA T4"}, {"name": "text"}),
        "utils.course.results.run_label": Entry(results.run_label, lambda: {"run": {"device": {"name": "T4"},
                                                                                    "size": "full"}},
                                         {"run": st.one_of(st.none(), st.integers(), st.just({}),
                                                           st.just({"device": {}}))}),
        "utils.lessons.experiment_sizes.ch06.mem_shape": Entry(sizes_ch06.mem_shape, lambda: {"size": "quick"},
                                                       {"size": st.one_of(st.integers(), st.just("huge"))}),
        "utils.course.results.Run": Entry(results.Run, lambda: {"chapter": "01_where_the_memory_goes"},
                                   {"chapter": st.one_of(_junk, st.text(max_size=6))}),
        "utils.course.results.reference_results": Entry(results.reference_results,
                                                 lambda: {"chapter": "01_where_the_memory_goes"},
                                                 {"chapter": st.one_of(_junk, st.text(max_size=6))}),
        "utils.course.results.printed_on_gpu": Entry(results.printed_on_gpu,
                                              lambda: {"chapter": "07_memory_profiling", "marker": "summary"},
                                              {"chapter": st.one_of(_junk, st.text(max_size=6)),
                                               "marker": st.one_of(st.none(), st.integers(), st.just(""))}),
        "utils.lessons.tables.format_table": Entry(tables.format_table, lambda: {"rows": [[1]], "headers": ["a"]},
                                           {"headers": st.one_of(st.just("ab"), st.just([]), st.just([1])),
                                            "rows": st.one_of(st.just("ab"), st.none(), st.integers(),
                                                              st.just([None]), st.just(["ab"]))}),
        "utils.course.hosted.badges_markdown": Entry(hosted.badges_markdown,
                                              lambda: {"notebook": "notebooks/x.ipynb",
                                                       "url": "https://github.com/a/b"}, {}),
        "utils.course.lab_server.command": Entry(lab_server.command, lambda: {"port": 8888, "token": "t"},
                                          {"port": st.one_of(_not_int, st.integers(max_value=0),
                                                             st.integers(min_value=65536)), "token": "text"}),
        "utils.course.lab_server.port_in_use": Entry(lab_server.port_in_use, lambda: {"port": 1},
                                              {"port": st.one_of(_not_int, st.integers(max_value=0))}),
        "utils.course.lab_server.copy_labs": Entry(lab_server.copy_labs, lambda: {}, {"labs_dir": "path",
                                                                               "my_labs_dir": "path"},
                                            run_valid=False),
        "utils.course.lab_server.environment": Entry(lab_server.environment, lambda: {"base": {}},
                                                     {"base": _NOT_A_LIST}),
        "utils.course.lab_sessions.open_sessions": Entry(lab_sessions.open_sessions,
                                                  lambda: {"path": "x.ipynb", "servers": []},
                                                  {"path": "path", "servers": _NOT_A_LIST}),
        "utils.course.lab_server.reset_lab": Entry(lab_server.reset_lab, lambda: {"number": "06"},
                                            {"number": st.one_of(st.just("6"), st.just("x6"), st.integers(),
                                                                 st.just("99"))}, run_valid=False),
        "utils.course.glossary.unit_problems": Entry(glossary.unit_problems, lambda: {"text": "a"}, {}),
        "utils.course.glossary.with_explicit_anchors": Entry(glossary.with_explicit_anchors,
                                                             lambda: {"text": "### A\n"},
                                                      {"text": _NOT_A_STR}),
        "utils.course.outputs.as_a_terminal_shows": Entry(outputs.as_a_terminal_shows, lambda: {"text": "a\rb"},
                                                   {"text": _NOT_A_STR}),
        "utils.course.outputs.collapse_streams": Entry(outputs.collapse_streams, lambda: {"outputs": []},
                                                {"outputs": st.one_of(_NOT_A_LIST, st.just([1]))}),
        "utils.course.lab_contents.drop_unsaved_widget_views": Entry(lab_contents.drop_unsaved_widget_views,
                                                              lambda: {"notebook": {"cells": []}},
                                                              {"notebook": st.one_of(st.none(), st.just([]))}),
        "utils.course.lab_contents.outdated_notice": Entry(lab_contents.outdated_notice,
                                                    lambda: {"path": "notebooks/00_x.ipynb"}, {"path": "text"}),
        "utils.course.lab_contents.saved_copy_notice": Entry(lab_contents.saved_copy_notice,
                                                      lambda: {"path": "notebooks/00_x.ipynb"}, {"path": "text"}),
        "utils.course.workshop.gpu_runs": Entry(workshop.gpu_runs, lambda: {}, {"results": "path"}),
        "utils.course.outputs.chapters": Entry(outputs.chapters, lambda: {"only": "00"},
                                        {"only": st.text(max_size=3).filter(lambda s: not s.isdigit() or
                                                                             len(s) != 2 or s > "10")}),
        "utils.validate.check_int": Entry(validate.check_int, lambda: {"name": "n", "value": 3}, {}),
        "utils.lessons.estimate.estimate_memory": Entry(
            estimate.estimate_memory, lambda: {"model": models.mlp(8, 16, 4, 1), "example_inputs": torch.randn(2, 8)},
            {"model": "module", "optimizer": _choice(optimizers), "precision": _choice(precisions),
             "checkpointing": "flag"}),
        "utils.ledger.gpt.transformer_memory": Entry(
            gpt.transformer_memory, lambda: {"shape": shape, "batch": 2},
            {"shape": "module", "batch": "count", "optimizer": _choice(optimizers), "precision": _choice(precisions),
             "checkpointing": "flag", "attention": _choice({"sdpa", "eager"})}),
        "utils.ledger.gpt.transformer_activation_bytes": Entry(
            gpt.transformer_activation_bytes, lambda: {"shape": shape, "batch": 2},
            {"shape": "module", "batch": "count", "precision": _choice(precisions), "checkpointing": "flag"}),
        "utils.ledger.plan.will_it_fit": Entry(
            plan.will_it_fit, lambda: {"model": shape, "batch": 1, "seq_len": 32},
            {"model": st.one_of(st.none(), st.integers(), st.just("no-such-model")), "batch": "count",
             "seq_len": "count", "precision": _choice(precisions), "optimizer": _choice(optimizers),
             "checkpointing": "flag"}),
        "utils.lessons.estimate.param_dtype": Entry(estimate.param_dtype, lambda: {"precision": "bf16"},
                                            {"precision": _choice(precisions)}),
        "utils.lessons.estimate.autocast_dtype": Entry(estimate.autocast_dtype, lambda: {"precision": "bf16"},
                                               {"precision": _choice(precisions)}),
        "utils.ledger.gpt.state_bytes_per_element": Entry(
            gpt.state_bytes_per_element, lambda: {"optimizer": "adamw", "precision": "fp32"},
            {"optimizer": _choice(optimizers), "precision": _choice(precisions)}),
        "utils.ledger.gpt.shape_of": Entry(gpt.shape_of, lambda: {"cfg": models.GPTConfig()}, {"cfg": "module"}),
        "utils.ledger.gpt.TransformerShape": Entry(
            gpt.TransformerShape, lambda: {"n_layer": 2, "d_model": 64, "n_head": 4, "seq_len": 8,
                                                "vocab_size": 16},
            {"n_layer": "count", "d_model": "count", "n_head": "count", "seq_len": "count", "vocab_size": "count"}),
        "utils.ledger.plan.Choice": Entry(plan.Choice, lambda: {},
                                   {"checkpointing": "flag", "micro_batch": "count", "accumulation": "count",
                                    "lora_rank": "index", "precision": _choice({"fp32", "bf16-mixed", "bf16"}),
                                    "offload_optimizer": "flag", "n_gpus": "count", "tensor_parallel": "count",
                                    "pipeline_stages": "count", "pipeline_chunks": "count",
                                    "sequence_parallel": "flag",
                                    "setup": st.one_of(st.integers(), st.just("frozen bf16 base"), st.just("nope"))}),
        "utils.ledger.plan.plan": Entry(plan.plan, lambda: {"shape": shape, "budget_bytes": 2**30,
                                                         "effective_batch": 8},
                                 {"shape": "module", "budget_bytes": "count", "effective_batch": "count",
                                  "n_gpus": "count", "lora_rank": "count", "allow_lora": "flag"}),
        "utils.ledger.plan.lora_parameters": Entry(plan.lora_parameters, lambda: {"shape": shape, "rank": 4},
                                            {"shape": "module", "rank": "count", "fused_qkv": "flag"}),
        "utils.ledger.plan.memory_of": Entry(plan.memory_of, lambda: {"shape": shape, "choice": plan.Choice()},
                                      {"shape": "module", "choice": "module"}),
        "utils.lessons.estimate.traced_memory": Entry(estimate.traced_memory, lambda: {
            "config": architectures.HF_CONFIGS["Llama-3-8B"] | {"num_hidden_layers": 2, "hidden_size": 64,
                                                                "num_attention_heads": 4, "num_key_value_heads": 2,
                                                                "intermediate_size": 128, "vocab_size": 256},
            "batch": 1, "seq_len": 16}, {"config": "module", "batch": "count", "seq_len": "count",
                                         "checkpointing": "flag"}),
        "utils.course.chapters.support_by_device": Entry(chapters.support_by_device, lambda: {"width": 100},
                                                  {"width": "count"}),
        "utils.ledger.plan.step_moments": Entry(plan.step_moments, lambda: {"shape": shape, "choice": plan.Choice()},
                                         {"shape": "module", "choice": "module"}),
        "utils.ledger.plan.peak_moment": Entry(plan.peak_moment, lambda: {"shape": shape, "choice": plan.Choice()},
                                        {"shape": "module", "choice": "module"}),
        "utils.ledger.plan.line_maxima": Entry(plan.line_maxima, lambda: {"shape": shape, "choice": plan.Choice()},
                                        {"shape": "module", "choice": "module"}),
        "utils.ledger.plan.parameter_tensor_sizes": Entry(plan.parameter_tensor_sizes,
                                                   lambda: {"shape": shape, "choice": plan.Choice()},
                                                   {"shape": "module", "choice": "module"}),
        "utils.ledger.plan.optimizer_state_overhead": Entry(plan.optimizer_state_overhead,
                                                     lambda: {"shape": shape, "choice": plan.Choice(),
                                                              "state_per_param": 8.0},
                                                     {"shape": "module", "choice": "module"}),
        "utils.ledger.gpt.sdpa_attention": Entry(gpt.sdpa_attention,
                                               lambda: {"precision": "bf16", "capability": (7, 5)},
                                               {"precision": _choice(precisions),
                                                "capability": st.one_of(st.just("7.5"), st.just((7,)))}),
        "utils.lessons.published_peaks.predict": Entry(published_peaks.predict,
                                                       lambda: {"row": published_peaks.ROWS[0]},
                                               {"row": "module"}),
        "utils.lessons.published_peaks.ratio": Entry(published_peaks.ratio, lambda: {"row": published_peaks.ROWS[0]},
                                             {"row": "module"}),
        "utils.lessons.published_peaks.published_table": Entry(published_peaks.published_table,
                                                       lambda: {"rows": published_peaks.ROWS[:1]},
                                                       {"rows": st.one_of(st.just("ab"), st.integers(), st.just([]),
                                                                          st.just([None]))}),
        "utils.ledger.plan.state_share": Entry(plan.state_share, lambda: {"shape": shape, "choice": plan.Choice(
            tensor_parallel=2)}, {"shape": "module", "choice": "module"}),
        "utils.ledger.plan.replicated_layer_bytes": Entry(plan.replicated_layer_bytes,
                                                   lambda: {"shape": shape, "micro_batch": 2, "precision": "bf16"},
                                                   {"shape": "module", "micro_batch": "count",
                                                    "precision": _choice({"fp32", "bf16-mixed", "bf16"})}),
        "utils.ledger.plan.model_parallel_terms": Entry(
            plan.model_parallel_terms,
            lambda: {"shape": shape, "choice": plan.Choice(tensor_parallel=2),
                     "parts": plan.memory_of(shape, plan.Choice())},
            {"shape": "module", "choice": "module", "parts": st.one_of(st.none(), st.integers(), st.just([1]))}),
        "utils.ledger.plan.zero_bytes_per_gpu": Entry(plan.zero_bytes_per_gpu,
                                               lambda: {"n_params": 10**6, "stage": 1, "n_gpus": 8},
                                               {"n_params": "count", "stage": st.one_of(_not_int, st.integers(4, 99),
                                                                                        st.integers(max_value=-1)),
                                                "n_gpus": "count"}),
        "utils.ledger.plan.costs": Entry(plan.costs, lambda: {"shape": shape, "choice": plan.Choice()},
                                  {"shape": "module", "choice": "module", "pcie_gb_per_s": "positive"}),
        "utils.lessons.profiling.census_growth": Entry(profiling.census_growth,
                                               lambda: {"before": Counter(), "after": Counter()},  # empty censuses
                                               {"before": "module", "after": "module"}),
        "utils.lessons.profiling.largest_fitting": Entry(profiling.largest_fitting, lambda: {"fits": lambda b: b <= 5},
                                                 {"fits": "callable", "start": "count", "limit": "count"}),
        "utils.lessons.profiling.snapshot_timeline": Entry(profiling.snapshot_timeline,
                                                   lambda: {"snapshot": {"segments": [], "device_traces": [[]]}},
                                                   {"snapshot": st.one_of(st.none(), st.integers(), st.just([])),
                                                    "top": "count"}),
        "utils.lessons.oom.run_oom_safe": Entry(oom.run_oom_safe, lambda: {"fn": lambda: 1}, {"fn": "callable"}),
        "utils.course.kernels.started_again": Entry(kernels.started_again, lambda: {"start": lambda: 1},
                                             {"start": "callable", "attempts": "count"}),
        "utils.lessons.oom.is_oom": Entry(oom.is_oom, lambda: {"exc": RuntimeError("x")}, {"exc": "module"}),
        "utils.lessons.formats.get_format": Entry(formats.get_format, lambda: {"fmt": "fp16"}, {"fmt": _choice(fmts)}),
        "utils.course.chapters.chapter_support": Entry(chapters.chapter_support,
                                                lambda: {"chapter": "01", "capability": (8, 0)},
                                                {"chapter": _choice({f"{i:02d}" for i in range(11)}),
                                                 "capability": st.one_of(st.text(max_size=3), st.just((8,)))}),
        "utils.lessons.distributed.launch_script": Entry(distributed.launch_script, lambda: {"script": __file__},
                                                 {"world_size": "count", "timeout_s": "positive",
                                                  "script": st.one_of(st.none(), st.integers(),
                                                                      st.just("no-such-script.py"))},
                                                 run_valid=False),
        "utils.lessons.distributed.fsdp2_demo": Entry(distributed.fsdp2_demo, lambda: {},
                                              {"width": "count", "world_size": "count", "timeout_s": "positive"},
                                              run_valid=False),
        "utils.lessons.fsdp_demo.fsdp_peaks": Entry(fsdp_demo.fsdp_peaks, lambda: {},
                                            {"width": "count", "depth": "count", "batch": "count",
                                             "world_size": "count", "timeout_s": "positive"}, run_valid=False),
        "utils.lessons.fsdp_demo.blocks_model": Entry(fsdp_demo.blocks_model, lambda: {"width": 4, "depth": 2},
                                              {"width": "count", "depth": "count"}),
        "utils.lessons.env.nvidia_smi_memory_used": Entry(env.nvidia_smi_memory_used, lambda: {"index": 0},
                                                  {"index": st.one_of(st.booleans(), st.floats(), st.text(max_size=2),
                                                                      st.integers(max_value=-1)),
                                                   "timeout_s": "positive"}),
        "utils.lessons.estimate.make_optimizer": Entry(estimate.make_optimizer,
                                               lambda: {"optimizer": "adamw", "params": model().parameters()},
                                               {"optimizer": _choice(optimizers), "lr": "positive"}),
        "utils.ledger.plan.activation_terms": Entry(plan.activation_terms,
                                             lambda: {"shape": shape, "micro_batch": 1, "regime": "fp32",
                                                      "checkpointing": False},
                                             {"shape": "module", "micro_batch": "count", "checkpointing": "flag",
                                              "regime": _choice({"fp32", "bf16-mixed", "bf16"})}),
        "utils.ledger.plan.optimizer_state_bytes_per_param": Entry(plan.optimizer_state_bytes_per_param,
                                                            lambda: {"optimizer": "adamw"},
                                                            {"optimizer": _choice({"adamw", "adamw8bit",
                                                                                   "adamw4bit"})}),
        "utils.ledger.plan.block_parameters": Entry(plan.block_parameters, lambda: {"shape": shape},
                                                     {"shape": "module"}),
        "utils.lessons.plan_runs.run_choice": Entry(plan_runs.run_choice, lambda: {"cfg": models.GPTConfig(),
                                                                           "choice": plan.Choice()},
                                       {"choice": "module", "steps": "count"}, run_valid=False),
        "utils.lessons.measure.owned_state_bytes": Entry(measure.owned_state_bytes, lambda: {"model": model()},
                                                 {"model": "module"}),
        "utils.lessons.measure.step_peak_by_category": Entry(measure.step_peak_by_category,
                                                     lambda: {"step": step, "model": model()},
                                                     {"step": "callable", "model": "module", "steps": "count"}),
        "utils.lessons.oom.run_step_oom_safe": Entry(oom.run_step_oom_safe,
                                             lambda: {"step": lambda: None,
                                                      "optimizer": torch.optim.SGD(model().parameters(), lr=0.1)},
                                             {"step": "callable", "optimizer": "module"}),
        "utils.lessons.oom.memory_fraction_cap": Entry(lambda **kw: oom.memory_fraction_cap(**kw).__enter__(),
                                               lambda: {"fraction": 0.5}, {"fraction": "fraction"}, run_valid=False),
        "utils.lessons.profiling.frame_label": Entry(profiling.frame_label, lambda: {"frames": []},
                                             {"frames": st.one_of(st.none(), st.integers(), st.text(max_size=3))}),
        "utils.lessons.profiling.graph_held_bytes": Entry(profiling.graph_held_bytes, lambda: {"roots": []},
                                                  {"roots": st.one_of(st.integers(), st.text(max_size=3))}),
        "utils.course.results.claims_ledger": Entry(results.claims_ledger, lambda: {},
                                             {"root": st.one_of(st.integers(), st.floats())}),
        "utils.course.results.reference_summary": Entry(results.reference_summary, lambda: {},
                                                 {"root": st.one_of(st.integers(), st.floats())}),
        "utils.course.glossary.github_anchor": Entry(glossary.github_anchor, lambda: {"heading": "ULP"},
                                                     {"heading": "text"}),
        "utils.course.labs.strip_solution": Entry(labs.strip_solution, lambda: {"source": "x = 1", "exercise": "1.1",
                                                                         "task": "t"},
                                            {"source": st.one_of(st.none(), st.integers(), st.just(b"x"))}),
        "utils.course.book.prepare": Entry(book.prepare, lambda: {"src": "unused"}, {"src": "path"}, run_valid=False),
        "utils.course.book.build": Entry(book.build, lambda: {}, {"out": "path"}, run_valid=False),
        "utils.course.grade.clear_previous": Entry(grade.clear_previous, lambda: {"csv_dir": "no-such-grades-folder"},
                                            {"csv_dir": "path"}),
        "utils.course.grade.reference_imports": Entry(grade.reference_imports,
                                               lambda: {"submission": nbformat.v4.new_notebook(),
                                                        "lab": nbformat.v4.new_notebook()},
                                               {"submission": st.one_of(st.none(), st.integers())},
                                               run_valid=True),
        "utils.course.grade.for_instructor": Entry(grade.for_instructor, lambda: {"reason": "r"},
                                            {"reason": st.one_of(st.none(), st.integers())}),
        "utils.course.grade.collect": Entry(grade.collect, lambda: {"paths": [Path(__file__).parent.parent / "labs"]},
                                     {"paths": st.one_of(st.none(), st.integers(), st.just([3]))}),
        "utils.lessons.widgets.log2_slider": Entry(widgets.log2_slider, lambda: {"value": 4, "low": 1, "high": 5},
                                           {"value": st.one_of(_not_int, st.just(3), st.just(64)),
                                            "low": st.one_of(_not_int, st.integers(max_value=-1))}),
        "utils.lessons.formats.describe": Entry(formats.describe, lambda: {"x": 0.1, "fmt": "bf16"},
                                                {"fmt": _choice(fmts)}),
        "utils.lessons.formats.spacing": Entry(formats.spacing, lambda: {"x": 0.1, "fmt": "bf16"},
                                       {"fmt": _choice(fmts), "x": st.one_of(_junk, st.booleans())}),
        "utils.lessons.formats.format_properties": Entry(formats.format_properties, lambda: {"fmt": "fp8_e4m3"},
                                                 {"fmt": _choice(fmts)}),
        "utils.lessons.measure.tensor_bytes": Entry(measure.tensor_bytes, lambda: {"t": torch.zeros(3)},
                                                    {"t": "tensor"}),
        "utils.lessons.measure.parameter_bytes": Entry(measure.parameter_bytes, lambda: {"model": model()},
                                               {"model": "module", "trainable_only": "flag"}),
        "utils.lessons.measure.gradient_bytes": Entry(measure.gradient_bytes, lambda: {"model": model()},
                                                      {"model": "module"}),
        "utils.lessons.measure.optimizer_state_bytes": Entry(
            measure.optimizer_state_bytes, lambda: {"optimizer": torch.optim.SGD(model().parameters(), lr=0.1)},
            {"optimizer": "module"}),
        "utils.lessons.measure.saved_activation_bytes": Entry(measure.saved_activation_bytes,
                                                      lambda: {"fn": lambda: model()(torch.randn(2, 4))},
                                                      {"fn": "callable"}),
        "utils.lessons.measure.step_peak": Entry(measure.step_peak, lambda: {"step": step, "model": model()},
                                         {"step": "callable", "model": "module", "warmup": "index"}),
        "utils.lessons.timing.time_fn": Entry(timing.time_fn, lambda: {"fn": lambda: None, "repeats": 2},
                                      {"fn": "callable", "warmup": "index", "repeats": "count"}),
        "utils.lessons.timing.matmul_tflops": Entry(timing.matmul_tflops, lambda: {"n": 8, "repeats": 1},
                                            {"n": "count", "dtype": dtype_bad, "repeats": "count"}),
        "utils.lessons.timing.count_flops": Entry(timing.count_flops, lambda: {"fn": matmul},
                                          {"fn": "callable"}),
        "utils.lessons.env.capability_gates": Entry(env.capability_gates, lambda: {"capability": (8, 0)},
                                            {"capability": st.one_of(st.text(max_size=3), st.just((8,)),
                                                                     st.just(("8", "0")), st.just((True, 0)))}),
        "utils.lessons.env.device_info": Entry(env.device_info, lambda: {"device": "cpu"},
                                       {"device": st.one_of(st.integers(), st.just("gpu0"), st.just(""))}),
        "utils.lessons.env.parse_version": Entry(env.parse_version, lambda: {"text": "2.13.0+cpu"},
                                         {"text": st.one_of(st.none(), st.integers(), st.just("two"))}),
        "utils.lessons.models.gpt_batch": Entry(models.gpt_batch, lambda: {"cfg": models.GPTConfig(), "batch": 2},
                                        {"cfg": "module", "batch": "count", "seed": st.one_of(_not_int,
                                                                                              st.integers(max_value=-1))}),
        "utils.lessons.bitview.bits_html": Entry(bitview.bits_html, lambda: {"stored": formats.describe(1.5, "fp16")},
                                         {"stored": "module"}),
        "utils.lessons.bitview.stored_table_html": Entry(bitview.stored_table_html,
                                                 lambda: {"rows": [formats.describe(1.5, "fp16")]},
                                                 {"rows": st.one_of(st.just([None]), st.just("ab"), st.integers())}),
        "utils.lessons.measure.peak_by_category": Entry(measure.peak_by_category, lambda: {"tracker": _tracker()},
                                                {"tracker": "module"}),
        "utils.lessons.profiling.profiler_timeline": Entry(profiling.profiler_timeline, lambda: {"prof": _prof()},
                                                   {"prof": st.one_of(st.none(), st.integers(), st.text(max_size=3))},
                                                   run_valid=False),
        "utils.lessons.estimate.measure_step": Entry(
            estimate.measure_step, lambda: {"model": models.mlp(8, 16, 4, 1), "inputs": torch.randn(2, 8)},
            {"model": "module", "inputs": st.one_of(st.just(b".."), st.none(), st.integers(), st.just("x")),
             "optimizer": _choice(optimizers), "precision": _choice(precisions)}, run_valid=False),
        "utils.lessons.estimate.validate": Entry(estimate.validate, lambda: {"configs": []},
                                         {"configs": st.one_of(st.just([{}]), st.just([None]), st.integers(),
                                                               st.just([{"batch": "x"}]))}, run_valid=False),
        "utils.lessons.models.mlp": Entry(models.mlp, lambda: {}, {"d_in": "count", "hidden": "count",
                                                                   "depth": "count"}),
        "utils.lessons.models.cnn": Entry(models.cnn, lambda: {}, {"channels": "count", "image": "count"}),
        "utils.lessons.models.GPTConfig": Entry(models.GPTConfig, lambda: {},
                                        {"n_layer": "count", "d_model": "count", "n_head": "count",
                                         "seq_len": "count", "vocab_size": "count",
                                         "dropout": st.one_of(st.just("0.1"), st.just(1.0), st.just(-0.1),
                                                              st.just(float("nan")), st.none()),
                                         "checkpointing": "flag"}),
        "utils.lessons.underflow.cast_outcomes": Entry(underflow.cast_outcomes, lambda: {"values": torch.ones(3)},
                                               {"values": "tensor", "dtype": dtype_bad, "scale": "positive"}),
        "utils.lessons.amp_trace.op_dtypes": Entry(amp_trace.op_dtypes, lambda: {"fn": matmul},
                                           {"fn": "callable", "device_type": _choice({"cpu", "cuda", "mps"})}),
        "utils.lessons.tables.show_table": Entry(tables.show_table, lambda: {"rows": [[1]], "headers": ["a"]},
                                         {"headers": st.one_of(st.just("ab"), st.just([]), st.just([1]))}),
        "utils.lessons.widgets.slider": Entry(widgets.slider, lambda: {"value": 2, "low": 1, "high": 4},
                                      {"value": st.one_of(_not_int, st.integers(min_value=5)), "step": "count"}),
        "utils.lessons.widgets.dropdown": Entry(widgets.dropdown, lambda: {"options": ["a", "b"]},
                                        {"options": st.one_of(st.just([]), st.none(), st.integers())}),
        "utils.lessons.env.device_uuid": Entry(env.device_uuid, lambda: {}, {"index": st.one_of(st.booleans(),
                                                                                                st.floats(),
                                                                                           st.text(max_size=2))}),
        "utils.lessons.env.cuda_build_note": Entry(env.cuda_build_note,
                                           lambda: {"torch_cuda": "12.8", "driver_cuda": "12.8", "gpu_visible": False},
                                           {"gpu_visible": "flag"}),
        "utils.lessons.env.nvidia_smi_cuda_version": Entry(env.nvidia_smi_cuda_version, lambda: {},
                                                   {"timeout_s": "positive"}),
        "utils.lessons.env.cuda_driver_check": Entry(env.cuda_driver_check, lambda: {}, {"timeout_s": "positive"}),
        "utils.lessons.env.allocator_settings": Entry(env.allocator_settings, lambda: {"environ": {}},
                                              {"environ": st.one_of(st.integers(), st.just([("a", "b")]),
                                                                    st.just({"PYTORCH_ALLOC_CONF": 3}))}),
        "utils.course.results.claims_summary": Entry(results.claims_summary, lambda: {},
                                              {"width": st.one_of(_not_int, st.integers(max_value=39)),
                                               "root": st.one_of(st.integers(), st.floats())}),
        "utils.course.results.write_ledger": Entry(results.write_ledger, lambda: {}, {"folder": "path"},
                                                   run_valid=False),
        "utils.course.navigation.navigation_markdown": Entry(navigation.navigation_markdown,
                                                      lambda: {"chapter": "notebooks/05_gradient_checkpointing.ipynb"},
                                                      {"chapter": st.one_of(st.none(), st.integers(),
                                                                            st.just("nope.ipynb"))}),
        "utils.ledger.budget.usable_budget": Entry(budget.usable_budget, lambda: {"reported_bytes": 24 * 2**30},
                                            {"reported_bytes": "count", "context_bytes": "index",
                                             "workspace_bytes": "index", "fragmentation": "fraction"}),
        "utils.ledger.budget.reported_bytes": Entry(budget.reported_bytes, lambda: {"gpu": "A10G"},
                                             {"gpu": st.one_of(st.none(), st.integers(), st.just("GTX 480"))}),
        "utils.ledger.budget.gpu_budget": Entry(budget.gpu_budget, lambda: {"gpu": "A10G"},
                                         {"gpu": st.one_of(st.none(), st.integers(), st.just("GTX 480"))}),
        "utils.ledger.parallel.layer_activation_bytes": Entry(
            parallel.layer_activation_bytes, lambda: {"s": 2048, "b": 1, "h": 12288, "a": 96, "t": 8},
            {"s": "count", "b": "count", "h": "count", "a": "count", "t": "count", "sequence_parallel": "flag",
             "recompute": _choice({"none", "selective", "full"})}),
        "utils.ledger.parallel.pipeline_layers_held": Entry(parallel.pipeline_layers_held,
                                                     lambda: {"n_layer": 96, "stages": 8},
                                                     {"n_layer": "count", "stages": "count", "chunks": "count",
                                                      "schedule": _choice({"1f1b", "interleaved"})}),
        "utils.ledger.parallel.activation_bytes_per_gpu": Entry(
            parallel.activation_bytes_per_gpu, lambda: {"s": 2048, "b": 1, "h": 12288, "a": 96, "n_layer": 96, "t": 8,
                                                        "p": 8},
            {"s": "count", "b": "count", "h": "count", "a": "count", "n_layer": "count", "t": "count", "p": "count",
             "sequence_parallel": "flag", "recompute": _choice({"none", "selective", "full"}), "chunks": "count"}),
        "utils.ledger.parallel.fraction_of_tensor_parallel": Entry(
            parallel.fraction_of_tensor_parallel, lambda: {"s": 2048, "b": 1, "h": 12288, "a": 96, "t": 8},
            {"s": "count", "b": "count", "h": "count", "a": "count", "t": "count"}),
        "utils.ledger.parallel.iteration_flops": Entry(
            parallel.iteration_flops, lambda: {"batch": 64, "n_layer": 96, "s": 2048, "h": 12288, "vocab": 51200},
            {"batch": "count", "n_layer": "count", "s": "count", "h": "count", "vocab": "count",
             "recompute": _choice({"none", "selective", "full"})}),
        "utils.ledger.parallel.flops_utilization": Entry(
            parallel.flops_utilization, lambda: {"flops": 1e18, "seconds": 13.75, "gpus": 64,
                                                 "peak_flops_per_gpu": 312e12},
            {"flops": "positive", "seconds": "positive", "gpus": "count", "peak_flops_per_gpu": "positive"}),
        "utils.ledger.architectures.from_hf_config": Entry(architectures.from_hf_config,
                                                    lambda: {"config": architectures.HF_CONFIGS["Llama-3-8B"]},
                                                    {"config": st.one_of(st.none(), st.integers(), st.just({}))}),
        "utils.ledger.architectures.parameter_tensors": Entry(architectures.parameter_tensors,
                                                       lambda: {"arch": architectures.ARCHITECTURES["Llama-3-8B"]},
                                                       {"arch": "module"}),
        "utils.ledger.architectures.activation_bytes": Entry(
            architectures.activation_bytes, lambda: {"arch": architectures.ARCHITECTURES["Llama-3-8B"], "batch": 1,
                                                     "seq_len": 512},
            {"arch": "module", "batch": "count", "seq_len": "count",
             "precision": _choice({"fp32", "bf16", "bf16-mixed"}, optional=True), "checkpointing": "flag"}),
        "utils.ledger.architectures.lora_parameters_of": Entry(
            architectures.lora_parameters_of, lambda: {"arch": architectures.ARCHITECTURES["Llama-3-8B"], "rank": 16},
            {"arch": "module", "rank": "count", "targets": _choice({"attention", "attention+mlp"}, optional=True)}),
        "utils.ledger.architectures.shape_of_model": Entry(
            architectures.shape_of_model, lambda: {"name": "Llama-3-8B", "seq_len": 4096},
            {"name": _choice(set(architectures.ARCHITECTURES))}),
        "utils.ledger.architectures.architecture_memory": Entry(
            architectures.architecture_memory, lambda: {"arch": architectures.ARCHITECTURES["Llama-3-8B"],
                                                        "batch": 1, "seq_len": 512},
            {"arch": "module", "batch": "count", "seq_len": "count"}),
        "utils.ledger.architectures.logits_bytes": Entry(architectures.logits_bytes,
                                                  lambda: {"tokens": 8192, "vocab_size": 128256},
                                                  {"tokens": "count", "vocab_size": "count"}),
        "utils.lessons.estimate.hf_model_on_meta": Entry(estimate.hf_model_on_meta,
                                                      lambda: {"arch_or_config": architectures.HF_CONFIGS["Llama-3-8B"],
                                                               "num_hidden_layers": 1},
                                                      {"arch_or_config": st.one_of(st.none(), st.integers())},
                                                      run_valid=False),
        "utils.lessons.estimate.estimate_memory_fast": Entry(
            estimate.estimate_memory_fast,
            lambda: {"model": models.mlp(8, 16, 4, 1), "example_inputs": torch.randn(2, 8)},
            {"model": "module", "optimizer": _choice(optimizers), "precision": _choice(precisions),
             "checkpointing": "flag"}),
        "utils.lessons.chunked_loss.chunked_cross_entropy": Entry(
            chunked_loss.chunked_cross_entropy,
            lambda: {"hidden": torch.randn(1, 8, 4), "weight": torch.randn(10, 4), "targets": torch.zeros(1, 8,
                                                                                                     dtype=torch.long),
                     "chunk_tokens": 4},
            {"hidden": "tensor", "weight": "tensor", "targets": "tensor", "chunk_tokens": "count"}),
        "utils.lessons.chunked_loss.logits_saved_bytes": Entry(chunked_loss.logits_saved_bytes,
                                                       lambda: {"tokens": 512, "vocab_size": 2000},
                                                       {"tokens": "count", "vocab_size": "count"}),
        "utils.ledger.setups.model_state_bytes": Entry(setups.model_state_bytes,
                                                lambda: {"n_params": 10**9, "setup": "deepspeed zero-2 bf16"},
                                                {"n_params": "count", "n_gpus": "count", "sharded": "flag",
                                                 "paged": "flag", "setup": st.one_of(st.none(), st.integers(),
                                                                                     st.just("nope"))}),
        "utils.ledger.setups.setup_lines": Entry(setups.setup_lines, lambda: {"setup": "deepspeed zero-2 bf16"},
                                          {"setup": st.one_of(st.none(), st.integers(), st.just("nope"))}),
        "utils.ledger.setups.activation_offload_bytes": Entry(setups.activation_offload_bytes,
                                                       lambda: {"per_layer_bytes": 100, "n_layer": 32,
                                                                "offload": True},
                                                       {"per_layer_bytes": "count", "n_layer": "count",
                                                        "offload": "flag"}),
        "utils.lessons.plan_runs.plan_figure": Entry(plan_runs.plan_figure, lambda: {"p": plan.plan(shape, 2**30, 8)},
                                        {"p": st.one_of(st.none(), st.integers(), st.text(max_size=2))},
                                        run_valid=False),
        "utils.ledger.plan.costs_table": Entry(plan.costs_table, lambda: {"shape": shape, "choice": plan.Choice()},
                                        {"shape": "module", "choice": "module", "pcie_gb_per_s": "positive"}),
        "utils.ledger.gpt.check_capability": Entry(gpt.check_capability, lambda: {"capability": (8, 0)},
                                                   {"capability": st.one_of(st.just((True, 0)), st.just((8,)),
                                                                            st.just([8, 0]), st.just((-1, 0)))}),
        "utils.ledger.gpt.check_step_choices": Entry(
            gpt.check_step_choices, lambda: {"optimizer": "adamw", "precision": "fp32", "checkpointing": False},
            {"optimizer": _choice(set(gpt.OPTIMIZERS)), "precision": _choice(set(gpt.PRECISIONS)),
             "checkpointing": "flag"}),
        "utils.ledger.plan.figure_bars": Entry(plan.figure_bars, lambda: {"p": plan.plan(shape, 2**30, 8)},
                                               {"p": "module"}),
        "utils.ledger.report.plan_report": Entry(
            report.plan_report, lambda: {"model": "Llama-3-8B", "seq_len": 4096, "gpu": "A10G (24 GB)",
                                         "effective_batch": 32, "host_gib": 128, "allow_offload": True,
                                         "allow_lora": True, "chunked_loss": True},
            {"model": _choice(set(report.MODELS)), "seq_len": "count", "gpu": _choice(set(budget.REPORTED_GIB)),
             "effective_batch": "count", "host_gib": "count", "allow_offload": "flag", "allow_lora": "flag",
             "chunked_loss": "flag", "n_gpus": "count", "config": _NOT_A_STR}),
        "utils.course.planner_page.ledger_bundle": Entry(planner_page.ledger_bundle, lambda: {}, {"root": "path"}),
        "utils.course.planner_page.write": Entry(planner_page.write, lambda: {}, {"src": "path"}, run_valid=False),
        "utils.course.planner_page.write_without_pyodide": Entry(
            planner_page.write_without_pyodide, lambda: {"src": "x", "reason": "offline"},
            {"src": "path", "reason": "text"}, run_valid=False),
        "utils.course.workshop.write": Entry(workshop.write, lambda: {}, {"doc": "path"}, run_valid=False),
        "utils.course.workshop.is_current": Entry(workshop.is_current, lambda: {}, {"doc": "path"}),
        "utils.course.results.read_run": Entry(results.read_run, lambda: {"path": "no-such-run.json"},
                                        {"path": "path"}, run_valid=False),
        "utils.lessons.distributed.accelerator_local_rank": Entry(distributed.accelerator_local_rank,
                                                          lambda: {"rank": 0, "world_size": 2},
                                                          {"rank": "index", "world_size": "count"}),
        "utils.lessons.sizes.tier_memory_fraction": Entry(sizes.tier_memory_fraction,
                                                  lambda: {"tier": 16, "total_bytes": 80 * 2**30},
                                                  {"tier": st.one_of(st.integers().filter(lambda t: t not in
                                                                                          sizes.TIERS), _junk),
                                                   "total_bytes": "count"}),
        "utils.ledger.plan.host_memory_of": Entry(plan.host_memory_of, lambda: {"shape": shape,
                                                                                "choice": plan.Choice()},
                                           {"shape": "module", "choice": "module"}),
        "utils.lessons.plan_runs.time_choice": Entry(plan_runs.time_choice,
                                        lambda: {"cfg": models.GPTConfig(n_layer=1, d_model=32, n_head=2, seq_len=16,
                                                                         vocab_size=64), "choice": plan.Choice()},
                                        {"cfg": "module", "choice": "module", "warmup": "index", "repeats": "count",
                                         "seed": "index"}, run_valid=False),
        "utils.lessons.profiling.allocation_trace": Entry(profiling.allocation_trace, lambda: {"prof": _prof()},
                                                  {"prof": st.one_of(st.none(), st.integers(), st.text(max_size=3)),
                                                   "device": _choice({"cpu", "cuda"})}, run_valid=False),
        "utils.lessons.profiling.replay": Entry(profiling.replay, lambda: {"trace": [], "allocator": _allocator()},
                                        {"trace": st.one_of(st.none(), st.integers(), st.just([(1,)]),
                                                            st.just("ab")),
                                         "allocator": st.one_of(st.none(), st.integers(), st.text(max_size=2))}),
        "utils.lessons.profiling.plot_segments": Entry(profiling.plot_segments, lambda: {"segments": []},
                                               {"segments": st.one_of(st.none(), st.integers(), st.just([1])),
                                                "max_segments": "count"}, run_valid=False),
        "utils.lessons.timing.compare_timings": Entry(timing.compare_timings, lambda: {"configs": {"a": lambda: None},
                                                                                "repeats": 2},
                                              {"configs": st.one_of(st.none(), st.just({}), st.just({"a": 3}),
                                                                    st.just([lambda: None])),
                                               "repeats": "count", "warmup": "index",
                                               "min_sample_s": st.one_of(_not_number, st.floats(max_value=-1e-9))}),
        "utils.course.verdicts.ch02.agrees_to_stated_digits": Entry(verdicts_ch02.agrees_to_stated_digits,
                                                             lambda: {"measured": 6.1e-5, "stated": "6.1e-5"},
                                                             {"stated": st.one_of(st.none(), st.integers())}),
        "utils.lessons.experiment_sizes.ch05.sweep_bytes": Entry(sizes_ch05.sweep_bytes,
                                                         lambda: {"depth": 4, "d": 8, "tokens": 16},
                                                         {"depth": "count", "d": "count", "tokens": "count"}),
        "utils.lessons.time_model.count_flops": Entry(time_model.count_flops, lambda: {"fn": matmul},
                                                      {"fn": "callable"}),
        "utils.lessons.time_model.gpt_step_flops": Entry(time_model.gpt_step_flops,
                                                 lambda: {"cfg": models.GPTConfig(), "batch": 1},
                                                 {"cfg": "module", "batch": "count", "backward": "flag"}),
        "utils.lessons.time_model.linear_stack_flops": Entry(time_model.linear_stack_flops,
                                                     lambda: {"widths": [(4, 4)], "tokens": 2},
                                                     {"widths": st.one_of(st.none(), st.integers(),
                                                                          st.just([(4,)]), st.just([(0, 4)])),
                                                      "tokens": "count", "backward": "flag"}),
        "utils.lessons.time_model.matmul_flops": Entry(time_model.matmul_flops, lambda: {"n": 8}, {"n": "count"}),
        "utils.lessons.time_model.count_ops": Entry(time_model.count_ops, lambda: {"fn": matmul}, {"fn": "callable"}),
        "utils.lessons.time_model.gpt_step_ops": Entry(time_model.gpt_step_ops,
                                                       lambda: {"cfg": models.GPTConfig(n_layer=1)},
                                               {"cfg": "module", "backward": "flag", "optimizer": "flag"}),
        "utils.lessons.time_model.linear_stack_ops": Entry(time_model.linear_stack_ops, lambda: {"n_layers": 2},
                                                   {"n_layers": "count", "backward": "flag"}),
        "utils.lessons.time_model.work_seconds": Entry(time_model.work_seconds,
                                               lambda: {"work": time_model.Work("w", 1, 1, "fp32"),
                                                        "gpu": time_model.GPUS["T4"]},
                                               {"work": st.one_of(st.none(), st.integers()),
                                                "gpu": st.one_of(st.none(), st.just("T4"), st.integers())}),
        "utils.lessons.time_model.datasheet_bound_seconds": Entry(time_model.datasheet_bound_seconds,
                                                          lambda: {"works": [], "gpu": time_model.GPUS["T4"]},
                                                          {"works": st.one_of(st.none(), st.integers(),
                                                                              st.just([1])),
                                                           "gpu": st.one_of(st.none(), st.just("T4"),
                                                                            st.integers())}),
        "utils.course.gpu_check.reference_gpu": Entry(gpu_check.reference_gpu, lambda: {"device": "Tesla T4"},
                                               {"device": st.one_of(st.none(), st.integers())}),
        "utils.lessons.sizes.memory_fraction_in_force": Entry(sizes.memory_fraction_in_force, lambda: {"index": 0},
                                                      {"index": st.one_of(st.just(-1), st.just("0"),
                                                                          st.just(1.5))}),
        "utils.lessons.time_model.predicted_seconds": Entry(time_model.predicted_seconds,
                                                    lambda: {"works": [], "gpu": time_model.GPUS["T4"]},
                                                    {"works": st.one_of(st.none(), st.integers(), st.just([1])),
                                                     "gpu": st.one_of(st.none(), st.just("T4"), st.integers())}),
        "utils.lessons.time_model.chapter_work": Entry(time_model.chapter_work, lambda: {"chapter": "04", "tier": 16},
                                               {"chapter": _choice({f"{i:02d}" for i in range(11)}),
                                                "tier": st.one_of(st.integers().filter(lambda t: t not in sizes.TIERS),
                                                                  _junk)}),
        "utils.lessons.widgets.snapshot_html": Entry(widgets.snapshot_html, lambda: {"result": "text"}, {}),
        "utils.course.verdicts.claim_markdown": Entry(verdicts.claim_markdown,
                                               lambda: {"line": "C01 (c): measured 1 -> holds; criterion: c"},
                                               {"line": "text"}),
        "utils.course.verdicts.show_claim": Entry(verdicts.show_claim, lambda: {"line": "C01 (c): measured 1 -> holds"},
                                           {"line": "text"}),
        "utils.course.verdicts.verdict": Entry(verdicts.verdict, lambda: {"name": "holds", "criterion": "x within 5%"},
                                        {"name": _choice({"holds", "fails", "partly", "depends", "needs GPU",
                                                          "not measured"})}),
        "utils.course.verdicts.judge": Entry(verdicts.judge, lambda: {"claim_id": "C01", "criterion": "c",
                                                               "examples": [{}, {}]},
                                      {"claim_id": st.one_of(st.just("C1"), st.just("X01"), st.integers()),
                                       "criterion": st.one_of(st.just(""), st.just("  ")),
                                       "examples": st.one_of(st.just([{}]), st.just([1, 2]), st.just({}))}),
        "utils.lessons.plots.memory_bar": Entry(plots.memory_bar, lambda: {"parts": {"params": 10}},
                                        {"parts": st.one_of(st.just({}), st.none(), st.just({"a": -1}),
                                                            st.just({"a": "x"})), "unit": "count"}),
    }


EXEMPT_PREFIXES: dict[str, str] = {
    "utils.course.checks.": "lab check or its helper: turns any learner answer into a verdict (never raises at the "
                            "learner); "
                     "tested by the lab tests and the grader's planted submissions",
    "utils.validate.": "the validators themselves (test_validators_name_the_argument)",
    "utils.course.scenes.": "a lab check's scenario, called only by its check with the check's own cases (the "
                            "learner's answer is judged by the check, never validated here); tested by the lab tests "
                            "and tests/test_grading_replay.py",
}
EXEMPT: dict[str, str] = {
    "utils.course.book.main": "command: tests/test_book.py builds the site through it",
    "utils.course.navigation.main": "command: checks or applies the closing links (tests/test_navigation.py)",
    "utils.course.navigation.problems": "takes no arguments",
    "utils.ledger.report.page_options": "takes no arguments",
    "utils.course.planner_page.cache_dir": "takes no arguments",
    "utils.course.planner_page.pyodide_tarball": "takes no arguments (tests/test_book.py builds the site through it)",
    "utils.course.navigation.apply": "rewrites a chapter it is given by the command, which lists the chapters itself",
    "utils.course.workshop.main": "command: rewrites or checks docs/workshop.md (tests/test_workshop.py)",
    "utils.course.workshop.minutes_rows": "takes no arguments",
    "utils.course.workshop.table_markdown": "takes no arguments",
    "utils.course.grade.autograded_points": "takes an Exercise that utils.course.labs parsed from a lab (never a "
                                            "user's value); "
                                     "tests/test_grade.py and test_nbgrader.py cover it",
    "utils.course.grade.reasoning_key": "takes an Exercise that utils.course.labs parsed from a lab "
                                        "(tests/test_grade.py)",
    "utils.course.grade.reasoning_note": "formats whatever a learner handed over as reasoning, any object by design "
                                  "(tests/test_grade.py: a placeholder, a marked and an unmarked reasoning)",
    "utils.course.labs.takes_reasoning": "takes an Exercise that utils.course.labs parsed from a lab "
                                         "(tests/test_nbgrader.py)",
    **{f"utils.{m}.main": "command: its arguments and files are tested in tests/test_commands.py"
       for m in ("course.chapters", "lessons.estimate", "course.glossary", "course.gpu_check", "course.grade",
                 "course.hosted", "course.lab_server", "course.labs", "course.outputs", "course.results")},
    **{n: "takes no arguments" for n in (
        "utils.lessons.env.default_device", "utils.lessons.env.mps_available", "utils.lessons.env.mps_memory",
        "utils.lessons.env.package_versions", "utils.lessons.env.transformer_engine_status",
        "utils.lessons.sizes.experiment_size", "utils.lessons.sizes.memory_tier",
        "utils.course.chapters.support_matrix", "utils.lessons.distributed.free_port", "utils.lessons.oom.free_memory",
        "utils.lessons.profiling.live_tensors", "utils.lessons.profiling.gc_tensors",
        "utils.lessons.measure.make_mem_tracker", "utils.course.glossary.terms", "utils.course.results.load_claims",
        "utils.course.hosted.repository_url", "utils.course.hosted.chapters", "utils.lessons.quiet.import_torchao",
        "utils.lessons.quiet.install_filters", "utils.lessons.quiet.native_stderr_silenced",
        "utils.lessons.distributed.cpu_mesh", "utils.lessons.time_model.time_table",
        "utils.course.gpu_check.no_gpu_line", "utils.ledger.plan.host_ram_bytes",
        "utils.course.forkserver.not_dumpable", "utils.course.verdicts.all_judges",
        "utils.course.gpu_check.chapter_notebooks", "utils.course.kernels.notebook_client_config")},
    **{n: "parses tool or file output: returns a value meaning 'unknown' for anything unparsable, by design "
          "(tested in test_env / test_profiling)" for n in (
        "utils.lessons.env.parse_driver_cuda_version", "utils.lessons.env.parse_nvidia_smi_mib",
        "utils.lessons.env.torch_version_note", "utils.lessons.env.tf32_override_note",
        "utils.lessons.profiling.is_user_frame")},
    **{n: "grader and lab-tool internals, called only with notebooks the command validated; the commands' bad input "
          "is tested in test_commands.py and test_grade.py" for n in (
        "utils.course.labs.parse_check_call", "utils.course.grade.execute", "utils.course.grade.find_lab",
        "utils.course.grade.grade_notebook", "utils.course.grade.gradescope_results",
        "utils.course.grade.metadata_problem", "utils.course.grade.prepare", "utils.course.grade.report",
        "utils.course.grade.score", "utils.course.grade.write_gradescope", "utils.course.labs.check_labs",
        "utils.course.labs.content_hash", "utils.course.grade.answers_sent", "utils.course.grade.combine",
        "utils.course.grade.lab_check_imports", "utils.course.grade.read_by_hand", "utils.course.grade.internals_used",
        "utils.course.labs.check_imports", "utils.course.labs.course_metadata", "utils.course.labs.guide_section",
        "utils.course.labs.guide_text", "utils.course.labs.hidden_exercises", "utils.course.labs.hidden_path",
        "utils.course.labs.lab_exercises", "utils.course.labs.make_lab", "utils.course.labs.read_notebook",
        "utils.course.labs.rubric_markdown", "utils.course.labs.write_guide", "utils.course.labs.write_labs",
        "utils.course.labs.nbgrader_source", "utils.course.labs.write_nbgrader", "utils.course.outputs.code_hash",
        "utils.course.outputs.execute", "utils.course.outputs.problems", "utils.course.hosted.apply",
        "utils.course.hosted.bootstrap_source", "utils.course.hosted.expected_cells", "utils.course.hosted.problems",
        "utils.course.glossary.apply", "utils.course.glossary.link_first_uses", "utils.course.glossary.unlinked_terms",
        "utils.course.gpu_check.check", "utils.course.gpu_check.estimator_check", "utils.course.gpu_check.report",
        "utils.course.gpu_check.run_chapter", "utils.course.gpu_check.query_device",
        "utils.course.gpu_check.predicted_wall")},
    **{n: "CUDA-only or a context manager: its arguments are tested in test_measure / test_env under the simulated GPU"
       for n in ("utils.lessons.measure.cuda_peak", "utils.lessons.measure.warm_up_cuda",
                 "utils.lessons.env.tf32_matmuls", "utils.lessons.estimate.checkpointed",
                 "utils.lessons.profiling.plot_snapshot")},
    **{f"utils.lessons.experiment_sizes.ch{n}.gpt_config": "the chapter's model config for a size; the size goes "
                                                           "through utils.lessons.sizes.pick, which rejects bad "
                                                           "sizes by name"
       for n in ("01", "03", "04", "07", "08")},
    "utils.lessons.plan_runs.make_optimizer": "builds torchao optimizers for run_choice, which validates its Choice "
                                              "first",
    "utils.course.results.recording_enabled": "reads COURSE_RECORD and rejects bad values by name "
                                       "(test_results_tables_widgets)",
}


def _public_functions() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(utils.__path__, "utils."):
        module = importlib.import_module(info.name)
        for attr, obj in vars(module).items():
            if attr.startswith("_") or getattr(obj, "__module__", "") != info.name:
                continue
            if inspect.isfunction(obj):
                names.append(f"{info.name}.{attr}")
    return sorted(names)


CASES = [(name, arg) for name, entry in _entries().items() for arg in entry.kinds]


@pytest.mark.parametrize(("name", "arg"), CASES, ids=[f"{n.removeprefix('utils.')}:{a}" for n, a in CASES])
def test_bad_values_are_rejected_by_name(name: str, arg: str) -> None:
    entry = _entries()[name]
    kind = entry.kinds[arg]
    strategy = KINDS[kind] if isinstance(kind, str) else kind

    @SETTINGS
    @given(bad=strategy)
    def property_(bad: Any) -> None:
        kwargs = entry.valid() | {arg: bad}
        try:
            entry.call(**kwargs)
        except (TypeError, ValueError) as exc:
            assert arg in str(exc), f"{name}({arg}={bad!r}) raised {type(exc).__name__} not naming {arg!r}: {exc}"
        else:
            raise AssertionError(f"{name}({arg}={bad!r}) was accepted")

    property_()


def _wrong_type(example: Any) -> Any:
    """A value of another type than `example` (a valid value of the argument)."""
    if isinstance(example, bool):
        return "yes"
    if isinstance(example, int | float):
        return "7"
    if isinstance(example, str | bytes):
        return 7
    if isinstance(example, torch.Tensor):
        return [1.0, 2.0]
    if isinstance(example, list | tuple | dict | set | frozenset | Path):
        return 7
    return object()


# Arguments for which None, or a value of another type, is a documented valid input (with the reason).
ARG_EXEMPT: dict[tuple[str, str], str] = {
    ("utils.validate.check_int", "value"): "the validator under test: any value is its input",
    ("utils.validate.check_int", "name"): "the argument's name, used only in the message",
    ("utils.course.hosted.badges_markdown", "url"): "None means the repository URL from pyproject.toml",
    ("utils.ledger.gpt.check_capability", "capability"): "None means no CUDA GPU (a CPU)",
    ("utils.course.glossary.unit_problems", "text"): "reads any text; tested in test_docs",
    ("utils.lessons.widgets.snapshot_html", "result"): "renders any value a panel function returns, None included",
    ("utils.lessons.env.cuda_build_note", "torch_cuda"): "None means a CPU build of torch",
    ("utils.lessons.env.cuda_build_note", "driver_cuda"): "None means no driver found",
    ("utils.lessons.env.cuda_build_note", "torch_version"): "None means this torch's version",
    ("utils.course.verdicts.ch02.agrees_to_stated_digits", "measured"): "any number; a non-number fails to agree",
    **{("utils.lessons.sizes.pick", a): "the caller's value for that size, of any type (a count, a config, a list)"
       for a in ("quick", "full", "tiny")},
    **{("utils.course.results.Run", a): "filled by Run.figure() and Run.claim(), which validate each entry; "
                                 "a Run is made from chapter and config" for a in ("figures", "claims")},
    ("utils.course.chapters.chapter_support", "capability"): "None means no CUDA GPU (CPU or Apple GPU)",
    ("utils.lessons.env.capability_gates", "capability"): "None means no CUDA GPU (CPU or Apple GPU)",
    ("utils.lessons.amp_trace.op_dtypes", "dtype"): "None means no autocast (the plain run to compare with)",
    ("utils.validate.check_int", "minimum"): "validator internals: bounds come from the course's code, never input",
    ("utils.validate.check_int", "maximum"): "validator internals: bounds come from the course's code, never input",
}


def _generic_cases() -> list[tuple[str, str, str]]:
    """(function, argument, 'None' or 'wrong type') for every argument of every inventory function."""
    cases = []
    for name, entry in _entries().items():
        try:
            params = inspect.signature(entry.call).parameters
        except (TypeError, ValueError):
            continue
        for arg, param in params.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or (name, arg) in ARG_EXEMPT:
                continue
            if param.default is not None:
                cases.append((name, arg, "None"))
            cases.append((name, arg, "wrong type"))
    return cases


GENERIC = _generic_cases()


@pytest.mark.parametrize(("name", "arg", "spoil"), GENERIC,
                         ids=[f"{n.removeprefix('utils.')}:{a}:{k}" for n, a, k in GENERIC])
def test_none_and_wrong_types_are_rejected_by_name(name: str, arg: str, spoil: str) -> None:
    """Every argument of every inventory function: None (unless None means the default) and a value of another
    type raise TypeError/ValueError naming the argument."""
    entry = _entries()[name]
    valid = entry.valid()
    params = inspect.signature(entry.call).parameters
    example = valid.get(arg, params[arg].default)
    bad = None if spoil == "None" else _wrong_type(example)
    try:
        entry.call(**(valid | {arg: bad}))
    except (TypeError, ValueError) as exc:
        assert arg in str(exc), f"{name}({arg}={bad!r}) raised {type(exc).__name__} not naming {arg!r}: {exc}"
    else:
        raise AssertionError(f"{name}({arg}={bad!r}) was accepted")


@pytest.mark.parametrize("name", sorted(_entries()))
def test_valid_calls_work(name: str) -> None:
    entry = _entries()[name]
    if entry.run_valid:
        entry.call(**entry.valid())


def test_validators_name_the_argument() -> None:
    from utils import validate

    for call in (lambda: validate.check_int("batch", True), lambda: validate.check_number("lr", float("nan")),
                 lambda: validate.check_bool("checkpointing", "no"), lambda: validate.check_choice("fmt", [1], ["a"]),
                 lambda: validate.check_device("device", "gpu0"), lambda: validate.check_str("token", ""),
                 lambda: validate.check_instance("model", None, torch.nn.Module)):
        with pytest.raises((TypeError, ValueError)) as info:
            call()
        assert info.value.args[0].split()[0] in {"batch", "lr", "checkpointing", "fmt", "device", "token", "model"}


def test_inventory_is_complete() -> None:
    """Every public function is in the inventory or exempt with a reason (the closing note's table)."""
    covered = set(_entries()) | set(EXEMPT)
    missing = [n for n in _public_functions()
               if n not in covered and not any(n.startswith(p) for p in EXEMPT_PREFIXES)]
    assert not missing, f"add these to INVENTORY (tests/test_bad_input.py) or EXEMPT with a reason: {missing}"


def _issue_cases() -> list[tuple[str, Callable[[], Any], str]]:
    """The cases an outside fuzz of the public API found (each raised a raw error or was accepted before)."""
    from utils.course import results
    from utils.lessons import bitview, estimate, measure, models, profiling, tables

    run = results.Run("01_where_the_memory_goes")
    return [
        ("bitview.stored_table_html([None])", lambda: bitview.stored_table_html([None]), "rows"),
        ("estimate.measure_step(inputs=b'..')",
         lambda: estimate.measure_step(models.mlp(8, 16, 4, 1), inputs=b".."), "inputs"),
        ("estimate.validate([{}])", lambda: estimate.validate([{}]), "configs"),
        ("measure.peak_by_category(None)", lambda: measure.peak_by_category(None), "tracker"),
        ("profiling.profiler_timeline(None)", lambda: profiling.profiler_timeline(None), "prof"),
        ("models.gpt_batch(seed=None)", lambda: models.gpt_batch(models.GPTConfig(), 2, seed=None), "seed"),
        ("tables.format_table('ab', ['a'])", lambda: tables.format_table("ab", ["a"]), "rows"),
        ("GPTConfig(dropout='0.1')", lambda: models.GPTConfig(dropout="0.1"), "dropout"),
        ("Run.claim({})", lambda: run.claim({}, "1 B", "holds"), "claim_id"),
        ("Run.figure({1})", lambda: run.figure({1}, 1), "name"),
    ]


@pytest.mark.parametrize("case", _issue_cases(), ids=lambda c: c[0])
def test_fuzz_findings_raise_by_name(case: tuple[str, Callable[[], Any], str]) -> None:
    label, call, arg = case
    with pytest.raises((TypeError, ValueError)) as info:
        call()
    assert arg in str(info.value), f"{label}: {type(info.value).__name__} does not name {arg!r}: {info.value}"


def test_spacing_at_nan_and_infinity_is_nan() -> None:
    from utils.lessons import formats

    for fmt in ("fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"):
        assert math.isnan(formats.spacing(float("nan"), fmt)), fmt
        assert math.isnan(formats.spacing(float("inf"), fmt)), fmt
    assert formats.spacing(1.0, "fp16") == 2.0**-10


def test_scaler_check_does_not_pass_for_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """check_scaler(None) passed through its reference path (GradScaler) before; None is an answer like any other."""
    from utils.course.checks import ch03

    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    assert ch03.check_scaler(None).status != "passed"
