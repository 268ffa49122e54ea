"""The test suite's forked kernels (tests/kernel_zygote.py) against ordinary ones (ipykernel's own kernel spec),
started with the same environment: what a cell can see is the same, except what must differ (random seeds, the
multiprocessing key); an interrupt reaches the kernel's process group; a killed client takes its kernel along,
and what a kernel left running ends with it; an environment the preloaded libraries would have read differently
gets an ordinary kernel, and so does a client that finds no server."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager

import tests.kernel_zygote as kz

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(os, "pidfd_open")
                                or os.environ.get(kz.ENV) == "0", reason="the zygote is Linux only, and turned off")

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
    "draws": [random.random(), float(numpy.random.rand())], "torch_preloaded": TORCH_PRELOADED,
    "authkey": bytes(__import__("multiprocessing").current_process().authkey).hex(),
    "own_group": os.getpgid(0) == os.getpid() == os.getsid(0)}))
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server of this module's own (not the session's), its socket and its kernel spec's folder."""
    folder = tmp_path_factory.mktemp("zygote")
    started = kz.start_for_session(str(folder))
    assert started is not None
    process, env = started
    deadline = time.monotonic() + 60
    while not os.path.exists(env[kz.ENV]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert os.path.exists(env[kz.ENV]), open(folder / "zygote.log").read()
    yield env[kz.ENV], folder
    process.terminate()
    process.wait(timeout=10)


def _start(folder, env: dict[str, str], cwd: str, ordinary: bool = False) -> tuple[KernelManager, object]:
    """A kernel from the server's spec, or (`ordinary`) from ipykernel's own spec of this interpreter, the one the
    spec without a zygote runs: `python -m ipykernel_launcher -f CONNECTION_FILE`."""
    specs = KernelSpecManager(kernel_dirs=[] if ordinary else [str(folder / "kernels")])
    km = KernelManager(kernel_name="python3", kernel_spec_manager=specs)
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


def _probe(folder, env: dict[str, str], cwd: str, ordinary: bool = False) -> dict:
    km, kc = _start(folder, env, cwd, ordinary)
    try:
        return json.loads(_run(kc, PROBE)[0])
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_a_forked_kernel_sees_what_an_ordinary_one_sees(server, tmp_path):
    sock, folder = server
    env = {**os.environ, "PYTHONWARNINGS": "ignore::UserWarning,error::ResourceWarning", "COURSE_PROBE": "1",
           kz.ENV: sock}
    forked = _probe(folder, env, str(tmp_path))
    fresh = _probe(folder, env, str(tmp_path), ordinary=True)
    again = _probe(folder, env, str(tmp_path))
    assert forked.pop("torch_preloaded") and again.pop("torch_preloaded") and not fresh.pop("torch_preloaded")
    draws = [forked.pop("draws"), fresh.pop("draws"), again.pop("draws")]
    assert draws[0] != draws[2], "two forks drew the same random numbers"
    assert forked.pop("authkey") != again.pop("authkey")
    fresh.pop("authkey")
    for probe in (forked, fresh, again):  # the connection file is each kernel's own
        probe["argv"] = [a for a in probe["argv"] if not a.endswith(".json")]
        probe["env"].pop("JPY_PARENT_PID")
    assert forked == fresh == again
    assert forked["cwd"] == str(tmp_path) and forked["env"]["COURSE_PROBE"] == "1" and forked["own_group"]
    assert forked["argv0"] == "ipykernel_launcher.py" and forked["argv"] == ["-f"]
    assert any("UserWarning" in f and "ignore" in f for f in forked["filters"])


def test_signals_reach_the_kernels_group_and_a_killed_client_takes_it_along(server, tmp_path):
    sock, folder = server
    km, kc = _start(folder, {**os.environ, kz.ENV: sock}, str(tmp_path))
    try:
        pid = int(_run(kc, "import os; print(os.getpid())")[0])
        assert pid != km.provisioner.process.pid  # a fork, not the client
        # a process the kernel leaves running, in a session of its own (the daemon of tests/test_grading_tamper.py)
        leftover = int(_run(kc, "import subprocess, sys\nleft = subprocess.Popen([sys.executable, '-c', 'import "
                                "time; time.sleep(600)'], start_new_session=True)\nprint(left.pid)")[0])
        # an interrupt reaches the kernel's group: the shell command it waits on ends too, as with a fresh kernel
        kc.execute("import os, time\nt0 = time.monotonic()\nstatus = os.system('sleep 60')")
        time.sleep(1)
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=20)
        assert reply["content"]["status"] in ("ok", "error")
        assert float(_run(kc, "print(time.monotonic() - t0)")[0]) < 30, "the interrupt did not reach the command"
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
    sock, folder = server
    threads = str(int(os.environ.get("OMP_NUM_THREADS", "1")) + 1)
    log = os.environ.get(kz.LOG_ENV) or str(folder / "zygote.log")
    size = os.path.getsize(log)
    probe = _probe(folder, {**os.environ, kz.ENV: sock, "OMP_NUM_THREADS": threads}, str(tmp_path))
    assert not probe["torch_preloaded"] and probe["env"]["OMP_NUM_THREADS"] == threads
    with open(log) as f:
        f.seek(size)
        assert "environment differs in ['OMP_NUM_THREADS']" in f.read()


def test_no_server_means_ordinary_kernels(server, tmp_path):
    _, folder = server
    probe = _probe(folder, {**os.environ, kz.ENV: str(tmp_path / "no-such.sock")}, str(tmp_path))
    assert probe["argv0"] == "ipykernel_launcher.py" and not probe["torch_preloaded"]
