"""Silence the known noise of libraries the course imports, and nothing else.

Three messages look like a broken install to a learner but are harmless here:
- torchao 0.18 logs "Failed to load .../_C_*.so" for its CUDA/Hopper kernels on machines that cannot load them
  (torchao/__init__.py, `logger.warning(f"Failed to load {file}: {e}")`); the course never calls those kernels
  where they did not load.
- torch's `_pytree` logs "<enum ...> is an Enum subclass and is now natively supported by torch.compile ..." when
  torchao registers its enums (torch/utils/_pytree.py, a deprecation aimed at torchao's maintainers).
- Kineto prints "USDT:... profiler_start / profiler_stop" from C++ on the process's file descriptor 2 whenever
  torch.profiler starts and stops.

`install_filters()` drops exactly the first two log records (filters on their two loggers, matched by message);
`native_stderr_silenced()` redirects file descriptor 2 to /dev/null around a profiler region (Python's own
warnings and errors go through `sys.stderr`, which Jupyter does not route through descriptor 2, so they still show).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator

_FILTERS = {
    "torchao": lambda msg: msg.startswith("Failed to load ") and ".so" in msg,
    "torch.utils._pytree": lambda msg: "is an Enum subclass and is now natively supported" in msg,
}


class _DropKnownNoise(logging.Filter):
    def __init__(self, logger_name: str) -> None:
        super().__init__()
        self._match = _FILTERS[logger_name]

    def filter(self, record: logging.LogRecord) -> bool:
        return not self._match(record.getMessage())


def install_filters() -> None:
    """Drop torchao's '.so' load failures and _pytree's Enum deprecation records (idempotent)."""
    for name in _FILTERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropKnownNoise) for f in logger.filters):
            logger.addFilter(_DropKnownNoise(name))


def import_torchao():  # noqa: ANN201 - returns the torchao module
    """Import torchao with its known load-time noise dropped; raises ImportError if it is not installed."""
    install_filters()
    import torchao

    return torchao


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """Send what C/C++ code writes to file descriptor 2 to /dev/null inside the block (e.g. Kineto's USDT lines)."""
    try:
        fd = sys.__stderr__.fileno() if sys.__stderr__ is not None else 2
    except (AttributeError, OSError, ValueError):
        fd = 2
    sys.stderr.flush()
    saved = os.dup(fd)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)
        os.close(devnull)
