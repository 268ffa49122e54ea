"""Where `make lab` keeps a learner's work: the course's committed files stay as committed, saves go to my-work/.

JupyterLab's contents manager (jupyter_server's own, for the file browser, opening and saving) is replaced by
`CourseContentsManager`, which serves the course's committed folders (notebooks/, labs/, solutions/, docs/) as an
overlay: a file is read from the learner's copy, `my-work/<same path>`, once there is one, and from the committed
file until then; every save (autosave included), new file or new folder there goes to `my-work/`, which git ignores.
So a chapter opens with its committed outputs, its links (which name `notebooks/...`, `../docs/...`) keep working
because the paths the browser sees do not change, its kernel runs in notebooks/ as before, and running and saving
every chapter leaves `git status` clean, so `git pull` always applies.

A saved copy opens with a one-line note on top saying it is the learner's copy (or, if the course has changed
that file since, that it is outdated), and how to see the course's version; the note is never saved.
Deleting `notebooks/NN_*.ipynb` in JupyterLab sets the learner's copy aside in my-work/.previous/ (the committed
version shows again), as `make reset-chapter N=09` does from a terminal; a committed file itself cannot be deleted
or renamed from JupyterLab. The committed file's hash when the copy was first saved is
kept in my-work/.bases.json, so `make lab` can say which saved chapters the course has changed since (a `git pull`).
Checkpoints ("File > Revert Notebook to Checkpoint") are kept in my-work/ too. A notebook is served with the
language_info this machine's Python kernel reports, which JupyterLab would otherwise write into it on opening (the
course's kernel also carries the committed display name), so nothing opens already marked modified.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from tornado import web
from traitlets import List, Unicode, default

from utils.course.lab_sessions import COMMITTED_DIRS, WORK_DIR, LabOpen, open_sessions
from utils.validate import check_instance, check_str

REPO_ROOT = Path(__file__).resolve().parents[2]
BASES_FILE = ".bases.json"


@dataclass(frozen=True)
class MyWork:
    """The learner's saved copies under `root`/`name` (my-work/): where a committed file's copy lives, which copies
    started from a committed version that has changed since, and starting a chapter over."""

    root: Path = REPO_ROOT
    name: str = WORK_DIR

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(check_instance("root", self.root, (str, Path))))
        check_str("name", self.name)

    @property
    def folder(self) -> Path:
        return self.root / self.name

    def copy_of(self, path: str) -> Path:
        """Where the learner's copy of the committed file at API path `path` (notebooks/00_x.ipynb) lives."""
        return self.folder / check_str("path", path).strip("/")

    def bases(self) -> dict[str, str]:
        """my-work/.bases.json: API path -> sha256 of the committed file each copy started from."""
        try:
            bases = json.loads((self.folder / BASES_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(bases, dict):
            return {}
        return {k: v for k, v in bases.items() if isinstance(k, str) and isinstance(v, str)}

    def remember(self, path: str) -> None:
        """Note the committed file's current hash as the base of the learner's copy of `path`."""
        bases = self.bases()
        bases[check_str("path", path).strip("/")] = _sha256(self.root / path.strip("/"))
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / BASES_FILE).write_text(json.dumps(bases, indent=1, sort_keys=True), encoding="utf-8")

    def changed(self) -> list[str]:
        """The copies whose committed file has changed since the copy was first saved (e.g. after `git pull`):
        their API paths, sorted. Each still shadows the new version until it is reset."""
        return sorted(path for path, base in self.bases().items()
                      if self.copy_of(path).is_file() and (self.root / path).is_file()
                      and _sha256(self.root / path) != base)

    def reset(self, path: str) -> Path | None:
        """Move the learner's copy of `path` (and its checkpoint) to my-work/.previous/, time-stamped, so the
        committed version shows again. Returns where the copy went; None if there was none."""
        mine = self.copy_of(path)
        if not mine.is_file():
            return None
        previous = self.folder / ".previous"
        previous.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        moved, n = previous / f"{mine.stem}-{stamp}{mine.suffix}", 1
        while moved.exists():  # two within a second: never one over the other
            moved, n = previous / f"{mine.stem}-{stamp}-{n}{mine.suffix}", n + 1
        shutil.move(mine, moved)
        for checkpoint in (mine.parent / ".ipynb_checkpoints").glob(f"{mine.stem}-checkpoint*{mine.suffix}"):
            checkpoint.unlink()
        bases = self.bases()
        if bases.pop(path.strip("/"), None) is not None:
            (self.folder / BASES_FILE).write_text(json.dumps(bases, indent=1, sort_keys=True), encoding="utf-8")
        return moved

    def reset_chapter(self, number: str, servers: list[dict] | None = None) -> str:
        """`make reset-chapter N=09`: set the learner's copy of chapter `number` aside (see `reset`); says what was
        done. Raises LabOpen, touching nothing, while a running JupyterLab has the chapter open (its next autosave
        would write the copy back)."""
        check_str("number", number)
        if not (len(number) == 2 and number.isdigit()):
            raise ValueError(f"number must be a two-digit chapter number such as '09', got {number!r}")
        matches = sorted((self.root / "notebooks").glob(f"{number}_*.ipynb"))
        if not matches:
            raise ValueError(f"number {number!r}: no chapter notebooks/{number}_*.ipynb in {self.root}")
        path = f"notebooks/{matches[0].name}"
        still_open = open_sessions(matches[0], servers)
        if still_open:
            raise LabOpen(f"{still_open[0]}. Close it first in JupyterLab (File > Close and Shut Down Notebook), "
                          f"then run `make reset-chapter N={number}` again.")
        moved = self.reset(path)
        if moved is None:
            return f"{path}: you have no saved copy; JupyterLab shows the course's version."
        return (f"{path}: JupyterLab shows the course's version again; your copy is kept as "
                f"{moved.relative_to(self.root).as_posix()}.")


OUTDATED_NOTICE_ID = "course-outdated-copy"
SAVED_COPY_NOTICE_ID = "course-saved-copy"
NOTICE_IDS = (OUTDATED_NOTICE_ID, SAVED_COPY_NOTICE_ID)  # served on top of a saved copy, removed by every save


def _see_the_course_version(path: str) -> str:
    """How to see the course's version of `path` again instead of the learner's copy."""
    number = Path(path).name[:2]
    if path.startswith("notebooks/") and number.isdigit():
        return f"run `make reset-chapter N={number}` in a terminal: your copy is kept in `my-work/.previous/`"
    return f"move `my-work/{path}` elsewhere"


def outdated_notice(path: str) -> dict:
    """The note shown at the top of a saved copy whose committed chapter has changed since (a `git pull`): served
    with the copy, removed again by every save."""
    check_str("path", path)
    text = (f"**This is your saved copy of `{path}`, and the course has changed that file since you first saved "
            f"it** (a `git pull`). You see your copy, not the new version. To see the new version, close this tab "
            f"and {_see_the_course_version(path)}. (This note is not saved.)")
    return {"cell_type": "markdown", "id": OUTDATED_NOTICE_ID, "metadata": {"editable": False}, "source": text}


def saved_copy_notice(path: str) -> dict:
    """The one-line note on top of a saved copy the course has not changed since: the tab and path are the
    course's own (my-work/ is not listed), so this is what tells the learner it is their copy. Served with the
    copy, removed again by every save."""
    check_str("path", path)
    number = Path(path).name[:2]
    how = (f"`make reset-chapter N={number}` shows the course's version again (close this tab first; yours is kept "
           f"in `my-work/.previous/`)" if path.startswith("notebooks/") and number.isdigit()
           else "move it elsewhere to see the course's version again")
    text = f"*This is your saved copy (`my-work/{path}`); {how}. This note is not saved.*"
    return {"cell_type": "markdown", "id": SAVED_COPY_NOTICE_ID, "metadata": {"editable": False}, "source": text}


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def drop_unsaved_widget_views(notebook: dict) -> int:
    """Remove from `notebook`'s outputs each widget view whose model the notebook does not save, where the output
    has another form to show (the panels' labelled static snapshot, text/html); returns how many were removed.

    JupyterLab saves no widget state by default, so a saved copy's views point at models of a kernel that is gone,
    and a reopened copy showed "Error displaying widget: model not found" where the snapshot would show."""
    if not isinstance(notebook, dict):
        raise TypeError(f"notebook must be a notebook's JSON dict, got {type(notebook).__name__}")
    saved = notebook.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {}).get("state", {}) or {}
    removed = 0
    for cell in notebook.get("cells", []):
        for out in cell.get("outputs", []) or []:
            data = out.get("data") or {}
            view = data.get(WIDGET_VIEW)
            if isinstance(view, dict) and view.get("model_id") not in saved and set(data) - {WIDGET_VIEW}:
                del data[WIDGET_VIEW]
                removed += 1
    return removed


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class CourseContentsManager(AsyncLargeFileManager):
    """jupyter_server's file contents manager with the course's committed folders overlaid by the learner's copies
    in `work_dir` (see the module's docstring)."""

    work_dir = Unicode(WORK_DIR, config=True, help="Folder (relative to root_dir, ignored by git) that holds the "
                                                   "learner's saved copies of the committed files.")
    committed_dirs = List(Unicode(), list(COMMITTED_DIRS), config=True,
                          help="Top-level folders whose files are never written: saves there go to work_dir.")

    @default("checkpoints_kwargs")
    def _default_checkpoints_kwargs(self) -> dict:
        return {"parent": self, "log": self.log, "root_dir": os.path.join(self.root_dir, self.work_dir)}

    def _in_committed(self, path: str) -> bool:
        return path.strip("/").split("/", 1)[0] in self.committed_dirs

    def _committed_os_path(self, path: str) -> str:
        return super()._get_os_path(path)

    def _mine_os_path(self, path: str) -> str:
        return super()._get_os_path(f"{self.work_dir}/{path.strip('/')}")

    def _get_os_path(self, path: str) -> str:
        """The learner's copy of a committed-folder file once there is one (or a file or folder that exists only
        there); the committed path otherwise."""
        committed = self._committed_os_path(path)
        if self._in_committed(path):
            mine = self._mine_os_path(path)
            if os.path.isfile(mine) or (not os.path.exists(committed) and os.path.exists(mine)):
                return mine
        return committed

    def _start_copy(self, path: str) -> bool:
        """Make sure the learner's copy of `path` exists before a write (a copy of the committed file, or an empty
        file for a new one); True if it was made now."""
        mine, committed = self._mine_os_path(path), self._committed_os_path(path)
        if os.path.isfile(mine):
            return False
        os.makedirs(os.path.dirname(mine), exist_ok=True)
        if os.path.isfile(committed):
            shutil.copy2(committed, mine)
            MyWork(Path(self.root_dir), self.work_dir).remember(path)
        else:
            Path(mine).touch()
        return True

    async def get(self, path: str, content: bool = True, type: str | None = None, format: str | None = None,
                  **kwargs) -> dict:
        """jupyter_server's model, with a python3 notebook's language_info as this machine's kernel will report it:
        JupyterLab writes the kernel's language_info into a notebook it opens, so a notebook committed from another
        Python version (or a lab, which carries none) would otherwise open already marked modified."""
        model = await super().get(path, content=content, type=type, format=format, **kwargs)
        notebook = model.get("content") if model.get("type") == "notebook" else None
        if notebook and notebook.get("metadata", {}).get("kernelspec", {}).get("name") == "python3":
            from ipykernel.ipkernel import IPythonKernel

            notebook["metadata"]["language_info"] = copy.deepcopy(IPythonKernel.language_info)
        clean = path.strip("/")
        if (notebook and self._in_committed(clean) and os.path.isfile(self._mine_os_path(clean))
                and os.path.isfile(self._committed_os_path(clean))):  # a copy of a course file, not a new one
            outdated = clean in MyWork(Path(self.root_dir), self.work_dir).changed()
            note = outdated_notice(clean) if outdated else saved_copy_notice(clean)
            notebook.setdefault("cells", []).insert(0, note)
        return model

    async def save(self, model: dict, path: str = "") -> dict:
        path = path.strip("/")
        if not self._in_committed(path) or path in self.committed_dirs:
            return await super().save(model, path)
        if model.get("type") == "directory":
            if not os.path.exists(self._committed_os_path(path)):
                os.makedirs(self._mine_os_path(path), exist_ok=True)
            return await super().save(model, path)
        if model.get("type") == "notebook" and isinstance(model.get("content"), dict):
            drop_unsaved_widget_views(model["content"])  # the copy reopens with snapshots, not broken views
            cells = model["content"].get("cells", [])
            cells[:] = [c for c in cells if c.get("id") not in NOTICE_IDS]  # the notes are shown, never saved
        started = self._start_copy(path)
        try:
            return await super().save(model, path)
        except BaseException:
            if started:  # a failed first save leaves no copy behind to shadow the committed file
                os.unlink(self._mine_os_path(path))
            raise

    async def restore_checkpoint(self, checkpoint_id: str, path: str) -> None:
        if self._in_committed(path):
            self._start_copy(path.strip("/"))
        await super().restore_checkpoint(checkpoint_id, path)

    async def _dir_model(self, path: str, content: bool = True) -> dict:
        """A committed folder lists its files and, besides them, what exists only among the learner's copies."""
        model = await super()._dir_model(path, content=content)
        mine = self._mine_os_path(path) if self._in_committed(path) else ""
        if content and mine and os.path.isdir(mine) and os.path.isdir(self._committed_os_path(path)):
            listed = {entry["name"] for entry in model["content"]}
            for name in sorted(os.listdir(mine)):
                if name in listed or not self.should_list(name) or (name.startswith(".") and not self.allow_hidden):
                    continue
                model["content"].append(await self.get(f"{path.strip('/')}/{name}".lstrip("/"), content=False))
        return model

    async def delete_file(self, path: str) -> None:
        """In a committed folder only the learner's copy (or a file of their own) can be deleted; a copy of a
        committed file is set aside in my-work/.previous/ (as `make reset-chapter` does), never destroyed."""
        path = path.strip("/")
        if self._in_committed(path) and os.path.exists(self._committed_os_path(path)):
            if MyWork(Path(self.root_dir), self.work_dir).reset(path) is None:
                raise web.HTTPError(403, f"{path} is the course's committed version: it is never deleted. Your "
                                         f"saved copies live in {self.work_dir}/.")
            return
        await super().delete_file(path)

    async def rename_file(self, old_path: str, new_path: str) -> None:
        old, new = old_path.strip("/"), new_path.strip("/")
        if self._in_committed(old) and os.path.exists(self._committed_os_path(old)):
            raise web.HTTPError(403, f"{old} is the course's committed version: it is never renamed or moved. "
                                     "Use File > Save Notebook As... to keep your copy under another name.")
        if self._in_committed(new) and new not in self.committed_dirs:
            if os.path.exists(self._get_os_path(new)):
                raise web.HTTPError(409, f"File already exists: {new}")
            target = self._mine_os_path(new)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.move(self._get_os_path(old), target)
            return
        await super().rename_file(old, new)
