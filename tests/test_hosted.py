"""The Colab/Kaggle path: badges and bootstrap cells generated from one URL, and the bootstrap run for real in a
fresh virtual environment that holds only torch (and the kernel a hosted image has), with a local clone of the
repository standing in for its URL."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch
from nbclient import NotebookClient
from platform_tier import only_in_platforms

from utils.course import hosted
from utils.course.kernels import notebook_client_config

REPO = Path(__file__).resolve().parent.parent


def test_every_chapter_opens_with_current_badges_and_bootstrap() -> None:
    url = hosted.repository_url()
    found = [msg for path in hosted.chapters() for msg in hosted.problems(path, url)]
    assert not found, "run `python -m utils.course.hosted --apply`:\n" + "\n".join(found)


def test_badges_use_the_one_configured_url(tmp_path: Path) -> None:
    url = hosted.repository_url()
    text = hosted.badges_markdown("notebooks/05_x.ipynb", url)
    owner_name = url.removeprefix("https://github.com/")
    assert f"colab.research.google.com/github/{owner_name}/blob/main/notebooks/05_x.ipynb" in text
    assert f"kaggle.com/kernels/welcome?src={url}/blob/main/notebooks/05_x.ipynb" in text
    assert f'"{url}"' in hosted.bootstrap_source(url)


def test_repository_url_is_validated(tmp_path: Path) -> None:
    bad = tmp_path / "pyproject.toml"
    bad.write_text('[project]\nname = "x"\n[project.urls]\nRepository = "ftp://example"\n')
    with pytest.raises(ValueError, match="Repository"):
        hosted.repository_url(bad)


def test_apply_is_idempotent_and_puts_bootstrap_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hosted, "REPO_ROOT", tmp_path)
    (tmp_path / "notebooks").mkdir()
    path = tmp_path / "notebooks" / "03_demo.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Chapter 03"),
                                         nbformat.v4.new_code_cell("x = 1")])
    nbformat.write(nb, path)
    url = "https://github.com/someone/course"
    assert hosted.apply(path, url) and not hosted.apply(path, url)
    cells = nbformat.read(path, as_version=4).cells
    assert [c.cell_type for c in cells] == ["markdown", "markdown", "code", "code"]
    assert cells[0].source == "# Chapter 03" and "COLAB_RELEASE_TAG" in cells[2].source
    assert hosted.problems(path, url) == []
    assert hosted.problems(path, "https://github.com/other/course")  # a changed URL makes them stale


def test_bootstrap_does_nothing_locally() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("COLAB_RELEASE_TAG", "KAGGLE_KERNEL_RUN_TYPE")}
    out = subprocess.run([sys.executable, "-c", hosted.bootstrap_source(hosted.repository_url())], env=env,
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Running locally on CPU") and "nothing to install" in out.stdout


def link_installed(names: tuple[str, ...], python: Path, folder: Path) -> bool:
    """Give the virtual environment of `python` the distributions `names` and everything they require, installed
    as a hosted image has them: hard links to this environment's files (their compiled caches too) in `folder`,
    which the environment reads through a .pth file, as its own site-packages. Installing torch there again took 24 s
    of this test (2 cores), and each process then compiled torch's sources on import. A hard link costs no copy,
    and pip, replacing one, only unlinks it. False where `folder` is on another filesystem than those files."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in found:
            continue
        found[name] = dist = metadata.distribution(name)
        todo += [r.name for r in map(Requirement, dist.requires or [])
                 if r.marker is None or r.marker.evaluate({"extra": ""})]
    folder.mkdir(parents=True)
    roots = {Path(dist.locate_file("")) for dist in found.values()}
    if any(root.stat().st_dev != folder.stat().st_dev for root in roots):
        return False
    for dist in found.values():
        root = Path(dist.locate_file(""))
        for top in sorted({f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}):
            source, target = root / top, folder / top
            if source.is_dir():
                shutil.copytree(source, target, copy_function=os.link, dirs_exist_ok=True)
            elif source.is_file() and not target.exists():
                os.link(source, target)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "hosted-image.pth").write_text(f"{folder}\n")
    return True


@pytest.mark.slow
@only_in_platforms
def test_bootstrap_in_a_torch_only_venv_then_chapter_00(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A hosted image caches bytecode as any Python does; where PYTHONDONTWRITEBYTECODE is set (as on the machine this
    # course is developed on) each process below would compile torch's sources again (6 s against 1.6 s for
    # `import torch`, measured there): the venv's processes write their caches as they import.
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    clone = tmp_path / "origin"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=120)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    torch_version = torch.__version__.split("+")[0]
    # What a hosted image already has: torch and a Jupyter kernel. Nothing of the course.
    if not link_installed(("torch", "ipykernel"), py, tmp_path / "image"):
        # --no-compile (PIP_COMPILE=0 below for the bootstrap's own installs): byte-compiling torch's and
        # transformers' sources took most of this test's time (torch: 64 s with it, 24 s without, on 2 cores);
        # Python compiles what it imports anyway.
        subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
                        f"torch=={torch_version}", "ipykernel"], check=True, timeout=900)
    assert subprocess.run([str(py), "-c", "import utils.lessons.sizes"], capture_output=True,
                          cwd=tmp_path).returncode != 0

    work = tmp_path / "content"  # Colab's working folder
    work.mkdir()
    env = {**os.environ, "COLAB_RELEASE_TAG": "test", hosted.URL_ENV: str(clone), "PIP_COMPILE": "0"}
    for key in ("VIRTUAL_ENV", "PYTHONPATH"):
        env.pop(key, None)
    boot = subprocess.run([str(py), "-c", hosted.bootstrap_source(hosted.repository_url())], cwd=work, env=env,
                          capture_output=True, text=True, timeout=900)
    assert boot.returncode == 0, boot.stdout + boot.stderr
    assert "Hosted notebook on CPU: course installed from" in boot.stdout
    assert "Warning" not in boot.stdout  # torch is in the tested range, and it was kept:
    kept = subprocess.run([str(py), "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    assert kept.stdout.strip() == torch.__version__

    # Chapter 00 in a kernel of that environment, its bootstrap cell finding the clone already there.
    kernels = tmp_path / "jupyter" / "kernels" / "hosted"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [str(py), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "hosted", "language": "python", "env": {"COLAB_RELEASE_TAG": "test", hosted.URL_ENV: str(clone),
                                                                 "MPLBACKEND": "Agg", "COURSE_SIZE": "quick",
                                                                 "PIP_COMPILE": "0"}}))
    before = os.environ.get("JUPYTER_PATH")  # the session's (conftest.py: its kernel spec for forked kernels)
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(tmp_path / "jupyter"), before]))
    try:
        nb = nbformat.read(clone / "notebooks" / "00_setup_and_environment.ipynb", as_version=4)
        NotebookClient(nb, kernel_name="hosted", timeout=300, config=notebook_client_config(),
                       resources={"metadata": {"path": str(work)}}).execute()
    finally:
        if before is None:
            del os.environ["JUPYTER_PATH"]
        else:
            os.environ["JUPYTER_PATH"] = before
    first_output = next(c for c in nb.cells if c.cell_type == "code").outputs[0]["text"]
    assert first_output.startswith("Hosted notebook on CPU")
