"""A check cell run before the cells it needs says which cell to run first, in one line, instead of a NameError; a
copy of a lab made before the course moved a module says how to get a fresh one, instead of a ModuleNotFoundError.

Light on purpose (no torch): the course's kernel imports it at start (utils/course/lab_settings/jupyter/kernels/python3,
the kernel `make lab` starts), so that even a check cell run in a fresh kernel, before the lab's import cell, is
answered; utils.course.checks.core installs it too, for kernels started any other way.
"""

from __future__ import annotations

import importlib.util
import re
from typing import Any

_CHECK_CALL = re.compile(r"^\s*(?:print\()?check_\w+\(", re.M)


def message(name: str) -> str:
    """What a check cell that hit `name` undefined says."""
    if str(name).startswith("check_"):
        return (f"NOT ATTEMPTED: `{name}` is not defined yet: run the lab's first code cell (the one that imports "
                "the checks, `from utils.course.checks... import ...`), then the exercise cell above, then this check. "
                "(Run > Run All Above does all of it.)")
    return (f"NOT ATTEMPTED: `{name}` is not defined yet: run the exercise cell above this check first (it defines "
            "your answer), then this check.")


def moved_message(name: str) -> str | None:
    """What an import of `name` says when the course moved that module (its package now has ledger/, lessons/ and
    course/ halves, issue 38): where it is now and how to get a fresh copy of the lab; None for any other module."""
    if not str(name).startswith("utils.") or str(name).startswith(("utils.ledger", "utils.lessons", "utils.course")):
        return None
    rest = str(name).removeprefix("utils.")
    for half in ("lessons", "course", "ledger"):
        try:
            found = importlib.util.find_spec(f"utils.{half}.{rest}") is not None
        except ImportError:
            found = False
        if found:
            lab = re.search(r"\d\d", rest)
            number = lab.group(0) if lab else "NN (the lab's number)"
            return (f"`{name}` moved to `utils.{half}.{rest}`: this notebook was copied before the course reorganised "
                    f"its package (some names moved between its halves too). Take a fresh copy of the lab with "
                    f"`make reset-lab N={number}` (yours is kept in my-labs/.previous/) and copy your answers "
                    "into it.")
    return None


def _not_run_yet(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: int | None = None) -> Any:
    """IPython's handler for a NameError (in a check cell: an earlier cell has not run) and a ModuleNotFoundError (a
    module the course moved): say so in one line instead of a traceback. Anything else: IPython's usual traceback."""
    if isinstance(value, ModuleNotFoundError):
        name = getattr(value, "name", None) or ""  # the first missing package: utils.checks for utils.checks.ch03
        cell = (shell.user_ns.get("In") or [""])[-1] or ""
        named = [m for m in re.findall(r"\b(utils(?:\.\w+)+)", cell) if m == name or m.startswith(name + ".")]
        moved = moved_message(max(named, key=len) if named else name)
        if moved:
            print(moved)
            return None
        return shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
    cells = shell.user_ns.get("In") or [""]
    if _CHECK_CALL.search(cells[-1] or ""):
        print(message(getattr(value, "name", None) or str(value)))
        return None
    return shell.showtraceback((etype, value, tb), tb_offset=tb_offset)


def install_not_run_handler() -> bool:
    """In a Jupyter kernel, make a check cell run before its exercise cell say "not attempted: run ... first"
    instead of a NameError traceback, and an import of a module the course moved say where it is now; returns
    whether a handler was installed (False outside IPython)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    shell.set_custom_exc((NameError, ModuleNotFoundError), _not_run_yet)
    return True


install_not_run_handler()
