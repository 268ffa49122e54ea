"""The grader's side of one check cell, run INSIDE the submission's kernel (loaded by file path, never imported).

`utils.grade` inserts, after each exercise, a cell that re-imports the lab's check functions fresh from disk,
loads this file by its path and calls `grade_exercise(globals(), ...)`. That function

1. parses the lab's check call (one call such as `check_schedule(my_schedule)`) and evaluates its argument
   expressions in the learner's namespace;
2. runs the public check with those arguments, then the held-out cases `HIDDEN[exercise]` from
   `grading/hidden/chNN.py` (also loaded by file path) with the same arguments;
3. where the exercise has `memory_limit_mb`, runs both under an address-space limit (RLIMIT_AS) of that many
   MiB above what the kernel maps just before, restored afterwards; an answer that runs out scores 0;
4. displays one verdict under the checks' MIME type, tagged with this grading run's nonce: the grader reads the
   last such verdict of the cell and nothing else.

Scoring: with held-out cases, the public cases earn half the exercise's points and the held-out cases the other
half (each all or nothing); without them the public cases earn all of it.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any

try:
    import resource
except ImportError:  # Windows: no address-space limits; the checks run without a cap
    resource = None

ALLOC_FAILURES = ("MemoryError", "can't allocate memory", "Cannot allocate memory", "not enough memory",
                  "out of memory", "std::bad_alloc")


def parse_call(source: str) -> tuple[str, list[str], dict[str, str]]:
    """The check cell's single call: (function name, argument sources, keyword argument sources)."""
    tree = ast.parse(source)
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Expr) or not isinstance(tree.body[0].value, ast.Call):
        raise ValueError("a check cell must hold exactly one call, such as check_schedule(my_schedule)")
    call = tree.body[0].value
    if not isinstance(call.func, ast.Name):
        raise ValueError("a check cell must call a check function by its name")
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        raise ValueError("a check cell's call may not use *args or **kwargs")
    return (call.func.id, [ast.unparse(a) for a in call.args], {k.arg: ast.unparse(k.value) for k in call.keywords})


def vm_size_bytes() -> int | None:
    """The address space this process maps now (VmSize), or None where /proc is absent."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _warm_up() -> None:
    """Map what a check commonly maps lazily (thread pools, optimizer modules) before the cap is set."""
    try:
        import torch

        torch.ones(256, 256) @ torch.ones(256, 256)
        torch.optim.Adam([torch.zeros(1, requires_grad=True)])
    except Exception:  # warm-up is best effort
        pass


@contextmanager
def memory_cap(limit_mb: float | None):
    """Limit the address space to `limit_mb` MiB above the current VmSize; restore the old limit after."""
    if limit_mb is None:
        yield None
        return
    _warm_up()
    base = vm_size_bytes()
    if base is None or resource is None:
        yield "unavailable"
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = base + int(limit_mb * 2**20)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield cap
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _alloc_failure(text: str) -> bool:
    return any(marker in text for marker in ALLOC_FAILURES)


def _load_hidden(path: str | None, exercise: str) -> Any:
    """HIDDEN[exercise] from the hidden file, or None when the file or the entry is absent."""
    if path is None or not Path(path).exists():
        return None
    name = f"_course_hidden_{uuid.uuid4().hex}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and typing need it while the file runs
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    hidden = getattr(module, "HIDDEN", None)
    if not isinstance(hidden, dict):
        raise TypeError(f"{Path(path).name} must define HIDDEN as a dict of exercise id -> function")
    fn = hidden.get(exercise)
    if fn is not None and not callable(fn):
        raise TypeError(f"{Path(path).name}: HIDDEN[{exercise!r}] must be a function")
    return fn


def _part(verdict: Any, max_points: float) -> dict[str, Any]:
    status = getattr(verdict, "status", "error")
    message = str(getattr(verdict, "message", verdict))
    return {"status": status, "message": message, "points": max_points if status == "passed" else 0.0,
            "max_points": max_points}


def evaluate(namespace: dict, exercise: str, points: float, call: str, hidden_path: str | None,
             memory_limit_mb: float | None) -> dict[str, Any]:
    """Run the public and held-out cases of one exercise; the verdict as a dict (never raises)."""
    import utils.checks.core as core  # the copy the grader's cell has just reloaded

    result: dict[str, Any] = {"exercise": exercise, "max_points": points, "memory_limit_mb": memory_limit_mb,
                              "public": None, "hidden": None, "hidden_max": 0.0}
    try:
        name, arg_sources, kwarg_sources = parse_call(call)
        hidden = _load_hidden(hidden_path, exercise)
    except Exception as exc:  # a course bug, not the learner's: say so
        return {**result, "status": "error", "points": 0.0,
                "message": f"grader setup failed for exercise {exercise}: {type(exc).__name__}: {exc}"}
    try:
        check = eval(name, namespace)  # noqa: S307 - the lab's own check function, re-imported by the cell
        args = [eval(s, namespace) for s in arg_sources]  # noqa: S307 - the learner's names, as the check cell
        kwargs = {k: eval(s, namespace) for k, s in kwarg_sources.items()}  # noqa: S307
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        return {**result, "status": "error", "points": 0.0,
                "message": f"the check could not start: {type(exc).__name__}: {first} (did the exercise cell run?)"}
    public_max = points / 2 if hidden is not None else points
    result["hidden_max"] = points - public_max
    over: str | None = None
    with memory_cap(memory_limit_mb) as cap:
        if cap == "unavailable":
            result["memory_limit_mb"] = None  # no /proc or no resource module here: say so in the message
        try:
            public = _part(check(*args, **kwargs), public_max)
        except MemoryError as exc:
            public, over = _part("MemoryError", public_max), f"MemoryError {exc}".strip()
        except Exception as exc:
            public = _part(f"the check raised {type(exc).__name__}: {exc}", public_max)
        if memory_limit_mb is not None and over is None and _alloc_failure(public["message"]):
            over = public["message"]
        if hidden is not None and over is None and public["status"] != "not attempted":
            try:
                held = core._run_check(exercise, lambda: hidden(*args, **kwargs), points - public_max)
                hidden_part = _part(held, points - public_max)
            except MemoryError as exc:
                hidden_part, over = _part("MemoryError", points - public_max), f"MemoryError {exc}".strip()
            if memory_limit_mb is not None and over is None and _alloc_failure(hidden_part["message"]):
                over = hidden_part["message"]
            result["hidden"] = hidden_part
    result["public"] = public
    if over is not None:
        return {**result, "status": "over memory cap", "points": 0.0,
                "message": f"the answer ran out of its memory cap ({memory_limit_mb:g} MiB above what the kernel "
                           f"used before the check), so this exercise scores 0: {over[:300]}"}
    parts = [p for p in (public, result["hidden"]) if p is not None]
    earned = sum(p["points"] for p in parts)
    if public["status"] == "not attempted":
        status = "not attempted"
    elif earned == points:
        status = "passed"
    elif earned > 0:
        status = "partial"
    else:
        status = next(p["status"] for p in parts if p["status"] != "passed")
    if status == "passed":
        message = "public and held-out cases passed" if result["hidden"] is not None else "public cases passed"
    elif status == "not attempted":
        message = public["message"]
    else:
        message = f"public cases: {public['status']}" + (f": {public['message']}" if public["status"] != "passed"
                                                           else "")
        if result["hidden"] is not None:
            held = result["hidden"]
            message += f" | held-out cases: {held['status']}" + (f": {held['message']}" if held["status"] != "passed"
                                                                  else "")
        elif hidden is not None:
            message += " | held-out cases: not run"
    if memory_limit_mb is not None and result["memory_limit_mb"] is None:
        message += f" (the {memory_limit_mb:g} MiB memory cap could not be applied on this system)"
    return {**result, "status": status, "points": earned, "message": message}


def grade_exercise(namespace: dict, *, exercise: str, points: float, call: str, hidden_path: str | None,
                   memory_limit_mb: float | None, nonce: str, mime: str) -> None:
    """Evaluate one exercise and display its verdict, tagged with the nonce, under the checks' MIME type."""
    try:
        verdict = evaluate(namespace, exercise, points, call, hidden_path, memory_limit_mb)
    except (Exception, SystemExit) as exc:  # a grader cell must always answer
        verdict = {"exercise": exercise, "status": "error", "points": 0.0, "max_points": points,
                   "message": f"the check raised {type(exc).__name__}: {exc}"[:300]}
    verdict["nonce"] = nonce
    from IPython.display import display

    text = f"[grader] Exercise {exercise}: {verdict['status']} ({verdict['points']:g}/{points:g}) {verdict['message']}"
    display({mime: verdict, "text/plain": text}, raw=True)
