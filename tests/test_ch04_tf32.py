"""Bug 13: chapter 04 must not call its FP32 baseline "TF32 off" when TORCH_ALLOW_TF32_CUBLAS_OVERRIDE turns TF32 on.

In torch 2.13 the variable initialises the legacy matmul precision to 'high' (ATen/Context.h:
`float32_matmul_precision = check_env("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE") == true ? HIGH : HIGHEST`), and
`Context::allowTF32CuBLAS` (ATen/Context.cpp) raises when the legacy state and the per-backend `fp32_precision`
disagree. The chapter's `fp32_matmul_precision` must therefore set both, and its label must read the state back.
The functions are taken from the notebook cell as written and run in a child process with the variable set (it is
read once, at start-up); this works on a CPU build because the state lives in torch's global context.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "04_automatic_mixed_precision.ipynb"
CELL = "d5b16861"  # section 5: the training cell that defines fp32_matmul_precision and tf32_label


def _functions(names: tuple[str, ...]) -> str:
    cells = {c.get("id"): c for c in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]}
    source = "".join(cells[CELL]["source"])
    tree = ast.parse(source)
    found = [ast.get_source_segment(source, node, padded=False) for node in tree.body
             if isinstance(node, ast.FunctionDef) and node.name in names]
    # decorators are not part of the segment: the context manager needs its @contextlib.contextmanager back
    return "\n\n".join(("@contextlib.contextmanager\n" if "yield" in seg else "") + seg for seg in found)


CHILD = """
import contextlib, os, torch
from utils.lessons.env import TF32_OVERRIDE_ENV
{functions}
start = torch.get_float32_matmul_precision()
assert start == "high", start
assert torch.backends.cuda.matmul.fp32_precision == "tf32"
with fp32_matmul_precision("highest"):
    inside = torch.backends.cuda.matmul.fp32_precision
    assert torch._C._get_cublas_allow_tf32() is False  # the two states agree: no "mix of APIs" error
label = tf32_label(start, inside)
assert "started this process with TF32 on" in label and "TF32 off" in label, label
assert tf32_label(start, "tf32").endswith("TF32 ON: not a true FP32 baseline)")
assert torch.get_float32_matmul_precision() == "high" and torch.backends.cuda.matmul.fp32_precision == "tf32"
assert torch._C._get_cublas_allow_tf32() is True  # restored as the process began
torch.backends.cuda.matmul.fp32_precision = "ieee"  # the per-backend flag alone, as the chapter used to do
try:
    torch._C._get_cublas_allow_tf32()
except RuntimeError as exc:
    assert "mix of the legacy and new" in str(exc)
else:
    raise AssertionError("setting only fp32_precision under the override should leave the states disagreeing")
print("ok", label)
"""


def _run(env_value: str | None, body: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"}
    if env_value is not None:
        env["TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"] = env_value
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-c", body], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)


def test_fp32_baseline_under_the_override_is_tf32_off_and_labelled_so() -> None:
    body = CHILD.format(functions=_functions(("fp32_matmul_precision", "tf32_label")))
    out = _run("1", body)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ok")


def test_label_without_the_override() -> None:
    body = textwrap.dedent("""
    import contextlib, os, torch
    from utils.lessons.env import TF32_OVERRIDE_ENV
    {functions}
    start = torch.get_float32_matmul_precision()
    with fp32_matmul_precision("highest"):
        inside = torch.backends.cuda.matmul.fp32_precision
    print(tf32_label(start, inside))
    """).format(functions=_functions(("fp32_matmul_precision", "tf32_label")))
    out = _run(None, body)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "started at 'highest'" in out.stdout and "TF32 off" in out.stdout
