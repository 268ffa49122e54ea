"""Open a chapter on a free hosted GPU: "Open in Colab" / "Open in Kaggle" badges and the bootstrap cell.

`python -m utils.course.hosted --apply` puts, at the top of every chapter notebook, a header cell with the two badges
and a bootstrap code cell, both generated from the one repository URL in pyproject.toml
(`[project.urls] Repository`). `--check` (run by the tests) fails when a chapter's header or bootstrap cell is
missing or differs from what the URL and the template give.

The bootstrap cell acts only in a hosted notebook (Colab or Kaggle, detected from their environment
variables): it clones the repository, installs `requirements-hosted.txt` and the course package, keeping the
host's torch (constrained to the installed version, never reinstalled or pinned to another), and warns in one
line if that torch is outside the tested range. Anywhere else it only says which device it runs on.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from utils.validate import check_str

REPO_ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
HEADER_KEY, BOOTSTRAP_KEY = "hosted-header", "hosted-bootstrap"
URL_ENV = "COURSE_REPO_URL"  # lets a test (or a fork) stand a local clone or another URL in for the repository

BOOTSTRAP_TEMPLATE = '''\
# Hosted notebooks (Google Colab, Kaggle): fetch the course and install its package, keeping the host's torch.
# Anywhere else (make lab, conda, CI) this cell installs nothing; it only says where it runs.
import os
import subprocess
import sys

import torch

COURSE_REPO = os.environ.get("{url_env}", "{url}")
HOSTED = "COLAB_RELEASE_TAG" in os.environ or "KAGGLE_KERNEL_RUN_TYPE" in os.environ
DEVICE = ("CUDA: " + torch.cuda.get_device_name() if torch.cuda.is_available()
          else "Apple MPS" if torch.backends.mps.is_available() else "CPU")
if HOSTED:
    home = os.path.abspath("gpu-memory-course")
    if not os.path.isdir(os.path.join(home, "utils")):
        subprocess.run(["git", "clone", "--quiet", "--depth", "1", COURSE_REPO, home], check=True)
    keep_torch = os.path.join(home, ".keep-host-torch.txt")  # a constraint: pip may not replace the host's torch
    with open(keep_torch, "w") as f:
        f.write(f"torch=={{torch.__version__}}\\n")
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-c", keep_torch]
    subprocess.run(pip + ["-r", os.path.join(home, "requirements-hosted.txt")], check=True)
    subprocess.run(pip + ["--no-deps", "-e", home], check=True)
    sys.path.insert(0, home)
    os.chdir(os.path.join(home, "notebooks"))
    major, minor = (int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    if not (2, 11) <= (major, minor) < (3, 0):
        print(f"Warning: the course is tested with torch 2.11 to 2.x; this host has torch {{torch.__version__}}.")
    print(f"Hosted notebook on {{DEVICE}}: course installed from {{COURSE_REPO}}; "
          f"host's torch {{torch.__version__}} kept.")
else:
    print(f"Running locally on {{DEVICE}} (torch {{torch.__version__}}): nothing to install here.")
'''


def repository_url(pyproject: Path = REPO_ROOT / "pyproject.toml") -> str:
    """The repository URL from pyproject.toml's [project.urls] Repository: the one place it is configured."""
    try:
        data = tomllib.loads(Path(pyproject).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{pyproject}: cannot be read as TOML ({type(exc).__name__}: {exc})") from None
    urls = data.get("project", {}).get("urls", {}) if isinstance(data.get("project"), dict) else {}
    url = urls.get("Repository") if isinstance(urls, dict) else None
    if not isinstance(url, str) or not url.startswith("https://github.com/"):
        raise ValueError(f"{pyproject}: [project.urls] Repository must be a https://github.com/OWNER/NAME URL, "
                         f"got {url!r}")
    return url.rstrip("/")


def badges_markdown(notebook: str, url: str) -> str:
    """The header cell: Open in Colab and Open in Kaggle badges for `notebook` (a path relative to the repo)."""
    check_str("notebook", notebook)
    check_str("url", url)
    owner_name = url.removeprefix("https://github.com/")
    blob = f"{owner_name}/blob/main/{notebook}"
    colab = f"https://colab.research.google.com/github/{blob}"
    kaggle = f"https://kaggle.com/kernels/welcome?src={url}/blob/main/{notebook}"
    return (f"[![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab}) "
            f"[![Open in Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)]({kaggle})\n\n"
            "On a hosted notebook choose a GPU runtime first (Colab: Runtime > Change runtime type; Kaggle: "
            "Settings > Accelerator); the next cell then installs the course. Locally it does nothing.")


def bootstrap_source(url: str) -> str:
    """The bootstrap cell's code for the repository at `url`."""
    return BOOTSTRAP_TEMPLATE.format(url=url, url_env=URL_ENV)


def _marked(cell: NotebookNode, key: str) -> bool:
    return bool(cell.get("metadata", {}).get("course", {}).get(key))


def expected_cells(path: Path, url: str) -> tuple[NotebookNode, NotebookNode]:
    """The header and bootstrap cells a chapter should open with."""
    relative = Path(path).resolve().relative_to(REPO_ROOT).as_posix()
    header = nbformat.v4.new_markdown_cell(badges_markdown(relative, url))
    header.metadata["course"] = {HEADER_KEY: True}
    boot = nbformat.v4.new_code_cell(bootstrap_source(url))
    boot.metadata["course"] = {BOOTSTRAP_KEY: True}
    return header, boot


def apply(path: Path, url: str) -> bool:
    """Put (or refresh) the header and bootstrap cells at the top of one notebook; True if it changed."""
    if not problems(path, url):
        return False
    nb = nbformat.read(path, as_version=4)
    header, boot = expected_cells(path, url)
    rest = [c for c in nb.cells if not (_marked(c, HEADER_KEY) or _marked(c, BOOTSTRAP_KEY))]
    # The header goes after the chapter's title cell (the first markdown cell), the bootstrap before any code.
    title = rest[:1] if rest and rest[0].cell_type == "markdown" else []
    nb.cells = title + [header, boot] + rest[len(title):]
    nbformat.write(nb, path)
    return True


def problems(path: Path, url: str) -> list[str]:
    """What is missing or stale in one chapter's header and bootstrap cells (empty when current)."""
    nb = nbformat.read(path, as_version=4)
    header, boot = expected_cells(path, url)
    found: list[str] = []
    headers = [c for c in nb.cells if _marked(c, HEADER_KEY)]
    boots = [c for c in nb.cells if _marked(c, BOOTSTRAP_KEY)]
    if [c.source for c in headers] != [header.source]:
        found.append(f"{path.name}: the badge header is missing or stale")
    if [c.source for c in boots] != [boot.source]:
        found.append(f"{path.name}: the bootstrap cell is missing or stale")
    first_code = next((c for c in nb.cells if c.cell_type == "code"), None)
    if boots and first_code is not boots[0]:
        found.append(f"{path.name}: the bootstrap cell must be the first code cell")
    return found


def chapters(folder: Path = NOTEBOOKS_DIR) -> list[Path]:
    return sorted(Path(folder).glob("[0-9][0-9]_*.ipynb"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Colab/Kaggle badges and the hosted bootstrap cell of each chapter.")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--apply", action="store_true", help="write or refresh them in every chapter")
    action.add_argument("--check", action="store_true", help="exit 1 if any chapter's are missing or stale")
    args = parser.parse_args(argv)
    try:
        url = repository_url()
    except ValueError as exc:
        print(f"utils.course.hosted: {exc}", file=sys.stderr)
        return 2
    if args.apply:
        changed = [p.name for p in chapters() if apply(p, url)]
        print(f"updated {len(changed)} chapter(s): {', '.join(changed) or 'none'}")
        return 0
    found = [msg for p in chapters() for msg in problems(p, url)]
    for msg in found:
        print(msg, file=sys.stderr)
    print("every chapter opens with current badges and bootstrap" if not found else f"{len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
