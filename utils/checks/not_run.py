"""A check cell run before the cells it needs says which cell to run first, in one line, instead of a NameError.

Light on purpose (no torch): the course's kernel imports it at start (utils/lab_settings/jupyter/kernels/python3,
the kernel `make lab` starts), so that even a check cell run in a fresh kernel, before the lab's import cell, is
answered; utils.checks.core installs it too, for kernels started any other way.
"""

from __future__ import annotations

import re
from typing import Any

_CHECK_CALL = re.compile(r"^\s*(?:print\()?check_\w+\(", re.M)


def message(name: str) -> str:
    """What a check cell that hit `name` undefined says."""
    if str(name).startswith("check_"):
        return (f"NOT ATTEMPTED: `{name}` is not defined yet: run the lab's first code cell (the one that imports "
                "the checks, `from utils.checks... import ...`), then the exercise cell above, then this check. "
                "(Run > Run All Above does all of it.)")
    return (f"NOT ATTEMPTED: `{name}` is not defined yet: run the exercise cell above this check first (it defines "
            "your answer), then this check.")


def _not_run_yet(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: int | None = None) -> Any:
    """IPython's handler for a NameError: in a check cell it means an earlier cell has not run; say so in one line
    instead of a traceback. Anywhere else, IPython's usual traceback."""
    cells = shell.user_ns.get("In") or [""]
    if _CHECK_CALL.search(cells[-1] or ""):
        print(message(getattr(value, "name", None) or str(value)))
        return None
    return shell.showtraceback((etype, value, tb), tb_offset=tb_offset)


def install_not_run_handler() -> bool:
    """In a Jupyter kernel, make a check cell run before its exercise cell say "not attempted: run ... first"
    instead of a NameError traceback; returns whether a handler was installed (False outside IPython)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    shell.set_custom_exc((NameError,), _not_run_yet)
    return True


install_not_run_handler()
