import os

import pytest
import torch

from utils.chapters import CHAPTERS, chapter_support, support_matrix
from utils.env import capability_gates, default_device, device_info, package_versions, transformer_engine_status


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
    with pytest.raises(ValueError, match="chapter"):
        chapter_support("10", None)


def test_readme_support_matrix_is_computed():
    readme = open("README.md", encoding="utf-8").read()
    assert support_matrix() in readme, "README's support matrix is stale: paste `python -m utils.chapters --matrix`"
    for ch in CHAPTERS:
        name = f"{ch.number}_{ch.slug}"
        assert name in readme
        if os.path.exists(f"notebooks/{name}.ipynb"):
            assert f"[{name}](notebooks/{name}.ipynb)" in readme and "available" in readme.split(name)[2].split("\n")[0]
