import os

import pytest
import torch

from utils.course.chapters import CHAPTERS, chapter_support, support_matrix
from utils.lessons.env import (
    capability_gates,
    default_device,
    device_info,
    mps_available,
    mps_memory,
    nvidia_smi_memory_used,
    package_versions,
    parse_nvidia_smi_mib,
    parse_version,
    tf32_matmuls,
    tf32_override_note,
    torch_version_note,
    transformer_engine_status,
)


@pytest.mark.parametrize(
    ("capability", "bf16", "tf32", "fp8"),
    [(None, False, False, False), ((7, 5), False, False, False), ((8, 0), True, True, False),
     ((8, 6), True, True, False), ((8, 9), True, True, True), ((9, 0), True, True, True), ((10, 0), True, True, True)],
)
def test_gates_follow_capability_not_is_bf16_supported(capability, bf16, tf32, fp8):
    gates = capability_gates(capability)
    assert (gates.bf16_native, gates.tf32, gates.fp8) == (bf16, tf32, fp8)


@pytest.mark.parametrize("bad", [(8,), "8.0", (8.0, 0), (-1, 0), (True, 0), [8, 0]])
def test_gates_reject_bad_capability(bad):
    with pytest.raises(TypeError, match="capability"):
        capability_gates(bad)


def test_device_info_on_this_machine():
    info = device_info()
    rows = dict(info.rows())
    assert info.device == ("cuda" if torch.cuda.is_available() else "cpu")
    assert rows["torch"] == torch.__version__
    assert set(rows) >= {"compute capability", "BF16 native", "TF32", "FP8 Tensor Cores", "Transformer Engine"}
    if not info.is_cuda:
        assert info.capability is None and info.total_memory is None
        assert rows["BF16 native"] == "no GPU"
    assert default_device().type == info.device


def test_device_info_bad_device():
    with pytest.raises(ValueError, match="device"):
        device_info("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device='cuda'"):
            device_info("cuda")


def test_transformer_engine_status_never_raises():
    status = transformer_engine_status()
    assert status.available == (status.version is not None)
    assert status.message


def test_transformer_engine_import_error_is_reported(monkeypatch, tmp_path):
    # A package that raises RuntimeError at import, as Transformer Engine does on a machine without a GPU.
    pkg = tmp_path / "transformer_engine"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('cuDNN library not found')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    status = transformer_engine_status()
    assert not status.available
    assert "RuntimeError: cuDNN library not found" in status.message


def test_package_versions():
    rows = dict(package_versions(("torch", "surely-not-a-package-xyz")))
    assert rows["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert rows["surely-not-a-package-xyz"] == "not installed"
    with pytest.raises(TypeError, match="names"):
        package_versions("torch")


def test_chapter_support():
    assert chapter_support("00", None).startswith("CPU:")
    assert chapter_support("04", (7, 5)).startswith("partial: BF16 emulated")
    assert chapter_support("08", (8, 0)).startswith("partial: no FP8")
    assert chapter_support("08", (9, 0), te_available=True) == "native"
    assert "Transformer Engine not importable" in chapter_support("08", (9, 0), te_available=False)
    assert chapter_support("05", (9, 0)) == "native"
    assert chapter_support("10", None) == "CPU: the ledger's bytes exact; FSDP2 on 2 gloo processes"
    assert chapter_support("10", (7, 5)) == "native"  # arithmetic and CPU processes: nothing a T4 lacks
    with pytest.raises(ValueError, match="chapter"):
        chapter_support("11", None)


def test_readme_support_matrix_is_computed():
    readme = open("README.md", encoding="utf-8").read()
    assert support_matrix() in readme, \
        "README's support matrix is stale: paste `python -m utils.course.chapters --matrix`"
    for ch in CHAPTERS:
        name = f"{ch.number}_{ch.slug}"
        assert name in readme
        if os.path.exists(f"notebooks/{name}.ipynb"):
            assert f"[{name}](notebooks/{name}.ipynb)" in readme and "available" in readme.split(name)[2].split("\n")[0]


def _fake_te(tmp_path, pytorch_init: str) -> None:
    pkg = tmp_path / "transformer_engine"
    (pkg / "pytorch").mkdir(parents=True)
    # Transformer Engine's __init__ tries each framework and swallows the ImportError of a missing one.
    (pkg / "__init__.py").write_text("__version__ = '9.9'\ntry:\n    from . import pytorch\nexcept ImportError:\n"
                                     "    pass\n")
    (pkg / "pytorch" / "__init__.py").write_text(pytorch_init)


def test_transformer_engine_status_imports_the_pytorch_part(monkeypatch, tmp_path):
    # Bug 8: `import transformer_engine` succeeded although transformer_engine.pytorch could not be imported.
    _fake_te(tmp_path, "raise ImportError('libtransformer_engine.so: undefined symbol')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in list(__import__("sys").modules) if m.startswith("transformer_engine")]:
        monkeypatch.delitem(__import__("sys").modules, name)
    status = transformer_engine_status()
    assert not status.available
    assert "ImportError: libtransformer_engine.so: undefined symbol" in status.message
    assert chapter_support("08", (9, 0), te_available=status.available) != "native"


def test_transformer_engine_status_when_the_pytorch_part_imports(monkeypatch, tmp_path):
    import sys

    _fake_te(tmp_path, "ENABLED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in list(sys.modules) if m.startswith("transformer_engine")]:
        monkeypatch.delitem(sys.modules, name)
    status = transformer_engine_status()
    assert status.available and status.version == "9.9" and "transformer_engine.pytorch" in status.message


@pytest.mark.parametrize(("profile", "device", "capability"), [("t4", "cuda", (7, 5)), ("h100", "cuda", (9, 0)),
                                                               ("mps", "mps", None)])
def test_device_info_under_a_simulated_gpu(profile, device, capability):
    from simulated_gpu import simulated

    with simulated(profile):
        info = device_info()
        assert default_device().type == device and info.device == device and info.capability == capability
        rows = dict(info.rows())
        assert "(simulated on CPU)" in rows["name"] or rows["name"].startswith("Apple GPU (MPS)")
        assert info.total_memory > 14 * 2**30 and 0 <= info.free_memory <= info.total_memory
        if device == "mps":
            assert info.is_mps and not info.is_cuda
            assert rows["FP8 Tensor Cores"].startswith("no (Apple GPU")
            assert any(k.startswith("GPU memory total (MPS") for k in rows)
            memory = mps_memory()
            assert set(memory) == {"current_allocated", "driver_allocated", "recommended_max"}
            assert chapter_support("08", None, device="mps").startswith("MPS: no FP8")
        else:
            assert rows["compute capability"] == f"{capability[0]}.{capability[1]}"


def test_device_info_describes_the_current_cuda_device(monkeypatch):
    # Bug 13: properties must come from the current device, not device 0.
    from simulated_gpu import simulated

    with simulated("t4"):
        asked = []
        real = {n: getattr(torch.cuda, n) for n in ("get_device_capability", "get_device_properties",
                                                    "mem_get_info", "get_device_name")}

        def spy(name):
            def fn(device=None):
                asked.append((name, device))
                return real[name](0)
            return fn

        monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
        for name in real:
            monkeypatch.setattr(torch.cuda, name, spy(name))
        device_info("cuda")
        assert asked and all(device == 1 for _, device in asked), asked


def test_mps_helpers_without_an_apple_gpu():
    if mps_available():
        pytest.skip("an Apple GPU is here")
    with pytest.raises(RuntimeError, match="needs an Apple GPU"):
        mps_memory()
    with pytest.raises(ValueError, match="device='mps'"):
        device_info("mps")


@pytest.mark.parametrize(("text", "expected"), [("1234\n", 1234 * 2**20), ("  7 \n", 7 * 2**20), ("[N/A]", None),
                                                ("", None), ("No devices were found", None), (None, None),
                                                ("12.5", None), ("-3", None)])
def test_nvidia_smi_parsing_never_crashes(text, expected):
    assert parse_nvidia_smi_mib(text) == expected


def test_nvidia_smi_memory_used_never_raises(monkeypatch, tmp_path):
    from simulated_gpu import fake_nvidia_smi_dir

    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi at all
    assert nvidia_smi_memory_used(uuid="GPU-1") is None
    fake_nvidia_smi_dir(str(tmp_path), used_mib=321)
    assert nvidia_smi_memory_used(uuid="GPU-1") == 321 * 2**20
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\necho 'Failed to initialize NVML'\nexit 9\n")
    assert nvidia_smi_memory_used(uuid="GPU-1") is None
    with pytest.raises(ValueError, match="index"):
        nvidia_smi_memory_used(-1)


def test_tf32_matmuls_restores_in_finally():
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    with pytest.raises(torch.OutOfMemoryError):
        with tf32_matmuls(not before[0]):
            assert torch.backends.cuda.matmul.allow_tf32 is (not before[0])
            raise torch.OutOfMemoryError("simulated out of memory")
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before
    with pytest.raises(TypeError, match="enabled"):
        with tf32_matmuls("yes"):
            pass


VERSIONS = [("2.13.0+cpu", "torch 2.13.0+cpu is inside"), ("2.11.0", "torch 2.11.0 is inside"),
            ("2.5.0a0+872d972e41.nv24.08", "torch 2.5.0a0+872d972e41.nv24.08 is OLDER"),
            ("3.0.0", "torch 3.0.0 is NEWER")]


@pytest.mark.parametrize(("version", "starts"), VERSIONS)
def test_torch_version_note(version, starts):
    note = torch_version_note(version)
    assert note.startswith(starts) and "\n" not in note


def test_torch_version_note_bad_input():
    with pytest.raises(ValueError, match="text"):
        torch_version_note("nightly")
    with pytest.raises(TypeError, match="text"):
        parse_version(2.11)


def test_tf32_override_note():
    assert "is not set" in tf32_override_note({})
    assert "is not set" in tf32_override_note({"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "0"})
    line = tf32_override_note({"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"})
    assert "=1 is set" in line and "TF32" in line and "\n" not in line


def test_chapter_support_bad_input():
    with pytest.raises(ValueError, match="device"):
        chapter_support("01", None, device="tpu")
    with pytest.raises(ValueError, match="capability"):
        chapter_support("01", (9, 0), device="mps")
    with pytest.raises(TypeError, match="te_available"):
        chapter_support("08", (9, 0), te_available="yes")
    with pytest.raises(ValueError, match="device"):
        device_info("gpu")


def test_bf16_parts_are_partial_below_ampere():
    """Chapters 01 and 09 run BF16 autocast parts: emulated on a T4, so not "native" there (bug 13)."""
    for chapter in ("01", "09"):
        assert chapter_support(chapter, (7, 5)).startswith("partial: BF16 emulated")
        assert chapter_support(chapter, (8, 0)) == "native"


def test_tf32_override_only_1_counts():
    """torch 2.13 reads the override with c10::utils::check_env: only "1" and "0" count (tests/test_ch02_*)."""
    line = tf32_override_note({"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "true"})
    assert "is ignored by torch" in line and "\n" not in line
