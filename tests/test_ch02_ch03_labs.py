"""Labs 02 and 03: the solutions pass the public AND the hidden cases; answers tuned to the public cases (or
carrying the bugs the exercises plant) pass the public check but fail a hidden one."""

from __future__ import annotations

import importlib.util
import math
import struct
from pathlib import Path

import pytest
import torch

from utils.course.checks import ch02, ch03
from utils.course.checks.core import CheckFailed
from utils.course.checks.protocol import STRICT_ENV

ROOT = Path(__file__).resolve().parents[1]


def hidden(ch: str) -> dict:
    spec = importlib.util.spec_from_file_location(f"_hidden_{ch}", ROOT / "grading" / "hidden" / f"{ch}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.HIDDEN


def passes_public(verdict) -> bool:
    return verdict.status == "passed"


# ---- reference answers (as in the solutions) -------------------------------------------------------------------
def decode_fp16(code: int) -> float:
    sign = -1.0 if code >> 15 else 1.0
    exp, man = (code >> 10) & 0x1F, code & 0x3FF
    if exp == 0x1F:
        return sign * math.inf if man == 0 else math.nan
    if exp == 0:
        return sign * man * 2.0 ** (1 - 15 - 10)
    return sign * (1 + man / 1024) * 2.0 ** (exp - 15)


def unsigned_zero_decode(code: int) -> float:  # tuned: passes every value check, loses the sign of zero
    v = decode_fp16(code)
    return 0.0 if v == 0 else v


def test_lab02_decode_tuned_to_public_values_fails_hidden():
    assert passes_public(ch02.check_decode_fp16(unsigned_zero_decode))
    hidden("ch02")["2.1"](decode_fp16)  # the right answer passes
    with pytest.raises(CheckFailed):
        hidden("ch02")["2.1"](unsigned_zero_decode)


def test_lab02_decode_through_a_struct_object_is_refused(monkeypatch: pytest.MonkeyPatch):
    """The outside review's escape: struct's half-precision format through a Struct object's own method (the watch
    covered struct.unpack, not Struct("<e").unpack) scored 2.1 in full; it is the library decoding for the learner."""
    half = struct.Struct("<e")

    def by_struct(code: int) -> float:
        return half.unpack(code.to_bytes(2, "little"))[0]

    monkeypatch.delenv(STRICT_ENV, raising=False)  # a verdict, not the strict mode's exception
    verdict = ch02.check_decode_fp16(by_struct)
    assert verdict.status == "failed" and "Struct.unpack" in str(verdict)


def test_lab02_zero_fraction_tuned_to_e4m3_fails_hidden_e5m2():
    def e4m3_only(t, fmt):  # the learner's own code, with the format fixed to E4M3
        nz = t[t != 0].double()
        q = (nz * (448.0 / nz.abs().max())).clamp(-448, 448).to(torch.float8_e4m3fn)
        return (q.double() == 0).double().mean().item()

    ch02.expect_zero_fraction(e4m3_only, [(ch02.log_uniform(5000, 24, 0), "e4m3")])  # public-like case passes
    with pytest.raises(CheckFailed):
        hidden("ch02")["2.4"](0.2, "x " * 12, e4m3_only)


def test_lab03_scaler_that_drops_unscale_from_step_fails():
    class NoUnscaleInStep:  # "fixes" the double unscale by never unscaling in step: wrong without clipping
        def __init__(self, init_scale, growth_factor, backoff_factor, growth_interval):
            self.scale_value, self.growth_factor, self.backoff_factor = init_scale, growth_factor, backoff_factor
            self.growth_interval, self.clean_steps, self.found_inf = growth_interval, 0, False

        def scale(self, loss):
            return loss * self.scale_value

        def unscale_(self, params):
            self.found_inf = False
            for p in params:
                p.grad.mul_(1.0 / self.scale_value)
                self.found_inf |= not bool(torch.isfinite(p.grad).all())
            return self.found_inf

        def step(self, optimizer, params):
            if not self.found_inf:
                optimizer.step()
            return not self.found_inf

        def update(self):
            self.found_inf = False

    with pytest.raises(CheckFailed):
        ch03.expect_scaler(NoUnscaleInStep, [(10, set(), set(), 2.0**8, 2, 1)])


def test_lab03_format_plan_that_only_knows_fp16_fails(monkeypatch):
    """Exercise 3.5: an answer that treats every format as FP16 fails on E5M2 (same range, half the precision
    loses values 8 binades sooner)."""
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)

    def fp16_only(grads, max_lost, fmt):
        nz = grads[grads != 0].double()
        good = [k for k in range(-40, 41) if ((c := (nz * 2.0**k).half()) == 0).double().mean() <= max_lost
                and bool(torch.isfinite(c).all())]
        window = (good[0], good[-1]) if good else None
        return window, window is None or not window[0] <= 0 <= window[1]

    verdict = ch03.check_format_plan(fp16_only)
    assert verdict.status == "failed" and "E5M2 has FP16's exponent range" in verdict.message


# ---- lab 02: rounding into E5M2/TF32, a Llama layer in E4M3, a colleague's per-block quantiser -------------------
def _solution(lab: str, cell: int, **extra) -> dict:
    """The namespace of a solution's answer cell (with the lab's imports), so the tests exercise the real answers."""
    import json

    nb = json.loads((ROOT / "solutions" / f"{lab}.ipynb").read_text())
    ns: dict = {"math": math, "torch": torch, "struct": __import__("struct"), **extra}
    exec("".join(nb["cells"][cell]["source"]), ns)
    return ns


def test_lab02_reference_round_agrees_with_torch_casts():
    """reference_round (saturating) is torch's cast after a clamp, for the formats torch has."""
    for (exp_bits, man_bits), dtype in (((5, 2), torch.float8_e5m2), ((5, 10), torch.float16),
                                        ((8, 7), torch.bfloat16)):
        xs = ch02.round_cases(7, 3000, exp_bits, man_bits)
        fmax = torch.finfo(dtype).max
        want = torch.tensor(xs).clamp(-fmax, fmax).to(dtype).double().tolist()
        got = [ch02.reference_round(x, exp_bits, man_bits) for x in xs]
        assert all(g == w and math.copysign(1, g) == math.copysign(1, w) for g, w in zip(got, want, strict=True))


def test_lab02_round_solution_passes_and_the_bf16_trick_fails(monkeypatch):
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    right = _solution("lab02_number_formats", 6)["round_to_format"]
    assert passes_public(ch02.check_round_to_format(right))
    hidden("ch02")["2.2"](right)

    def bf16_trick(x, exp_bits, man_bits):  # the chapter's TF32 cell with other constants: no subnormals, no clamp
        drop = 23 - man_bits
        bits = x.view(torch.int32).to(torch.int64)
        bits = (bits + (1 << (drop - 1)) - 1 + ((bits >> drop) & 1)) >> drop << drop
        return bits.to(torch.int32).view(torch.float32)

    def no_saturation(x, exp_bits, man_bits):  # right, except that it overflows to infinity
        v = right(x, exp_bits, man_bits)
        return torch.where(v.abs() < x.abs(), torch.where(v.abs() == v.abs().max(), v * math.inf, v), v)

    def one_by_one(x, exp_bits, man_bits):  # the chapter's scalar rounding, element by element
        return torch.tensor([ch02.reference_round(v, exp_bits, man_bits) for v in x.tolist()])

    def ties_away(x, exp_bits, man_bits):  # half a spacing added, then truncated: ties away from zero
        bias = 2 ** (exp_bits - 1) - 1
        fmax = (2 - 2.0**-man_bits) * 2.0 ** (2**exp_bits - 2 - bias)
        binade = (((x.view(torch.int32) >> 23) & 0xFF) - 127).clamp(min=1 - bias)
        spacing = torch.tensor(2.0, dtype=torch.float64) ** (binade - man_bits)
        a = x.double()
        return (torch.floor(a.abs() / spacing + 0.5) * spacing * torch.sign(a)).clamp(-fmax, fmax).float()

    assert ch02.check_round_to_format(bf16_trick).status == "failed"
    assert ch02.check_round_to_format(no_saturation).status == "failed"
    assert ch02.check_round_to_format(lambda x, e, m: x.to(torch.float8_e5m2).float()).status == "failed"
    assert "tolist" in ch02.check_round_to_format(one_by_one).message
    assert ch02.check_round_to_format(ties_away).status == "failed"
    assert ch02.check_round_to_format(lambda x, e, m: right(x, e, m).double()).status == "failed"


def test_lab02_round_tuned_to_public_formats_fails_hidden():
    right = _solution("lab02_number_formats", 6)["round_to_format"]

    def public_only(x, exp_bits, man_bits):  # the bias looked up for E5M2 and TF32 only
        return right(x, exp_bits, man_bits) if (exp_bits, man_bits) in ((5, 2), (8, 10)) else right(x, 5, man_bits)

    assert passes_public(ch02.check_round_to_format(public_only))
    with pytest.raises(CheckFailed):
        hidden("ch02")["2.2"](public_only)


def test_lab02_llama_linear_shapes_match_transformers():
    """LLAMA8B_LINEAR_WEIGHTS is what transformers builds for Llama-3-8B's config (on the meta device)."""
    from collections import Counter

    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                         num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=False)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    shapes = Counter(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert dict(shapes) == ch02.LLAMA8B_LINEAR_WEIGHTS


def test_lab02_llama_prediction_is_analytic_and_near_a_sample(monkeypatch):
    """The analytic count for one tensor against a sample scaled the same way (about 580 for a down_proj, measured
    570 and 591 on two seeds when this was written); the model's count (about 74,100) accepts the solution's
    prediction and rejects one amax for the whole model, k/v without grouped-query attention, a missing lm_head and
    the chapter's uniform-binade count."""
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    n = 1 << 22
    want = ch02.reference_flushed_weights(n, "e4m3")
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(n, generator=gen)
    q = (w * (448 / w.abs().max())).clamp(-448, 448).to(torch.float8_e4m3fn)
    assert abs(int((q.float() == 0).sum()) - want) < 4 * math.sqrt(want) + 3
    assert 550 < ch02.reference_flushed_weights(4096 * 14336, "e4m3") < 620
    full = ch02.reference_flushed_model(ch02.LLAMA8B_LINEAR_WEIGHTS, "e4m3")
    assert 73_000 < full < 75_500
    ns = _solution("lab02_number_formats", 12)
    words = "amax is between five and six standard deviations per tensor and zero begins below two to the minus ten"
    assert passes_public(ch02.check_zero_fraction(ns["prediction"], words, ns["fp8_zero_fraction"]))
    total = sum(n * c for n, c in ch02.LLAMA8B_LINEAR_WEIGHTS.items())
    one_amax = total * math.erf(ch02.gaussian_amax_median(total) / 448 * 2**-10 / math.sqrt(2))
    no_gqa = ch02.reference_flushed_model({4096 * 4096: 128, 14336 * 4096: 96, 128256 * 4096: 1}, "e4m3")
    no_lm_head = ch02.reference_flushed_model({4096 * 4096: 64, 1024 * 4096: 64, 14336 * 4096: 96}, "e4m3")
    uniform = total * (24 - math.log2(448) - 10) / 24
    for wrong in (one_amax, no_gqa, no_lm_head, uniform, 0.0, None):
        assert ch02.check_zero_fraction(wrong, words, ns["fp8_zero_fraction"]).status != "passed", wrong


def test_lab02_zero_fraction_measure_tuned_to_e4m3_fails_hidden():
    def e4m3_only(t, fmt):  # the learner's own code, with the format fixed to E4M3
        nz = t[t != 0].double()
        q = (nz * (448.0 / nz.abs().max())).clamp(-448, 448).to(torch.float8_e4m3fn)
        return (q.double() == 0).double().mean().item()

    with pytest.raises(CheckFailed):
        hidden("ch02")["2.4"](580.0, "x " * 12, e4m3_only)


def test_lab02_block_quantizer_solution_passes_and_each_planted_bug_fails(monkeypatch):
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    ns = _solution("lab02_number_formats", 15)
    ns = _solution("lab02_number_formats", 16, FP8=ns["FP8"])
    quantize, dequantize = ns["quantize_blocks"], ns["dequantize_blocks"]
    assert passes_public(ch02.check_block_quantize(quantize, dequantize))
    hidden("ch02")["2.5"](quantize, dequantize)
    colleague = _solution("lab02_number_formats", 15)
    assert ch02.check_block_quantize(colleague["colleague_quantize_blocks"],
                                     colleague["colleague_dequantize_blocks"]).status != "passed"

    def no_zero_block(t, fmt, block):  # everything fixed but the all-zero block
        q, scales = quantize(t, fmt, block)
        return q, torch.where(scales == 1.0, torch.inf, scales)

    def signed_max(t, fmt, block):  # everything fixed but the amax: max, not the largest magnitude
        dtype = ch02.FP8[fmt]
        fmax = torch.finfo(dtype).max
        k = t.shape[-1]
        nb = -(-k // block)
        blocks = torch.nn.functional.pad(t.float(), (0, nb * block - k)).reshape(*t.shape[:-1], nb, block)
        amax = blocks.amax(dim=-1)
        scales = torch.where(amax > 0, fmax / amax, torch.ones_like(amax))
        q = (blocks * scales.unsqueeze(-1)).clamp(-fmax, fmax).to(dtype)
        return q.reshape(*t.shape[:-1], nb * block)[..., :k], scales

    for bad_q, bad_d in ((no_zero_block, dequantize), (signed_max, dequantize),
                         (quantize, lambda q, s, b: q.float() * s.repeat_interleave(b, -1)[..., :q.shape[-1]])):
        assert ch02.check_block_quantize(bad_q, bad_d).status != "passed"


# ---- lab 03: an 8B prediction, a model-wide census, a colleague's loop ---------------------------------------------
def test_lab03_prediction_is_graded_on_the_8b_case(monkeypatch):
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    words = "overflow needs six standard deviations over eight billion draws and zero is a normal tail below"

    def flushed(values, scale):  # the learner's own measurement
        nz = values[values != 0].double() * scale
        return (nz.to(torch.float16) == 0).double().mean().item()

    k, lost = ch03.reference_prediction(ch03.LLAMA8B_PARAMS, ch03.PREDICT_MEAN, ch03.PREDICT_SD)
    assert (k, round(lost, 6)) == (18, round(0.5 * math.erfc(3.75 / math.sqrt(2)), 6))
    assert ch03.check_flushed((k, lost), words, flushed).status == "passed"
    assert ch03.check_flushed((k, lost * 1.1), words, flushed).status == "passed"
    # k from 400,000 samples (what a laptop can draw) is too optimistic; a lost fraction off by 2x fails
    assert ch03.check_flushed((20, lost), words, flushed).status == "failed"
    assert ch03.check_flushed((k, 2 * lost), words, flushed).status == "failed"
    assert ch03.check_flushed((float(k), lost), words, flushed).status == "failed"
    assert ch03.check_flushed(..., ..., None).status == "not attempted"


def _census_variant(per_layer=True, zero_edge=-26, top_edge=14, skip_empty=True):
    def window(counts, lo, max_lost):
        counts = counts.double()
        b = lo + torch.arange(counts.shape[1])
        tot = counts.sum(1)
        if skip_empty:
            counts, tot = counts[tot > 0], tot[tot > 0]
        top = int(b[counts.sum(0) > 0].max())
        ok = []
        for k in range(41):
            lost = counts[:, b + k <= zero_edge].sum(1)
            fine = bool((lost / tot <= max_lost).all()) if per_layer else bool(lost.sum() / tot.sum() <= max_lost)
            if top + k <= top_edge and fine:
                ok.append(k)
        return (ok[0], ok[-1]) if ok else None

    return window


def test_lab03_census_window_solution_passes_and_plausible_mistakes_fail(monkeypatch):
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    right = _solution("lab03_loss_scaling", 11)["scale_window"]
    assert passes_public(ch03.check_window(right))
    hidden("ch03")["3.3"](right)
    for wrong in (_census_variant(per_layer=False), _census_variant(zero_edge=-25), _census_variant(top_edge=15)):
        assert ch03.check_window(wrong).status == "failed"
    with pytest.raises(CheckFailed):  # a layer with no gradients divides 0 by 0
        hidden("ch03")["3.3"](_census_variant(skip_empty=False))


def test_lab03_census_tuned_to_public_fails_hidden():
    counts = ch03.binade_counts(ch03.LLAMA8B_LAYERS, -64, 72)
    public = {ml: ch03.reference_window(counts, -64, ml) for ml in (1e-3, 0.2)}

    def tuned(counts, lo, max_lost):
        return public.get(max_lost, (0, 40))

    assert passes_public(ch03.check_window(tuned))
    with pytest.raises(CheckFailed):
        hidden("ch03")["3.3"](tuned)


def test_lab03_colleague_loop_and_each_single_bug_fail(monkeypatch):
    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    ns = _solution("lab03_loss_scaling", 14)
    assert passes_public(ch03.check_loop(ns["train_loop"]))
    hidden("ch03")["3.4"](ns["train_loop"])
    assert ch03.check_loop(ns["colleague_train_loop"]).status == "failed"

    def variant(divide=True, unscale=True, sched_always=False, by_accum=False, drop_last=False, ask_scale=False):
        def loop(model, opt, sched, scaler, batches, after_backward, accum, max_norm):
            taken, stepped = [], []
            handle = opt.register_step_post_hook(lambda *_: stepped.append(True))
            ends = range(0, len(batches) - len(batches) % accum if drop_last else len(batches), accum)
            for start in ends:
                group = range(start, min(start + accum, len(batches)))
                for i in group:
                    xb, yb = batches[i]
                    size = (accum if by_accum else len(group)) if divide else 1
                    scaler.scale(torch.nn.functional.mse_loss(model(xb), yb) / size).backward()
                    after_backward(i)
                if unscale:
                    scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
                stepped.clear()
                before = scaler.get_scale() if ask_scale else None
                scaler.step(opt)
                scaler.update()
                took = scaler.get_scale() >= before if ask_scale else bool(stepped)
                if took or sched_always:
                    sched.step()
                opt.zero_grad(set_to_none=True)
                taken.append(took)
            handle.remove()
            return taken

        return loop

    assert passes_public(ch03.check_loop(variant()))
    for bug in (dict(divide=False), dict(unscale=False), dict(sched_always=True), dict(by_accum=True),
                dict(drop_last=True), dict(ask_scale=True)):
        assert ch03.check_loop(variant(**bug)).status == "failed", bug


def test_labs_show_only_the_answer_names_their_instructions_define():
    """A top-level answer block becomes `name = ...` for every name it assigns: in every lab those are only the
    names the instructions ask for (prediction, reasoning), never a solution's intermediate variables (lab 02's 2.4
    once showed `linear_weights = ...` and `amax_sd = ...`, lab 08's 8.2 `per_layer` and `n_linear`, defined nowhere
    in their instructions)."""
    import json
    import re

    for path in sorted((ROOT / "labs").glob("lab*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            names = re.findall(r"^(\w+) = \.\.\.  # your answer here$", "".join(cell["source"]), re.MULTILINE)
            assert set(names) <= {"prediction", "reasoning"}, (path.name, names)
