"""The grader's side of a submission's kernel (loaded by file path, never imported), and of its comparison.

`utils.course.grade` inserts a first cell that calls `seal(...)`: the lab's check modules become stand-ins with no
reference in reach while the learner's cells run. After each exercise it inserts a cell that loads this file by its
path and calls `grade_exercise(globals(), ...)`, which

1. opens the real check modules fresh from disk (`opened`), for this cell only;
2. parses the lab's check call (one call such as `check_schedule(my_schedule)`) and evaluates its argument
   expressions in the learner's namespace; wraps each learner function (or class) in a `Recorder` whose calls,
   and whose scenes (a check's scenario run with the learner's code, utils.course.scenes), another process answers
   (`AnswerProcess`: the learner's code never runs where a check is), and sends every answer as plain data
   (utils/course/checks/wire.py), and the learner's values the same way;
3. runs the public check with those arguments, then the held-out cases `HIDDEN[exercise]` from
   `grading/hidden/chNN.py` (also loaded by file path) with the same arguments;
4. where the exercise has `memory_limit_mb`, runs both under an address-space limit (RLIMIT_AS) of that many
   MiB above what the kernel maps just before, restored afterwards; an answer that runs out scores 0;
5. displays one verdict under the checks' MIME type, tagged with this grading run's nonce (a cell with two
   verdicts scores 0). The grader also runs `replay` in its own process: the same checks on the answers the
   kernel sent, and takes the lower of the two.

Scoring: with held-out cases, the public cases earn half the exercise's points and the held-out cases the other
half (each all or nothing); without them the public cases earn all of it.
"""

from __future__ import annotations

import ast
import functools
import gc
import importlib.util
import sys
import types
import uuid
from collections.abc import Iterator
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


# Whether the memory cap's warm-up builds an optimizer: its first construction imports torch._dynamo (about 67 MiB
# of address space and a second of CPU), which an answer that trains would otherwise pay inside its cap. The grader
# cell sets it for its exercise (grade_exercise's `warm_optimizer`: whether the lab's code or its checks name
# torch.optim, utils.course.grade._names_optimizers); the answer process, forked in that cell, inherits it.
WARM_OPTIMIZER = True


def _warm_up() -> None:
    """Map what a check commonly maps lazily (thread pools, optimizer modules) before the cap is set."""
    try:
        import torch

        torch.ones(256, 256) @ torch.ones(256, 256)
        if WARM_OPTIMIZER:
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
    """Whether a verdict's message tells of a failed allocation (a check that merely names torch's
    OutOfMemoryError, or quotes the CUDA out-of-memory error a check plants, as 7.4 does, is not one)."""
    text = text.replace("OutOfMemoryError", "").replace("CUDA out of memory", "")
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
             memory_limit_mb: float | None, on_part: Any = None, prepare: Any = None) -> dict[str, Any]:
    """Run the public and held-out cases of one exercise; the verdict as a dict (never raises).

    `prepare(args, kwargs)`, if given, returns the (args, kwargs) the checks are called with (the grading kernel
    wraps the learner's functions in recorders); `on_part("public" | "hidden")` is called before each part."""
    import utils.course.checks.core as core  # the copy the grader's cell has just reloaded

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
    if prepare is not None:
        try:
            args, kwargs = prepare(args, kwargs)
        except Exception as exc:
            return {**result, "status": "error", "points": 0.0,
                    "message": f"the answer could not be handed to the grader: {type(exc).__name__}: {exc}"[:300]}
    public_max = points / 2 if hidden is not None else points
    result["hidden_max"] = points - public_max
    over: str | None = None
    with memory_cap(memory_limit_mb) as cap:
        if cap == "unavailable":
            result["memory_limit_mb"] = None  # no /proc or no resource module here: say so in the message
        if on_part is not None:
            on_part("public")
        try:
            public = _part(check(*args, **kwargs), public_max)
        except MemoryError as exc:
            public, over = _part("MemoryError", public_max), f"MemoryError {exc}".strip()
        except Exception as exc:
            public = _part(f"the check raised {type(exc).__name__}: {exc}", public_max)
        if memory_limit_mb is not None and over is None and _alloc_failure(public["message"]):
            over = public["message"]
        if hidden is not None and over is None and public["status"] != "not attempted":
            if on_part is not None:
                on_part("hidden")
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


# ---------------------------------------------------------------------------------------------------------------
# The learner's kernel never holds the checks while the learner's cells run (seal), and for a recorded exercise it only
# produces answers: each call of the learner's function is recorded as plain data (utils.course.checks.wire) and sent to
# the grader, which runs the same checks in its own process on those answers (replay). The kernel's own verdict can then
# only take points away (a call to a reference, a memory cap), never grant them.

SEALED_MODULES = ("utils.course.checks.core", "utils.course.checks.wire",
                  "utils.course.checks.protocol")  # reloaded fresh, never sealed
FLUSH_EVERY = 256  # recorded answers are sent at least this often
BATCH = 4096  # calls sent to the answer process in one exchange (a check's batch of cases, core.answer_each)


class _SealFinder:
    """On sys.meta_path while the learner's cells run: `utils.course.checks.<lab module>` imports the sealed module. It
    also keeps the fingerprint the seal took before the learner's first cell (`fingerprint`)."""

    def __init__(self, sealed: dict[str, Any], baseline: dict[Any, Any]) -> None:
        self.sealed, self.open, self.baseline = sealed, False, baseline

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if self.open or name not in self.sealed:
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec: Any) -> Any:
        return self.sealed[spec.name]

    def exec_module(self, module: Any) -> None:
        return None


def _stub(name: str) -> Any:
    """A check function's stand-in in the grading kernel: no globals, no reference."""
    namespace: dict[str, Any] = {"__builtins__": {"print": print}}
    exec(f"def {name}(*args, **kwargs):\n    print('the grader runs {name} itself')\n", namespace)  # noqa: S102
    return namespace.pop(name)


def _rebound(obj: Any, envs: dict[str, dict], done: dict[int, Any], class_cell: Any = None) -> Any:
    """`obj` (a function or class of a check module) with globals holding only the names its code uses. A method's
    `__class__` cell (zero-argument super()) points at the rebuilt class (`class_cell`)."""
    import types

    module = getattr(obj, "__module__", "") or ""
    if not module.startswith("utils.course.checks.") or module in SEALED_MODULES:
        return obj
    if id(obj) in done:
        return done[id(obj)]
    real = sys.modules[module].__dict__
    env = envs.setdefault(module, {"__builtins__": real["__builtins__"], "__name__": module})
    if isinstance(obj, types.FunctionType):
        closure = obj.__closure__
        if closure and class_cell is not None and "__class__" in obj.__code__.co_freevars:
            closure = tuple(class_cell if name == "__class__" else cell
                            for name, cell in zip(obj.__code__.co_freevars, closure, strict=True))
        new = types.FunctionType(obj.__code__, env, obj.__name__, obj.__defaults__, closure)
        new.__kwdefaults__, new.__qualname__, new.__doc__ = obj.__kwdefaults__, obj.__qualname__, obj.__doc__
        done[id(obj)] = new
        _fill(obj.__code__, real, env, envs, done)
        return new
    if isinstance(obj, type):
        cell = types.CellType()
        members = {}
        for key, value in vars(obj).items():
            if key in ("__dict__", "__weakref__"):
                continue
            inner = getattr(value, "__func__", None) or getattr(value, "fget", None) or value
            if isinstance(value, staticmethod | classmethod):
                members[key] = type(value)(_rebound(inner, envs, done, cell))
            elif isinstance(value, property):
                members[key] = property(*(None if f is None else _rebound(f, envs, done, cell)
                                          for f in (value.fget, value.fset, value.fdel)), value.__doc__)
            else:
                members[key] = _rebound(value, envs, done, cell)
        new = type(obj.__name__, tuple(_rebound(b, envs, done) for b in obj.__bases__), members)
        new.__module__, new.__qualname__ = module, obj.__qualname__
        cell.cell_contents = new
        done[id(obj)] = new
        return new
    return obj


def _fill(code: Any, real: dict, env: dict, envs: dict, done: dict) -> None:
    """Put into `env` the module globals `code` (and the code nested in it) names, each rebound in turn."""
    for name in code.co_names:
        if name in real and name not in env:
            env[name] = None  # placeholder against cycles
            env[name] = _rebound(real[name], envs, done)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            _fill(const, real, env, envs, done)


def sealed_module(real: Any, names: list[str]) -> Any:
    """A stand-in for a lab's check module: its check functions as stubs, and the other `names` the lab imports
    (helpers, constants, classes) rebound to globals that hold only what their own code uses."""
    import types

    sealed = types.ModuleType(real.__name__, "the sealed check module of a grading kernel: the grader checks "
                                             "answers in its own process")
    sealed.__spec__ = None
    envs: dict[str, dict] = {}
    done: dict[int, Any] = {}
    for name in names:
        if name.startswith("check_"):
            setattr(sealed, name, _stub(name))
        elif name in vars(real):
            setattr(sealed, name, _rebound(vars(real)[name], envs, done))
    return sealed


def seal(imports: dict[str, list[str]]) -> None:
    """Run first in a grading kernel: every lab module `utils.course.checks.X` the lab imports from becomes a sealed
    module, for `import` and `from ... import` alike, until the grader's own cell opens them (`opened`)."""
    import importlib

    real = {m: importlib.import_module(m) for m in imports}
    sealed = {m: sealed_module(real[m], names) for m, names in imports.items()}
    finder = _SealFinder(sealed, fingerprint())
    sys.meta_path.insert(0, finder)
    _install(sealed)
    # What is alive now (the libraries, the grader's objects) leaves the collector's sight (gc.freeze): the full
    # collections the grader makes before and inside its forks (AnswerProcess, _forked_each) then walk only what the
    # lab's cells create, not the hundreds of thousands of objects torch's import leaves (about 0.3 s each, dozens
    # per lab). Frozen objects are not listed by gc.get_objects() or gc.get_referrers() either (a learner's code
    # that calls gc.unfreeze() is named in the grade notes, utils.course.grade.INTERNALS).
    gc.collect()
    gc.freeze()


def _install(modules: dict[str, Any]) -> None:
    import utils.course.checks as package

    for name, module in modules.items():
        sys.modules[name] = module
        setattr(package, name.rpartition(".")[2], module)


def _finder() -> Any:
    return next((f for f in sys.meta_path if type(f).__name__ == "_SealFinder"), None)


@contextmanager
def opened(modules: list[str]):
    """The real check modules, fresh from disk, for the grader's cell; the sealed ones are back afterwards."""
    import importlib

    finder = _finder()
    sealed = dict(finder.sealed) if finder is not None else {}
    if finder is not None:
        finder.open = True
    saved = {m: sys.modules.pop(m, None) for m in (*SEALED_MODULES, *modules)}
    try:
        fresh = {m: importlib.import_module(m) for m in (*SEALED_MODULES, *modules)}
        yield fresh
    finally:
        for m in modules:
            sys.modules.pop(m, None)
        for m in SEALED_MODULES:
            if saved[m] is not None:
                sys.modules[m] = saved[m]
        if finder is not None:
            finder.open = False
            _install({m: sealed[m] for m in modules if m in sealed})


# ---------------------------------------------------------------------------------------------------------------
# What the learner's code replaced. A verdict leaves the kernel through IPython's display machinery, and a check
# computes with torch and numpy in that kernel: a cell that replaces one of their functions can rewrite the kernel's
# verdict (review 34c, A8/A13: `IPython.display.display` replaced by a function that turns every verdict into
# "passed"; A14: the same hook rewrites a recorded exercise's answers). The seal takes a fingerprint of the callables
# of these modules and of their classes before the learner's first cell runs; each grader cell compares it with the
# kernel's state before and after its check, and the verdict carries what changed (`replaced`), which voids it in
# the grader's process (utils.course.grade.score). A library that patches itself (torch.compile replaces
# `nn.Module.__init__` with a function of torch's own files; ipykernel rebinds `builtins.input` to a method of its
# kernel) is not counted: only a value of the learner's code is.
# This is a tripwire, not a wall: the kernel runs the learner's code, so a cell written against this file can still
# hide its traces; the wall is the grader's replay, in its own process, on the answers the kernel sent.
TAMPER_ERROR = "the learner's code replaced what the grader's verdict passes through:"


class GraderTampered(RuntimeError):
    """Raised by a grader cell instead of showing a verdict, when the learner's code replaced something it passes
    through."""


WATCHED_MODULES = ("builtins", "sys", "json", "IPython", "ipykernel", "jupyter_client", "zmq", "traitlets", "comm",
                   "torch", "numpy", "math", "struct", "utils", "inspect", "types", "functools", "threading",
                   "importlib", "copy", "pickle", "operator", "uuid", "os", "gc", "resource", "weakref", "warnings",
                   "itertools", "collections", "contextlib", "statistics", "random", "time", "unittest")
_REPLACEABLE = (staticmethod, classmethod, property)
_COURSE_ROOT = Path(__file__).resolve().parent.parent
# utils.course.checks.core._TRUSTED_CODE_DIRS's twin, on purpose: this file trusts nothing the learner's kernel could
# have patched, so it imports none of the course's modules to decide what is the learner's
_LIBRARY_DIRS = tuple(sorted({str(Path(p).resolve()) + "/" for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
                             | {str(_COURSE_ROOT / d) + "/" for d in ("utils", "grading")}))


def _kernel_objects() -> dict[str, Any]:
    """The kernel's own objects a verdict passes through on its way out. They are instances: a fingerprint of
    modules and classes does not see an attribute set on one (`display_pub.publish = ...`), a hook appended to its
    list (`display_pub.register_hook`) or a callback registered with the shell's events."""
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    if shell is None:
        return {}
    display_pub, kernel = getattr(shell, "display_pub", None), getattr(shell, "kernel", None)
    pub_socket = getattr(display_pub, "pub_socket", None)
    io_thread = getattr(pub_socket, "io_thread", None) or getattr(kernel, "iopub_thread", None)
    session = getattr(kernel, "session", None)
    found = {"shell": shell, "shell.display_pub": display_pub, "shell.displayhook": getattr(shell, "displayhook", None),
             "shell.display_formatter": getattr(shell, "display_formatter", None),
             "shell.events": getattr(shell, "events", None), "shell.kernel": kernel,
             "shell.kernel.session": session, "shell.kernel.session.auth": getattr(session, "auth", None),
             "shell.display_pub.session": getattr(display_pub, "session", None),
             # the IOPub path below the session (review s5: a send_multipart set on the IOPub thread re-signed and
             # rewrote the verdict on its way to the socket)
             "shell.display_pub.pub_socket": pub_socket, "shell.kernel.iopub_socket": getattr(kernel, "iopub_socket",
                                                                                                None),
             "iopub thread": io_thread, "iopub thread's socket": getattr(io_thread, "socket", None),
             "sys.stdout": sys.stdout, "sys.stderr": sys.stderr}
    return {name: obj for name, obj in found.items() if obj is not None}


def _entries() -> dict[Any, Any]:
    """What the fingerprint covers, by key: every loaded module under WATCHED_MODULES (but the check modules, which
    the grader itself swaps), its callables as one entry and each of its classes' members as one entry (so that an
    attribute added after the seal counts too: `torch.Tensor.allclose = ...` shadows an inherited method), and the
    kernel's own objects (their callable attributes, traitlets' values included, and their hook and callback
    lists)."""
    entries: dict[Any, Any] = {}
    for name in sorted(n for n in list(sys.modules) if n.partition(".")[0] in WATCHED_MODULES
                       and not n.startswith("utils.course.checks")):
        module = sys.modules.get(name)
        entries[name] = module
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        callables = {attr: value for attr, value in list(namespace.items()) if callable(value)}
        entries[(name, "*")] = callables
        for attr, value in callables.items():
            if isinstance(value, type) and value.__dict__.get("__module__") == name:
                entries[(name, attr)] = {key: member for key, member in list(value.__dict__.items())
                                         if callable(member) or isinstance(member, _REPLACEABLE)}
    objects = _kernel_objects()
    for name, obj in objects.items():
        attributes = {**getattr(obj, "_trait_values", {}), **getattr(obj, "__dict__", {})}
        entries[(f"<{name}>", "object")] = obj
        entries[(f"<{name}>", "type")] = type(obj)  # obj.__class__ = a subclass of the learner's (review s5, F1c)
        entries[(f"<{name}>", "*")] = {k: v for k, v in attributes.items() if callable(v)}
    if "shell.display_pub" in objects:
        entries[("<shell.display_pub>", "hooks")] = list(getattr(objects["shell.display_pub"], "_hooks", []))
    if "shell.events" in objects:
        entries[("<shell.events>", "callbacks")] = [c for cs in getattr(objects["shell.events"], "callbacks",
                                                                        {}).values() for c in cs]
    return entries


def _identity(value: Any) -> Any:
    """What a replacement changes: the object, and for a function its code (a swapped `__code__` keeps the id);
    a bound method is its function and receiver (each attribute read makes a new method object); a list or dict of
    them (a kernel object's attributes, a hook list) is each of its members."""
    kind = type(value)
    if kind is types.FunctionType:
        return id(value), id(value.__code__)
    if kind is types.MethodType:
        return id(value.__self__), _identity(value.__func__)
    if kind is dict:
        return tuple(sorted((str(k), _identity(v)) for k, v in value.items()))
    if kind is list:
        return tuple(_identity(v) for v in value)
    return id(value)


def fingerprint() -> dict[Any, Any]:
    """{key: identity} over `_entries()`: what the seal records before the learner's first cell."""
    return {key: _identity(value) for key, value in _entries().items()}


def _learners_value(value: Any) -> bool:
    """Whether a value runs the learner's code: a function (or the function of a method or a partial) whose code was
    not loaded from Python's, an installed package's or the course's files, a class (or an object of a class) with
    such a function, a mock (unittest.mock: a library class that answers whatever it is told), or a list or dict
    holding one. Built-in and extension callables (print, a pybind11 method) are not the learner's."""
    if type(value) in (list, dict):
        return any(_learners_value(v) for v in (value.values() if type(value) is dict else value))
    mock = sys.modules.get("unittest.mock")
    if mock is not None and isinstance(value, mock.Base | mock.NonCallableMock):
        return True
    while isinstance(value, types.MethodType | functools.partial | staticmethod | classmethod):
        value = value.func if isinstance(value, functools.partial) else value.__func__
    if isinstance(value, property):
        return any(_learners_value(f) for f in (value.fget, value.fset, value.fdel) if f is not None)
    if isinstance(value, types.FunctionType):
        return not str(Path(value.__code__.co_filename).resolve()).startswith(_LIBRARY_DIRS)
    if isinstance(value, types.BuiltinFunctionType | types.ModuleType):
        return False
    kind = value if isinstance(value, type) else type(value)
    return any(_learners_value(member) for cls in kind.__mro__ for member in list(vars(cls).values())
               if isinstance(member, types.FunctionType | staticmethod | classmethod | property))


def _name(key: Any, member: str | None = None) -> str:
    parts = [key] if isinstance(key, str) else [k for k in key if k != "*"]
    return ".".join([*parts, member] if member else parts)


def replaced_since_seal() -> list[str]:
    """What the learner's code replaced or added since the seal, as dotted names ([] when nothing was); the seal's
    own record gone is itself a replacement. A removal is not counted: libraries remove and redefine their own
    attributes as they load (torch._dynamo), and a removed function makes a check fail rather than pass."""
    finder = _finder()
    if finder is None or not isinstance(getattr(finder, "baseline", None), dict):
        return ["sys.meta_path (the grader's seal)"]
    now = _entries()
    found = []
    for key, identity in finder.baseline.items():
        if key not in now or _identity(now[key]) == identity:
            continue
        value = now[key]
        if type(value) is dict:  # name the members that changed or appeared, where they are the learner's
            before = dict(identity)
            found += [_name(key, k) for k, v in value.items()
                      if before.get(str(k)) != _identity(v) and _learners_value(v)]
        elif _learners_value(value):
            found.append(_name(key))
    return found


# ---------------------------------------------------------------------------------------------------------------
# Where the learner's function runs: never in the process that holds the checks. The check runs in
# the grading kernel (it builds the inputs and holds the expected values); each call of the learner's function is
# answered by another process that holds none of it, and the answer comes back as plain data:
# - a call whose arguments are plain data without tensors (numbers, strings, lists, dicts) goes to the ANSWER
#   PROCESS, a fork of the kernel made before the grader's cell opens the checks (it holds the learner's state and
#   the sealed modules);
# - a call with other arguments (a model, a function to run, a tensor whose storage matters) goes to a fork of the
# kernel made for that call, which first clears every frame's locals and every check module's functions and values that
# the arguments do not reach, so no expected value, reference or held-out case is left in a frame or module when the
# learner's code runs (what the check still needs of a frame lives on in the kernel, which the learner's code never runs
# in). The watch on the learner's calls (utils.course.checks.core.own_work) runs in the answering process too, and what
# it finds comes back with the answer. A scene (utils.course.checks.core.observe: the check's scenario run with the
# learner's function, what happened returned as data) is answered the same way, the scene in place of the call.
# Where os.fork is missing (Windows), the call runs in the kernel, as before.

def _child_setup() -> None:
    """In a forked child: one torch thread (GNU OpenMP's pool does not survive a fork) and no output of its own."""
    import io

    sys.stdout = sys.stderr = io.StringIO()
    try:
        import torch

        torch.set_num_threads(1)
    except Exception:  # noqa: BLE001 - a kernel without torch answers without it
        pass


def _check_module(name: Any) -> bool:
    """A module that holds references, truths or held-out cases: a lab's check module or a held-out cases file."""
    return isinstance(name, str) and ((name.startswith("utils.course.checks.") and name not in SEALED_MODULES
                                       and name != "utils.course.checks.not_run") or name.startswith("_course_hidden_"))


def _reachable(root: Any) -> set[int]:
    """The ids of what `root` (the arguments of a call) reaches through containers, closures and bound methods: the
    values a cleared frame keeps (the call needs them, and they are the learner's to see)."""
    import functools
    import types

    seen: set[int] = set()
    todo = [(root, 0)]
    while todo:
        obj, depth = todo.pop()
        if id(obj) in seen or depth > 8:
            continue
        seen.add(id(obj))
        kind = type(obj)  # only exact types, read without running any __getattr__ of the learner's (this runs in
        inner: list = []  # the kernel, beside the check)
        if kind in (list, tuple, set, frozenset):
            inner = list(obj)
        elif kind is dict:
            inner = [*obj.keys(), *obj.values()]
        elif kind is types.FunctionType:
            inner = [*(obj.__closure__ or ()), *(obj.__defaults__ or ())]
        elif kind is types.MethodType:
            inner = [obj.__self__, obj.__func__]
        elif kind is functools.partial:
            inner = [obj.func, obj.args, obj.keywords]
        elif kind is types.CellType:
            try:
                inner = [obj.cell_contents]
            except ValueError:  # an empty cell
                pass
        todo += [(i, depth + 1) for i in inner]
    return seen


def _hooks() -> list:
    """What runs around the learner's call without being handed to it, and must keep what it reads: the watch's
    profile hook and torch's saved-tensor hooks (a check counts what the call saves)."""
    found: list = [sys.getprofile()]
    try:
        import torch

        found.append(torch._C._autograd._top_saved_tensors_default_hooks(False))
    except Exception:  # noqa: BLE001 - a torch without this private function: no hook to keep
        pass
    return found


def _clear_module(namespace: dict, keep: set[int]) -> None:
    """A check module's globals without its functions and values (its modules and classes stay: the inputs are
    made of them), but for what the call's arguments reach."""
    import types

    for name, value in list(namespace.items()):
        if name.startswith("__") or isinstance(value, types.ModuleType | type) or id(value) in keep:
            continue
        del namespace[name]


def _clear_stack(start: Any, keep: set[int]) -> None:
    """In a forked child: every function frame from `start` outwards loses its locals, its cells included (None in
    their place), but for what `keep` holds, and every check module met on the way, or loaded, loses its functions
    and values."""
    import ctypes

    to_fast = getattr(ctypes.pythonapi, "PyFrame_LocalsToFast", None)  # Python 3.11-3.12; 3.13 writes through
    frame = start
    while frame is not None:
        if frame.f_code.co_flags & 0x1:  # CO_OPTIMIZED: a function's frame (a module's locals are its globals)
            names = frame.f_locals
            for name, value in list(names.items()):
                if id(value) not in keep:
                    names[name] = None
            if to_fast is not None:
                to_fast(ctypes.py_object(frame), ctypes.c_int(0))
        if _check_module(frame.f_globals.get("__name__")):
            _clear_module(frame.f_globals, keep)
        frame = frame.f_back
    for name, module in list(sys.modules.items()):
        if _check_module(name):
            _clear_module(vars(module), keep)


def _watch_spec(watch: Any) -> dict[str, Any] | None:
    """What an own_work block watches, as data another process can rebuild: code objects (marshal), builtins and C
    methods by name, dtypes and module names."""
    import base64
    import inspect
    import marshal

    if watch is None:
        return None
    names = []
    for t in watch.targets:
        if isinstance(t, str):
            names.append(t)
        elif inspect.ismethoddescriptor(t):
            names.append(f"{t.__objclass__.__module__}:{t.__objclass__.__qualname__}.{t.__name__}")
        elif inspect.isbuiltin(t):
            owner = getattr(t, "__self__", None)
            module = getattr(t, "__module__", None) or getattr(owner, "__name__", "")
            names.append(f"{module}:{t.__qualname__}")
    direct = [f"{getattr(t, '__module__', None) or getattr(getattr(t, '__self__', None), '__name__', '')}:"
              f"{t.__name__}" for t in watch.direct if inspect.isbuiltin(t)]  # a pybind11 qualname is not a path
    return {"codes": [base64.b64encode(marshal.dumps(c)).decode("ascii") for c in watch.codes], "names": names,
            "dtypes": [str(d).removeprefix("torch.") for d in watch.dtypes], "modules": list(watch.modules),
            "direct_codes": [base64.b64encode(marshal.dumps(c)).decode("ascii") for c in watch.direct_codes],
            "direct_names": direct}


def _resolve(name: str) -> Any:
    import importlib

    module, _, qualname = name.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _watch_parts(spec: dict[str, Any] | None) -> tuple[list, dict[str, Any]] | None:
    """The arguments of the own_work block `_watch_spec` described, rebuilt here: (targets, keywords); None where
    nothing is watched."""
    import base64
    import marshal

    if spec is None:
        return None
    import torch

    targets = []
    for name in spec["names"]:
        try:
            targets.append(_resolve(name))
        except (ImportError, AttributeError):  # a library this kernel does not have: nothing to call there
            pass
    direct = []
    for name in spec.get("direct_names", []):
        try:
            direct.append(_resolve(name))
        except (ImportError, AttributeError):
            pass
    return targets, {"dtypes": tuple(getattr(torch, d) for d in spec["dtypes"]), "modules": tuple(spec["modules"]),
                     "codes": tuple(marshal.loads(base64.b64decode(c)) for c in spec["codes"]),
                     "direct": tuple(direct),
                     "direct_codes": tuple(marshal.loads(base64.b64decode(c)) for c in spec.get("direct_codes", []))}


def _answer(fn: Any, args: Any, kwargs: Any, memory_limit_mb: float | None = None, *,
            same_process: bool = False) -> dict[str, Any]:
    """The reply for one call of the learner's function, made in the answering process: the answer as plain data
    (or what it raised), and what the watch open around it found ("hits"); `same_process`: also the answer itself
    ("object") and the exception itself ("exception"), for a caller in this process."""
    import contextlib

    import utils.course.checks.core as core
    from utils.course.checks import wire

    reply: dict[str, Any]
    with memory_cap(memory_limit_mb) if memory_limit_mb is not None else contextlib.nullcontext():
        try:
            out = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - what the learner's code raised is its answer
            reply = {"raised": type(exc).__name__, "message": str(exc)[:500]}
            if same_process:
                reply["exception"] = exc
        else:
            try:
                reply = {"value": wire.encode(out)}
            except Exception as exc:  # noqa: BLE001 - not plain data
                reply = {"unplain": str(exc)[:300]}
            if same_process:
                reply["object"] = out
    return {**reply, "hits": list(core.WATCHING[-1].hits) if core.WATCHING else []}


def _send_line(stream: Any, data: dict) -> None:
    import json

    stream.write(json.dumps(data).encode() + b"\n")
    stream.flush()


def _read_line(stream: Any) -> dict:
    import json

    line = stream.readline()
    if not line:
        raise RuntimeError("the process answering the learner's calls ended without an answer (it died or exited)")
    return json.loads(line)


def _forked_each(fn: Any, calls: list[tuple[Any, Any]]) -> list[dict[str, Any]]:
    """Calls answered, in order, by one fork of the kernel that has cleared its stack and the check modules first;
    the batch ends at the first call that does not answer with a value. One fork for a batch: the fork's garbage
    collection, which makes the cleared values unreachable, touches every object of the kernel and so copies its
    memory page by page (0.3 s of a 0.35 s call in a grading kernel)."""
    import os

    import utils.course.checks.core as core

    core.TRUSTED_FORKS.add(_forked_each.__code__)  # this fork, made inside the check's watch, is the grader's
    keep = _reachable((fn, calls, *_hooks()))
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns (it exits in _child_answer, whose frame it does not clear)
        os.close(read_fd)
        _child_answer(write_fd, fn, calls, keep)
    os.close(write_fd)
    try:
        with os.fdopen(read_fd, "rb") as stream:
            return _read_line(stream)["each"]
    finally:
        _reap(pid)


def _child_answer(write_fd: int, fn: Any, calls: list[tuple[Any, Any]], keep: set[int]) -> None:
    """The forked child of `_forked_each`: clear the stack below this frame and the check modules, answer each call
    from the check's random state (as a call of its own would start), write, and exit (never returning into the
    cleared frames)."""
    import gc
    import os
    import random

    import torch

    try:
        _child_setup()
        _clear_stack(sys._getframe(1), keep)
        gc.collect()
        replies = _answer_in_turn(fn, calls, (torch.get_rng_state(), random.getstate()), None)
        with os.fdopen(write_fd, "wb") as out:
            _send_line(out, {"each": replies})
    finally:
        os._exit(0)


def _reap(pid: int) -> None:
    import os
    import signal

    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _holds_arrays(value: Any) -> bool:
    """Whether arguments hold a tensor or an array: their storages (shared, or larger than the view) are part of
    the question, and plain data would lose them, so such a call goes to a fork of the kernel, which keeps them.
    (A loop, not a recursion: it runs under the check's watch, whose hook costs each Python call made here.)"""
    import numpy as np
    import torch

    todo = [(value, 0)]
    while todo:
        item, depth = todo.pop()
        kind = type(item)
        if kind in _SCALARS:
            continue
        if depth > 32 or issubclass(kind, torch.Tensor | np.ndarray):  # issubclass: no code of the learner's runs
            return True
        if kind in (list, tuple, set, frozenset):
            todo += [(v, depth + 1) for v in item]
        elif kind is dict:
            todo += [(v, depth + 1) for v in item.values()]
    return False


_SCALARS = (int, float, bool, str, type(None))


def _rng_data(torch_state: Any, random_state: tuple) -> dict[str, Any]:
    """torch's and Python's random states, as data."""
    import base64

    version, internal, gauss = random_state
    # tolist, not numpy: an exercise's watch may refuse numpy (2.1), and this runs inside it
    return {"torch": base64.b64encode(bytes(torch_state.tolist())).decode("ascii"),
            "random": [version, list(internal), gauss]}


def _rng_state(data: dict[str, Any]) -> tuple[Any, tuple]:
    """The (torch, Python) random states `_rng_data` wrote."""
    import base64

    import torch

    version, internal, gauss = data["random"]
    return torch.frombuffer(bytearray(base64.b64decode(data["torch"])), dtype=torch.uint8), (version, tuple(internal),
                                                                                             gauss)


def _answer_in_turn(fn: Any, calls: list[tuple[Any, Any]], rng: tuple | None, memory_limit_mb: float | None,
                    replies: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The replies to calls made one after another, each from the random state `rng` (torch's, Python's; None:
    as it is), appended to `replies`; the batch ends at the first call that does not answer with a value."""
    import random

    import torch

    replies = [] if replies is None else replies
    for args, kwargs in calls:
        if rng is not None:
            torch.set_rng_state(rng[0])
            random.setstate(rng[1])
        replies.append(_answer(fn, args, kwargs, memory_limit_mb))
        if "value" not in replies[-1]:
            break
    return replies


def _answer_each(fn: Any, calls: list[dict], watch: tuple | None, rng: tuple | None,
                 memory_limit_mb: float | None) -> list[dict[str, Any]]:
    """In the answer process: the replies to calls sent as data, under the check's watch (entered once for the
    batch), each call from the check's random state as in the kernel; the batch ends at the first call that does not
    answer with a value."""
    import contextlib

    import utils.course.checks.core as core
    from utils.course.checks import wire

    try:
        decoded = [([wire.decode(a) for a in call["args"]], {k: wire.decode(v) for k, v in call["kwargs"].items()})
                   for call in calls]
    except Exception as exc:  # noqa: BLE001 - a grader bug: say so in the answer
        return [{"raised": "RuntimeError", "message": f"arguments not read back: {exc}", "hits": []}]
    replies: list[dict[str, Any]] = []
    found: list[str] = []
    try:
        with core.own_work(*watch[0], **watch[1]) if watch else contextlib.nullcontext():
            if watch:
                found = core.WATCHING[-1].hits
            _answer_in_turn(fn, decoded, rng, memory_limit_mb, replies)
    except BaseException as exc:  # noqa: BLE001 - the watch failed the batch (its hits say why)
        replies[-1:] = [{"raised": type(exc).__name__, "message": str(exc)[:500]}]
    for reply in replies:
        reply["hits"] = list(found)
    return replies


def _observe_each(fn: Any, scene: Any, calls: list[dict], watch: tuple | None, rng: tuple | None,
                  memory_limit_mb: float | None) -> list[dict[str, Any]]:
    """In the answer process: the replies to scene(fn, *case) for cases sent as data, the check's watch open around
    the whole scene (what the learner's code returns, a scaler or a factory's object, is driven by the scene after
    the call; review s15's red team, A5), and, where the grader sealed this kernel, what the learner's code replaced
    in the course's modules, torch or numpy during the scene (a meter swapped inside the call, A7) as hits."""
    import functools

    replies = _answer_each(functools.partial(scene, fn), calls, watch, rng, memory_limit_mb)
    replaced = replaced_since_seal() if _finder() is not None else []
    if replaced:
        for reply in replies:
            reply["hits"] = [*reply.get("hits", []), f"a replacement of {replaced[0]} (what the check measures with)"]
    return replies


def _scene_name(scene: Any) -> str:
    """How a scene travels to the answer process and is named in a record: "module:qualname"."""
    return f"{scene.__module__}:{scene.__qualname__}"


class AnswerProcess:
    """A fork of the grading kernel made before the grader's cell opens the checks: it holds the learner's
    `functions` (by argument key) and nothing of the checks, and answers each call whose arguments are plain data."""

    def __init__(self, functions: dict[str, Any], memory_limit_mb: float | None, *, fork: bool = True) -> None:
        import gc
        import os

        self.functions, self.pid, self.watch_sent, self.rng_sent = functions, None, None, None
        self.fork = fork and hasattr(os, "fork")  # False: every call is answered here (a test's in-process run)
        if not functions or not self.fork:
            return
        import utils.course.checks.core as core

        core.TRUSTED_FORKS.add(AnswerProcess.__init__.__code__)  # the grader's, should a check's watch be open
        gc.collect()
        to_child, from_parent = os.pipe()
        to_parent, from_child = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: serves until the kernel closes its pipe
            try:
                os.close(from_parent)
                os.close(to_parent)
                _child_setup()
                self._serve(os.fdopen(to_child, "rb"), os.fdopen(from_child, "wb"), memory_limit_mb)
            finally:
                os._exit(0)
        os.close(to_child)
        os.close(from_child)
        self.pid, self.out, self.back = pid, os.fdopen(from_parent, "wb"), os.fdopen(to_parent, "rb")

    def _serve(self, requests: Any, replies: Any, memory_limit_mb: float | None) -> None:
        import json

        rng, watch = None, None
        for line in requests:
            request = json.loads(line)
            if "watch" in request:  # the watch the kernel's check has open: entered here for each exchange
                watch = _watch_parts(request["watch"])
            elif "rng" in request:
                rng = _rng_state(request["rng"])
            elif "scene" in request:
                _send_line(replies, {"each": _observe_each(self.functions[request["key"]], _resolve(request["scene"]),
                                                           request["each"], watch, rng, memory_limit_mb)})
            else:
                _send_line(replies, {"each": _answer_each(self.functions[request["key"]], request["each"], watch,
                                                          rng, memory_limit_mb)})

    def observe(self, key: str, fn: Any, scene: Any, case: tuple) -> dict[str, Any]:
        """The reply to scene(fn, *case) (utils.course.checks.core.observe), answered as a call is (`ask_each`),
        naming its scene, which the grader's replay checks."""
        return {**next(self.ask_each(key, fn, [(case, {})], scene=scene)), "scene": _scene_name(scene)}

    def ask(self, key: str, fn: Any, args: Any, kwargs: Any) -> dict[str, Any]:
        """The reply to fn(*args, **kwargs): a batch of one (`ask_each`)."""
        return next(self.ask_each(key, fn, [(args, kwargs)]))

    def ask_each(self, key: str, fn: Any, calls: list[tuple[Any, Any]], scene: Any = None
                 ) -> Iterator[dict[str, Any]]:
        """The replies to fn(*args, **kwargs) for each (args, kwargs) in `calls`, in order (or to scene(fn, *args)
        where a scene is given): the whole batch in one exchange with the answer process where every argument is
        plain data, else in one fork of the kernel (both stop at the first call that raises); in this process only
        where os.fork is missing, one call at a time as the caller takes its reply."""
        import functools
        import random

        import torch

        sent = self._as_data(key, fn, calls)
        fn = fn if scene is None else functools.partial(scene, fn)
        if sent is None and self.fork:  # arguments that are not plain data: one fork of the kernel for the batch
            yield from _forked_each(fn, calls)
            return
        if sent is None:
            for args, kwargs in calls:
                state = random.getstate()
                try:
                    with torch.random.fork_rng(devices=[]):  # the learner's random numbers are not the check's
                        reply = _answer(fn, args, kwargs, same_process=True)
                finally:
                    random.setstate(state)
                yield reply
            return
        for start in range(0, len(sent), BATCH):
            self._send({"key": key, "each": sent[start:start + BATCH],
                        **({} if scene is None else {"scene": _scene_name(scene)})})
            replies = _read_line(self.back)["each"]
            yield from replies
            if len(replies) < len(sent[start:start + BATCH]):
                return

    def _as_data(self, key: str, fn: Any, calls: list[tuple[Any, Any]]) -> list[dict[str, Any]] | None:
        """The calls as the answer process reads them, or None where that process cannot answer them (no process,
        another function than the one it holds, or arguments that are not plain data)."""
        from utils.course.checks import wire

        if self.pid is None or self.functions.get(key) is not fn or _holds_arrays(calls):
            return None
        try:
            return [{"args": [wire.encode(a) for a in args], "kwargs": {k: wire.encode(v) for k, v in kwargs.items()}}
                    for args, kwargs in calls]
        except wire.Unplain:
            return None

    def _send(self, request: dict[str, Any]) -> None:
        """A request to the answer process, after the check's watch and random state where they changed."""
        import random

        import torch

        import utils.course.checks.core as core

        watch = core.WATCHING[-1] if core.WATCHING else None
        if watch is not self.watch_sent:
            _send_line(self.out, {"watch": _watch_spec(watch)})
            self.watch_sent = watch
        rng = (torch.get_rng_state(), random.getstate())
        if self.rng_sent is None or rng[1] != self.rng_sent[1] or not torch.equal(rng[0], self.rng_sent[0]):
            _send_line(self.out, {"rng": _rng_data(*rng)})  # each call starts from the check's random state, as
            self.rng_sent = rng  # in the kernel
        _send_line(self.out, request)

    def close(self) -> None:
        if self.pid is not None:
            for stream in (self.out, self.back):
                try:
                    stream.close()
                except OSError:
                    pass
            _reap(self.pid)
            self.pid = None


def _learner_functions(namespace: dict, call: str) -> dict[str, Any]:
    """{argument key: the learner's function} of a check call, read from the learner's namespace (by the keys the
    Recorder uses: "0", "1"... for positional arguments, the name for keyword ones)."""
    _, arg_sources, kwarg_sources = parse_call(call)
    found = {}
    for key, source in [*((str(i), s) for i, s in enumerate(arg_sources)), *kwarg_sources.items()]:
        try:
            value = eval(source, namespace)  # noqa: S307 - the lab's own argument names, as the check cell has them
        except Exception:  # noqa: BLE001 - the check reports a name that is not defined
            continue
        if callable(value):
            found[key] = value
    return found


class Recorder:
    """Wraps the learner's functions: each call is answered by a process that holds no check (AnswerProcess), and
    its answer (or what it raised) is recorded as plain data and sent to the grader, tagged with the grading run's
    nonce."""

    def __init__(self, exercise: str, nonce: str, mime: str, send: Any, answers: AnswerProcess | None = None
                 ) -> None:
        self.exercise, self.nonce, self.mime, self.send = exercise, nonce, mime, send
        self.answers = answers if answers is not None else AnswerProcess({}, None)
        self.part = "public"
        self.pending: dict[tuple[str, str], list] = {}
        self.sent: dict[tuple[str, str], int] = {}

    def on_part(self, part: str) -> None:
        self.flush()
        self.part = part

    def wrap(self, key: str, fn: Any) -> Any:
        """The function the checks call in place of the learner's `fn`; its `answer_each` takes a batch of calls
        (core.answer_each)."""
        def recorded(*args: Any, **kwargs: Any) -> Any:
            return self._returned(key, self.answers.ask(key, fn, args, kwargs))

        def answer_each(calls: list[tuple]) -> list:
            replies = self.answers.ask_each(key, fn, [(tuple(args), {}) for args in calls])
            return [self._returned(key, reply) for reply in replies]

        def observe(scene: Any, case: tuple) -> Any:
            return self._returned(key, self.answers.observe(key, fn, scene, case))

        recorded.answer_each = answer_each
        recorded.observe = observe
        return recorded

    def _returned(self, key: str, reply: dict[str, Any]) -> Any:
        """One call's reply recorded, and handed to the check as the call's return value (or raised)."""
        import torch

        import utils.course.checks.core as core
        from utils.course.checks import wire

        hits = reply.pop("hits", [])
        if hits and core.WATCHING and not core.WATCHING[-1].hits:
            core.WATCHING[-1].hits.append(str(hits[0]))
        answered_here = "object" in reply or "exception" in reply
        kept, raised = reply.pop("object", None), reply.pop("exception", None)
        self._add(key, reply)
        if raised is not None:
            raise raised
        if answered_here:  # in this process (a test's run): the answer itself, as the kernel once had it
            return kept
        if "raised" in reply:
            raise _raised(str(reply["raised"]), str(reply.get("message", "")))
        if "unplain" in reply:
            raise TypeError(f"the function returned {reply['unplain']}, not plain data (numbers, strings, "
                            "lists, dicts, tensors)")
        with torch._C.DisableTorchFunction():  # reading the answer back is the grader's, not the learner's
            return wire.decode(reply["value"])

    def _add(self, key: str, item: dict) -> None:
        queue = self.pending.setdefault((self.part, key), [])
        queue.append(item)
        if len(queue) >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        for (part, key), items in list(self.pending.items()):
            if items:
                start = self.sent.get((part, key), 0)
                self.send({"kind": "records", "exercise": self.exercise, "nonce": self.nonce, "part": part,
                           "arg": key, "start": start, "items": list(items)})
                self.sent[(part, key)] = start + len(items)
                items.clear()

    def prepare(self, args: list, kwargs: dict) -> tuple[list, dict]:
        """The learner's arguments as the checks get them (functions wrapped), and sent to the grader as data."""
        from utils.course.checks import wire

        spec: dict[str, Any] = {}

        def one(key: str, value: Any) -> Any:
            if callable(value):  # a function or a class of the learner's: its calls or scenes are answered elsewhere
                spec[key] = {"function": True}
                return self.wrap(key, value)
            try:
                spec[key] = {"value": wire.encode(value)}
            except wire.Unplain as exc:
                spec[key] = {"unplain": str(exc)}
                return value
            return wire.decode(spec[key]["value"])  # the check gets data, never an object of the learner's

        new_args = [one(str(i), v) for i, v in enumerate(args)]
        new_kwargs = {k: one(k, v) for k, v in kwargs.items()}
        self.send({"kind": "args", "exercise": self.exercise, "nonce": self.nonce, "args": spec})
        return new_args, new_kwargs


def _quiet_learner_hooks() -> None:
    """Before the checks open: what the learner's earlier cells left to run inside them goes (trace and profile
    hooks, garbage-collector callbacks), so the learner's code never runs while the kernel holds a check."""
    import gc
    import threading

    sys.settrace(None)
    sys.setprofile(None)
    threading.settrace(None)
    threading.setprofile(None)
    gc.callbacks.clear()


def grade_exercise(namespace: dict, *, exercise: str, points: float, call: str, hidden_path: str | None,
                   memory_limit_mb: float | None, nonce: str, mime: str, modules: tuple = (),
                   warm_optimizer: bool = True) -> None:
    """Evaluate one exercise in the grading kernel with the real checks opened, and display its verdict and the
    learner's answers, tagged with the nonce, under the checks' MIME type."""
    from IPython.display import display

    global WARM_OPTIMIZER
    WARM_OPTIMIZER = warm_optimizer

    def send(data: dict) -> None:
        display({mime: data, "text/plain": f"[grader] exercise {exercise}: answers sent"}, raw=True)

    _quiet_learner_hooks()
    replaced = replaced_since_seal()
    answers = AnswerProcess(_learner_functions(namespace, call), memory_limit_mb)
    recorder = Recorder(exercise, nonce, mime, send, answers)
    try:
        with opened(list(modules)) as fresh:
            foreign_threads = fresh["utils.course.checks.core"].foreign_threads
            running = foreign_threads()  # a thread of the learner's alive as the grader's cell starts
            name = parse_call(call)[0]
            check = next((getattr(m, name) for m in fresh.values() if hasattr(m, name)), None)
            scope = {**namespace, name: check} if check is not None else namespace
            verdict = evaluate(scope, exercise, points, call, hidden_path, memory_limit_mb, on_part=recorder.on_part,
                               prepare=recorder.prepare)
            recorder.flush()
            running = running or foreign_threads()
            if running:
                verdict = {**verdict, "status": "failed", "points": 0.0, "void": True,
                           "message": f"a thread of the learner's code ({running[0]}) was still running after the "
                                      "check: its work is not the answer's"}
    except (Exception, SystemExit) as exc:  # a grader cell must always answer
        verdict = {"exercise": exercise, "status": "error", "points": 0.0, "max_points": points,
                   "message": f"the check raised {type(exc).__name__}: {exc}"[:300]}
    finally:
        recorder.answers.close()
    replaced += [name for name in replaced_since_seal() if name not in replaced]
    if replaced:  # no verdict at all: one shown here would pass through what the learner's code replaced, which
        # can rewrite it (a transform hook on the display publisher rewrote `replaced` itself to []); a cell with no
        # verdict scores 0, and this error names what was found (utils.course.grade: TAMPER_ERROR)
        raise GraderTampered(f"{TAMPER_ERROR} {', '.join(replaced[:5])}")
    verdict["replaced"] = replaced
    verdict["nonce"] = nonce
    verdict["kind"] = "verdict"
    text = f"[grader] Exercise {exercise}: {verdict['status']} ({verdict['points']:g}/{points:g}) {verdict['message']}"
    display({mime: verdict, "text/plain": text}, raw=True)


# ---------------------------------------------------------------------------------------------------------------
# The grader's side of a recorded exercise: the checks run in the grader's own process on the recorded answers.

class ReplayError(Exception):
    """The recorded answers do not fit the checks' calls (fewer answers than calls, or no answer at all)."""


def _raised(name: str, message: str) -> BaseException:
    """The exception a recorded answer raised, made again from its name: a builtin one as itself, torch's
    OutOfMemoryError as itself, any other as an Exception of that name."""
    import builtins

    if name in ("NotImplementedError", "NotAnswered"):
        return NotImplementedError(message)
    if name == "SystemExit":
        return SystemExit(message)
    found = getattr(builtins, name, None)
    if isinstance(found, type) and issubclass(found, Exception) and name not in ("KeyboardInterrupt",):
        return found(message)
    if name == "OutOfMemoryError":
        import torch

        return torch.OutOfMemoryError(message)
    return type(name if name.isidentifier() else "Error", (Exception,), {})(message)


def replay(exercise: str, points: float, call: str, hidden_path: str | None, args_spec: dict,
           records: dict[tuple[str, str], list], modules: tuple = ()) -> dict[str, Any]:
    """The exercise's verdict from the checks run here, in the grader's process, with each learner function
    replaced by the answers its calls gave in the kernel (`records[(part, arg)]`, in call order) and each learner
    value by the value the kernel sent."""
    from utils.course.checks import wire

    name, arg_sources, kwarg_sources = parse_call(call)
    state = {"part": "public", "used": {}}
    import importlib

    found = [getattr(m, name) for m in map(importlib.import_module, modules) if hasattr(m, name)]
    if not found:
        raise ReplayError(f"no check module of the lab ({', '.join(modules) or 'none'}) defines {name}")
    namespace: dict[str, Any] = {name: found[0]}

    def value_for(key: str) -> Any:
        spec = args_spec.get(key)
        if not isinstance(spec, dict):
            raise ReplayError(f"argument {key} was not sent")
        if spec.get("function"):
            def following(scene: str | None) -> dict:
                part = state["part"]
                used = state["used"].get((part, key), 0)
                items = records.get((part, key), [])
                if used >= len(items):
                    raise ReplayError("the kernel gave fewer answers than the checks asked for (it stopped early)")
                state["used"][(part, key)] = used + 1
                if items[used].get("scene") != scene:
                    raise ReplayError(f"the kernel's answer {used} of argument {key} is not the one the checks ask for "
                                      f"here ({scene or 'a call'})")
                return items[used]

            def answer(*_args: Any, **_kwargs: Any) -> Any:
                return returned(following(None))

            def observe(scene: Any, _case: tuple) -> Any:
                return returned(following(_scene_name(scene)))

            def returned(item: dict) -> Any:
                if "raised" in item:
                    raise _raised(str(item["raised"]), str(item.get("message", "")))
                if "unplain" in item:
                    raise TypeError(f"the function returned {item['unplain']}, not plain data (numbers, strings, "
                                    "lists, dicts, tensors)")
                return wire.decode(item["value"])

            answer.observe = observe
            return answer
        if "unplain" in spec:
            return _Unplain(str(spec["unplain"]))
        return wire.decode(spec["value"])

    call_args = []
    for i, _ in enumerate(arg_sources):
        namespace[f"_answer_{i}"] = value_for(str(i))
        call_args.append(f"_answer_{i}")
    for k in kwarg_sources:
        namespace[f"_answer_{k}"] = value_for(k)
        call_args.append(f"{k}=_answer_{k}")
    return evaluate(namespace, exercise, points, f"{name}({', '.join(call_args)})", hidden_path, None,
                    on_part=lambda part: state.__setitem__("part", part))


class _Unplain:
    """What the grader has for an answer the kernel could not send as data: it equals nothing."""

    def __init__(self, what: str) -> None:
        self.what = what

    def __repr__(self) -> str:
        return f"<{self.what}, not plain data>"

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = None

