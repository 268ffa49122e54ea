"""The course's argument checks: one small shared set, so every public function rejects bad input the same way.

Each raises TypeError (wrong kind of value) or ValueError (right kind, value not allowed) with a message that
names the argument and says what is allowed. `True`/`False` are never accepted where a number is meant.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported where a device is checked: the grading command never needs it
    import torch


def _type_name(value: Any) -> str:
    return type(value).__name__


def check_int(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """An int (not a bool) within [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {_type_name(value)} {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def check_number(name: str, value: Any, *, minimum: float | None = None, maximum: float | None = None,
                 positive: bool = False, finite: bool = True) -> float:
    """A real number (int or float, not a bool), finite unless finite=False, within the bounds given."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number, got {_type_name(value)} {value!r}")
    try:
        as_float = float(value)
    except OverflowError:
        raise ValueError(f"{name} is too large for a float: {value}") from None
    if math.isnan(as_float) or (finite and math.isinf(as_float)):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if positive and not as_float > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    if minimum is not None and as_float < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    if maximum is not None and as_float > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value!r}")
    return as_float


def check_bool(name: str, value: Any) -> bool:
    """A real bool: a string such as "no" is truthy in Python, so it is refused rather than read as True."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {_type_name(value)} {value!r}")
    return value


def check_str(name: str, value: Any, *, non_empty: bool = True) -> str:
    """A str (non-empty unless non_empty=False)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {_type_name(value)} {value!r}")
    if non_empty and not value.strip():
        raise ValueError(f"{name} must be a non-empty string")
    return value


def check_choice(name: str, value: Any, allowed: Iterable[Any]) -> Any:
    """One of `allowed` (compared with ==; an unhashable value is refused by name, not with 'unhashable type')."""
    options = tuple(allowed)
    try:
        ok = any(type(value) is type(o) and value == o for o in options)
    except Exception:  # a value whose == raises is not one of the options
        ok = False
    if not ok:
        shown = ", ".join(repr(o) for o in options)
        raise ValueError(f"{name} must be one of {shown}; got {value!r}")
    return value


def check_instance(name: str, value: Any, kinds: type | tuple[type, ...]) -> Any:
    """An instance of `kinds`."""
    if not isinstance(value, kinds):
        wanted = kinds.__name__ if isinstance(kinds, type) else " or ".join(k.__name__ for k in kinds)
        raise TypeError(f"{name} must be a {wanted}, got {_type_name(value)}")
    return value


def check_device(name: str, value: Any) -> torch.device:
    """A torch.device, or a string torch accepts as one (e.g. 'cpu', 'cuda:0', 'mps')."""
    import torch

    if isinstance(value, torch.device):
        return value
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a torch.device or a device string such as 'cpu' or 'cuda', "
                        f"got {_type_name(value)}")
    try:
        return torch.device(value)
    except (RuntimeError, ValueError):
        raise ValueError(f"{name} must name a device such as 'cpu', 'cuda', 'cuda:0' or 'mps'; got {value!r}") from None
