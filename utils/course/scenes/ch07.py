"""Scenes of lab 07's checks (memory profiling and out-of-memory debugging): what the learner's training loops leave
alive (graphs, gradients, hooks), and what the learner's micro-batch search does with a training step that runs out
of memory above a budget (utils.course.scenes explains the split)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from utils.course.scenes.live_peak import LivePeak
from utils.lessons.profiling import graph_held_bytes


def leak_setup(width: int, batches: int, batch: int, seed: int) -> tuple[nn.Module, torch.optim.Optimizer, list]:
    """A small MLP, its SGD optimizer and `batches` (x, y) pairs: the loop of exercises 7.3 and 7.5."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(width, 4 * width), nn.ReLU(), nn.Linear(4 * width, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = [(torch.randn(batch, width), torch.randn(batch, 1)) for _ in range(batches)]
    return model, opt, data


def _logged(values: Any) -> dict[str, Any]:
    """A logged series as data: each entry's type, and its value where it is a Python float."""
    if not isinstance(values, list):
        return {"type": type(values).__name__}
    return {"kinds": [type(v).__name__ for v in values], "values": [v if type(v) is float else None for v in values]}


# 7.3 ------------------------------------------------------------------------------------------------------------
def leak_scene(train_and_log: Callable, width: int, n: int, batch: int, seed: int) -> dict[str, Any]:
    """The learner's loop over `n` batches under a live-tensor meter (LivePeak: the bytes of the storages created
    during the call and still alive): the live bytes at each optimizer step (before its update) and once the loop
    has returned and what it returned is dropped, wherever the learner keeps them (a module-level list, a closure,
    the model, the data); what it logged and left for the dashboard (`model.last_hidden_norm`); bytes held by graphs
    reachable from the model and the data; parameters with a .grad; data tensors left with a .grad or requiring
    grad."""
    model, opt, data = leak_setup(width, n, batch, seed)
    gc.collect()
    at_step: list[int] = []
    inputs = [t for xy in data for t in xy]
    existing = frozenset(t.untyped_storage().data_ptr() for t in [*model.parameters(), *inputs])
    with LivePeak(existing) as meter:
        opt.register_step_pre_hook(lambda *_: at_step.append(meter.live))
        history = train_and_log(model, opt, data)
    logged = ({key: _logged(history[key]) for key in ("loss", "saliency")}
              if isinstance(history, dict) and set(history) == {"loss", "saliency"} else None)
    kind = type(history).__name__
    del history
    gc.collect()
    norm = model.__dict__.get("last_hidden_norm")
    kept = [v for v in model.__dict__.values() if isinstance(v, torch.Tensor)]
    return {"type": kind, "logged": logged,
            "norm": norm if type(norm) is float else None, "norm_type": type(norm).__name__,
            "at_step": at_step, "live_after": meter.live, "input_bytes": inputs[0].nbytes,
            "weights": [float(p.detach().double().sum()) for p in model.parameters()],
            "held": graph_held_bytes([*model.parameters(), *kept, *inputs]),
            "grads": sum(p.grad is not None for p in model.parameters()),
            "data_grads": sum(t.grad is not None or t.requires_grad for t in inputs)}


# 7.5 ------------------------------------------------------------------------------------------------------------
def features_scene(train_with_features: Callable, width: int, n: int, batch: int, seed: int) -> dict[str, Any]:
    """The learner's feature-collecting loop: its mean loss, the features it kept (as values, with whether each
    still requires grad), the bytes their graphs hold, the hooks left on the model and the gradients left."""
    model, opt, data = leak_setup(width, n, batch, seed)
    got = train_with_features(model, opt, data)
    if not isinstance(got, dict) or set(got) != {"mean_loss", "features"}:
        return {"shape": repr(got)[:80]}
    feats = got["features"]
    tensors = isinstance(feats, list) and all(type(f) is torch.Tensor for f in feats)
    return {"shape": "ok", "mean_loss": got["mean_loss"] if type(got["mean_loss"]) is float else None,
            "mean_loss_repr": repr(got["mean_loss"])[:60],
            "features": [f.detach().clone() for f in feats] if tensors else None,
            "requires_grad": any(f.requires_grad for f in feats) if tensors else False,
            "held": graph_held_bytes([*(feats if tensors else []), *model.parameters(),
                                      *(t for xy in data for t in xy)]),
            "hooks": sum(len(m._forward_hooks) for m in model.modules()),
            "grads": any(p.grad is not None for p in model.parameters())}


# 7.4 ------------------------------------------------------------------------------------------------------------
PHASES = ("forward", "backward", "optimizer")


class BudgetedTrainer:
    """A training step that runs out of memory above a byte budget, like a GPU would: it allocates a batch-sized
    activation, then raises torch.OutOfMemoryError in the phase chosen (after backward filled .grad, if later).
    It records each trial and keeps weak references to the activations of failed trials. A batch size in `flaky`
    fits the budget but fails its FIRST trial in forward, as a size can right after a larger trial failed (the cache
    left in pieces: fragmentation); tried again, it trains."""

    def __init__(self, budget_samples: int, phase: str = "backward", width: int = 8, seed: int = 0,
                 error: type[BaseException] | None = None, flaky: frozenset[int] = frozenset()) -> None:
        torch.manual_seed(seed)
        self.model = nn.Linear(width, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.0)
        self.budget, self.phase, self.width, self.error = budget_samples, phase, width, error
        self.flaky = set(flaky)
        self.trials: list[int] = []
        self.trained: list[int] = []  # the trials that trained
        self.failed_activations: list[weakref.ref] = []

    def step(self, batch: int) -> float:
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch must be a positive int, got {batch!r}")
        self.trials.append(batch)
        if self.error is not None:
            raise self.error("a bug, not an out-of-memory error")
        activation = torch.randn(batch, self.width)
        over = batch > self.budget
        if batch in self.flaky:  # fits, but not this first time
            self.flaky.discard(batch)
            self.failed_activations.append(weakref.ref(activation))
            raise torch.OutOfMemoryError(f"CUDA out of memory (at batch {batch}: the cache is fragmented)")
        if over:
            self.failed_activations.append(weakref.ref(activation))
        if over and self.phase == "forward":
            raise torch.OutOfMemoryError(f"CUDA out of memory (planted in forward at batch {batch})")
        loss = self.model(activation).pow(2).mean()
        loss.backward()
        if over and self.phase == "backward":
            raise torch.OutOfMemoryError(f"CUDA out of memory (planted after backward at batch {batch})")
        if over:
            raise torch.OutOfMemoryError(f"CUDA out of memory (planted in optimizer.step at batch {batch})")
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.trained.append(batch)
        return loss.item()


def micro_batch_plan_scene(plan_micro_batch: Callable, budget: int, phase: str, effective: int, limit: int,
                           flaky: Sequence[int]) -> dict[str, Any]:
    """`plan_micro_batch(step, optimizer, effective, limit)` searching a BudgetedTrainer's step (`flaky`: the sizes
    that fail their first trial, sent as a sorted tuple): what it returned, the trials it ran and those that
    trained, whether a .grad was left behind, and how many activations of failed trials are still alive."""
    trainer = BudgetedTrainer(budget, phase, flaky=frozenset(flaky))
    returned = plan_micro_batch(trainer.step, trainer.optimizer, effective, limit)
    gc.collect()
    return {"returned": returned, "trials": list(trainer.trials), "trained": list(trainer.trained),
            "grad_left": any(p.grad is not None for p in trainer.model.parameters()),
            "alive": sum(r() is not None for r in trainer.failed_activations)}


def bug_in_step_scene(plan_micro_batch: Callable) -> dict[str, Any]:
    """`plan_micro_batch(step, optimizer, 16, 16)` with a step that raises ValueError (a bug, not a full GPU):
    whether that ValueError came out of the search (caught here on purpose, and said as data)."""
    trainer = BudgetedTrainer(4, error=ValueError)
    try:
        plan_micro_batch(trainer.step, trainer.optimizer, 16, 16)
    except ValueError:
        return {"propagated": True}
    return {"propagated": False}
