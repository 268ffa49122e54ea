"""make lab's behaviour without a browser: the course's JupyterLab settings turn news off, learners' copies of
the labs live in my-labs/ (ignored by git, never overwritten), reset-lab starts one over, a busy port is said."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from utils import lab_server

ROOT = Path(__file__).resolve().parent.parent


def test_command_ships_the_news_setting() -> None:
    cmd = lab_server.command(port=8888, token="t")
    settings = next(a.split("=", 1)[1] for a in cmd if a.startswith("--LabApp.app_settings_dir="))
    overrides = json.loads((Path(settings) / "overrides.json").read_text())
    assert overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
    assert any("file-browser-path=/" in a for a in cmd), "the file browser must open at the repository root"


def test_copy_labs_never_overwrites_a_learners_copy(tmp_path: Path) -> None:
    labs, mine = tmp_path / "labs", tmp_path / "my-labs"
    labs.mkdir()
    for name in ("lab00_warmup.ipynb", "lab01_x.ipynb"):
        (labs / name).write_text("{}")
    assert len(lab_server.copy_labs(labs, mine)) == 2
    (mine / "lab00_warmup.ipynb").write_text("edited")
    assert lab_server.copy_labs(labs, mine) == []
    assert (mine / "lab00_warmup.ipynb").read_text() == "edited"


def test_reset_lab_keeps_the_old_copy(tmp_path: Path) -> None:
    labs, mine = tmp_path / "labs", tmp_path / "my-labs"
    labs.mkdir()
    (labs / "lab06_acc.ipynb").write_text("fresh")
    lab_server.copy_labs(labs, mine)
    (mine / "lab06_acc.ipynb").write_text("edited")
    fresh = lab_server.reset_lab("06", labs, mine)
    assert fresh.read_text() == "fresh"
    assert [p.read_text() for p in (mine / ".previous").iterdir()] == ["edited"]
    with pytest.raises(ValueError, match="number"):
        lab_server.reset_lab("6", labs, mine)
    with pytest.raises(ValueError, match="number"):
        lab_server.reset_lab("07", labs, mine)


def test_my_labs_is_ignored_by_git() -> None:
    out = subprocess.run(["git", "check-ignore", "-q", "my-labs/lab06_gradient_accumulation.ipynb"], cwd=ROOT)
    assert out.returncode == 0, "my-labs/ must be in .gitignore"


def test_a_learners_edit_in_my_labs_leaves_the_lab_check_green(tmp_path: Path) -> None:
    """The sync check (`python -m utils.labs --check`, part of make test) looks at labs/, never at my-labs/."""
    lab = next((ROOT / "labs").glob("lab06_*.ipynb"))
    mine = ROOT / "my-labs"
    created = not mine.exists()
    target = mine / f"zz-test-{lab.name}"
    try:
        mine.mkdir(exist_ok=True)
        nb = json.loads(lab.read_text())
        nb["cells"][0]["source"] = "edited by a learner"
        target.write_text(json.dumps(nb))
        out = subprocess.run([sys.executable, "-m", "utils.labs", "--check"], cwd=ROOT, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
    finally:
        target.unlink(missing_ok=True)
        if created:
            mine.rmdir()


def test_busy_port_is_said_in_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert lab_server.port_in_use(port)
        out = subprocess.run([sys.executable, "-m", "utils.lab_server", f"--port={port}", "--no-browser"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert f"port {port} is already in use" in out.stderr and "PORT=" in out.stderr
