"""Tasks for tests/test_forkserver.py's fork server: each takes the argument list the server passes."""

import os
import sys
import time


def report(argv: list[str]) -> int:
    """Write to the descriptor argv[0] which of argv[1:]'s modules this child already has, and print to stderr."""
    with os.fdopen(int(argv[0]), "w") as out:
        out.write(" ".join(name for name in argv[1:] if name in sys.modules))
    print("the child's stderr", file=sys.stderr)
    return 3


def sleep(argv: list[str]) -> int:
    time.sleep(float(argv[0]))
    return 0


def crash(argv: list[str]) -> int:
    raise RuntimeError("a task that fails")
