"""Lab 10's checks: the solution passes the public and the held-out cases; the common mistakes each exercise names,
None, and answers that hand the work to the checks' references or to utils' implementations do not."""

import importlib.util
from pathlib import Path

import nbformat
import pytest

import utils.ledger.parallel
from utils.course.checks import ch10
from utils.ledger.plan import Choice

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def solution() -> dict:
    nb = nbformat.read(ROOT / "solutions" / "lab10_beyond_one_gpu.ipynb", as_version=4)
    namespace: dict = {}
    for cell in nb.cells:
        if cell.cell_type == "code" and "check" not in cell.metadata.get("tags", []) and \
                "Your layouts" not in cell.source:
            exec(cell.source, namespace)
    return namespace


@pytest.fixture(scope="module")
def hidden():
    spec = importlib.util.spec_from_file_location("hidden_ch10", ROOT / "grading" / "hidden" / "ch10.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.HIDDEN


def _status(verdict) -> str:
    return verdict.status


def test_the_solution_passes_public_and_held_out_cases(solution, hidden):
    assert _status(ch10.check_pipeline_stage(solution["pipeline_stage"])) == "passed"
    assert _status(ch10.check_params_per_rank(solution["params_per_rank"])) == "passed"
    assert _status(ch10.check_layout(solution["choose_layout"])) == "passed"
    assert _status(ch10.check_fsdp2_traffic(solution["fsdp2_traffic"])) == "passed"
    hidden["10.4"](solution["fsdp2_traffic"])
    hidden["10.1"](solution["pipeline_stage"])
    hidden["10.2"](solution["params_per_rank"])
    hidden["10.3"](solution["choose_layout"])


def test_pipeline_mistakes_fail(monkeypatch):
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)  # failing verdicts are what this test wants
    def as_1f1b(layer_bytes, n_layer, stages, micro, schedule):  # GPipe counted like 1F1B
        return layer_bytes * n_layer / stages * min(stages, micro), (stages - 1) / (micro + stages - 1)

    def bubble_over_m(layer_bytes, n_layer, stages, micro, schedule):  # Narayanan's (p - 1)/m, not a fraction
        held = layer_bytes * n_layer / stages * (micro if schedule == "gpipe" else min(stages, micro))
        return held, (stages - 1) / micro

    def delegates(*args):
        return ch10.reference_stage(*args)

    def library(layer_bytes, n_layer, stages, micro, schedule):
        held = utils.ledger.parallel.pipeline_layers_held(n_layer, stages)
        return layer_bytes * held * (micro / stages if schedule == "gpipe" else 1), (stages - 1) / (micro + stages - 1)

    for wrong in (as_1f1b, bubble_over_m, delegates, library, lambda *a: None):
        assert _status(ch10.check_pipeline_stage(wrong)) != "passed", wrong


def test_params_per_rank_mistakes_fail(monkeypatch):
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)  # failing verdicts are what this test wants
    def no_gqa(d, heads, kv, ffn, t):
        return (4 * d * d + 3 * d * ffn) // t + 2 * d

    def norms_split(d, heads, kv, ffn, t):
        return (2 * d * d + 2 * d * kv * (d // heads) + 3 * d * ffn + 2 * d) // t

    def never_refuses(d, heads, kv, ffn, t):
        return (2 * d * d + 2 * d * kv * (d // heads) + 3 * d * ffn) // t + 2 * d

    for wrong in (no_gqa, norms_split, never_refuses, ch10.reference_params_per_rank, lambda *a: None):
        assert _status(ch10.check_params_per_rank(wrong)) != "passed", wrong


def test_layout_mistakes_fail(monkeypatch):
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)  # failing verdicts are what this test wants
    def widest(model, n_gpus, budget, micro):  # the largest t: it fits, but moves activations at every layer
        return Choice(precision="bf16-mixed", checkpointing=True, accumulation=micro, chunked_loss=1024,
                      tensor_parallel=8, sequence_parallel=True, pipeline_stages=4, n_gpus=n_gpus // 32 or 1)

    def deep_pipeline(model, n_gpus, budget, micro):  # traffic-light, but idle far beyond 20% of the step
        return Choice(precision="bf16-mixed", checkpointing=True, accumulation=micro, chunked_loss=1024,
                      tensor_parallel=2, pipeline_stages=16, n_gpus=n_gpus // 32)

    for wrong in (widest, deep_pipeline, ch10.reference_layout, lambda *a: None):
        assert _status(ch10.check_layout(wrong)) != "passed", wrong


def test_each_of_the_colleagues_three_fsdp2_traffic_mistakes_fails(monkeypatch, solution):
    """Review s14 R17: 10.4 re-typed chapter 09's ZeRO traffic formula; it now asks for FSDP2's switches and
    mixed-precision widths, which no chapter counts. The colleague's function and each single mistake fail."""
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)  # failing verdicts are what this test wants
    fixed = solution["fsdp2_traffic"]

    def colleague(n, gather, reduce, gpus, micro, reshard, sync):  # the lab's function as handed out
        return (gpus - 1) / gpus * n * gather * (2 * micro + micro)

    def gathers_twice_always(n, gather, reduce, gpus, micro, reshard, sync):
        return fixed(n, gather, reduce, gpus, micro, True, sync)

    def reduces_every_micro_batch(n, gather, reduce, gpus, micro, reshard, sync):
        return fixed(n, gather, reduce, gpus, micro, reshard, True)

    def one_width(n, gather, reduce, gpus, micro, reshard, sync):
        return fixed(n, gather, gather, gpus, micro, reshard, sync)

    def zero3_of_chapter_09(n, gather, reduce, gpus, micro, reshard, sync):  # 3 m (N - 1)/N G at one width
        return 3 * micro * (gpus - 1) / gpus * n * gather

    for wrong in (colleague, gathers_twice_always, reduces_every_micro_batch, one_width, zero3_of_chapter_09,
                  ch10.reference_fsdp2_traffic, lambda *a: None):
        assert _status(ch10.check_fsdp2_traffic(wrong)) != "passed", wrong
