"""How the course starts JupyterLab (`make lab`, and the browser test the same way).

It serves the repository root, so the file browser shows notebooks/, labs/, my-labs/, solutions/ and docs/, and
opens chapter 00 with the file browser at the root; it listens on 127.0.0.1 only, always behind a token, and never
asks about JupyterLab news: the course's settings (utils/course/lab_settings/overrides.json, JupyterLab's app-settings
overrides) turn news and update checks off, so a learner sees exactly what the browser test sees.

Learners work in `my-labs/` (ignored by git), copied from `labs/` on the first `make lab`; `labs/` stays as
generated, so editing a lab never breaks `make test`. `make reset-lab N=06` copies one lab afresh (the old copy is
kept in my-labs/.previous/).

The chapters are never written either: JupyterLab's contents manager is the course's (utils/course/lab_contents.py),
which opens notebooks/NN_*.ipynb from the committed file until the learner saves, and writes every save to my-work/
(ignored by git), reading that copy thereafter. `make reset-chapter N=09` starts a chapter over.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import secrets
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from utils.course.lab_sessions import COMMITTED_DIRS, WORK_DIR, LabOpen, open_sessions
from utils.validate import check_bool, check_instance, check_int, check_str

REPO_ROOT = Path(__file__).resolve().parents[2]
FIRST_NOTEBOOK = "notebooks/00_setup_and_environment.ipynb"
SETTINGS_DIR = Path(__file__).resolve().parent / "lab_settings"
LABS_DIR, MY_LABS_DIR = REPO_ROOT / "labs", REPO_ROOT / "my-labs"
# What the file browser does not list: jupyter_server's own defaults, and the install metadata `make env` writes into
# the repository root (pip install -e .), which a learner has no use for. The learner's saved copies (my-work/, see
# utils/course/lab_contents.py) are not listed either: they are opened under the committed files' own paths
# (notebooks/NN_*.ipynb), where their links and their kernel's folder are right.
HIDDEN = ("__pycache__", "*.pyc", "*.pyo", ".DS_Store", "*~", "*.egg-info", WORK_DIR)
CONTENTS_MANAGER = "utils.course.lab_contents.CourseContentsManager"


def command(*, port: int, token: str, root: Path = REPO_ROOT, open_browser: bool = True) -> list[str]:
    """The `jupyter lab` command line (run with the venv's Python)."""
    check_int("port", port, minimum=1, maximum=65535)
    check_str("token", token)
    root = Path(check_instance("root", root, (str, Path)))
    check_bool("open_browser", open_browser)
    return [sys.executable, "-m", "jupyterlab", "--ip=127.0.0.1", f"--port={port}", "--port-retries=0",
            f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={Path(root).resolve()}",
            "--LabApp.news_url=None", f"--LabApp.app_settings_dir={SETTINGS_DIR}",
            f"--ServerApp.default_url=/lab/tree/{FIRST_NOTEBOOK}?file-browser-path=/",
            f"--ServerApp.contents_manager_class={CONTENTS_MANAGER}"] \
        + [f"--ContentsManager.hide_globs={glob}" for glob in HIDDEN] \
        + ([] if open_browser else ["--no-browser"]) + (["--allow-root"] if os.geteuid() == 0 else [])


# JUPYTER_PATH entry: the course's python3 kernel (utils/course/checks/not_run.py)
KERNELS_DIR = SETTINGS_DIR / "jupyter"


def environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment JupyterLab runs in: `base` (default os.environ) with the course's kernel first on
    JUPYTER_PATH. That kernel is Python's own with one line run at start, `import utils.course.checks.not_run`, so a
    check cell run in a fresh kernel, before the lab's import cell, says which cell to run first (no NameError)."""
    env = dict(os.environ if base is None else check_instance("base", base, dict))
    env["JUPYTER_PATH"] = os.pathsep.join([str(KERNELS_DIR), *filter(None, [env.get("JUPYTER_PATH")])])
    return env


def port_in_use(port: int) -> bool:
    """Whether something already listens on 127.0.0.1:`port` (e.g. an earlier `make lab`)."""
    check_int("port", port, minimum=1, maximum=65535)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def copy_labs(labs_dir: Path = LABS_DIR, my_labs_dir: Path = MY_LABS_DIR) -> list[Path]:
    """Copy every lab that is not in `my_labs_dir` yet (never overwriting a learner's copy); returns the copies."""
    labs_dir = Path(check_instance("labs_dir", labs_dir, (str, Path)))
    my_labs_dir = Path(check_instance("my_labs_dir", my_labs_dir, (str, Path)))
    if not labs_dir.is_dir():
        raise ValueError(f"labs_dir {labs_dir} is not a folder")
    my_labs_dir.mkdir(parents=True, exist_ok=True)
    copied = []
    for lab in sorted(labs_dir.glob("lab[0-9][0-9]_*.ipynb")):
        target = my_labs_dir / lab.name
        if not target.exists():
            shutil.copyfile(lab, target)
            copied.append(target)
    return copied


def reset_lab(number: str, labs_dir: Path = LABS_DIR, my_labs_dir: Path = MY_LABS_DIR,
              servers: list[dict] | None = None) -> Path:
    """Start lab `number` ("06") over: the learner's copy moves to my-labs/.previous/ (time-stamped) and a fresh
    copy of labs/labNN_*.ipynb takes its place. Returns the fresh copy. Raises LabOpen, touching nothing, while a
    running JupyterLab has the copy open (`servers`: the running servers, default: found from Jupyter's runtime
    files), since its next autosave would silently write the old copy back."""
    check_str("number", number)
    if not (len(number) == 2 and number.isdigit()):
        raise ValueError(f"number must be a two-digit lab number such as '06', got {number!r}")
    labs_dir = Path(check_instance("labs_dir", labs_dir, (str, Path)))
    my_labs_dir = Path(check_instance("my_labs_dir", my_labs_dir, (str, Path)))
    matches = sorted(labs_dir.glob(f"lab{number}_*.ipynb"))
    if not matches:
        raise ValueError(f"number {number!r}: no lab lab{number}_*.ipynb in {labs_dir}")
    if servers is not None:
        check_instance("servers", servers, (list, tuple))
    lab = matches[0]
    target = my_labs_dir / lab.name
    still_open = open_sessions(target, servers)
    if still_open:
        raise LabOpen(f"{still_open[0]}. Close it first in JupyterLab (File > Close and Shut Down Notebook), then "
                      f"run `make reset-lab N={number}` again: while it is open, JupyterLab's next autosave writes "
                      "your old copy back over the fresh one.")
    if target.exists():
        previous = my_labs_dir / ".previous"
        previous.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        shutil.move(target, previous / f"{lab.stem}-{stamp}.ipynb")
    my_labs_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(lab, target)
    return target


def _work_line(root: Path = REPO_ROOT) -> str:
    """What `make lab` says about the learner's saved chapters: where they are, and which the course has changed
    since they were saved (a `git pull`), with how to take the new version."""
    from utils.course.lab_contents import MyWork  # here: it imports jupyter_server, which resetting a lab does not need

    work = MyWork(Path(check_instance("root", root, (str, Path))))
    saved = sorted(work.folder.glob("notebooks/*.ipynb")) if work.folder.is_dir() else []
    line = (f"Your chapters: saving a chapter writes your copy to {WORK_DIR}/ (git ignores it; notebooks/ stays as "
            f"committed, so `git pull` always works); JupyterLab opens your copy under the chapter's own name, a note "
            f"on top saying so. "
            f"{len(saved)} saved so far; `make reset-chapter N=09` starts one over.")
    changed = work.changed()
    if changed:
        line += (f"\nUpdated in the course since you saved your copy: {', '.join(changed)}. You still see your copy; "
                 "`make reset-chapter N=NN` shows the new version (yours is kept in "
                 f"{WORK_DIR}/.previous/).")
    status = subprocess.run(["git", "-C", str(work.root), "status", "--porcelain", "--", *COMMITTED_DIRS],
                            capture_output=True, text=True)
    entries = status.stdout.splitlines() if status.returncode == 0 else []
    if entries:
        in_place = [entry[3:] for entry in entries]
        first, new = in_place[0].rstrip("/"), entries[0].startswith("??")
        keep = (f"mkdir -p {WORK_DIR}/{Path(first).parent} && "
                + (f"mv {first} {WORK_DIR}/{first}" if new else
                   f"cp {first} {WORK_DIR}/{first} && git checkout -- {first}"))
        line += (f"\nChanged in place (by an editor, or a JupyterLab started before {WORK_DIR}/ existed): "
                 f"{', '.join(in_place[:5])}{f' and {len(in_place) - 5} more' if len(in_place) > 5 else ''}; "
                 f"`git pull` may refuse them. To keep one as your copy: {keep}")
    return line


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Start JupyterLab on the course (127.0.0.1, with a token).")
    parser.add_argument("--port", type=int, default=8888)
    parser.add_argument("--token", default="", help="default: a random one")
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--reset-lab", metavar="NN", help="copy labs/labNN_*.ipynb afresh into my-labs/ and exit")
    parser.add_argument("--reset-chapter", metavar="NN", help="set your saved copy of chapter NN aside (in "
                                                              "my-work/.previous/) and exit")
    args = parser.parse_args(argv)
    refusals = (TypeError, ValueError, LabOpen)
    if args.reset_chapter is not None:
        from utils.course.lab_contents import MyWork

        try:
            message = MyWork().reset_chapter(args.reset_chapter)
        except refusals as exc:
            parser.exit(2, f"utils.course.lab_server: {exc}\n")
        print(message)
        return
    if args.reset_lab is not None:
        had_copy = any(MY_LABS_DIR.glob(f"lab{args.reset_lab}_*.ipynb"))
        try:
            fresh = reset_lab(args.reset_lab)
        except refusals as exc:
            parser.exit(2, f"utils.course.lab_server: {exc}\n")
        print(f"{fresh.relative_to(REPO_ROOT)} is a fresh copy of the lab ("
              + ("your old one is in my-labs/.previous/" if had_copy else "there was no copy before") + ").")
        return
    token = args.token or secrets.token_hex(24)
    try:
        cmd = command(port=args.port, token=token, open_browser=not args.no_browser)
    except (TypeError, ValueError) as exc:
        parser.exit(2, f"utils.course.lab_server: {exc}\n")
    if port_in_use(args.port):
        parser.exit(2, f"utils.course.lab_server: port {args.port} is already in use (an earlier `make lab`?). Stop "
                       f"it, "
                       f"or start another with `make lab PORT={args.port + 2}`.\n")
    copied = copy_labs()
    print(f"Your labs: my-labs/ ({f'{len(copied)} copied from labs/ now' if copied else 'already there'}); work "
          "there (git ignores it), labs/ stays as generated; `make reset-lab N=06` starts one over.", flush=True)
    print(_work_line(), flush=True)
    url = f"http://127.0.0.1:{args.port}/lab/tree/{FIRST_NOTEBOOK}?token={token}&file-browser-path=/"
    print(f"Starting JupyterLab (a few seconds) ...\nJupyterLab: {url}", flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            env=environment())
    announced = False
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            if not announced and "is running at" in line:
                announced = True
            elif announced and "http://" in line and "127.0.0.1" in line:
                print(f"\n==> Open the course here: {url}\n    (Ctrl+C stops JupyterLab.)\n", flush=True)
                announced = None  # printed once
    except KeyboardInterrupt:
        proc.terminate()
    sys.exit(proc.wait())


if __name__ == "__main__":  # LabOpen lives in utils.course.lab_sessions: the class main catches under python -m too
    main()
