"""Issue 35's errors in chapters 00-04 and labs 02-04, checked on the committed notebooks (each test fails on the
text or outputs the issue quotes) and, where a torch fact is stated, on the installed torch."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
NB = {n[:2]: ROOT / "notebooks" / n for n in (
    "00_setup_and_environment.ipynb", "01_where_the_memory_goes.ipynb", "02_number_formats.ipynb",
    "03_loss_scaling.ipynb", "04_automatic_mixed_precision.ipynb")}


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _markdown(path: Path) -> str:
    return "\n".join("".join(c["source"]) for c in _cells(path) if c["cell_type"] == "markdown")


def _outputs(path: Path, cell_id: str | None = None) -> str:
    parts = []
    for c in _cells(path):
        if c["cell_type"] != "code" or (cell_id is not None and c.get("id") != cell_id):
            continue
        for out in c.get("outputs", []):
            if "text" in out:
                parts.append("".join(out["text"]))
            for key in ("text/markdown", "text/html", "text/plain"):
                if key in out.get("data", {}):
                    parts.append("".join(out["data"][key]))
    return "\n".join(parts)


def _verdict(path: Path, claim: str) -> str:
    found = re.findall(rf"^{claim} \(.*?-> (holds|partly|fails|depends|needs GPU)", _outputs(path), re.M)
    assert len(found) == 1, (path.name, claim, found)
    return found[0]


def test_item1_weight_copies_share_is_computed_and_equal_for_toy_and_7b_at_batch_1() -> None:
    table = _outputs(NB["01"], "232a8b98")
    rows = [line for line in table.splitlines() if line.startswith("| this block") or line.startswith("| 7B block")]
    ratios = [row.split("|")[3].strip() for row in rows]
    assert ratios[:2] == ["24.00", "24.00"]  # the toy block and 7B at b = 1: the same 24h/(s·b)
    assert "a rounding error at 7B size with 4,096-token sequences" not in _markdown(NB["01"])
    assert "small at 7B size" not in table


def test_item2_one_step_one_peak_and_one_c03_verdict() -> None:
    text = _outputs(NB["01"])
    line = re.search(r"section 1's peak: ([\d,]+) B by MemTracker, [\d,]+ B counted without it; the estimate's total "
                     r"is ([\d,]+) B", text)
    assert line and line.group(1) == line.group(2)
    first_validate = re.search(r"^\| fp32 +\| adamw +\| off +\| 4 +\| ([\d,]+) ", text, re.M)
    assert first_validate and first_validate.group(1) == line.group(1)
    totals = re.findall(r"^\| Total +\| ([\d,]+) ", _outputs(NB["01"], "10de52c3"), re.M)
    assert totals == [line.group(1)]
    # one criterion for C03, judged once (chapter 01, on the bytes each regime keeps; review s5: chapter 04's "at
    # least 17.5 at the peak" counted AdamW's temporaries as confirming 18); chapter 04 prints the peak it leaves open
    assert _verdict(NB["01"], "C03") in ("holds", "depends", "fails")
    assert not re.findall(r"^C03 \(.*?-> ", _outputs(NB["04"]), re.M)
    assert "C03, chapter 01's verdict, what it leaves open: torch.amp's measured forward/backward peak" in _outputs(
        NB["04"])
    from utils.course.verdicts import ch01, ch04

    assert hasattr(ch01, "c03") and not hasattr(ch04, "c03")


def test_item3_cross_entropy_routes_under_autocast() -> None:
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    assert has("aten::cross_entropy_loss", "AutocastCPU") and not has("aten::cross_entropy_loss", "AutocastCUDA")
    assert has("aten::log_softmax.int", "AutocastCUDA") and has("aten::nll_loss", "AutocastCUDA")
    assert "is on autocast's FP32 lists for CUDA and CPU" not in _markdown(NB["01"])
    lab = (ROOT / "solutions" / "lab04_automatic_mixed_precision.ipynb").read_text(encoding="utf-8")
    assert "KERNEL_CPU" in lab and "autocast_mode.cpp" in lab


def test_item4_the_7b_overhead_is_decomposed() -> None:
    assert "dwarf one sequence's" not in _markdown(NB["01"])
    assert "gradients not yet allocated at backward's start" in _outputs(NB["01"], "c04a0002")


def test_item5_one_units_convention() -> None:
    glossary = (ROOT / "docs" / "glossary.md").read_text(encoding="utf-8")
    assert "product label" in glossary and "total_memory" in glossary
    assert "sold in binary units" not in _markdown(NB["01"])
    assert "not 80 GiB" in _outputs(NB["01"], "2fd5cd83")


def test_item6_hybrid_is_a_format_and_the_default_recipe_depends_on_the_gpu() -> None:
    text = _markdown(NB["02"])
    assert 'default "HYBRID" recipe' not in text
    assert "get_default_fp8_recipe" in text and "amax_history_len" in text


def test_item7_tf32_override_only_sets_the_starting_precision() -> None:
    text = _markdown(NB["00"])
    assert "whatever `torch.backends.cuda.matmul.allow_tf32` says" not in text
    assert "*starting* `float32_matmul_precision`" in text


def test_item8_the_dtype_panel_snapshot_shows_its_table() -> None:
    snapshot = _outputs(NB["04"], "fea9f6a3")
    assert "<pre></pre>" not in snapshot and "addmm" in snapshot


def test_item9_c08_as_its_source_counts_and_lab_2_2_and_the_pure_bf16_warning() -> None:
    assert _verdict(NB["01"], "C08") == "holds"
    lab = (ROOT / "solutions" / "lab02_number_formats.ipynb").read_text(encoding="utf-8")
    assert "Chapter 02 rounded FP32 to BF16 by adding" not in lab
    assert "memory plan only" in _markdown(NB["01"])


def test_item10_the_fp16_moment_of_a_parameter_gradient() -> None:
    line = _outputs(NB["03"], "c35dwcode")
    assert "ToCopyBackward0: receives the weight gradient in float16" in line and "p.grad is float32" in line


def test_item11_new_topics_are_measured() -> None:
    opt = _outputs(NB["01"], "c35optcode")
    assert "fused kernel (fused=True)" in opt and "AdamW8bit" in opt
    assert "MixedPrecisionPolicy" in _outputs(NB["04"], "c35neighcode")
    assert "float8_e4m3fnuz" in _outputs(NB["02"], "c35fnuzcode")


def test_claim_lines_fold_their_criterion() -> None:
    import pytest

    from utils.course.verdicts import claim_markdown

    shown = claim_markdown("C01 (a claim): measured 16 B/param -> holds; criterion: holds if x_1 < 2; some detail")
    head, folded = shown.split("\n\n<details>", 1)
    assert head == "C01 (a claim): measured 16 B/param -> holds"
    assert "x\\_1 &lt; 2; some detail" in folded and folded.endswith("</details>")
    assert claim_markdown("C02 (b): measured 1 -> fails") == "C02 (b): measured 1 -> fails"
    with pytest.raises(ValueError, match="line"):
        claim_markdown("no verdict here")
    with pytest.raises(TypeError, match="line"):
        claim_markdown(3)
    for chapter in ("01", "02", "03", "04"):
        outputs = _outputs(NB[chapter])
        assert "; criterion: " not in outputs and "<summary>criterion" in outputs, chapter


def test_units_check_refuses_a_label_read_as_gib() -> None:
    import pytest

    from utils.course.glossary import unit_problems

    assert unit_problems('A card sold as "80 GB" has 80 GiB and reports a little less.')
    assert unit_problems("GPU memory itself is sold in binary units.")
    assert unit_problems("a 16 GB T4 has 16 GiB")
    assert not unit_problems('a "16 GB" T4 reports about 14.7 GiB (total_memory).')
    # the sentence issue 35 quotes from chapter 01 before the fix
    assert unit_problems('GPU memory itself is sold in binary units: a card sold as "80 GB" has\n80 GiB and reports a '
                         "little less as its total.")
    with pytest.raises(TypeError, match="text"):
        unit_problems(None)


# Issue 35, clarity: chapters 00-04 read and run in about an hour. Session 6 cut chapter 01 from 7,487 words of prose
# to 5,493, chapter 02 from 6,072 to 4,998 and chapter 04 from 6,151 to 4,981 (then about 50 words each came back
# after the outside review of the cuts); no paragraph (a table aside, each list
# item its own paragraph) runs past 150 words (chapter 00 had one of 491, chapter 01 one of 706).
PROSE_WORDS_AT_MOST = {"00": 3500, "01": 5600, "02": 5100, "03": 5000, "04": 5100}


def prose_budget(path: Path) -> tuple[int, str]:
    """(words of prose, the longest paragraph) of a chapter: its markdown without the hosted header and the
    navigation; a table aside, each list item its own paragraph."""
    cells = [c for c in _cells(path) if c["cell_type"] == "markdown"
             and not {"hosted-header", "navigation"} & set(c.get("metadata", {}).get("course", {}))]
    paragraphs = [p for c in cells for p in "".join(c["source"]).split("\n\n") if not p.lstrip().startswith("|")]
    return sum(len("".join(c["source"]).split()) for c in cells), max(paragraphs, key=lambda p: len(p.split()))


def test_chapters_00_to_04_stay_short_enough_to_read_and_run_in_an_hour() -> None:
    for chapter, cap in PROSE_WORDS_AT_MOST.items():
        words, longest = prose_budget(NB[chapter])
        assert words <= cap, f"chapter {chapter}: {words} words of prose, more than {cap}"
        assert len(longest.split()) <= 150, f"chapter {chapter}: a paragraph of {len(longest.split())} words: " \
                                            f"{longest[:80]!r}"


def test_chapters_05_and_07_stay_within_their_budgets() -> None:
    """Issue 36, clarity: chapter 05 was cut from 6,141 words of prose to 4,997 and chapter 07 from 7,182 to 5,487
    in session 6 (code cells and outputs untouched); no paragraph over 150 words."""
    for name, cap in (("05_gradient_checkpointing.ipynb", 5100), ("07_memory_profiling.ipynb", 5600)):
        words, longest = prose_budget(ROOT / "notebooks" / name)
        assert words <= cap, name
        assert len(longest.split()) <= 150, name


def test_review_s8_chapter_04_answer_2_states_the_first_updates_of_its_setup() -> None:
    """Review s8 F28: answer 2's figures are those of section 6's setup (cell d1bbfe83) at the course's size with
    offset=0.02, recomputed here: the median |w0 - w*|, the largest first SGD update, and the share of first updates
    above half a BF16 spacing at 1 (2^-8)."""
    assert "def fine_tune(pure_bf16: bool, steps: int, dim: int, lr: float = 0.1, offset: float = 0.002)" in "".join(
        "".join(c["source"]) for c in _cells(NB["04"]) if c.get("id") == "d1bbfe83")
    dim, lr, offset = 128, 0.1, 0.02  # "at the course's size (128 weights)": the quick size of DRIFT_DIM
    sizes = ROOT / "utils" / "lessons" / "experiment_sizes" / "ch04.py"
    assert "DRIFT_DIM = pick(128," in sizes.read_text(encoding="utf-8")
    g = torch.Generator().manual_seed(0)  # the cell's draws, in its order
    w0 = (torch.randn(dim, generator=g).sign() * (1 + torch.rand(dim, generator=g))).bfloat16().float()
    target = w0 * (1 + offset * torch.randn(dim, generator=g))
    x = torch.randn(4 * dim, dim, generator=g)
    w = w0.clone().requires_grad_(True)
    (x @ w - x @ target).pow(2).mean().backward()
    update = (lr * w.grad).abs()
    answer = " ".join(_markdown(NB["04"]).split())
    assert f"the median |w − w*| is {(w0 - target).abs().median().item():.3f}" in answer
    assert f"(the largest {update.max().item():.3f})" in answer
    assert "about half the first updates" in answer and 0.4 < (update > 2**-8).float().mean().item() < 0.6


def test_review_s12_chapter_03_answer_1_is_checked_not_printed() -> None:
    """Review s12 03.3: the chapter printed exercise 1's answer in the open. Its last code cell now checks the
    answer's shape (the no-loss window inside the 0.1% one, the same right end) and prints nothing; the answer,
    folded, says so without the run's numbers."""
    cells = json.loads(NB["03"].read_text(encoding="utf-8"))["cells"]
    cell = next(c for c in cells if c.get("id") == "c3ex1window")
    assert not cell["outputs"] and "print(" not in "".join(cell["source"]) and "assert " in "".join(cell["source"])
    assert not any("Exercise 1 (answer)" in json.dumps(c.get("outputs", [])) for c in cells)
    answer = " ".join(_markdown(NB["03"]).split())
    assert "1. Narrower, at the left end only" in answer


def test_no_chapter_shows_an_exercise_answer_in_the_open() -> None:
    """Issue 34 and review s12 (02.3, 03.3, 04.6): every chapter keeps its exercise answers in one folded
    "Answers" block, and no cell's output prints an answer."""
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        prose = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        assert "*(Answer:" not in prose, path.name
        if "## Exercises" in prose:
            exercises = prose[prose.index("## Exercises"):]
            assert "<details><summary>Answers</summary>" in exercises.split("## Further reading")[0], path.name
        printed = json.dumps([c.get("outputs", []) for c in cells if c["cell_type"] == "code"])
        assert "(answer)" not in printed.lower(), path.name


def test_review_s13_chapter_00_answer_2_is_the_gated_mlps_measured_bytes() -> None:
    """Review s13 00.2: exercise 2 asked what the section's reading had just said (36·B·d is linear in B and d); it
    now asks for Llama's gated MLP, whose saved bytes the answer derives (68·B·d) and quotes as measured."""
    from notebook_lessons import gated_mlp

    from utils.lessons.measure import saved_activation_bytes

    measured = saved_activation_bytes(gated_mlp(64), torch.randn(8, 64))
    answer = " ".join(_markdown(NB["00"]).split())
    assert measured == 68 * 8 * 64 and f"Measured at batch 8, width 64: {measured:,} B = 68 × 8 × 64" in answer


def _saved_run(root: Path, chapter: str, name: str, figures: dict) -> None:
    folder = root / name.lower().replace(" ", "-")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{chapter}.json").write_text(json.dumps({
        "chapter": chapter, "size": "quick", "torch": "2.13.0", "date": "2026-11-28", "config": {"threads": 2},
        "device": {"name": name, "type": "cpu", "capability": None}, "figures": figures, "claims": []}))


@pytest.mark.parametrize(("saved_tflops", "withheld"), [(0.1, False), (1.0, True)])
def test_review_s12_chapter_02_withholds_its_verdict_when_the_whole_run_was_slowed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, saved_tflops: float, withheld: bool) -> None:
    """Review s12 02.1: a run slowed throughout by other load stored "BF16 7.6x faster"; its own spread cannot show
    that, this device's saved run can: over 3x off it, the cell withholds the verdict (here 10x off, then 1x)."""
    from types import SimpleNamespace

    from utils.course import results

    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    _saved_run(tmp_path, "02_number_formats", "AMD EPYC", {"matmul_tflops_float32_n128": {"value": saved_tflops}})
    source = next("".join(c["source"]) for c in _cells(NB["02"]) if c.get("id") == "eec84700")
    printed: list[str] = []
    namespace = {"n": 128, "throughput": {"float32": 0.1, "bfloat16": 0.01}, "print": printed.append,
                 "reference_results": results.reference_results,
                 "info": SimpleNamespace(name="AMD EPYC", is_cuda=False),
                 "mm_times": SimpleNamespace(reading=lambda a, b: "bfloat16 is 10.0x slower than float32")}
    exec(source[source.index("refs = "):], namespace)  # noqa: S102 (the chapter's own cell)
    assert ("verdict withheld" in printed[0]) is withheld and ("10.0x slower" in printed[0]) is not withheld


@pytest.mark.parametrize(("saved_ms", "mixed_quartiles", "reading"), [
    (6.0, (13.0, 15.0), "bf16 autocast takes 2.33x FP32's step time here"),
    (60.0, (13.0, 15.0), "step times withheld: this run's FP32 step is 10.0x off this device's saved run"),
    (6.0, (5.5, 6.5), "bf16 autocast's and FP32's step-time quartiles overlap: not distinguishable here")])
def test_review_s12_chapter_04_reads_its_step_times_only_when_they_can_be_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, saved_ms: float, mixed_quartiles: tuple, reading: str) -> None:
    """Review s12 04.1: "bf16 autocast takes 0.11x FP32's step time" came from a run slowed by other load; the cell
    now withholds the ratio when FP32's step is over 3x off this device's saved run, or when the quartiles overlap."""
    from types import SimpleNamespace

    from utils.course import results

    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    chapter = "04_automatic_mixed_precision"
    _saved_run(tmp_path, chapter, "AMD EPYC", {"precision_comparison": {"value": {"fp32": {"step_ms": saved_ms}}}})
    source = next("".join(c["source"]) for c in _cells(NB["04"]) if c.get("id") == "d5b16861")
    block = source[source.index("(q1, q3), (m1, m3) = "):source.index('print(f"The FP32 step runs')]
    runs = {"fp32": {"step_ms": 6.0, "step_quartiles_ms": (5.8, 6.2)},
            "bf16 autocast": {"step_ms": 14.0, "step_quartiles_ms": mixed_quartiles}}
    namespace = {"results": runs, "claim_precision": "bf16 autocast", "mixed_ratio": 14.0 / 6.0,
                 "reference_results": results.reference_results, "run": SimpleNamespace(chapter=chapter),
                 "info": SimpleNamespace(name="AMD EPYC")}
    exec(block, namespace)  # noqa: S102 (the chapter's own cell)
    assert namespace["time_reading"].startswith(reading)


def test_no_chapter_has_a_paragraph_over_150_words() -> None:
    """Every chapter, 08-10 included (chapter 10 had one of 287 words, review s14): a paragraph past 150 words is
    split where its reading turns."""
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        _, longest = prose_budget(path)
        assert len(longest.split()) <= 150, (path.name, longest[:80])
