"""tests/servers.py: a server whose free port was taken before it bound it starts again on another (review s15's
fresh run: a Jupyter kernel's ZMQ socket answered JupyterLab's readiness probe with its greeting)."""

import socket
import sys
import threading

import servers
from servers import started, stop_group


def test_a_port_taken_by_another_program_is_given_up_for_another(tmp_path, monkeypatch) -> None:
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]

    def greet() -> None:  # what a ZMQ socket sends first: not HTTP
        while True:
            try:
                conn, _ = squatter.accept()
            except OSError:
                return
            conn.sendall(b"\xff" + bytes(8) + b"\x7f\n")
            conn.close()

    threading.Thread(target=greet, daemon=True).start()
    ports = iter([taken, servers.free_port()])
    monkeypatch.setattr(servers, "free_port", lambda: next(ports))
    try:
        proc, port = started(lambda port: [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                                           "-d", str(tmp_path)], "/", tmp_path / "server.log", wait_s=30)
    finally:
        squatter.close()
    stop_group(proc)
    assert port != taken
