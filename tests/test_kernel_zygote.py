"""The test suite's forked kernels (tests/kernel_zygote.py) against ordinary ones, started side by side with the same
environment: what a cell can see is the same, except what must differ (random seeds); signals reach the kernel;
a killed client takes its kernel along, and a kernel's leftovers end with it; an environment the preloaded
libraries would have read differently gets an ordinary kernel."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest
from jupyter_client import KernelManager

import tests.kernel_zygote as kz

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(os, "pidfd_open"),
                                reason="the zygote is Linux only")

PROBE = """
import sys
TORCH_PRELOADED = "torch" in sys.modules
import json, os, random, resource, signal, sys, warnings
import numpy, torch
print(json.dumps({"path": sys.path, "cwd": os.getcwd(), "argv0": os.path.basename(sys.argv[0]),
    "argv": sys.argv[1:], "env": {k: v for k, v in os.environ.items() if k not in ("COURSE_KERNEL_ZYGOTE",)},
    "filters": sorted(repr(f) for f in warnings.filters),  # the order among the imports' own differs
    "umask": os.umask(0o022), "nofile": resource.getrlimit(resource.RLIMIT_NOFILE),
    "sigint": repr(signal.getsignal(signal.SIGINT)), "main": sys.modules["__main__"].__class__.__name__,
    "stdin": os.isatty(0), "flags": list(sys.flags), "executable": sys.executable,
    "draws": [random.random(), float(numpy.random.rand())], "torch_preloaded": TORCH_PRELOADED}))
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("zygote")
    started = kz.start_for_session(str(folder))
    assert started is not None
    process, env = started
    deadline = time.monotonic() + 60
    while not os.path.exists(env[kz.ENV]) and time.monotonic() < deadline:
        time.sleep(0.1)
    yield env, folder
    process.terminate()
    process.wait(timeout=10)


def _start(env: dict[str, str], cwd: str) -> tuple[KernelManager, object]:
    km = KernelManager(kernel_name="python3")
    km.start_kernel(env=env, cwd=cwd)
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    return km, kc


def _run(kc, code: str, timeout: float = 60) -> tuple[str, dict]:
    out: list[str] = []

    def hook(msg: dict) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])

    reply = kc.execute_interactive(code, timeout=timeout, output_hook=hook)
    return "".join(out), reply["content"]


def _probe(env: dict[str, str], cwd: str) -> dict:
    km, kc = _start(env, cwd)
    try:
        return json.loads(_run(kc, PROBE)[0])
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _env(server_env: dict[str, str], **extra: str) -> dict[str, str]:
    return {**os.environ, "JUPYTER_PATH": server_env["JUPYTER_PATH"], **extra}


def test_a_forked_kernel_sees_what_an_ordinary_one_sees(server, tmp_path):
    env, _ = server
    extra = {"PYTHONWARNINGS": "ignore::UserWarning,error::ResourceWarning", "COURSE_PROBE": "1"}
    forked = _probe(_env(env, **{kz.ENV: env[kz.ENV]}, **extra), str(tmp_path))
    fresh = _probe(_env(env, **{kz.ENV: ""}, **extra), str(tmp_path))  # the client's own fallback: a plain kernel
    again = _probe(_env(env, **{kz.ENV: env[kz.ENV]}, **extra), str(tmp_path))
    assert forked.pop("torch_preloaded") and again.pop("torch_preloaded") and not fresh.pop("torch_preloaded")
    draws = [forked.pop("draws"), fresh.pop("draws"), again.pop("draws")]
    assert draws[0] != draws[2], "two forks drew the same random numbers"
    for probe in (forked, fresh, again):  # the connection file is each kernel's own
        probe["argv"] = [a for a in probe["argv"] if not a.endswith(".json")]
        probe["env"].pop("JPY_PARENT_PID")
    assert forked == fresh == again
    assert forked["cwd"] == str(tmp_path) and forked["env"]["COURSE_PROBE"] == "1"
    assert any("UserWarning" in f and "ignore" in f for f in forked["filters"])


def test_signals_reach_the_kernel_and_a_killed_client_takes_it_along(server, tmp_path):
    env, _ = server
    km, kc = _start(_env(env, **{kz.ENV: env[kz.ENV]}), str(tmp_path))
    try:
        pid = int(_run(kc, "import os; print(os.getpid())")[0])
        assert pid != km.provisioner.process.pid  # a fork, not the client
        _run(kc, "import subprocess, sys\nleft = subprocess.Popen([sys.executable, '-c', 'import time; "
                 "time.sleep(600)'], start_new_session=True)\nprint(left.pid)")
        leftover = int(_run(kc, "print(left.pid)")[0])
        kc.execute("import time\nwhile True:\n    time.sleep(0.1)")
        time.sleep(1)
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=20)
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
        km.shutdown_kernel(now=True)  # SIGKILL to the client's process group, no message: the fork is not in it
        deadline = time.monotonic() + 20
        while (os.path.exists(f"/proc/{pid}") or os.path.exists(f"/proc/{leftover}")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not os.path.exists(f"/proc/{pid}"), "the kernel outlived its killed client"
        assert not os.path.exists(f"/proc/{leftover}"), "a process the kernel left running outlived it"
    finally:
        kc.stop_channels()
        if km.has_kernel:
            km.shutdown_kernel(now=True)


def test_an_environment_read_at_import_gets_an_ordinary_kernel(server, tmp_path):
    env, folder = server
    threads = str(int(os.environ.get("OMP_NUM_THREADS", "1")) + 1)
    probe = _probe(_env(env, **{kz.ENV: env[kz.ENV]}, OMP_NUM_THREADS=threads), str(tmp_path))
    assert not probe["torch_preloaded"] and probe["env"]["OMP_NUM_THREADS"] == threads
    log = os.environ.get(kz.LOG_ENV) or os.path.join(folder, "zygote.log")
    assert "environment differs in ['OMP_NUM_THREADS']" in open(log).read()


def test_no_server_means_ordinary_kernels(tmp_path):
    probe = _probe({**os.environ, kz.ENV: str(tmp_path / "no-such.sock")}, str(tmp_path))
    assert probe["argv0"] == "ipykernel_launcher.py" and not probe["torch_preloaded"]
