"""Every chapter under a SIMULATED GPU (shared by the per-device files).

Each chapter notebook runs in a fresh kernel with torch.cuda simulated on the CPU (tests/simulated_gpu.py): as a T4
(capability 7.5, ~15 GiB) at quick size with every figure assertion on (tests/test_simulated_gpu_t4.py and
tests/test_simulated_gpu_t4_quick.py), and at COURSE_SIZE=tiny (control flow) as an H100 (9.0, ~79 GiB) and as an
Apple GPU (MPS), so that every CUDA and MPS branch executes.
No cell may end in an error or print a traceback. Child processes run under the same simulated device and say so
in one stderr line ("[simulated GPU] ..."), which the run prints.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from simulated_gpu import END_MARK, PROFILES, run_notebook

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
# What tells a T4 from an H100 at COURSE_SIZE=tiny: the compute capability and what is gated on it (BF16, TF32,
# FP8, Transformer Engine). Memory tiers pick full sizes only. A chapter whose code reads none of these takes
# the same path on both, so the H100 runs only the chapters that do (tests/test_simulated_gpu.py checks that
# utils reads the capability only in the modules that answer these questions, never behind a chapter's back).
# utils.lessons.estimate's `validate` picks the SDPA kernel a GPU runs by its capability (chapter 01 calls it).
CAPABILITY_READS = re.compile(r"capability|is_bf16_supported|gates\.|transformer_engine_status|te_status|tf32|"
                              r"\bvalidate\(")
CAPABILITY_MODULES = ("env", "chapters", "gpu_check", "results", "estimate",
                      "plan")  # plan: a Choice's capability, which the chapter passes in, never the device's


def reads_capability(notebook: str) -> bool:
    """Whether a chapter's code cells read the compute capability or a gate derived from it."""
    cells = json.loads((ROOT / "notebooks" / notebook).read_text())["cells"]
    return any(CAPABILITY_READS.search("".join(c["source"])) for c in cells if c["cell_type"] == "code")


CAPABILITY_CHAPTERS = [c for c in CHAPTERS if reads_capability(c)]
# The simulated T4 runs every chapter at QUICK size, figure assertions on (they are off at tiny size): chapter 05's
# optimum (issue 21 bug 2) and chapter 09's budgeted run showed up only there, and chapter 06's distributed workers
# are skipped at tiny size. Measured on 2 cores (other jobs running, s): quick / tiny under the simulated T4:
# 00 10/5, 01 10/16, 02 12/8, 03 18/12, 04 13/8, 05 52/21, 06 29/7, 07 137/91, 08 9/8, 09 22/21 - about 310 s
# against 200 s, so quick replaces tiny for the T4 (H100 and MPS stay tiny: control flow). Two files, so that
# pytest-xdist (--dist loadfile) runs the halves side by side in `make test-platforms`: test_simulated_gpu_t4.py
# (00-06, ~145 s) and test_simulated_gpu_t4_quick.py (07-10, ~170 s).
T4_SIZE = "quick"
T4_FIRST = [c for c in CHAPTERS if c[:2] <= "06"]
T4_SECOND = [c for c in CHAPTERS if c[:2] > "06"]
QUICK_KNOWN_FAILURES: dict[str, str] = {}  # none since issue 33 (docs/simulation.md, "Findings")


# The per-device chapter matrix (every chapter under the simulated T4, Apple GPU and H100: about 530 CPU-seconds,
# four and a half minutes on 2 cores) runs in `make test-platforms` (tests/platform_tier.py),
# which CI runs after `make test`; `make test` keeps chapter 00 under each simulated device (its device lines and the
# T4 trap) and the simulation's own tests (tests/test_sim_gpu_behaviour.py, tests/test_issue33_gpu_paths.py).
IN_MAKE_TEST = "00_setup_and_environment.ipynb"


def device_params(notebooks: list[str], *, in_make_test: bool = True) -> list:
    """pytest parameters for a per-device chapter run: every chapter but IN_MAKE_TEST (none with `in_make_test=False`)
    only in `make test-platforms`, and known quick-size failures marked xfail(strict=False) with their finding."""
    import pytest
    from platform_tier import only_in_platforms

    params = []
    for c in notebooks:
        marks = [] if in_make_test and c == IN_MAKE_TEST else [only_in_platforms]
        if c[:2] in QUICK_KNOWN_FAILURES:
            marks.append(pytest.mark.xfail(strict=False, reason=QUICK_KNOWN_FAILURES[c[:2]]))
        params.append(pytest.param(c, marks=marks))
    return params


SIM_CELL_TIMEOUT = int(os.environ.get("COURSE_SIM_CELL_TIMEOUT", "240"))


def check_chapter(notebook: str, profile: str, size: str = "tiny") -> list[str]:
    """Run `notebook` under the simulated `profile` at `size`; fail on any cell error. Returns its printed lines."""
    failures, lines, seconds = run_notebook(str(ROOT / "notebooks" / notebook), profile, size=size,
                                            cell_timeout=SIM_CELL_TIMEOUT)
    print(f"{notebook} as {profile} at {size} size: {seconds:.1f} s")
    children = [line for line in lines if line.startswith("[simulated GPU]") and not line.startswith(END_MARK)]
    if children:
        print(f"{len(children)} child processes under the simulation, e.g. {children[0]}")
    assert not failures, f"{notebook} under a simulated {profile}:\n" + "\n".join(map(str, failures))
    if notebook.startswith("00_"):  # chapter 00 names the device and answers the T4 trap in one line each
        text = "\n".join(lines)
        assert f"on {PROFILES[profile].kind}: {PROFILES[profile].name}" in text or profile == "mps"
        assert "is inside the tested range" in text and "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE" in text
        if profile == "t4":
            assert "torch.cuda.is_bf16_supported() says True; the capability gate says BF16 native = False" in text
    return lines
