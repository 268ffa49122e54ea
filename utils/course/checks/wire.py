"""The learner's answers as plain data: what a grading kernel hands the grader, and what a check compares.

`encode` turns an answer (numbers, strings, None, lists, tuples, dicts, tensors, dtypes, numpy values) into
JSON-ready data and refuses anything else; `decode` builds the same answer back without running any of the
learner's code (no pickle). The grader (utils.course.grade) compares the decoded answers with the references in its own
process, so nothing the learner's kernel holds or prints can take part in the comparison.

`plain` is the check's side of the same rule: an answer a check compares must be plain data of the types above, not
an object of the learner's whose `__eq__` says yes to everything.
"""

from __future__ import annotations

import base64
import dataclasses
import importlib
import math
from typing import Any

import torch

# the course's own value classes an answer may be made of (an exercise asks for a utils.ledger.plan.Choice)
DATACLASSES = ("utils.ledger.plan:Choice",)
MAX_BYTES = 64 * 2**20  # one answer's tensors at most; beyond, the answer is not sent


class Unplain(TypeError):
    """An answer that is not plain data (an object of the learner's own class, a module, a function)."""


def encode(value: Any, _depth: int = 0) -> Any:
    """JSON-ready data for `value`; raises Unplain for anything but plain data."""
    if _depth > 32:
        raise Unplain("an answer nested more than 32 deep")
    t = type(value)
    if value is None or t in (bool, str):
        return value
    if value is Ellipsis:  # a lab's placeholder (`prediction = ...`): the check says "not attempted"
        return {"ellipsis": True}
    if t is int:
        return value if abs(value) < 2**53 else {"int": str(value)}
    if t is float:
        return value if math.isfinite(value) else {"float": repr(value)}
    if t is list:
        return [encode(v, _depth + 1) for v in value]
    if t is tuple:
        return {"tuple": [encode(v, _depth + 1) for v in value]}
    if t is dict:
        return {"dict": [[encode(k, _depth + 1), encode(v, _depth + 1)] for k, v in value.items()]}
    if t is torch.Size:
        return {"size": list(value)}
    if t is torch.dtype:
        return {"dtype": str(value).removeprefix("torch.")}
    if t is torch.device:
        return {"device": str(value)}
    if isinstance(value, torch.Tensor) and t in (torch.Tensor, torch.nn.Parameter):
        x = value.detach().cpu().contiguous()
        if x.is_quantized or x.is_sparse or x.layout != torch.strided:
            raise Unplain("a quantized or sparse tensor")
        raw = x.reshape(-1).view(torch.uint8).numpy().tobytes() if x.numel() else b""
        if len(raw) > MAX_BYTES:
            raise Unplain(f"a tensor of {len(raw):,} bytes")
        return {"tensor": str(x.dtype).removeprefix("torch."), "shape": list(x.shape),
                "requires_grad": bool(value.requires_grad), "data": base64.b64encode(raw).decode("ascii")}
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy comes with torch
        np = None
    if np is not None and t is np.ndarray and value.dtype.kind in "biuf":
        return {"ndarray": encode(torch.from_numpy(value.copy()), _depth + 1)}
    if np is not None and isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return {"np": value.dtype.name, "value": encode(value.item(), _depth + 1)}
    if f"{t.__module__}:{t.__qualname__}" in DATACLASSES and dataclasses.is_dataclass(value):
        return {"dataclass": f"{t.__module__}:{t.__qualname__}",
                "fields": [[f.name, encode(getattr(value, f.name), _depth + 1)] for f in dataclasses.fields(value)]}
    raise Unplain(f"a {t.__module__}.{t.__qualname__}")


def decode(data: Any) -> Any:
    """The answer `encode` wrote (raises ValueError on anything `encode` cannot have written)."""
    if data is None or type(data) in (bool, str, int, float):
        return data
    if isinstance(data, list):  # JSON's lists and objects (nbformat reads them as its own dict subclass)
        return [decode(v) for v in data]
    if not isinstance(data, dict) or not data:
        raise ValueError(f"not an encoded answer: {type(data).__name__}")
    if "ellipsis" in data:
        return Ellipsis
    if "int" in data:
        return int(data["int"])
    if "float" in data:
        return float(data["float"])
    if "tuple" in data:
        return tuple(decode(v) for v in data["tuple"])
    if "dict" in data:
        return {_key(decode(k)): decode(v) for k, v in data["dict"]}
    if "size" in data:
        return torch.Size(int(v) for v in data["size"])
    if "dtype" in data:
        return _dtype(data["dtype"])
    if "device" in data:
        return torch.device(str(data["device"]))
    if "tensor" in data:
        dtype = _dtype(data["tensor"])
        raw = bytearray(base64.b64decode(data["data"]))
        shape = [int(v) for v in data["shape"]]
        flat = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
        x = flat.view(dtype).reshape(shape).clone() if raw else torch.empty(shape, dtype=dtype)
        return x.requires_grad_(bool(data.get("requires_grad"))) if x.is_floating_point() else x
    if "dataclass" in data:
        if data["dataclass"] not in DATACLASSES:
            raise ValueError(f"not a course dataclass: {data['dataclass']!r}")
        module, _, name = str(data["dataclass"]).partition(":")
        cls = getattr(importlib.import_module(module), name)
        return cls(**{str(k): decode(v) for k, v in data["fields"]})
    if "ndarray" in data:
        return decode(data["ndarray"]).numpy()
    if "np" in data:
        import numpy as np

        return np.dtype(str(data["np"])).type(decode(data["value"]))
    raise ValueError(f"not an encoded answer: keys {sorted(data)}")


def _key(k: Any) -> Any:
    if isinstance(k, list):  # a list cannot be a key: encode never writes one
        raise ValueError("a list as a dict key")
    return k


def _dtype(name: Any) -> torch.dtype:
    found = getattr(torch, str(name), None)
    if not isinstance(found, torch.dtype):
        raise ValueError(f"not a torch dtype: {name!r}")
    return found


def plain(value: Any) -> Any:
    """`value` itself when it is plain data (see `encode`), else Unplain naming what it is."""
    encode(value)
    return value
