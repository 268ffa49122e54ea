"""Lab 07's checks: answers tuned to the public cases, or with the classic mistakes, fail; an untouched lab says
"not attempted". That the solutions pass the public and the hidden cases is shown where it counts, through
`make grade` (tests/test_grade.py::test_every_solution_earns_full_marks_and_every_lab_none)."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import nbformat
import pytest
import torch

from utils.course.checks import ch07
from utils.course.checks.core import CheckFailed

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _lenient(monkeypatch):
    monkeypatch.setenv("COURSE_CHECKS_STRICT", "0")  # these tests look at failing verdicts on purpose


def _hidden():
    spec = importlib.util.spec_from_file_location("hidden_ch07", ROOT / "grading" / "hidden" / "ch07.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.HIDDEN


def _namespace(path: Path) -> dict:
    """Run every code cell of a notebook that defines the answers (not the checks, not the challenge)."""
    ns: dict = {}
    for cell in nbformat.read(path, as_version=4).cells:
        meta = cell.metadata.get("course", {})
        skip = "check" in meta or "answer" in meta or "BudgetedTrainer(300" in cell.source
        if cell.cell_type == "code" and not skip:
            try:
                exec(cell.source, ns)  # noqa: S102
            except NotImplementedError:
                pass
    return ns


ARGS = {"7.1": ("read_run",), "7.2": ("prediction", "reasoning", "kept_loss_bytes"), "7.3": ("train_and_log",),
        "7.4": ("plan_micro_batch",), "7.5": ("train_with_features",), "7.6": ("replay_allocator",)}
CHECKS = {"7.1": ch07.check_read_run, "7.2": ch07.check_kept_graph, "7.3": ch07.check_leak_fixed,
          "7.4": ch07.check_micro_batch_plan, "7.5": ch07.check_features_fixed, "7.6": ch07.check_allocator_replay}


def test_untouched_lab_is_not_attempted():
    ns = _namespace(ROOT / "labs" / "lab07_memory_profiling.ipynb")
    for ex, check in CHECKS.items():
        verdict = check(*[ns[a] for a in ARGS[ex]])
        assert verdict.status == "not attempted", verdict


def test_tuned_answers_fail_hidden_cases():
    sol = _namespace(ROOT / "solutions" / "lab07_memory_profiling.ipynb")

    def never_none(snapshots):  # the public runs both leak and one retries: None never comes up there
        answer = sol["read_run"](snapshots)
        return {**answer, "leaking_pool": answer["leaking_pool"] or "large_pool",
                "first_retry_step": answer["first_retry_step"] or 0}

    assert ch07.check_read_run(never_none).status == "failed"  # the small-pool run never retries

    def pool_only_if_total_grows(snapshots):  # both public runs grow in total: a small-pool leak behind a
        answer = sol["read_run"](snapshots)      # shrinking large pool (held out) is missed
        return {**answer, "leaking_pool": answer["leaking_pool"] if answer["leak_per_step"] else None}

    assert ch07.check_read_run(pool_only_if_total_grows).status == "passed"
    with pytest.raises(CheckFailed):
        _hidden()["7.1"](pool_only_if_total_grows)

    def search_for_public(step, optimizer, effective, limit):  # answers the two public cases by heart
        return (6, 120) if effective == 720 else (32, 3)

    assert ch07.check_micro_batch_plan(search_for_public).status == "failed"  # it never calls the step

    def search_tuned(step, optimizer, effective, limit):  # tries only what proves the public answers
        best, above = (6, 8) if effective == 720 else (32, 48)
        for batch in (best, best, above, above):
            try:
                step(batch)
            except torch.OutOfMemoryError:
                pass
            finally:
                optimizer.zero_grad(set_to_none=True)
        return best, effective // best

    assert ch07.check_micro_batch_plan(search_tuned).status == "passed"
    with pytest.raises(CheckFailed):
        _hidden()["7.4"](search_tuned)
    with pytest.raises(CheckFailed):
        _hidden()["7.4"](search_for_public)


def test_classic_mistakes_fail():
    sol = _namespace(ROOT / "solutions" / "lab07_memory_profiling.ipynb")

    # 7.1: the leak measured from the first snapshot (the optimizer's state counted as a leak)
    def from_first(snapshots):
        answer = sol["read_run"](snapshots)
        alloc = [s["allocated_bytes.all.current"] for s in snapshots]
        return {**answer, "leak_per_step": max(0, (alloc[-1] - alloc[0]) // (len(alloc) - 1))}

    assert ch07.check_read_run(from_first).status == "failed"

    def peak_column(snapshots):  # the peak instead of the current allocation
        answer = sol["read_run"](snapshots)
        alloc = [s["allocated_bytes.all.peak"] for s in snapshots]
        return {**answer, "leak_per_step": max(0, (alloc[-1] - alloc[1]) // (len(alloc) - 2))}

    assert ch07.check_read_run(peak_column).status == "failed"

    # 7.2: the classic miscounts of the Llama graph, each a plausible op-by-op count that is wrong
    count = sol["kept_loss_bytes"]
    truth = ch07.reference_kept_loss_bytes(ch07.LLAMA8B, ch07.PREDICT_SEQ)
    assert sol["prediction"] == truth
    words = sol["reasoning"]

    def kv_heads_not_repeated(cfg, s):  # k and v counted at n_kv_head heads
        kv = cfg["d_model"] // cfg["n_head"] * cfg["n_kv_head"]
        return count(cfg, s) - 2 * 2 * s * (cfg["d_model"] - kv) * cfg["n_layer"]

    def logits_in_bf16(cfg, s):
        return count(cfg, s) - 2 * s * cfg["vocab"]

    def no_softmax(cfg, s):  # forgets the n_head x s x s probabilities
        return count(cfg, s) - 2 * cfg["n_head"] * s * s * cfg["n_layer"]

    def norm_output_only(cfg, s):  # RMSNorm saves just its output, as if it were one op
        return count(cfg, s) - 2 * 2 * s * cfg["d_model"] * (2 * cfg["n_layer"] + 1)

    for wrong in (kv_heads_not_repeated, logits_in_bf16, no_softmax, norm_output_only):
        assert ch07.check_kept_graph(wrong(ch07.LLAMA8B, 4096), words, count).status == "failed", wrong.__name__
        assert ch07.check_kept_graph(truth, words, wrong).status == "failed", wrong.__name__
    assert ch07.check_kept_graph(truth * 1.008, words, count).status == "passed"  # within 1%
    # a reasoning is read by the instructor, not counted: any text lets the value pass; none at all does not
    assert ch07.check_kept_graph(truth, "too short", count).status == "passed"
    assert ch07.check_kept_graph(truth, 42, count).status == "failed"
    assert ch07.check_kept_graph(truth, "  ", count).status == "failed"
    assert ch07.check_kept_graph(truth, words, None).status != "passed"  # a right number alone earns nothing
    assert ch07.check_kept_graph(None, words, count).status != "passed"
    assert ch07.check_kept_graph(truth, words, lambda cfg, s: truth).status == "failed"  # the tiny public case

    tiny = ch07.reference_kept_loss_bytes(ch07.TINY, 10)

    def tuned(cfg, s):  # right on both public cases by heart, wrong on held-out shapes
        return truth if cfg["d_model"] == 4096 and s == 4096 else tiny

    assert ch07.check_kept_graph(truth, words, tuned).status == "passed"
    with pytest.raises(CheckFailed):
        _hidden()["7.2"](truth, words, tuned)

    # 7.3: each of the three leaks alone fails, and so does a tensor logged; so do leaks cleaned up after the loop
    # (the memory grew in it) or moved where the scene's other meters do not look (review s16's red team)
    kept = []

    def loop(in_place=False, tensor_norm=False, zero_first=False, detached_log=False, cleanup=False, stash=False):
        def train(model, opt, batches):
            history = {"loss": [], "saliency": []}
            for x, y in batches:
                if zero_first:
                    opt.zero_grad()
                x = x.requires_grad_(True) if in_place else x.detach().requires_grad_(True)
                hidden = model[1](model[0](x))
                loss = torch.nn.functional.mse_loss(model[2](hidden), y)
                loss.backward()
                opt.step()
                if not zero_first:
                    opt.zero_grad(set_to_none=True)
                history["loss"].append(loss.detach() if detached_log else loss.item())
                history["saliency"].append(x.grad.abs().mean().item())
                model.last_hidden_norm = hidden.norm() if tensor_norm else hidden.detach().norm().item()
                if stash:
                    kept.append(hidden.norm())
            if cleanup:
                for x, _ in batches:
                    x.grad = None
                    x.requires_grad_(False)
                if isinstance(model.last_hidden_norm, torch.Tensor):
                    model.last_hidden_norm = model.last_hidden_norm.item()
            return history
        return train

    assert ch07.check_leak_fixed(loop()).status == "passed"
    for leak in ("in_place", "tensor_norm", "zero_first", "detached_log", "stash"):
        assert ch07.check_leak_fixed(loop(**{leak: True})).status == "failed", leak
    assert ch07.check_leak_fixed(loop(in_place=True, tensor_norm=True, cleanup=True)).status == "failed"

    def untrained(model, opt, batches):  # the numbers from a throwaway copy; the model handed in never trains
        twin = copy.deepcopy(model)
        history = loop()(twin, torch.optim.SGD(twin.parameters(), lr=0.01), batches)
        model.last_hidden_norm = twin.last_hidden_norm
        return history

    assert ch07.check_leak_fixed(untrained).status == "failed"

    # 7.4: no finally (gradients left), exception kept, Exception caught, no retry, a scan, every size tried
    def search(zero_grad_always=True, keep=False, catch=torch.OutOfMemoryError, retry=True, scan=False,
               divisors=True):
        kept = []

        def plan(step, optimizer, effective, limit):
            def trains(b):
                try:
                    step(b)
                    optimizer.zero_grad(set_to_none=True)
                    return True
                except catch as exc:
                    if keep:
                        kept.append(exc)
                    if zero_grad_always:
                        optimizer.zero_grad(set_to_none=True)
                    return False

            def fits(b):
                return trains(b) or (retry and trains(b))

            sizes = [d for d in range(1, limit + 1) if not divisors or effective % d == 0]
            if scan:
                best = next((d for d in reversed(sizes) if fits(d)), 0)
                return (best, effective // best) if best else (0, 0)
            if not fits(1):
                return 0, 0
            good, bad = 0, len(sizes)
            while bad - good > 1:
                mid = (good + bad) // 2
                good, bad = (mid, bad) if fits(sizes[mid]) else (good, mid)
            return sizes[good], effective // sizes[good]

        return plan

    assert ch07.check_micro_batch_plan(search()).status == "passed"
    assert ch07.check_micro_batch_plan(search(zero_grad_always=False)).status == "failed"
    assert ch07.check_micro_batch_plan(search(keep=True)).status == "failed"
    assert ch07.check_micro_batch_plan(search(retry=False)).status == "failed"
    assert ch07.check_micro_batch_plan(search(scan=True)).status == "failed"
    assert ch07.check_micro_batch_plan(search(divisors=False)).status == "failed"
    assert ch07.check_micro_batch_plan(search(catch=Exception)).status == "passed"  # public cases cannot tell ...
    with pytest.raises(CheckFailed, match="propagate"):
        _hidden()["7.4"](search(catch=Exception))  # ... the hidden ones can


def test_kept_loss_reference_is_the_meta_graph_walk():
    """The 7.2 reference formula equals the graph census of LlamaStyle built on the meta device, at the public and
    held-out shapes, and the chapter's census of a real (CPU) tiny model."""
    from utils.lessons.profiling import graph_held_bytes

    cases = [(ch07.LLAMA8B, 4096), (ch07.TINY, 10),
             ({"vocab": 32000, "d_model": 2048, "n_layer": 16, "n_head": 16, "n_kv_head": 16, "ffn_hidden": 5632},
              1024),
             ({"vocab": 50, "d_model": 48, "n_layer": 3, "n_head": 6, "n_kv_head": 3, "ffn_hidden": 40}, 7)]
    for cfg, seq in cases:
        assert ch07.meta_kept_loss_bytes(cfg, seq) == ch07.reference_kept_loss_bytes(cfg, seq), (cfg, seq)
    loss, _ = ch07.llama_kept_loss(ch07.TINY, 10)
    assert graph_held_bytes([loss]) == ch07.reference_kept_loss_bytes(ch07.TINY, 10)


def test_budgeted_trainer_rejects_bad_batches():
    trainer = ch07.BudgetedTrainer(4)
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="batch"):
            trainer.step(bad)


def test_the_allocator_replay_agrees_with_the_model_on_random_sequences():
    """Exercise 7.6's solution, written from the rules the lab states, and chapter 07's allocator model agree on 300
    random sequences of allocations (small pool, large pool under and over 10 MiB) and frees: each witnesses the
    other's reading of CUDACachingAllocator.cpp's default rules."""
    import random

    replay = _namespace(ROOT / "solutions" / "lab07_memory_profiling.ipynb")["replay_allocator"]
    for seed in range(300):
        rng, events, live = random.Random(seed), [], []
        for k in range(rng.randint(1, 30)):
            if live and rng.random() < 0.4:
                events.append(["free", live.pop(rng.randrange(len(live)))])
            else:
                size = rng.choice([rng.randint(1, 2**20 + 5000), rng.randint(2**20, 12 * 2**20),
                                   rng.randint(9 * 2**20, 30 * 2**20)])
                events.append(["alloc", f"n{k}", size])
                live.append(f"n{k}")
        assert replay(events) == ch07.allocator_truth(events), (seed, events)


MISTAKE_CASES = [
    (("alloc", "a", 8), ("alloc", "s", 1.5), ("alloc", "b", 8), ("alloc", "t", 1.5), ("free", "a", 0),
     ("free", "b", 0), ("alloc", "c", 12)),
    (("alloc", "x", 1), ("alloc", "y", 0.5), ("free", "x", 0), ("alloc", "z", 0.25)),
    # best fit takes c's 3 MiB for u and keeps a's 8 MiB whole for v; first fit splits a and v needs a new segment
    (("alloc", "a", 8), ("alloc", "b", 2), ("alloc", "c", 3), ("alloc", "d", 2), ("free", "a", 0),
     ("free", "c", 0), ("alloc", "u", 3), ("alloc", "v", 7)),
    (("alloc", "e", 3), ("alloc", "f", 1.25), ("free", "e", 0), ("free", "f", 0)),  # a segment emptied
]


@pytest.mark.parametrize(("mistake", "old", "new"), [
    ("a 1 MiB large-pool remainder split off", "rest > mib", "rest >= mib"),
    ("a 20 MiB segment from 10 MiB up", "20 * mib if size < 10 * mib", "20 * mib if size <= 20 * mib"),
    ("exactly 1 MiB in the large pool", "small = size <= mib", "small = size < mib"),
    ("first fit", "_, s, i = min(fits)", "_, s, i = fits[0]"),
    ("empty_cache() keeping segments with no live block", 'if any(b[1] is not None for b in seg["blocks"])',
     "if True"),
])
def test_the_allocator_replays_classic_mistakes_fail(mistake, old, new):
    cells = nbformat.read(ROOT / "solutions" / "lab07_memory_profiling.ipynb", as_version=4).cells
    source = next(c.source for c in cells if c.source.startswith("def replay_allocator"))
    assert old in source, mistake
    namespace: dict = {}
    exec(source.replace(old, new), namespace)  # noqa: S102
    with pytest.raises(CheckFailed):
        ch07.expect_allocator_replay(namespace["replay_allocator"],
                                     [ch07.allocator_events(*case) for case in MISTAKE_CASES])
