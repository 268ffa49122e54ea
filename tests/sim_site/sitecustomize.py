"""Child processes of a simulated-GPU run see the same simulated device as their parent.

tests/simulated_gpu.py's `install` puts this folder on PYTHONPATH and sets COURSE_SIMULATED_GPU (t4, h100 or mps),
so every Python process started from a simulated kernel (spawned workers, utils.lessons.distributed.launch_script's
ranks, chapter 07's fragmentation child) runs this at interpreter start. It waits for `import torch` and then
installs the simulation, reading the allocator settings the child was started with; a child that never imports
torch pays nothing. One line on stderr says which device the child sees, e.g.
`[simulated GPU] Tesla T4 (simulated on CPU) in child process 1234 (worker.py)`.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

_PROFILE = os.environ.get("COURSE_SIMULATED_GPU", "")
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_MODULE = "course_simulated_gpu"


def _install() -> None:
    if _ROOT not in sys.path:
        sys.path.append(_ROOT)  # utils.lessons.allocator_model, utils.lessons.timing
    module = sys.modules.get(_MODULE)
    if module is None:
        spec = importlib.util.spec_from_file_location(_MODULE, os.path.join(_ROOT, "tests", "simulated_gpu.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[_MODULE] = module
        spec.loader.exec_module(module)
    if module._STATE is None:
        profile = module.install(_PROFILE)
        program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "-c"
        if "ipykernel" not in program:  # a kernel's own setup cell reports nothing: its children do
            print(f"[simulated GPU] {profile.name} in child process {os.getpid()} ({program})", file=sys.stderr,
                  flush=True)


class _AfterTorchImport(importlib.abc.MetaPathFinder):
    """Finds torch with the other finders, and installs the simulation once torch's module has executed."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module: object) -> None:
            execute(module)
            _install()

        spec.loader.exec_module = exec_module
        return spec


if _PROFILE and "torch" not in sys.modules:
    sys.meta_path.insert(0, _AfterTorchImport())
