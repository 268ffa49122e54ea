"""Checks for lab 07 (memory profiling and out-of-memory debugging).

Each `check_*` runs the public cases; grading/hidden/ch07.py runs held-out ones through the same `expect_*`
helpers (other statistics, models, budgets, failure phases), so an answer tuned to the public cases fails there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from utils.course.checks.core import (
    CheckFailed,
    Verdict,
    answered,
    expect_equal,
    expect_reasoning,
    guarded,
    observe,
    run_check,
)
from utils.course.scenes.ch07 import (  # the lab's trainer, importable from here as before
    PHASES,  # noqa: F401
    BudgetedTrainer,  # noqa: F401
    bug_in_step_scene,
    features_scene,
    leak_scene,
    leak_setup,
    micro_batch_plan_scene,
)
from utils.course.scenes.live_peak import MODE_SWITCHES
from utils.lessons.allocator_model import CachingAllocatorModel
from utils.lessons.oom import run_oom_safe, run_step_oom_safe
from utils.lessons.profiling import graph_held_bytes, largest_fitting


# 7.1 ------------------------------------------------------------------------------------------------------------
def make_stats(allocated: int, requested: int, reserved: int, non_releasable: int, peak: int, retries: int,
               ooms: int, large_share: float = 0.8) -> dict[str, int]:
    """A dict shaped like torch.cuda.memory_stats(): every core metric for the pools all/large/small and the four
    columns, plus the event counters (the small pool gets the rest of each figure)."""
    stats: dict[str, int] = {}
    current = {"allocated_bytes": allocated, "requested_bytes": requested, "reserved_bytes": reserved,
               "inactive_split_bytes": non_releasable, "active_bytes": allocated}
    for key, value in current.items():
        large = int(value * large_share)
        peaks = {"all": max(peak, value) if key == "allocated_bytes" else value * 2}
        for pool, v in (("all", value), ("large_pool", large), ("small_pool", value - large)):
            stats[f"{key}.{pool}.current"] = v
            stats[f"{key}.{pool}.peak"] = peaks.get(pool, v + 4096)
            stats[f"{key}.{pool}.allocated"] = 10 * v + 7
            stats[f"{key}.{pool}.freed"] = 9 * v + 7
    for count in ("allocation", "active", "segment", "inactive_split"):
        for pool in ("all", "large_pool", "small_pool"):
            for col in ("current", "peak", "allocated", "freed"):
                stats[f"{count}.{pool}.{col}"] = 3
    stats.update(num_alloc_retries=retries, num_ooms=ooms, num_sync_all_streams=0, num_device_alloc=5,
                 num_device_free=1)
    return stats


def step_stats(large: int, small: int, non_releasable: int, retries: int) -> dict[str, int]:
    """A memory_stats() dict taken at the end of a training step: `large` and `small` bytes allocated in the two
    pools, the cache holding 64 MiB more than the live blocks plus `non_releasable`."""
    allocated = large + small
    stats = make_stats(allocated, allocated - allocated // 100, allocated + non_releasable + 64 * 2**20,
                       non_releasable, 2 * allocated, retries, 0)
    stats["allocated_bytes.large_pool.current"], stats["allocated_bytes.small_pool.current"] = large, small
    return stats


RUN_FIELDS = ("leak_per_step", "leaking_pool", "first_retry_step", "worst_fragmentation_step")


def run_truth(snapshots: Sequence[Mapping[str, int]]) -> dict[str, Any]:
    """What a run's end-of-step memory_stats() snapshots say: the leak per step (from the second snapshot on: the
    first step also creates the optimizer's state), the pool that grows, the first step with a cudaMalloc retry,
    the step with the most non-releasable memory."""
    alloc = [s["allocated_bytes.all.current"] for s in snapshots]
    growth = {pool: snapshots[-1][f"allocated_bytes.{pool}.current"] - snapshots[1][f"allocated_bytes.{pool}.current"]
              for pool in ("large_pool", "small_pool")}
    pool = max(growth, key=lambda k: growth[k])
    retries = [s["num_alloc_retries"] for s in snapshots]
    split = [s["inactive_split_bytes.all.current"] for s in snapshots]
    return {"leak_per_step": max(0, (alloc[-1] - alloc[1]) // (len(alloc) - 2)),
            "leaking_pool": pool if growth[pool] > 0 else None,
            "first_retry_step": next((i for i in range(1, len(retries)) if retries[i] > retries[i - 1]), None),
            "worst_fragmentation_step": split.index(max(split))}


def _expect_fields(answer: Callable, truth: Callable, cases: Sequence[list], copy: Callable, fields: tuple[str, ...],
                   call: str, items: str, hint: str) -> None:
    """Each case's answer, a dict, against the truth field by field (`answer` already guarded; `copy` hands each
    call its own copy of the case)."""
    for case in cases:
        got = answer([copy(item) for item in case])
        if not isinstance(got, Mapping):
            raise CheckFailed("a dict with the keys " + ", ".join(fields), type(got).__name__)
        expected = truth(case)
        for field in fields:
            expect_equal(got.get(field), expected[field], f"{call}(<{len(case)} {items}>)[{field!r}]", hint=hint)


def expect_run(read_run: Callable[[list], dict], cases: Sequence[list[dict[str, int]]]) -> None:
    _expect_fields(guarded(read_run, run_truth), run_truth, cases, dict, RUN_FIELDS, "read_run", "snapshots",
                   "current values of the pool 'all' (a pool's own keys for leaking_pool); the leak from the SECOND "
                   "snapshot to the last, per step, floored, 0 if it does not grow; the pool whose allocation grows "
                   "most (None if none grows); a retry is num_alloc_retries going up from one snapshot to the next "
                   "(None if never); non-releasable is inactive_split_bytes.")


def check_read_run(read_run: Callable[[list], dict]) -> Verdict:
    """Exercise 7.1: read a run's trend out of one memory_stats() snapshot per step."""

    def body() -> None:
        mib = 2**20
        leak = [step_stats(900 * mib + 3 * mib * i, 40 * mib, (10 + 7 * (i % 3)) * mib, max(0, i - 3))
                for i in range(7)]
        leak[0] = step_stats(600 * mib, 38 * mib, 5 * mib, 0)  # before the optimizer's state exists
        small = [step_stats(2 * 2**30, 8 * mib + 4096 * i, 30 * mib - mib * i, 0) for i in range(5)]
        expect_run(read_run, [leak, small])

    return run_check("7.1", body, points=1)


# 7.2 ------------------------------------------------------------------------------------------------------------
# Llama-3-8B's shape (a colleague's Llama-style decoder with it: 32 layers, GQA over 8 KV heads, SwiGLU, RMSNorm, an
# untied 128,256-token head), the context the prediction is graded at, and tiny ones the learner can run.
LLAMA8B = {"vocab": 128256, "d_model": 4096, "n_layer": 32, "n_head": 32, "n_kv_head": 8, "ffn_hidden": 14336}
PREDICT_SEQ = 4096
TINY = {"vocab": 97, "d_model": 32, "n_layer": 2, "n_head": 4, "n_kv_head": 2, "ffn_hidden": 48}
CONFIG_KEYS = tuple(LLAMA8B)


class RMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) * weight, in the input's dtype."""

    def __init__(self, d: int, **kw: Any) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d, **kw))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight


class LlamaStyle(nn.Module):
    """A colleague's Llama-style decoder for one sequence of tokens, in BF16: token embedding; per layer RMSNorm,
    q/k/v projections (k and v with n_kv_head heads, repeated to n_head as Hugging Face's repeat_kv does), eager
    causal attention (scores, masked_fill, softmax, probabilities @ v), the output projection and a residual add,
    RMSNorm, a SwiGLU MLP (down(silu(gate(a)) * up(a))) and a residual add; a final RMSNorm, an untied head, and
    cross-entropy on the logits upcast to float32 (as Hugging Face's loss does). No rotary embedding."""

    def __init__(self, vocab: int, d_model: int, n_layer: int, n_head: int, n_kv_head: int, ffn_hidden: int,
                 dtype: torch.dtype = torch.bfloat16, device: str | torch.device | None = None) -> None:
        super().__init__()
        kw = {"dtype": dtype, "device": device}
        self.n_head, self.n_kv_head, self.head_dim = n_head, n_kv_head, d_model // n_head
        kv = n_kv_head * self.head_dim
        self.embed = nn.Embedding(vocab, d_model, **kw)
        self.layers = nn.ModuleList(nn.ModuleDict({
            "norm1": RMSNorm(d_model, **kw), "q": nn.Linear(d_model, d_model, bias=False, **kw),
            "k": nn.Linear(d_model, kv, bias=False, **kw), "v": nn.Linear(d_model, kv, bias=False, **kw),
            "o": nn.Linear(d_model, d_model, bias=False, **kw), "norm2": RMSNorm(d_model, **kw),
            "gate": nn.Linear(d_model, ffn_hidden, bias=False, **kw),
            "up": nn.Linear(d_model, ffn_hidden, bias=False, **kw),
            "down": nn.Linear(ffn_hidden, d_model, bias=False, **kw)}) for _ in range(n_layer))
        self.norm = RMSNorm(d_model, **kw)
        self.head = nn.Linear(d_model, vocab, bias=False, **kw)

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        s, hd, rep = ids.shape[0], self.head_dim, self.n_head // self.n_kv_head
        h = self.embed(ids)
        mask = torch.ones(s, s, dtype=torch.bool, device=ids.device).triu(1)  # one mask, shared by every layer
        for layer in self.layers:
            a = layer["norm1"](h)
            q = layer["q"](a).view(s, self.n_head, hd).transpose(0, 1)
            k = layer["k"](a).view(s, self.n_kv_head, hd).transpose(0, 1)
            v = layer["v"](a).view(s, self.n_kv_head, hd).transpose(0, 1)
            k = k[:, None].expand(self.n_kv_head, rep, s, hd).reshape(self.n_head, s, hd)
            v = v[:, None].expand(self.n_kv_head, rep, s, hd).reshape(self.n_head, s, hd)
            p = ((q / math.sqrt(hd)) @ k.transpose(1, 2)).masked_fill(mask, float("-inf")).softmax(-1)
            h = h + layer["o"]((p @ v).transpose(0, 1).reshape(s, -1))
            a = layer["norm2"](h)
            h = h + layer["down"](F.silu(layer["gate"](a)) * layer["up"](a))
        return F.cross_entropy(self.head(self.norm(h)).float(), targets)


def llama_kept_loss(cfg: Mapping[str, int], seq_len: int, device: str = "cpu", seed: int = 0
                    ) -> tuple[torch.Tensor, nn.Module]:
    """A kept (never backpropagated) loss of LlamaStyle(**cfg) on one sequence of `seq_len` tokens, and the model."""
    torch.manual_seed(seed)
    model = LlamaStyle(**cfg, device=device)
    ids = torch.randint(0, cfg["vocab"], (seq_len,), device=device)
    return model(ids, torch.randint(0, cfg["vocab"], (seq_len,), device=device)), model


def reference_kept_loss_bytes(cfg: Mapping[str, int], seq_len: int) -> int:
    """The bytes LlamaStyle's kept loss holds (tests/test_ch07_checks.py checks it against a walk of the graph built
    on the meta device)."""
    s, d, f = seq_len, cfg["d_model"], cfg["ffn_hidden"]
    per_layer = 2 * (10 * s * d + 2 * s + 4 * s * f + cfg["n_head"] * s * s) + 8
    return cfg["n_layer"] * per_layer + s * s + 2 * (3 * s * d + s) + 4 * s * cfg["vocab"] + 16 * s + 4


def meta_kept_loss_bytes(cfg: Mapping[str, int], seq_len: int) -> int:
    """The same figure measured: LlamaStyle built on the meta device (no memory), its kept graph walked as
    graph_held_bytes walks it, but counting meta storages (their nbytes is what the real ones would take)."""
    loss, _ = llama_kept_loss(cfg, seq_len, device="meta")
    saved: dict[int, int] = {}
    leaves: set[int] = set()
    seen: set[int] = set()
    stack = [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if hasattr(node, "variable"):
            leaves.add(node.variable.untyped_storage()._cdata)
        for name in dir(node):
            if name.startswith("_saved_"):
                value = getattr(node, name)
                for t in value if isinstance(value, tuple | list) else (value,):
                    if isinstance(t, torch.Tensor) and not isinstance(t, nn.Parameter) \
                            and not isinstance(t._base, nn.Parameter):
                        saved[t.untyped_storage()._cdata] = t.untyped_storage().nbytes()
        stack.extend(fn for fn, _ in node.next_functions)
    return sum(n for key, n in saved.items() if key not in leaves)


def expect_kept_loss_bytes(kept_loss_bytes: Callable[[dict, int], int], cases: Sequence[tuple[dict, int]]) -> None:
    kept_loss_bytes = guarded(kept_loss_bytes, reference_kept_loss_bytes, meta_kept_loss_bytes, graph_held_bytes)
    for cfg, seq in cases:
        truth = reference_kept_loss_bytes(cfg, seq)
        got = kept_loss_bytes(dict(cfg), seq)
        if isinstance(got, bool) or not isinstance(got, int | float) or not math.isfinite(got) \
                or abs(got - truth) > 0.01 * truth:
            shown = f"{got:,}" if isinstance(got, int | float) and not isinstance(got, bool) else repr(got)[:60]
            raise CheckFailed(f"kept_loss_bytes({dict(cfg)}, {seq}) within 1% of {truth:,}", shown,
                              "count per layer and per op, as the chapter's census does: the three ops of the "
                              "written-out RMSNorm, the projections' shared input, attention with k and v repeated "
                              "to n_head heads, the softmax, SwiGLU's three ops; BF16 is 2 bytes; once: the mask, "
                              "the final norm and the loss on float32 logits. Test your rules on a tiny LlamaStyle.")


def check_kept_graph(prediction: int, reasoning: str, kept_loss_bytes: Callable[[dict, int], int]) -> Verdict:
    """Exercise 7.2: predict the bytes a kept loss of a Llama-3-8B-shaped decoder holds at 4,096 tokens (a graph no
    laptop builds), then write the op-by-op count as a function of the configuration."""

    def body() -> None:
        guess = answered(prediction, "prediction")
        if isinstance(guess, bool) or not isinstance(guess, int | float):
            raise CheckFailed("prediction as a number of bytes", repr(guess))
        expect_reasoning(reasoning, "7.2")
        truth = reference_kept_loss_bytes(LLAMA8B, PREDICT_SEQ)
        if abs(guess - truth) > 0.01 * truth:
            raise CheckFailed(f"a prediction within 1% of the graph's bytes ({truth / 2**30:.1f} GiB)",
                              f"{guess:,} B ({guess / 2**30:.1f} GiB)",
                              "op by op, as the chapter's graph census counts: which ops save their input, their "
                              "output or both, in which dtype; a storage two ops save counts once; the parameters "
                              "(and the weight views matmuls save) are not the graph's memory.")
        expect_kept_loss_bytes(kept_loss_bytes, [(LLAMA8B, PREDICT_SEQ), (TINY, 10)])

    return run_check("7.2", body, points=3)


# 7.3 ------------------------------------------------------------------------------------------------------------
def reference_train_and_log(model: nn.Module, opt: torch.optim.Optimizer, batches: list) -> dict[str, list[float]]:
    history: dict[str, list[float]] = {"loss": [], "saliency": []}
    for x, y in batches:
        x = x.detach().requires_grad_(True)
        hidden = model[1](model[0](x))
        loss = F.mse_loss(model[2](hidden), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        history["loss"].append(loss.item())
        history["saliency"].append(x.grad.abs().mean().item())
        model.last_hidden_norm = hidden.detach().norm().item()
    return history


LIVE_SLACK = 1024  # bytes a fixed loop may keep alive beyond the reference's, besides one batch's input


def expect_no_leak(train_and_log: Callable, cases: Sequence[tuple[int, int, int, int]]) -> None:
    """cases: (width, batches, batch size, seed). The loop runs in a scene (utils.course.scenes.ch07), the reference
    loop in the same scene here: the same logged numbers and dashboard float, nothing left on the data or the
    model, and at each optimizer step and after the loop no more live bytes than the reference's plus one batch's
    input and LIVE_SLACK (so a leak cleaned up after the loop, or moved where the check does not look, still
    fails)."""
    train_and_log = guarded(train_and_log, reference_train_and_log, direct=MODE_SWITCHES)
    for width, n, batch, seed in cases:
        want = leak_scene(reference_train_and_log, width, n, batch, seed)
        got = observe(leak_scene, train_and_log, width, n, batch, seed)
        if got["logged"] is None:
            raise CheckFailed("a dict {'loss': [...], 'saliency': [...]}", repr(got["type"]))
        for key in ("loss", "saliency"):
            logged = got["logged"][key]
            if "kinds" not in logged or any(k != "float" for k in logged["kinds"]):
                raise CheckFailed(f"history[{key!r}] as a list of Python floats (.item())",
                                  repr(logged["kinds"][:3]) if "kinds" in logged else logged["type"],
                                  "a kept tensor keeps its graph (or its storage) alive; .item() keeps a number.")
            values = logged["values"]
            if len(values) != n or not all(math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6)
                                           for a, b in zip(values, want["logged"][key]["values"], strict=True)):
                raise CheckFailed(f"the {n} logged {key} values of the unchanged training loop", "other values",
                                  "fix the leaks without changing what is trained or logged.")
        pairs = zip(got["weights"], want["weights"], strict=False)
        if len(got["weights"]) != len(want["weights"]) or not all(
                math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-5) for a, b in pairs):
            raise CheckFailed("the model it was handed, trained as the loop trains it", "other weights",
                              "train the model and optimizer you are given, once per batch.")
        if got["norm"] is None or not math.isclose(got["norm"], want["norm"], rel_tol=1e-4):
            raise CheckFailed(f"model.last_hidden_norm, the last hidden activation's norm, as a float "
                              f"({want['norm']:.4f})",
                              got["norm_type"] if got["norm"] is None else f"{got['norm']:.4f}",
                              "a Python float (.item()): a tensor computed from an activation also holds the graph "
                              "behind it, and this branch never reaches backward, so nothing frees what its ops saved.")
        if got["data_grads"]:
            raise CheckFailed("the caller's batches left as they were handed in",
                              f"{got['data_grads']} input tensors left requiring grad or holding a .grad",
                              "every batch you made a leaf in place keeps its input gradient as long as the data "
                              "lives: take the gradient on a leaf of your own.")
        if got["held"] or got["grads"]:
            raise CheckFailed("no graph and no gradient alive after the loop", f"{got['held']:,} B held by graphs, "
                              f"{got['grads']} parameters with .grad", "zero_grad(set_to_none=True) after the step.")
        slack = got["input_bytes"] + LIVE_SLACK
        if len(got["at_step"]) != n:
            raise CheckFailed(f"{n} optimizer steps, one per batch (opt.step())", f"{len(got['at_step'])} seen")
        over = [g - w for g, w in zip(got["at_step"], want["at_step"], strict=True)]
        if max(over) > slack:
            step = over.index(max(over))
            raise CheckFailed(f"at most {want['at_step'][step] + slack:,} B alive at optimizer step {step + 1} (what "
                              "the fixed loop keeps, plus one batch's input)", f"{got['at_step'][step]:,} B",
                              "memory that grows from step to step is a leak even if you clean it up after the "
                              "loop: on a GPU the loop runs out of memory before it ends.")
        if got["live_after"] > want["live_after"] + slack:
            raise CheckFailed(f"at most {want['live_after'] + slack:,} B created by the loop still alive after it "
                              "returns", f"{got['live_after']:,} B",
                              "whatever keeps them (a list, a closure, a copy, the model) keeps their memory.")


def check_leak_fixed(train_and_log: Callable) -> Verdict:
    """Exercise 7.3: the loop logs numbers, leaves the caller's data and the model without gradients or graphs."""

    def body() -> None:
        expect_no_leak(train_and_log, [(32, 6, 16, 0)])

    return run_check("7.3", body, points=2)


# 7.4 ------------------------------------------------------------------------------------------------------------
def micro_plan_truth(budget: int, effective: int, limit: int) -> tuple[int, int]:
    """The largest micro-batch that divides `effective`, is at most `limit` and fits the budget, and the number of
    accumulation steps it takes; (0, 0) when not even 1 fits."""
    fitting = [d for d in range(1, min(limit, budget) + 1) if effective % d == 0]
    return (fitting[-1], effective // fitting[-1]) if fitting else (0, 0)


def expect_micro_batch_plans(plan_micro_batch: Callable, cases: Sequence[tuple[int, str, int, int, frozenset[int]]]
                             ) -> None:
    """cases: (budget, phase, effective batch, limit, flaky sizes). The search runs in a scene
    (utils.course.scenes.ch07) whose returned trials, trained sizes, gradients and live activations are judged here."""
    plan_micro_batch = guarded(plan_micro_batch, largest_fitting, run_step_oom_safe, run_oom_safe, micro_plan_truth)
    for budget, phase, effective, limit, flaky in cases:
        seen = observe(micro_batch_plan_scene, plan_micro_batch, budget, phase, effective, limit, tuple(sorted(flaky)))
        trials, trained = seen["trials"], seen["trained"]
        what = (f"plan_micro_batch(step, optimizer, effective={effective}, limit={limit}) with the step raising "
                f"OutOfMemoryError above batch {budget} (in {phase})"
                + (f", batch {sorted(flaky)} failing once" if flaky else ""))
        expect_equal(seen["returned"], micro_plan_truth(budget, effective, limit), what,
                     hint="the candidates are the divisors of the effective batch up to the limit: bisect over that "
                     "list; catch torch.OutOfMemoryError only, and try a size that failed once more (after "
                     "gc.collect() and torch.cuda.empty_cache()) before counting it as too big; (0, 0) if 1 fails.")
        if not trials:
            raise CheckFailed("a search that calls step(batch)", "no trial at all",
                              "the answer must come from trials of the step, not from a number written down.")
        candidates = sum(1 for d in range(1, limit + 1) if effective % d == 0)
        bound = 4 * max(1, math.ceil(math.log2(max(candidates, 2)))) + 4
        if len(trials) > bound:
            raise CheckFailed(f"at most {bound} trials (a bisection over the {candidates} divisors, each failure "
                              "retried once)", f"{len(trials)} trials: {trials[:12]}...")
        best, _ = micro_plan_truth(budget, effective, limit)
        above = next((d for d in range(best + 1, limit + 1) if effective % d == 0), None)
        if (best and best not in trained) or (above is not None and trials.count(above) < 2):
            raise CheckFailed(f"trials that prove the answer: {best or 1} {'trained' if best else 'failed twice'}"
                              + (f", {above} failed twice" if above and best else ""),
                              f"trials {trials} (trained: {trained})",
                              "the answer must come from the step's own trials, each failure retried once.")
        if any(effective % b for b in trials):
            raise CheckFailed("trials of divisors of the effective batch only", f"trials {trials}",
                              "accumulation needs equal micro-batches: a size that does not divide is no plan.")
        if seen["grad_left"]:
            raise CheckFailed("no .grad left after the search", "a filled .grad",
                              "an OOM after backward skips the step's own zero_grad: call "
                              "optimizer.zero_grad(set_to_none=True) in a finally around each trial.")
        if seen["alive"]:
            raise CheckFailed("no activation of a failed trial alive after the search",
                              f"{seen['alive']} still alive", "do not keep the exception (or its traceback): keep a "
                              "string if you want the message, and retry after the except block.")


def expect_bugs_propagate(plan_micro_batch: Callable) -> None:
    """A step that raises ValueError (a bug) must see it come out of the search (utils.course.scenes.ch07)."""
    plan_micro_batch = guarded(plan_micro_batch, largest_fitting, run_step_oom_safe, run_oom_safe, micro_plan_truth)
    if observe(bug_in_step_scene, plan_micro_batch)["propagated"]:
        return
    raise CheckFailed("a ValueError from the step to propagate (it is a bug, not a full GPU)", "it was swallowed",
                      "catch torch.OutOfMemoryError, not Exception.")


def check_micro_batch_plan(plan_micro_batch: Callable) -> Verdict:
    """Exercise 7.4: the largest micro-batch that divides an effective batch and trains, found by trials that
    survive out-of-memory errors (a transient one included)."""

    def body() -> None:
        expect_micro_batch_plans(plan_micro_batch, [(7, "backward", 720, 720, frozenset()),
                                                    (40, "forward", 96, 64, frozenset({32}))])

    return run_check("7.4", body, points=2)


# 7.5 ------------------------------------------------------------------------------------------------------------
def reference_train_with_features(model: nn.Module, opt: torch.optim.Optimizer, batches: list) -> dict[str, Any]:
    """A loop that also collects the hidden features of every step through a forward hook on model[1]: the fixed
    version of the lab's script (features detached, the loss summed as a float, the hook removed)."""
    features: list[torch.Tensor] = []
    handle = model[1].register_forward_hook(lambda module, inputs, output: features.append(output.detach()))
    total = 0.0
    try:
        for x, y in batches:
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            total += loss.item()
    finally:
        handle.remove()
    return {"mean_loss": total / len(batches), "features": features}


def expect_features_fixed(train_with_features: Callable, cases: Sequence[tuple[int, int, int, int]]) -> None:
    """cases: (width, batches, batch size, seed). The loop runs in a scene (utils.course.scenes.ch07): what it
    returns and leaves on the model, compared with the reference loop's."""
    train_with_features = guarded(train_with_features, reference_train_with_features)
    for width, n, batch, seed in cases:
        expected = reference_train_with_features(*leak_setup(width, n, batch, seed))
        got = observe(features_scene, train_with_features, width, n, batch, seed)
        if got["shape"] != "ok":
            raise CheckFailed("a dict {'mean_loss': float, 'features': [tensor per step]}", got["shape"])
        if got["mean_loss"] is None or not math.isclose(got["mean_loss"], expected["mean_loss"], rel_tol=1e-5):
            raise CheckFailed(f"mean_loss = {expected['mean_loss']:.6f} as a Python float",
                              got["mean_loss_repr"], "a sum of loss tensors chains every step's graph into "
                              "one: add loss.item().")
        feats = got["features"]
        if feats is None or len(feats) != n or not all(torch.equal(f, e) for f, e in zip(feats, expected["features"],
                                                                                         strict=False)):
            raise CheckFailed(f"{n} feature tensors, model[1]'s output at each step", "other features",
                              "keep what the hook collects; change how it keeps it.")
        if got["held"] or got["requires_grad"]:
            raise CheckFailed("features that hold no graph", f"{got['held']:,} B of saved tensors held through them",
                              "a forward hook's output is part of the graph: every kept output keeps its step's "
                              "graph alive. Keep output.detach().")
        if got["hooks"]:
            raise CheckFailed("no forward hook left on the model after the function returns",
                              f"{got['hooks']} hook(s) still registered", "every later forward would still append "
                              "to the list: remove the handle in a finally block.")
        if got["grads"]:
            raise CheckFailed("no gradient left", "parameters with .grad", "zero_grad(set_to_none=True).")


def check_features_fixed(train_with_features: Callable) -> Verdict:
    """Exercise 7.5: someone else's training script with a feature-collecting forward hook, its leaks fixed."""
    return run_check("7.5", lambda: expect_features_fixed(train_with_features, [(16, 5, 8, 0)]), points=2)


# 7.6 ------------------------------------------------------------------------------------------------------------ A
# sequence of allocations and frees replayed through the caching allocator's default rules. The reference is the
# allocator model chapter 07 runs where no GPU is (utils.lessons.allocator_model, its rules cited to
# CUDACachingAllocator.cpp and tested against a GPU's counters); the learner's replay may not call it.
ALLOCATOR_FIELDS = ("allocated", "reserved", "reserved_after_empty_cache")
_UNCAPPED = 2**50  # a device that never runs out: the exercise is about the rules, not the cap


def allocator_truth(events: Sequence[Sequence[Any]]) -> dict[str, int]:
    """What the caching allocator holds after `events` (("alloc", name, nbytes) and ("free", name)): allocated and
    reserved bytes, and the reserved bytes left after an empty_cache() at the end."""
    model = CachingAllocatorModel(_UNCAPPED)
    handles = {}
    for event in events:
        if event[0] == "alloc":
            handles[event[1]] = model.malloc(event[2])
        else:
            model.free(handles.pop(event[1]))
    held = {"allocated": model.allocated, "reserved": model.reserved}
    model.empty_cache()
    return held | {"reserved_after_empty_cache": model.reserved}


def allocator_events(*steps: tuple[str, str, float]) -> list[list[Any]]:
    """Events from (op, name, MiB) steps: ("alloc", "a", 1.5) allocates 1.5 MiB as "a"; ("free", "a", 0) frees it.
    Sizes in MiB may be fractions; they become whole bytes."""
    return [["alloc", name, int(mib * 2**20)] if op == "alloc" else ["free", name] for op, name, mib in steps]


def expect_allocator_replay(replay_allocator: Callable[[list], dict], cases: Sequence[list[list[Any]]]) -> None:
    _expect_fields(guarded(replay_allocator, allocator_truth, CachingAllocatorModel), allocator_truth, cases, list,
                   ALLOCATOR_FIELDS, "replay_allocator", "events",
                   "requests round up to 512 B; at most 1 MiB is the small pool (2 MiB segments), above it the large "
                   "pool (20 MiB segments under 10 MiB, else the request rounded up to 2 MiB); best fit in the "
                   "request's pool, ties to the lower address; a remainder is split off at 512 B or more in the small "
                   "pool, only above 1 MiB in the large; a freed block merges with free neighbours in its own "
                   "segment; empty_cache() returns only segments with no live block.")


def check_allocator_replay(replay_allocator: Callable[[list], dict]) -> Verdict:
    """Exercise 7.6: replay allocations and frees through the caching allocator's rules."""

    def body() -> None:
        expect_allocator_replay(replay_allocator, [
            # chapter 07's fragmentation, shortened: two survivors pin their 20 MiB segments
            allocator_events(("alloc", "a1", 8), ("alloc", "s1", 1.5), ("alloc", "a2", 8), ("alloc", "s2", 1.5),
                             ("free", "a1", 0), ("free", "a2", 0), ("alloc", "b", 12)),
            # the small pool: 300 B rounds to 512; exactly 1 MiB is still small
            allocator_events(("alloc", "x", 300 / 2**20), ("alloc", "y", 0.7), ("alloc", "z", 1), ("free", "y", 0),
                             ("alloc", "w", 0.25), ("free", "x", 0))])

    return run_check("7.6", body, points=3)
