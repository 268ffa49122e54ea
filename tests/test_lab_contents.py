"""Issue 37: `make lab` never writes a committed file. The course's contents manager (utils/course/lab_contents.py), the
one `make lab` configures, driven through jupyter_server's contents API as JupyterLab drives it: open, save,
autosave, new file, delete, rename, checkpoints, and `make reset-chapter`. The browser session that runs and saves
chapter 00 and then asks git is in tests/test_browser.py."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import nbformat
import pytest
from tornado import web

from utils.course import lab_server
from utils.course.lab_contents import CourseContentsManager, MyWork

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = "notebooks/00_x.ipynb"


def _notebook(text: str) -> dict:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(text)]
    return json.loads(nbformat.writes(nb))


@pytest.fixture
def course(tmp_path: Path) -> Path:
    """A course folder with one committed chapter and a docs page."""
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "docs").mkdir()
    (tmp_path / CHAPTER).write_text(json.dumps(_notebook("committed")))
    (tmp_path / "docs" / "glossary.md").write_text("# Glossary\n")
    return tmp_path


def _manager(root: Path) -> CourseContentsManager:
    """The manager as `make lab` configures it (its own command line, parsed by jupyter_server)."""
    from jupyter_server.serverapp import ServerApp

    app = ServerApp()
    app.parse_command_line([a for a in lab_server.command(port=8888, token="t", root=root)
                            if a.startswith(("--ContentsManager", "--ServerApp.contents_manager_class"))])
    assert app.contents_manager_class is CourseContentsManager
    return CourseContentsManager(config=app.config, root_dir=str(root))


def _run(coroutine):
    return asyncio.run(coroutine)


def _source(model: dict) -> str:
    """The first cell's text, below the note a saved copy is served with."""
    from utils.course.lab_contents import NOTICE_IDS

    return "".join(next(c for c in model["content"]["cells"] if c.get("id") not in NOTICE_IDS)["source"])


def test_a_save_goes_to_my_work_and_is_read_back(course: Path) -> None:
    manager = _manager(course)
    committed = (course / CHAPTER).read_bytes()
    assert _source(_run(manager.get(CHAPTER))) == "committed"
    saved = _run(manager.save({"type": "notebook", "content": _notebook("my outputs")}, CHAPTER))
    assert saved["path"] == CHAPTER, "the copy is opened under the chapter's own path (its links stay right)"
    assert (course / CHAPTER).read_bytes() == committed
    assert "my outputs" in (course / "my-work" / CHAPTER).read_text()
    assert _source(_run(manager.get(CHAPTER))) == "my outputs"
    # a second save (autosave) writes the copy again, never the committed file
    _run(manager.save({"type": "notebook", "content": _notebook("again")}, CHAPTER))
    assert (course / CHAPTER).read_bytes() == committed and _source(_run(manager.get(CHAPTER))) == "again"
    listing = _run(manager.get("notebooks"))["content"]
    assert [e["path"] for e in listing] == [CHAPTER], "the chapter is listed once"
    assert "my-work" not in [e["name"] for e in _run(manager.get(""))["content"]], "my-work/ is not listed"
    assert _run(manager.get_kernel_path(CHAPTER)) == "notebooks", "the kernel still runs in notebooks/"


def test_new_files_and_text_files_in_committed_folders_go_to_my_work(course: Path) -> None:
    manager = _manager(course)
    model = _run(manager.new_untitled(path="notebooks", type="notebook"))
    assert not (course / model["path"]).exists() and (course / "my-work" / model["path"]).is_file()
    assert model["path"] in [e["path"] for e in _run(manager.get("notebooks"))["content"]]
    _run(manager.save({"type": "file", "format": "text", "content": "my notes"}, "docs/glossary.md"))
    assert (course / "docs" / "glossary.md").read_text() == "# Glossary\n"
    assert _run(manager.get("docs/glossary.md"))["content"] == "my notes"
    folder = _run(manager.new_untitled(path="notebooks", type="directory"))
    assert not (course / folder["path"]).exists() and (course / "my-work" / folder["path"]).is_dir()
    # outside the committed folders nothing changes: my-labs/ is written as before
    (course / "my-labs").mkdir()
    _run(manager.save({"type": "notebook", "content": _notebook("lab")}, "my-labs/lab00.ipynb"))
    assert (course / "my-labs" / "lab00.ipynb").is_file()


def test_deleting_a_chapter_sets_only_the_copy_aside(course: Path) -> None:
    manager = _manager(course)
    with pytest.raises(web.HTTPError) as refused:
        _run(manager.delete_file(CHAPTER))
    assert refused.value.status_code == 403 and (course / CHAPTER).is_file()
    _run(manager.save({"type": "notebook", "content": _notebook("mine")}, CHAPTER))
    _run(manager.delete(CHAPTER))
    assert (course / CHAPTER).is_file() and not (course / "my-work" / CHAPTER).exists()
    _run(manager.save({"type": "notebook", "content": _notebook("mine again")}, CHAPTER))
    _run(manager.delete(CHAPTER))  # within the same second: both kept
    kept = sorted(_source({"content": json.loads(p.read_text())}) for p in (course / "my-work" / ".previous").iterdir())
    assert kept == ["mine", "mine again"], "a deleted copy is set aside, never destroyed"
    assert _source(_run(manager.get(CHAPTER))) == "committed"
    with pytest.raises(web.HTTPError) as refused:
        _run(manager.rename_file(CHAPTER, "notebooks/renamed.ipynb"))
    assert refused.value.status_code == 403 and (course / CHAPTER).is_file()
    with pytest.raises(web.HTTPError):
        _run(manager.delete_file("notebooks"))


def test_renaming_into_a_committed_folder_goes_to_my_work(course: Path) -> None:
    manager = _manager(course)
    (course / "scratch.ipynb").write_text(json.dumps(_notebook("scratch")))
    _run(manager.rename_file("scratch.ipynb", "notebooks/scratch.ipynb"))
    assert not (course / "notebooks" / "scratch.ipynb").exists()
    assert _source(_run(manager.get("notebooks/scratch.ipynb"))) == "scratch"
    _run(manager.rename_file("notebooks/scratch.ipynb", "notebooks/scratch2.ipynb"))
    assert (course / "my-work" / "notebooks" / "scratch2.ipynb").is_file()
    with pytest.raises(web.HTTPError) as clash:
        _run(manager.rename_file("notebooks/scratch2.ipynb", CHAPTER))
    assert clash.value.status_code == 409


def test_checkpoints_live_in_my_work_and_restore_the_copy(course: Path) -> None:
    manager = _manager(course)
    _run(manager.save({"type": "notebook", "content": _notebook("first save")}, CHAPTER))
    checkpoints = _run(manager.list_checkpoints(CHAPTER))
    assert checkpoints and not (course / "notebooks" / ".ipynb_checkpoints").exists()
    _run(manager.save({"type": "notebook", "content": _notebook("second save")}, CHAPTER))
    _run(manager.restore_checkpoint(checkpoints[0]["id"], CHAPTER))
    assert _source(_run(manager.get(CHAPTER))) == "first save"
    assert "committed" in (course / CHAPTER).read_text()


def test_reset_chapter_and_a_changed_chapter_after_a_pull(course: Path) -> None:
    manager = _manager(course)
    work = MyWork(course)
    (course / "notebooks" / "09_y.ipynb").write_text(json.dumps(_notebook("nine")))
    _run(manager.save({"type": "notebook", "content": _notebook("mine")}, CHAPTER))
    assert work.changed() == []
    (course / CHAPTER).write_text(json.dumps(_notebook("updated by a pull")))
    assert work.changed() == [CHAPTER]
    assert "Updated in the course since you saved your copy: notebooks/00_x.ipynb" in lab_server._work_line(course)
    said = work.reset_chapter("00", servers=[])
    assert "course's version again" in said and "my-work/.previous/00_x-" in said
    assert _source(_run(manager.get(CHAPTER))) == "updated by a pull" and work.changed() == []
    assert "no saved copy" in work.reset_chapter("09", servers=[])
    for bad in ("9", "07", 9):
        with pytest.raises((TypeError, ValueError), match="number"):
            work.reset_chapter(bad, servers=[])
    with pytest.raises(TypeError, match="root"):
        MyWork(None)


def test_my_work_is_ignored_by_git() -> None:
    out = subprocess.run(["git", "check-ignore", "-q", "my-work/notebooks/00_setup_and_environment.ipynb"], cwd=ROOT)
    assert out.returncode == 0, "my-work/ must be in .gitignore"


def test_the_course_kernel_keeps_the_committed_display_name() -> None:
    """JupyterLab writes the kernel's display name into a notebook it opens: the course's kernel must carry the
    name the chapters were committed with, or every chapter opens already modified."""
    spec = json.loads((lab_server.KERNELS_DIR / "kernels" / "python3" / "kernel.json").read_text())
    names = {json.loads(p.read_text())["metadata"]["kernelspec"]["display_name"]
             for folder in ("notebooks", "labs") for p in (ROOT / folder).glob("*.ipynb")}
    assert names == {spec["display_name"]}


def test_make_lab_names_course_files_changed_in_place(course: Path) -> None:
    """A working copy that an earlier JupyterLab (or an editor) wrote into: `make lab` names the files and says how
    to keep them as the learner's copies; a clean one gets no such line."""
    git = ["git", "-C", str(course), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "c"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    assert "Changed in place" not in lab_server._work_line(course)
    (course / CHAPTER).write_text(json.dumps(_notebook("run in place")))
    said = lab_server._work_line(course)
    assert "Changed in place" in said and f"cp {CHAPTER} my-work/{CHAPTER} && git checkout -- {CHAPTER}" in said
    subprocess.run([*git, "checkout", "--", CHAPTER], check=True, capture_output=True)
    (course / "notebooks" / "Untitled.ipynb").write_text("{}")  # a new file, never committed: moved, not restored
    said = lab_server._work_line(course)
    assert "mkdir -p my-work/notebooks && mv notebooks/Untitled.ipynb my-work/notebooks/Untitled.ipynb" in said


def test_a_notebook_is_served_with_this_kernels_language_info(course: Path) -> None:
    """JupyterLab writes the kernel's language_info into the notebook it opens: a chapter committed from another
    Python version, or a lab (which carries none), opened already marked modified. The manager serves the
    language_info the course's python3 kernel reports (the committed file is untouched)."""
    from ipykernel.ipkernel import IPythonKernel

    nb = _notebook("committed")
    nb["metadata"]["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb["metadata"]["language_info"] = {"name": "python", "version": "3.0.1"}
    (course / CHAPTER).write_text(json.dumps(nb))
    served = _run(_manager(course).get(CHAPTER))["content"]["metadata"]["language_info"]
    assert served == IPythonKernel.language_info and served["version"] != "3.0.1"
    assert "3.0.1" in (course / CHAPTER).read_text()


def test_a_saved_copy_keeps_snapshots_where_its_widget_models_are_not_saved(course: Path) -> None:
    """Issue 37: JupyterLab saves no widget state, so a copy reopened in a later session showed "Error displaying
    widget: model not found". A saved copy drops each view whose model it does not save, when the output has a
    snapshot to show instead; a view whose model is saved, and a view with nothing else to show, stay."""
    from utils.course.lab_contents import WIDGET_STATE, WIDGET_VIEW

    nb = _notebook("panel")
    view = {WIDGET_VIEW: {"model_id": "gone", "version_major": 2, "version_minor": 0}}
    nb["cells"][0]["outputs"] = [
        {"output_type": "execute_result", "execution_count": 1, "metadata": {},
         "data": {**view, "text/html": "<b>snapshot</b>", "text/plain": "Panel"}},
        {"output_type": "display_data", "metadata": {},
         "data": {WIDGET_VIEW: {"model_id": "kept", "version_major": 2, "version_minor": 0}, "text/plain": "x"}},
        {"output_type": "display_data", "metadata": {}, "data": {WIDGET_VIEW: {"model_id": "alone"}}}]
    nb["metadata"]["widgets"] = {WIDGET_STATE: {"state": {"kept": {}}, "version_major": 2, "version_minor": 0}}
    manager = _manager(course)
    _run(manager.save({"type": "notebook", "content": nb}, CHAPTER))
    outputs = json.loads((course / "my-work" / CHAPTER).read_text())["cells"][0]["outputs"]
    assert WIDGET_VIEW not in outputs[0]["data"] and "".join(outputs[0]["data"]["text/html"]) == "<b>snapshot</b>"
    assert WIDGET_VIEW in outputs[1]["data"] and WIDGET_VIEW in outputs[2]["data"]


def test_a_copy_the_course_has_changed_since_says_so_and_the_note_is_never_saved(course: Path) -> None:
    """Issue 37: after a `git pull` changed a chapter, JupyterLab kept showing the learner's older saved copy with no
    word about it. The copy is served with a note on top (how to see the new version); a save drops the note."""
    from utils.course.lab_contents import OUTDATED_NOTICE_ID

    manager = _manager(course)
    _run(manager.save({"type": "notebook", "content": _notebook("my run")}, CHAPTER))
    assert _run(manager.get(CHAPTER))["content"]["cells"][0].get("id") != OUTDATED_NOTICE_ID  # course unchanged
    (course / CHAPTER).write_text(json.dumps(_notebook("the course's new version")))  # a git pull
    served = _run(manager.get(CHAPTER))["content"]
    note = served["cells"][0]
    assert note["id"] == OUTDATED_NOTICE_ID and "make reset-chapter N=00" in "".join(note["source"])
    assert _source({"content": {"cells": served["cells"][1:]}}) == "my run"
    _run(manager.save({"type": "notebook", "content": served}, CHAPTER))
    saved = json.loads((course / "my-work" / CHAPTER).read_text())
    assert [c.get("id") for c in saved["cells"]].count(OUTDATED_NOTICE_ID) == 0


def test_a_saved_copy_says_it_is_yours_and_the_note_is_never_saved(course: Path) -> None:
    """Issue 37 (review item 15): nothing in JupyterLab told a saved copy (my-work/, not listed in the file browser,
    opened under the chapter's own path) from the course's version. An up-to-date copy is served with a one-line
    note on top (whose copy, how to see the course's version); the committed file is served without it; a save
    drops it. A copy the course has changed since gets the outdated note instead, never both."""
    from utils.course.lab_contents import NOTICE_IDS, OUTDATED_NOTICE_ID, SAVED_COPY_NOTICE_ID, saved_copy_notice

    manager = _manager(course)
    assert [c.get("id") for c in _run(manager.get(CHAPTER))["content"]["cells"]].count(SAVED_COPY_NOTICE_ID) == 0
    _run(manager.save({"type": "notebook", "content": _notebook("my run")}, CHAPTER))
    served = _run(manager.get(CHAPTER))["content"]
    note = "".join(served["cells"][0]["source"])
    assert served["cells"][0]["id"] == SAVED_COPY_NOTICE_ID and served["cells"][0]["cell_type"] == "markdown"
    assert f"my-work/{CHAPTER}" in note and "make reset-chapter N=00" in note and "not saved" in note
    assert _source({"content": served}) == "my run"
    _run(manager.save({"type": "notebook", "content": served}, CHAPTER))  # Ctrl+S on the served copy
    saved = json.loads((course / "my-work" / CHAPTER).read_text())
    assert [c.get("id") for c in saved["cells"]].count(SAVED_COPY_NOTICE_ID) == 0 and len(saved["cells"]) == 1
    assert "committed" in (course / CHAPTER).read_text()
    (course / CHAPTER).write_text(json.dumps(_notebook("the course's new version")))  # a git pull
    ids = [c.get("id") for c in _run(manager.get(CHAPTER))["content"]["cells"]]
    assert ids[0] == OUTDATED_NOTICE_ID and SAVED_COPY_NOTICE_ID not in ids
    assert "`my-work/docs/x.ipynb`); move it elsewhere" in saved_copy_notice("docs/x.ipynb")["source"]
    _run(manager.save({"type": "notebook", "content": _notebook("scratch")}, "notebooks/scratch.ipynb"))
    assert _run(manager.get("notebooks/scratch.ipynb"))["content"]["cells"][0]["id"] not in NOTICE_IDS  # no course's
