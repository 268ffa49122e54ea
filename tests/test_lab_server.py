"""make lab's behaviour without a browser: the course's JupyterLab settings turn news off, learners' copies of
the labs live in my-labs/ (ignored by git, never overwritten), reset-lab starts one over, a busy port is said."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from utils.course import lab_server

ROOT = Path(__file__).resolve().parent.parent


def test_command_ships_the_news_setting() -> None:
    cmd = lab_server.command(port=8888, token="t")
    settings = next(a.split("=", 1)[1] for a in cmd if a.startswith("--LabApp.app_settings_dir="))
    overrides = json.loads((Path(settings) / "overrides.json").read_text())
    assert overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
    assert any("file-browser-path=/" in a for a in cmd), "the file browser must open at the repository root"


def test_the_file_browser_hides_the_install_metadata() -> None:
    """`make env`'s editable install leaves gpu_memory_course_utils.egg-info/ in the root: jupyter_server's own
    ContentsManager, configured from the command line, must not list it (and still lists the course)."""
    from jupyter_server.serverapp import ServerApp
    from jupyter_server.services.contents.manager import ContentsManager

    app = ServerApp()
    app.parse_command_line([a for a in lab_server.command(port=8888, token="t") if a.startswith("--ContentsManager")])
    manager = ContentsManager(config=app.config)
    assert not manager.should_list("gpu_memory_course_utils.egg-info")
    assert not manager.should_list("__pycache__")
    assert manager.should_list("notebooks") and manager.should_list("my-labs")


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
    """The sync check (`python -m utils.course.labs --check`, part of make test) looks at labs/, never at my-labs/."""
    lab = next((ROOT / "labs").glob("lab06_*.ipynb"))
    mine = ROOT / "my-labs"
    created = not mine.exists()
    target = mine / f"zz-test-{lab.name}"
    try:
        mine.mkdir(exist_ok=True)
        nb = json.loads(lab.read_text())
        nb["cells"][0]["source"] = "edited by a learner"
        target.write_text(json.dumps(nb))
        out = subprocess.run([sys.executable, "-m", "utils.course.labs", "--check"], cwd=ROOT, capture_output=True,
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
        out = subprocess.run([sys.executable, "-m", "utils.course.lab_server", f"--port={port}", "--no-browser"],
                             cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert f"port {port} is already in use" in out.stderr and "PORT=" in out.stderr


def test_reset_lab_refuses_a_lab_open_in_jupyterlab(tmp_path: Path) -> None:
    """Issue 34: `make reset-lab N=03` while the lab is open in JupyterLab was silently undone by the next autosave.
    A server (here a stand-in answering Jupyter's /api/sessions) that has the copy open makes the reset refuse,
    touching nothing, and say how to close it; once it is closed the reset goes ahead."""
    import http.server
    import threading

    labs, mine = tmp_path / "labs", tmp_path / "my-labs"
    labs.mkdir()
    (labs / "lab03_loss.ipynb").write_text("fresh")
    lab_server.copy_labs(labs, mine)
    (mine / "lab03_loss.ipynb").write_text("edited")
    sessions: list[dict] = [{"path": "my-labs/lab03_loss.ipynb", "kernel": {"execution_state": "idle"}}]

    class Sessions(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            ok = self.path.startswith("/api/sessions?token=t")
            self.send_response(200 if ok else 403)
            self.end_headers()
            self.wfile.write(json.dumps(sessions if ok else {}).encode())

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Sessions)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    running = [{"root_dir": str(tmp_path), "url": f"http://127.0.0.1:{server.server_port}/", "token": "t"}]
    try:
        with pytest.raises(lab_server.LabOpen, match="Close and Shut Down Notebook"):
            lab_server.reset_lab("03", labs, mine, servers=running)
        assert (mine / "lab03_loss.ipynb").read_text() == "edited" and not (mine / ".previous").exists()
        sessions.clear()
        assert lab_server.reset_lab("03", labs, mine, servers=running).read_text() == "fresh"
    finally:
        server.shutdown()


@pytest.mark.slow
def test_a_check_run_before_the_import_cell_says_which_cell_to_run(tmp_path: Path, monkeypatch) -> None:
    """Issue 34: in a fresh kernel of the course's JupyterLab, a check cell run before the lab's import cell said
    `NameError: name 'check_window' is not defined`. The kernel `make lab` starts (lab_server.environment) answers
    with one line naming the cell to run first."""
    from jupyter_client.manager import start_new_kernel

    monkeypatch.delenv("JUPYTER_PATH", raising=False)
    env = lab_server.environment()
    monkeypatch.setenv("JUPYTER_PATH", env["JUPYTER_PATH"])  # where the server (here: this process) finds kernels
    km, kc = start_new_kernel(kernel_name="python3", env=env, cwd=str(tmp_path))
    try:
        msg_id = kc.execute("check_window(scale_window)")
        out = []
        while True:
            msg = kc.get_iopub_msg(timeout=60)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] in ("stream", "error"):
                out.append(msg["content"].get("text") or msg["content"].get("ename"))
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
    finally:
        km.shutdown_kernel(now=True)
    assert "NameError" not in "".join(out), out
    assert "run the lab's first code cell" in "".join(out), out


def test_reset_lab_says_whether_there_was_an_old_copy(tmp_path: Path, monkeypatch, capsys) -> None:
    """Issue 34 (M5): `make reset-lab` said "your old one is in my-labs/.previous/" when there was no old copy."""
    fresh = lab_server.REPO_ROOT / "my-labs" / "lab06_x.ipynb"
    monkeypatch.setattr(lab_server, "reset_lab", lambda number: fresh)
    monkeypatch.setattr(lab_server, "MY_LABS_DIR", tmp_path / "my-labs")
    lab_server.main(["--reset-lab", "06"])
    assert "there was no copy before" in capsys.readouterr().out
    (tmp_path / "my-labs").mkdir()
    (tmp_path / "my-labs" / "lab06_x.ipynb").write_text("{}")
    lab_server.main(["--reset-lab", "06"])
    assert "your old one is in my-labs/.previous/" in capsys.readouterr().out
