"""The environment files agree, and `make lab` serves JupyterLab on 127.0.0.1 behind a token."""

import os
import re
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from servers import free_port, stop_group

ROOT = Path(__file__).resolve().parent.parent


def requirement_lines(text: str) -> list[str]:
    return [line.split("#")[0].strip() for line in text.splitlines() if line.split("#")[0].strip()]


def test_environment_yml_pip_section_mirrors_requirements():
    requirements = requirement_lines((ROOT / "requirements.txt").read_text())
    yml = (ROOT / "environment.yml").read_text()
    pip_part = yml.split("- pip:", 1)[1]
    pip_lines = [m.group(1).strip() for m in re.finditer(r"^\s+- (.+)$", pip_part, flags=re.M)]
    assert pip_lines[0].startswith("torch"), "torch comes first in environment.yml's pip list"
    assert pip_lines[-1] == "-e ."
    assert pip_lines[1:-1] == requirements


def test_torch_range_accepts_older_gpu_images():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"torch>=2.11,<3"' in pyproject
    assert "torch>=2.11,<3" in (ROOT / "environment.yml").read_text()
    assert "TORCH ?= torch==2.13.0" in (ROOT / "Makefile").read_text()


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.slow
def test_make_lab_serves_jupyterlab_with_a_token(tmp_path):
    port, token = free_port(), "course-test-token-1234"
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_CONFIG_DIR": str(tmp_path)}
    log = open(tmp_path / "lab.log", "w")
    proc = subprocess.Popen(["make", "lab", f"PORT={port}", f"TOKEN={token}", "NO_BROWSER=1"], cwd=ROOT,
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline, status = time.monotonic() + 120, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status = http_status(f"http://127.0.0.1:{port}/lab?token={token}")
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(1)
        assert status == 200, f"JupyterLab did not answer 200 on /lab: {(tmp_path / 'lab.log').read_text()[-2000:]}"
        assert http_status(f"http://127.0.0.1:{port}/api/contents") == 403, "without the token, access is refused"
        assert http_status(f"http://127.0.0.1:{port}/api/contents?token={token}") == 200
        # The whole course is served (not only notebooks/): labs, solutions and docs open from the file browser.
        for folder in ("notebooks", "labs", "solutions", "docs"):
            assert http_status(f"http://127.0.0.1:{port}/api/contents/{folder}?token={token}") == 200, folder
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/lab?token={token}", timeout=10) as response:
            page = response.read().decode()
        assert '"news": {"disabled": true}' in page, "JupyterLab would ask about news on first start"
    finally:
        stop_group(proc)
        log.close()
    assert proc.poll() is not None
