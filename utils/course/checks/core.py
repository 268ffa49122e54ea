"""One verdict per exercise: passed; failed with expected vs got and a hint; not attempted; or error.

A check never lets a traceback out: a learner sees one clear line. The verdict is also published under
its own MIME type, which is what the grader reads (from the check cells it inserted itself).

A learner's check runs the PUBLIC cases only: the grader also runs held-out cases (grading/hidden/), so a
passing verdict says "public checks passed", never that everything passed.
"""

from __future__ import annotations

import _thread
import contextlib
import html
import inspect
import os
import random
import sys
import threading
import types
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch

from utils.course.checks.not_run import install_not_run_handler
from utils.course.checks.protocol import CHECK_MIME, REASONING_TERMS, STRICT_ENV
from utils.course.checks.wire import Unplain, plain
from utils.validate import check_number

STATUSES = ("passed", "failed", "not attempted", "error")
PASSED_MESSAGE = ("The grader also runs held-out cases (other shapes, seeds, dtypes or budgets): make sure your "
                  "code is general, not tuned to these cases.")


class NotAnswered(NotImplementedError):
    """A top-level answer (e.g. `prediction = ...`) still holds the lab's placeholder."""


class CheckFailed(Exception):
    """Raised inside a check body: what was expected, what came back, and a hint."""

    def __init__(self, expected: Any, got: Any, hint: str = "") -> None:
        super().__init__(f"expected {expected}, got {got}")
        self.expected, self.got, self.hint = expected, got, hint


@dataclass(frozen=True)
class Verdict:
    exercise: str
    status: str
    message: str
    points: float
    max_points: float

    def __str__(self) -> str:
        mark = {"passed": "PUBLIC CHECKS PASSED", "failed": "NOT YET", "not attempted": "NOT ATTEMPTED",
                "error": "ERROR"}
        worth = f"{self.max_points:g} point{'' if self.max_points == 1 else 's'}"
        return f"Exercise {self.exercise} ({worth}): {mark[self.status]}. {self.message}"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return {"text/plain": str(self), CHECK_MIME: asdict(self), "text/html": self.html()}

    def html(self) -> str:
        """The verdict as JupyterLab shows it: the status as a coloured label, the message in the notebook's own
        text font and colour, wrapped between words (a long formula may break after a symbol, never mid-word)."""
        colour = {"passed": "#1a7f37", "failed": "#9a3412", "not attempted": "#57606a", "error": "#cf222e"}
        mark = {"passed": "PUBLIC CHECKS PASSED", "failed": "NOT YET", "not attempted": "NOT ATTEMPTED",
                "error": "ERROR"}
        worth = f"{self.max_points:g} point{'' if self.max_points == 1 else 's'}"
        return (f'<div class="course-check course-check-{self.status.replace(" ", "-")}" style="font-family:inherit;'
                f"white-space:normal;word-break:normal;overflow-wrap:break-word;hyphens:none;line-height:1.5;"
                f'border-left:4px solid {colour[self.status]};padding:2px 0 2px 10px">'
                f'<strong style="color:{colour[self.status]}">Exercise {html.escape(self.exercise)} ({worth}): '
                f"{mark[self.status]}.</strong> {html.escape(self.message)}</div>")


def run_check(exercise: str, body: Callable[[], Any], *, points: float = 1.0) -> Verdict:
    """Run a check body with fixed seeds (the learner's RNG state is restored afterwards).

    With COURSE_CHECKS_STRICT=1 (set by the test suite for the solutions) anything but a pass raises
    AssertionError, so nbval fails on a solution that does not pass its own check.
    """
    verdict = _run_check(exercise, body, points)
    if os.environ.get(STRICT_ENV) == "1" and verdict.status != "passed":
        raise AssertionError(str(verdict))
    return verdict


def _run_check(exercise: str, body: Callable[[], Any], points: float) -> Verdict:
    if not isinstance(exercise, str) or not exercise:
        raise ValueError(f"exercise must be a non-empty id like '1.2', got {exercise!r}")
    if not callable(body):
        raise TypeError(f"body must be callable, got {type(body).__name__}")
    points = check_number("points", points, positive=True)
    state = random.getstate()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            random.seed(0)
            body()
    except NotAnswered as exc:
        return Verdict(exercise, "not attempted", str(exc), 0.0, points)
    except NotImplementedError:
        return Verdict(exercise, "not attempted", "the exercise still raises NotImplementedError: "
                       "replace the raise with your code, run that cell, then this one.", 0.0, points)
    except CheckFailed as failed:
        hint = f" Hint: {failed.hint}" if failed.hint else ""
        return Verdict(exercise, "failed", f"expected {failed.expected}, got {failed.got}.{hint}", 0.0, points)
    except SystemExit:
        return Verdict(exercise, "error", "your code called sys.exit(): remove it.", 0.0, points)
    except Exception as exc:  # the learner's code raised: one line, not a traceback wall
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return Verdict(exercise, "error", f"your code raised {type(exc).__name__}: {first}", 0.0, points)
    finally:
        random.setstate(state)
    return Verdict(exercise, "passed", PASSED_MESSAGE, points, points)


def _codes(target: Any) -> set[Any]:
    """The code objects a call to `target` runs first: a function's (and what it wraps, and the functions nested in
    it), a class's methods. A string "module:attribute" names a library's function; it is watched only if the
    learner's code imported that module (nothing is imported here)."""
    if isinstance(target, str):
        module, _, name = target.partition(":")
        loaded = sys.modules.get(module)
        return _codes(getattr(loaded, name)) if loaded is not None and hasattr(loaded, name) else set()
    if isinstance(target, type):
        found: set[Any] = set()
        for member in vars(target).values():  # the class's own methods (its bases are shared with other code)
            member = getattr(member, "__func__", member)  # staticmethod / classmethod
            member = getattr(member, "fget", member)  # property
            if callable(member) and not isinstance(member, type):
                found |= _codes(member)
        return found
    found = set()
    while target is not None:
        code = getattr(target, "__code__", None)
        if code is not None:
            found |= _nested(code)
        target = getattr(target, "__wrapped__", None)
    return found


def _top_code(code: Any) -> bool:
    """Whether a code object is a named function or method's own (not a lambda, comprehension or inner function)."""
    return not code.co_name.startswith("<") and "<locals>" not in getattr(code, "co_qualname", "")


def _top_codes(targets: tuple) -> set[Any]:
    """The code objects of the targets' own named functions and methods (not what is nested in them)."""
    return {c for t in targets if not inspect.isbuiltin(t) for c in _codes(t) if _top_code(c)}


def _nested(code: Any) -> set[Any]:
    """A code object and every code object nested in it (its inner functions, lambdas and comprehensions)."""
    found = {code}
    for const in code.co_consts:
        if inspect.iscode(const):
            found |= _nested(const)
    return found


MIN_SIGNATURE_BYTES = 48  # shorter bytecode (a one-line formula) is too likely to be the learner's own honest code


def signature(code: Any) -> tuple | None:
    """What a copy of a function's code keeps whatever it is renamed to (`code.replace(co_name=...)`, a new
    `types.FunctionType`, or its source pasted under another name): its bytecode and the names and constants it
    uses, its docstring aside (a copy with only its docstring changed is still a copy, review 34c, A4), and its
    arguments' shape (sympy's `_global_parameters.__init__(self, **kwargs)` has the bytecode of GradScaler's
    `__setstate__(self, state)`, `self.__dict__.update(...)`). None for bytecode too short to tell a copy from an
    honest one-liner. Python 3.11 compiles `torch.autocast(...)` differently where the module imports torch (the
    check's) than where it does not (a cell): a pasted reference then differs, and so does an honest fix typed like
    it, which a debug exercise's reference is; both are the learner's to write (review s15's red team, A9)."""
    if len(code.co_code) < MIN_SIGNATURE_BYTES:
        return None
    consts = [signature(c) if inspect.iscode(c) else repr(c) for c in code.co_consts]
    if consts and isinstance(code.co_consts[0], str) and code.co_name != "<module>":
        consts[0] = "a docstring"  # a function's first constant is its docstring when it has one (or None)
    return (code.co_code, code.co_names, tuple(consts), code.co_argcount, code.co_posonlyargcount,
            code.co_kwonlyargcount, code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS))


@dataclass(frozen=True)
class Watch:
    """What an `own_work` block watches (its targets, dtypes, modules and code objects) and what it found so far."""

    targets: tuple
    dtypes: tuple
    modules: tuple
    codes: frozenset
    hits: list
    direct: tuple = ()  # called from the learner's own code only (own_work's `direct`)
    direct_codes: frozenset = frozenset()


WATCHING: list[Watch] = []  # the own_work blocks running now, innermost last


# What a learner's call may not do while a check watches it: switch the watch off or start threads it cannot see.
_WATCH_SWITCHES = (sys.setprofile, sys.settrace)
# ... or start a process: the watch runs in this one, so a reference called in a child is not seen (review 34c, A5).
# os.fork (multiprocessing's fork), _posixsubprocess.fork_exec (subprocess, multiprocessing's spawn), the rest direct.
_PROCESS_STARTS = tuple(f for f in (getattr(os, n, None) for n in ("fork", "forkpty", "posix_spawn", "posix_spawnp",
                                                                    "system")) if f is not None)
try:
    import _posixsubprocess

    _PROCESS_STARTS += (_posixsubprocess.fork_exec,)
except ImportError:  # Windows
    pass
# The code objects that may start a process inside a watched block: the grader's own forks (grading/runner.py
# registers them), which answer the learner's calls under the same watch.
TRUSTED_FORKS: set[Any] = set()


def _fork_seen() -> None:
    """os.register_at_fork's `before` hook: a fork inside a watched block that the watch did not see called (os.fork
    reached from C, e.g. through functools.partial: review s16's red team) is a hit all the same, unless the Python
    frame that forked is the grader's."""
    if not WATCHING:
        return
    frame = sys._getframe(1)
    if frame.f_code in TRUSTED_FORKS:
        return
    hit = "a call to os.fork (a process the check cannot watch)"
    if hit not in WATCHING[-1].hits:
        WATCHING[-1].hits.append(hit)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_fork_seen)
# ... or read the interpreter's frames: from the learner's function, the check that called it is one frame up, with
# its reference's arguments and expected values in its locals (review 34c, A6: 7.4's budget read that way). Python's
# own modules, the installed packages and the course's checks and grader read frames for their own work.
_FRAME_READERS = (sys._getframe, sys._current_frames)
_FRAME_READER_CODES = frozenset(f.__code__ for f in (inspect.currentframe, inspect.stack, inspect.getouterframes,
                                                      inspect.trace))
_COURSE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__)))))
_TRUSTED_CODE_DIRS = tuple(sorted({os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
                                  | {os.path.join(_COURSE_ROOT, d) + os.sep for d in ("utils", "grading")}))


def _learners(code: Any) -> bool:
    """Whether a code object is the learner's: not Python's, an installed package's, or the course's checks and
    grader (a cell's code lives in the kernel's temporary folder)."""
    return not os.path.realpath(code.co_filename).startswith(_TRUSTED_CODE_DIRS)
# Threads that belong to the kernel, the test runner or a library's own machinery (by the module of the thread's
# class or target); any other Python thread alive when a watched call starts could run a reference unseen.
_KERNEL_THREAD_MODULES = ("ipykernel", "IPython", "jupyter_client", "zmq", "tornado", "traitlets", "comm", "debugpy",
                          "pydevd", "_pydevd", "pytest_timeout", "_pytest", "xdist", "execnet", "torch.utils.data",
                          "asyncio", "anyio", "tqdm")


def _thread_module(thread: threading.Thread) -> str:
    target = getattr(thread, "_target", None)
    if type(thread) is threading.Thread and target is not None:
        return str(getattr(target, "__module__", "") or "")
    return type(thread).__module__


def foreign_threads() -> list[str]:
    """The names of the Python threads, other than the calling one, that are neither the kernel's nor the test
    runner's: a thread started by the learner's code (a thread pool left running, a timer)."""
    me = threading.get_ident()
    found = []
    known = {t.ident: t for t in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        if ident == me:
            continue
        thread = known.get(ident)
        if thread is None:  # started with _thread.start_new_thread: no threading object to vouch for it, but its
            # stack may (pytest-xdist's execnet runs its IO threads so)
            modules = []
            while frame is not None:
                modules.append(str(frame.f_globals.get("__name__", "")))
                frame = frame.f_back
            if not any(m.startswith(_KERNEL_THREAD_MODULES) for m in modules):
                found.append(f"thread {ident}")
        elif thread is not threading.main_thread() and not _thread_module(thread).startswith(_KERNEL_THREAD_MODULES):
            found.append(thread.name)
    return found


# torchao's per-tensor FP8 cast and scale: the library implementation of the FP8 quantisation exercises (2.5, 8.3)
TORCHAO_FP8 = ("torchao.float8.float8_utils:to_fp8_saturated", "torchao.float8.float8_utils:amax_to_scale")


class _DtypeWatch(torch.overrides.TorchFunctionMode):
    """Records the first torch call that names one of `dtypes` (a cast or a bit view into that format), takes a
    tensor of one, or makes one (`.half()`, which names no dtype: review 34c, A3)."""

    def __init__(self, dtypes: set[torch.dtype], hits: list[str]) -> None:
        super().__init__()
        self.dtypes, self.hits = dtypes, hits

    def _format(self, values: Any) -> torch.dtype | None:
        for v in values:
            if isinstance(v, torch.dtype) and v in self.dtypes:
                return v
            if isinstance(v, torch.Tensor) and v.dtype in self.dtypes:
                return v.dtype
            if isinstance(v, list | tuple) and (found := self._format(v)) is not None:
                return found
        return None

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        named = None if self.hits else self._format((*args, *kwargs.values()))
        out = func(*args, **kwargs)
        if not self.hits and (named := named or self._format((out,))) is not None:
            self.hits.append(f"torch's {getattr(func, '__name__', 'cast')}(...) into {named}")
        return out


def _module_of(code: Any) -> str:
    return code.co_filename.replace("\\", "/")


@contextlib.contextmanager
def own_work(*targets: Any, dtypes: tuple[torch.dtype, ...] = (), modules: tuple[str, ...] = (), what: str = "",
             codes: tuple[Any, ...] = (), direct: tuple[Any, ...] = (), direct_codes: tuple[Any, ...] = ()
             ) -> Iterator[None]:
    """Fail the check when the code run inside the block calls any of `targets` (Python functions or classes, or
    builtins such as struct.unpack), a copy of one of them (the same bytecode under another name or code object),
    any torch function with one of `dtypes` as an argument, or anything of the packages named in `modules` (e.g.
    "numpy", whose casts and bit views decode a format for the learner): the check's own reference, or the library
    implementation the exercise asks the learner to write.

    Python calls are seen by a profile hook (it sees a function however it was imported, wrapped or renamed), set
    in the calling thread and in every thread started inside the block. The block also fails when the code switches
    the hook off (sys.setprofile, sys.settrace), starts a thread outside `threading` or a process (os.fork,
    subprocess, multiprocessing: the hook does not follow it; the grader's own forks excepted), or when a thread of the
    learner's (a pool left running) is alive as the block starts: such a thread could run the reference unseen.
    A submission that hands back the reference's answer by calling it earns nothing. Wrap only the learner's calls.

    `codes`: more code objects to watch (and to match copies of), for a process that has the targets' code but not
    the targets (the grading kernel's answer process, grading/runner.py). `direct` (and `direct_codes`, their code
    objects): functions, classes or builtins that count only when the learner's own code calls them, for the tools
    a check measures with that libraries use too (a saved-tensor hook: torch's checkpoint sets one; the learner's
    own one blinds the check's meter). While the block runs, WATCHING holds what
    it watches and what it found, so that a learner's call made in another process can be watched alike.
    """
    builtins = {id(t) for t in targets if inspect.isbuiltin(t)}
    direct_builtins = {id(t) for t in direct if inspect.isbuiltin(t)}
    direct_set = {c for c in set(direct_codes).union(*(_codes(t) for t in direct if not inspect.isbuiltin(t)))
                  if not c.co_filename.endswith(_CONTEXTLIB)}  # a @contextmanager's shared wrapper is not it
    # a C type's method (struct.Struct.unpack): every bound copy of it, on any instance of the type
    methods = {(t.__objclass__, t.__name__) for t in targets if inspect.ismethoddescriptor(t)}
    extra = set().union(*(_nested(c) for c in codes)) if codes else set()
    codes: set[Any] = extra.union(*(_codes(t) for t in targets
                                    if not inspect.isbuiltin(t) and not inspect.ismethoddescriptor(t)))
    if not codes and not builtins and not methods and not dtypes and not modules and not direct_set \
            and not direct_builtins:
        raise ValueError("own_work needs a Python function, a class, a builtin, a dtype or a module to watch")
    # copies are matched on the targets' own functions (a lambda or a generator expression is too short and too
    # common to tell apart from the learner's; a copied function still runs the originals' nested code objects)
    signatures = {s for s in map(signature, _top_codes(targets) | {c for c in extra if _top_code(c)})
                  if s is not None}
    folders = tuple(f"/{m.replace('.', '/')}/" for m in modules)
    hits: list[str] = []
    seen: dict[int, tuple] = {}  # id(code) -> what `known` found: each code object looked at once
    previous = sys.getprofile()
    previous_thread_hook = getattr(threading, "_profile_hook", None)
    start_thread = threading.Thread.start.__code__
    # The hook runs at every call of the block (a decode over 65,536 bit patterns makes millions): a C call is
    # looked at further only when it is one of the functions below (one set lookup), or when methods or modules
    # are watched, which need its type or module.
    watched_c = builtins | direct_builtins | {id(f) for f in (*_WATCH_SWITCHES, _thread.start_new_thread,
                                                              *_FRAME_READERS, *_PROCESS_STARTS)}
    c_slow = bool(methods or modules)

    def known(code: Any) -> tuple:
        """(code, its signature where copies are watched, whether a watched module's file holds it), kept in `seen`
        (which keeps the code alive, so that its id is not reused)."""
        found = seen[id(code)] = (code, signature(code) if signatures else None,
                                  bool(folders) and any(f in _module_of(code) for f in folders))
        return found

    def profile(frame: Any, event: str, arg: Any) -> None:
        if not hits:
            if event == "call":
                code = frame.f_code
                _, copied, in_module = seen.get(id(code)) or known(code)
                if code in codes or (copied is not None and copied in signatures):
                    hits.append(f"a call to {getattr(code, 'co_qualname', code.co_name)}")
                elif code in _FRAME_READER_CODES and frame.f_back is not None and _learners(frame.f_back.f_code):
                    hits.append(f"a call to inspect.{code.co_name} (reading the frames of the check that calls "
                                "your answer)")
                elif in_module:
                    hits.append(f"a call to {code.co_name} of {modules[0]}")
                elif code in direct_set and _called_by_learner(frame):
                    hits.append(f"a call to {getattr(code, 'co_qualname', code.co_name)} from your code (it would "
                                "change what the check measures)")
            elif event == "c_call" and (c_slow or id(arg) in watched_c) and not _graders(frame):
                special = id(arg) in watched_c
                if special and id(arg) in direct_builtins and _learners(frame.f_code):
                    hits.append(f"a call to {getattr(arg, '__name__', repr(arg))} from your code (it would "
                                "change what the check measures)")
                elif (special and id(arg) in builtins) or (methods and _bound_to(arg, methods)):
                    hits.append(f"a call to {getattr(arg, '__qualname__', repr(arg))}")
                elif special and any(arg is s for s in _WATCH_SWITCHES) and frame.f_code is not _OWN_WORK_CODE:
                    hits.append(f"a call to sys.{arg.__name__} (switching off the check's watch)")
                elif special and arg is _thread.start_new_thread and frame.f_code is not start_thread:
                    hits.append("a call to _thread.start_new_thread (a thread the check cannot watch)")
                elif special and any(arg is r for r in _FRAME_READERS) and _learners(frame.f_code):
                    hits.append(f"a call to sys.{arg.__name__} (reading the frames of the check that calls your "
                                "answer)")
                elif special and any(arg is s for s in _PROCESS_STARTS) and frame.f_code not in TRUSTED_FORKS:
                    hits.append(f"a call to {getattr(arg, '__module__', None) or 'os'}.{arg.__name__} (a process the "
                                "check cannot watch)")
                elif modules and str(getattr(arg, "__module__", "") or getattr(
                        type(getattr(arg, "__self__", None)), "__module__", "")).startswith(modules):
                    name = getattr(arg, "__qualname__", getattr(arg, "__name__", "function"))
                    hits.append(f"a call to {modules[0]}'s {name}")
        if previous is not None:
            previous(frame, event, arg)

    failure: BaseException | None = None
    mode = _DtypeWatch(set(dtypes), hits) if dtypes else contextlib.nullcontext()
    running = foreign_threads()
    if running:
        hits.append(f"a thread of your code ({running[0]}) running while the check calls your answer (a thread's "
                    "calls are not watched: shut your thread pools down, or do the work in the calling thread)")
    WATCHING.append(Watch(targets, tuple(dtypes), tuple(modules), frozenset(codes), hits, tuple(direct),
                          frozenset(direct_set)))
    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        with mode:
            yield
    except BaseException as exc:  # a delegated call that also failed reports the delegation
        failure = exc
    finally:
        replaced = sys.getprofile() is not profile
        sys.setprofile(previous)
        WATCHING.pop()
        threading.setprofile(previous_thread_hook)
    if replaced and not hits:
        hits.append("a replaced profile hook (switching off the check's watch)")
    if hits:
        raise CheckFailed("your own code" + (f" for {what}" if what else ""), hits[0],
                          "the exercise asks you to write this yourself: the check's reference and the library's "
                          "implementation are what your answer is compared with, not a way to produce it.")
    if failure is not None:
        raise failure


_CONTEXTLIB = os.path.join("", "contextlib.py")


def _called_by_learner(frame: Any) -> bool:
    """Whether the function running in `frame` was called by the learner's code, through contextlib where it is a
    @contextmanager entered by a `with` of the learner's."""
    caller = frame.f_back
    while caller is not None and caller.f_code.co_filename.endswith(_CONTEXTLIB):
        caller = caller.f_back
    return caller is not None and _learners(caller.f_code)


def _bound_to(method: Any, methods: set[tuple[type, str]]) -> bool:
    """Whether a C method bound to an object is one of `methods` ((class, name)), of the object's class or of a
    class it derives from (a tensor's `item` is torch._C.TensorBase's)."""
    name = getattr(method, "__name__", "")
    return any((cls, name) in methods for cls in type(getattr(method, "__self__", None)).__mro__)


_OWN_WORK_CODE = own_work.__wrapped__.__code__  # its own sys.setprofile calls are not the learner's
# The grader's own work inside a watched call: a fork of the kernel answering it runs under the kernel's watch, and
# its answer is encoded there (a tensor's bytes through numpy) before the watch's findings are read.
_GRADER_FILES = (os.path.join("grading", "runner.py"), os.path.join("checks", "wire.py"))
_DTYPE_WATCH_CODE = _DtypeWatch.__torch_function__.__code__


def _graders(frame: Any) -> bool:
    """Whether a C call is made by the grader's own code (through the dtype watch's mode, its caller's)."""
    if frame.f_code is _DTYPE_WATCH_CODE:
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename.endswith(_GRADER_FILES)


def guarded(fn: Any, *targets: Any, dtypes: tuple[torch.dtype, ...] = (), modules: tuple[str, ...] = (),
            direct: tuple[Any, ...] = ()) -> Any:
    """`fn` (a learner's function) with each call run under `own_work(*targets, dtypes=dtypes, modules=modules,
    direct=direct)`; anything that is not callable comes back unchanged, for the check to report."""
    if not callable(fn):
        return fn

    def call(*args: Any, **kwargs: Any) -> Any:
        with own_work(*targets, dtypes=dtypes, modules=modules, direct=direct):
            return fn(*args, **kwargs)

    remote = fn.__dict__.get("observe") if type(fn) is types.FunctionType else None  # no learner's code runs
    if remote is not None:  # the grader's recorder: its scene runs elsewhere, under this watch (observe)
        def observe_remote(scene: Callable, case: tuple) -> Any:
            with own_work(*targets, dtypes=dtypes, modules=modules, direct=direct):
                return remote(scene, case)

        call.observe = observe_remote
    return call


def answer_each(fn: Callable, calls: list[tuple]) -> list:
    """fn(*args) for each argument tuple in `calls`, in order: a learner's answers to a batch of cases (a call that
    raises ends the batch there). In a grading kernel the learner's function is the grader's recorder, which takes
    the whole batch to its answer process in one exchange (its `answer_each`, grading/runner.py): 65,536 calls cost
    seconds, not half a minute. Elsewhere each case is one plain call."""
    batch = fn.__dict__.get("answer_each") if type(fn) is types.FunctionType else None  # no learner's code runs
    if batch is not None:
        return batch(calls)
    return [fn(*args) for args in calls]


def observe(scene: Callable, fn: Any, *case: Any) -> Any:
    """`scene(fn, *case)`: what a learner's function (or class) does in one of a check's scenarios, as plain data
    (gradients, statistics, counts, bytes), for the check to compare with the same scene run with its reference.
    A scene lives in utils.course.scenes, which holds no reference, truth or expected value. In a grading kernel
    `fn` is the grader's recorder, whose `observe` runs the scene in its answer process, where the learner's code
    runs and no check is (grading/runner.py); elsewhere the scene runs here."""
    remote = fn.__dict__.get("observe") if type(fn) is types.FunctionType else None  # no learner's code runs
    if remote is not None:
        return remote(scene, case)
    return scene(fn, *case)


def answered(value: Any, name: str) -> Any:
    """The learner's answer `value`, or NotImplementedError (verdict "not attempted") while it is still `...`.

    A lab replaces a top-level answer such as `prediction = 1234` with `prediction = ...`; a check calls
    `answered(prediction, "prediction")` before using it.
    """
    if value is Ellipsis:
        raise NotAnswered(f"`{name}` is still `...`: write your answer in its place, run that cell, then this one.")
    return value


def expect_reasoning(reasoning: Any, exercise: str) -> None:
    """Fail the check unless `reasoning` is there: a string of the learner's, not the lab's placeholder.

    A reasoning is read, not counted: it never earns or costs the value's points. The grader (utils.course.grade) lists
    every reasoning with its text for the instructor, who gives its point by hand; one that names fewer than two of
    the exercise's quantities (REASONING_TERMS) is marked so in that list."""
    words = answered(reasoning, "reasoning")
    if exercise not in REASONING_TERMS:
        raise ValueError(f"exercise {exercise!r} has no reasoning terms in REASONING_TERMS")
    if not isinstance(words, str) or not words.strip():
        raise CheckFailed("a reasoning of a sentence or two, as a string (your instructor reads it)",
                          repr(words)[:200])


def expect_equal(got: Any, expected: Any, what: str, hint: str = "") -> None:
    """Fail the check unless got == expected (same type family for numbers). `got` must be plain data (numbers,
    strings, lists, tensors...: utils.course.checks.wire): an object whose `__eq__` says yes to anything is not an
    answer."""
    try:
        plain(got)
    except Unplain as exc:
        raise CheckFailed(f"{what} = {expected!r}", f"{exc} (an answer is plain data: numbers, strings, lists, "
                          "dicts, tensors)", hint) from None
    if got != expected or (type(got) is bool and type(expected) is not bool):
        raise CheckFailed(f"{what} = {expected!r}", repr(got), hint)


def expect_close(got: torch.Tensor | float, expected: torch.Tensor | float, what: str, *, rtol: float = 1e-5,
                 atol: float = 1e-8, hint: str = "") -> None:
    """Fail the check unless got is close to expected (tensors: same shape, allclose)."""
    got_t, exp_t = torch.as_tensor(got), torch.as_tensor(expected)
    if got_t.shape != exp_t.shape:
        raise CheckFailed(f"{what} of shape {tuple(exp_t.shape)}", f"shape {tuple(got_t.shape)}", hint)
    if not torch.allclose(got_t.double(), exp_t.double(), rtol=rtol, atol=atol):
        err = (got_t.double() - exp_t.double()).abs().max().item()
        raise CheckFailed(f"{what} within rtol={rtol:g}, atol={atol:g}", f"a max abs error of {err:.3g}", hint)


install_not_run_handler()  # utils/course/checks/not_run.py: a check run before its cells names the cell to run first
