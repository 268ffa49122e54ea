"""Time per tier (issue 21, bug 5; issue 33, bug 3): every chapter's full-size work, in FLOPs and aten ops counted on
the meta device, predicted from sustained rates, per-op host overhead and fixed costs (the old datasheet figure kept
as a bound); at most 5 minutes a chapter and 40 minutes for the course on a T4 (BF16 at the FP32 rate there)."""

from __future__ import annotations

import pytest
import torch

from utils.lessons import time_model
from utils.lessons.models import GPT, GPTConfig
from utils.lessons.tables import format_table
from utils.lessons.time_model import (
    CHAPTER_LIMIT_S,
    COURSE_LIMIT_S,
    GPUS,
    Work,
    chapter_work,
    count_flops,
    datasheet_bound_seconds,
    gpt_step_flops,
    gpt_step_ops,
    predicted_seconds,
    time_table,
    work_seconds,
)


def test_every_chapter_fits_five_minutes_on_a_t4_and_the_course_forty():
    rows, headers, totals = time_table()
    print()
    print(format_table(rows, headers))
    t4 = GPUS["T4"]
    slow = {ch: s for ch, s in ((r[0], float(r[1])) for r in rows[:-1]) if s > CHAPTER_LIMIT_S}
    assert not slow, f"chapters over {CHAPTER_LIMIT_S:.0f} s predicted on a T4: {slow}"
    assert totals["T4"] <= COURSE_LIMIT_S, f"the course is {totals['T4']:.0f} s predicted on a T4"
    assert t4.rate("bf16") == t4.fp32 and t4.rate("tf32") == t4.fp32 and t4.rate("fp16") == 65.0


def test_chapter_04s_old_full_size_is_caught():
    """200 steps x 4 precisions of the 98M GPT at 4,096 tokens (7-13 minutes on a real T4) fail the limit."""
    old = [Work(w.name, w.flops, 200, w.precision) if w.name.startswith("GPT training") else w
           for w in chapter_work("04", 16)]
    assert predicted_seconds(old, GPUS["T4"]) > CHAPTER_LIMIT_S
    assert predicted_seconds(chapter_work("04", 16), GPUS["T4"]) <= CHAPTER_LIMIT_S


def test_gpt_flops_from_one_and_two_blocks_are_exact():
    cfg = GPTConfig(n_layer=3, d_model=32, n_head=4, seq_len=16, vocab_size=64)

    def direct():
        with torch.device("meta"):
            model = GPT(cfg)
            idx = torch.zeros(2, cfg.seq_len, dtype=torch.long)
        model(idx, idx).backward()

    assert gpt_step_flops(cfg, 2) == count_flops(direct)
    assert gpt_step_flops(cfg, 2, backward=False) * 3 == pytest.approx(gpt_step_flops(cfg, 2), rel=0.01)


def test_rates_follow_the_capability():
    assert GPUS["A100"].rate("bf16") == 312.0 and GPUS["H100"].rate("fp8") == 1978.9
    assert GPUS["A10G"].rate("fp8") == GPUS["A10G"].fp32  # no FP8 Tensor Cores: emulated
    assert datasheet_bound_seconds([Work("x", int(65e12), 1, "fp16")], GPUS["T4"]) == pytest.approx(1.0)
    assert datasheet_bound_seconds([Work("x", int(65e12 * time_model.EFFICIENCY), 1, "fp16")], GPUS["T4"],
                                   efficiency=time_model.EFFICIENCY) == pytest.approx(1.0)  # the old model
    assert predicted_seconds([Work("t", 1, 1, "fp32", min_seconds=0.5)], GPUS["T4"]) == 0.5
    t4 = GPUS["T4"]
    assert t4.sustained_rate("bf16") == t4.sustained_rate("fp32") == t4.sustained_rate("tf32")  # emulated
    assert GPUS["A10G"].sustained_rate("fp8") == GPUS["A10G"].sustained_rate("bf16")  # chapter 08 emulates it
    flops = int(time_model.SIZE_EFFICIENCY * t4.sustained_rate("fp16") * 1e12 / (1 + time_model.NON_GEMM_SHARE))
    assert predicted_seconds([Work("x", flops, 1, "fp16")], t4) == pytest.approx(1.0)


def test_an_a100_is_not_slower_than_an_a10g_in_fp32():
    """Bug 3: the datasheet's FP32 figure of an A10G counts dual-issue FP32 that SGEMM does not reach (31.2 against
    the A100's 19.5): at 40% of the datasheet, every FP32 chapter was predicted slower on an A100."""
    for chapter in ("01", "03", "07"):
        works = chapter_work(chapter, 24)
        assert predicted_seconds(works, GPUS["A100"]) <= predicted_seconds(works, GPUS["A10G"])
    old = time_model.EFFICIENCY
    assert datasheet_bound_seconds(chapter_work("03", 24), GPUS["A100"], efficiency=old) > \
        datasheet_bound_seconds(chapter_work("03", 24), GPUS["A10G"], efficiency=old)  # the old prediction


def test_host_overhead_and_fixed_costs_count():
    """Bug 3: a small model's steps are bounded by the host's per-op time, not FLOPs; every chapter has fixed costs
    (the old model predicted 0.0-0.3 min for most chapters on an H100)."""
    cfg = GPTConfig(n_layer=1, d_model=32, n_head=4, seq_len=32, vocab_size=64)
    tiny = Work("tiny steps", gpt_step_flops(cfg, 8), 1000, "fp32", ops=gpt_step_ops(cfg))
    device, host = work_seconds(tiny, GPUS["H100"])
    assert host > 100 * device and host == pytest.approx(1000 * tiny.ops * time_model.HOST_S_PER_OP)
    assert predicted_seconds([tiny], GPUS["H100"]) == pytest.approx(host)
    assert 100 < tiny.ops < 1000 and gpt_step_ops(cfg, optimizer=False) < tiny.ops
    for chapter in time_model.CHAPTERS:
        works = chapter_work(chapter, 80)
        fixed = sum(time_model.FIXED_COSTS[chapter].values())
        assert predicted_seconds(works, GPUS["H100"], chapter=chapter) >= fixed + datasheet_bound_seconds(
            works, GPUS["H100"]) * 0.5
        assert all(w.ops > 0 for w in works if "matmul" not in w.name and "widget" not in w.name), chapter


def test_work_lists_follow_the_notebooks():
    """Bug 3: chapter 07's search reaches batch 16 on a T4 and about 128 on an H100 (the old list: 10 probes at
    2 x STEP_BATCH); chapter 06 runs 14 steps per k (2 measured, 1 + 11 timed), each k forwards and backwards."""
    from utils.lessons.experiment_sizes import ch07

    assert ch07._search_probes(16) == [1, 2, 4, 8, 16, 32, 24, 20, 18, 17]
    t4 = next(w for w in chapter_work("07", 16) if w.name.startswith("largest-batch search"))
    h100 = next(w for w in chapter_work("07", 80) if w.name.startswith("largest-batch search"))
    assert "up to batch 32" in t4.name and "up to batch 256" in h100.name and h100.repeats > 5 * t4.repeats
    per_k = [w for w in chapter_work("06", 16) if w.name.startswith("memory vs micro-batch")]
    assert [w.repeats for w in per_k] == [14] * 5 and per_k[-1].ops > 8 * per_k[0].ops


def test_every_chapter_has_a_prediction_and_a_bound():
    rows, headers, totals = time_table()
    bound_rows, _, bound_totals = time_table(bound=True)
    assert [r[0] for r in rows] == [*time_model.CHAPTERS, "course"]
    for key in totals:
        assert totals[key] > bound_totals[key]
    assert totals["H100"] > 300  # the old model said 213 s for the course on an H100


def test_bad_input():
    with pytest.raises(ValueError, match="precision"):
        Work("x", 1, 1, "int8")
    with pytest.raises(TypeError, match="flops"):
        Work("x", 1.5, 1, "fp32")
    with pytest.raises(ValueError, match="chapter"):
        chapter_work("11", 16)
    with pytest.raises(TypeError, match="cfg"):
        gpt_step_flops("gpt2", 1)
    with pytest.raises(TypeError, match="gpu"):
        predicted_seconds([], "T4")
    with pytest.raises(TypeError, match="fn"):
        count_flops(3)
