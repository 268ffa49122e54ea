"""utils.lessons.underflow.cast_outcomes: fates of values cast to low precision, bad input refused by name."""

from __future__ import annotations

import math

import pytest
import torch

from utils.lessons.underflow import cast_outcomes


def test_fp16_fates_and_scaling():
    x = torch.tensor([1e-9, 1e-6, 1e-3, 1.0, 1e5, 0.0])
    out = cast_outcomes(x, torch.float16)
    assert (out.zero, out.subnormal, out.overflow, out.normal, out.count) == (0.2, 0.2, 0.2, 0.4, 5)
    assert cast_outcomes(x, torch.float16, scale=2**10).zero == 0.0
    assert cast_outcomes(x, torch.bfloat16).zero == 0.0


def test_e4m3_overflow_counted_on_every_torch_version():
    # torch >= 2.12 saturates 1000 to 448, older torch gives NaN: both are "overflow".
    out = cast_outcomes(torch.tensor([1000.0, 1.0, -1e6, math.inf]), torch.float8_e4m3fn)
    assert out.overflow == 0.75 and out.normal == 0.25
    assert cast_outcomes(torch.tensor([448.0, 464.0]), torch.float8_e4m3fn).overflow == 0.5  # 464 rounds to 448
    assert cast_outcomes(torch.tensor([60000.0, 1.0]), torch.float8_e5m2).overflow == 0.5


@pytest.mark.parametrize(("kwargs", "error", "name"), [
    ({"values": [1.0]}, TypeError, "values"), ({"values": torch.arange(3)}, TypeError, "values"),
    ({"dtype": torch.float32}, ValueError, "dtype"), ({"dtype": "float16"}, TypeError, "dtype"),
    ({"scale": 0}, ValueError, "scale"), ({"scale": -2.0}, ValueError, "scale"),
    ({"scale": math.nan}, ValueError, "scale"), ({"scale": math.inf}, ValueError, "scale"),
    ({"scale": True}, TypeError, "scale"), ({"scale": "8"}, TypeError, "scale"),
])
def test_bad_arguments_are_refused_by_name(kwargs, error, name):
    args = {"values": torch.ones(3), "dtype": torch.float16, "scale": 1.0, **kwargs}
    with pytest.raises(error, match=name):
        cast_outcomes(**args)


def test_empty_and_all_zero():
    assert cast_outcomes(torch.zeros(4)).count == 0
    assert cast_outcomes(torch.tensor([])).count == 0
