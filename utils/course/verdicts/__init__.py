"""Claim verdicts computed from a run's measurements, each with its criterion stated.

A notebook never types a verdict: it calls the chapter's verdict function with what it measured, and records
what comes back with `Run.claim(claim_id, measured, *judged)`. Each function is registered with `judge`, which
keeps its criterion (one sentence the chapter prints beside the verdict) and examples on both sides of that
criterion; tests/test_verdicts.py calls every registered function on its examples and requires that they give
different verdicts, so no verdict can be a constant.

One module per chapter (`utils.course.verdicts.ch01`, ...), imported by `all_judges()`.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

VERDICTS = ("holds", "fails", "partly", "depends", "needs GPU", "not measured")


class Judged(NamedTuple):
    """A verdict and the note that states its criterion; unpacks into `Run.claim(id, measured, *judged)`."""

    verdict: str
    note: str


@dataclass(frozen=True)
class Judge:
    """A registered verdict function with its claim, criterion and examples on both sides of the criterion."""

    claim_id: str
    criterion: str
    examples: tuple[dict[str, Any], ...]
    fn: Callable[..., Judged]

    def __call__(self, *args: Any, **kwargs: Any) -> Judged:
        return self.fn(*args, **kwargs)


_REGISTRY: list[Judge] = []


def judge(claim_id: str, *, criterion: str, examples: list[dict[str, Any]]) -> Callable[[Callable[..., Judged]], Judge]:
    """Register a verdict function for `claim_id`. `examples` are keyword arguments on both sides of the
    criterion (at least two, giving at least two different verdicts)."""
    if not isinstance(claim_id, str) or not (len(claim_id) == 3 and claim_id[0] == "C" and claim_id[1:].isdigit()):
        raise ValueError(f"claim_id must look like 'C07', got {claim_id!r}")
    if not isinstance(criterion, str) or not criterion.strip():
        raise ValueError("criterion must be a non-empty sentence")
    if not isinstance(examples, list) or len(examples) < 2 or not all(isinstance(e, dict) for e in examples):
        raise ValueError("examples must be a list of at least two keyword-argument dicts")

    def register(fn: Callable[..., Judged]) -> Judge:
        j = Judge(claim_id, criterion, tuple(examples), fn)
        _REGISTRY.append(j)
        return j

    return register


def verdict(name: str, criterion: str, detail: str = "") -> Judged:
    """Build a `Judged` whose note states the criterion (and a detail of this run, if given)."""
    if name not in VERDICTS:
        raise ValueError(f"name must be one of {VERDICTS}, got {name!r}")
    if not isinstance(criterion, str) or not criterion.strip():
        raise TypeError(f"criterion must be a non-empty sentence (str), got {criterion!r:.40}")
    if not isinstance(detail, str):
        raise TypeError(f"detail must be a str, got {type(detail).__name__}")
    note = f"criterion: {criterion}" + (f"; {detail}" if detail else "")
    return Judged(name, note)


def all_judges() -> list[Judge]:
    """Every registered verdict function, after importing each chapter module of this package."""
    for mod in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{mod.name}")
    return list(_REGISTRY)


def claim_markdown(line: str) -> str:
    """A `Run.claim` line as Markdown for a notebook: the claim, what was measured and the verdict in the open; the
    criterion and the run's detail folded in a <details> block, so the lesson reads straight through."""
    if not isinstance(line, str):
        raise TypeError(f"line must be the str Run.claim returns, got {type(line).__name__}")
    head, sep, criterion = line.partition("; criterion: ")
    if " -> " not in head:
        raise ValueError(f"line must be a Run.claim line ('C.. (claim): measured ... -> verdict'), got {line!r:.60}")

    def escape(text: str) -> str:  # Markdown would read * and _ as emphasis and < as a tag
        return text.replace("\\", "\\\\").replace("*", "\\*").replace("_", "\\_").replace("<", "&lt;")

    shown = escape(head)
    if not sep:
        return shown
    return (f"{shown}\n\n<details><summary>criterion (how the verdict is decided)</summary>\n\n{escape(criterion)}"
            "\n\n</details>")


def show_claim(line: str) -> None:
    """Display `claim_markdown(line)` in a notebook (the way chapters show each judged claim)."""
    from IPython.display import Markdown, display

    display(Markdown(claim_markdown(line)))
