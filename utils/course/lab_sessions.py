"""What a running JupyterLab has open: the course refuses to reset a lab or a chapter under an open notebook, whose
next autosave would write the old copy back. Shared by the server's commands (utils/course/lab_server.py) and the
contents manager (utils/course/lab_contents.py)."""

from __future__ import annotations

from pathlib import Path

from utils.validate import check_instance

# The learner's saved copies of the committed folders' files (utils/course/lab_contents.py): ignored by git.
WORK_DIR, COMMITTED_DIRS = "my-work", ("notebooks", "labs", "solutions", "docs")


class LabOpen(RuntimeError):
    """The lab to reset is open in a running JupyterLab: its autosave would write the old copy back."""


def open_sessions(path: Path, servers: list[dict] | None = None) -> list[str]:
    """The running Jupyter servers (this user's, from their runtime files) that have `path` open with a kernel:
    a line each. A reset under an open notebook is undone by JupyterLab's next autosave."""
    path = Path(check_instance("path", path, (str, Path))).resolve()
    if servers is not None:
        servers = list(check_instance("servers", servers, (list, tuple)))
        for server in servers:
            check_instance("servers item", server, dict)
    if servers is None:
        try:
            from jupyter_server.serverapp import list_running_servers

            servers = list(list_running_servers())
        except Exception:  # no jupyter_server, or unreadable runtime files: nothing known to be open
            return []
    found = []
    for server in servers:
        root, url, token = server.get("root_dir"), server.get("url", ""), server.get("token", "")
        if not root:
            continue
        try:
            import json
            import urllib.request

            with urllib.request.urlopen(f"{url.rstrip('/')}/api/sessions?token={token}", timeout=3) as response:
                sessions = json.loads(response.read())
        except (OSError, ValueError):
            continue
        for session in sessions:
            opened = session.get("path") or session.get("notebook", {}).get("path", "")
            if opened and (Path(root) / opened).resolve() == path:
                found.append(f"{opened} is open in the JupyterLab at {url} (its kernel is running)")
    return found
