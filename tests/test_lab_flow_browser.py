"""Issue 34's lab-flow items in headless Chromium, on JupyterLab started the way `make lab` starts it
(utils.course.lab_server: the course's kernel, the course's settings), serving a copy of the course's files:

- a check cell run in a fresh kernel, before the lab's import cell, shows the one-line "run the first code cell"
  message, not a NameError traceback;
- a chapter's "Practise: lab NN" link opens the learner's copy in my-labs/, not the generated labs/ file;
- a check's verdict renders in the notebook's own text font, not monospace, and wraps between words (no word is
  split across two lines, even in a narrow window);
- issue 37: chapter 09's planner panel, run in a 1,400 x 900 window, shows every control's whole label, wraps its
  plan text between words, and its controls and figure fit one screen.

One JupyterLab server and one browser serve all four tests. Uses Debian's Chromium by path (never a downloaded
browser); without it, or without Playwright for Python, the tests are skipped with the reason (in CI, a failure).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from servers import started, stop_group

from utils.course.lab_server import command as lab_command
from utils.course.lab_server import environment as lab_environment

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path(os.environ.get("COURSE_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = ROOT / "test-artifacts" / "browser"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-quic", "--no-first-run"]
CHAPTER = "notebooks/02_number_formats.ipynb"
PLANNER_CHAPTER = "notebooks/09_capstone_fit_a_model.ipynb"
LAB02 = "lab02_number_formats.ipynb"
LAB00 = "lab00_warmup.ipynb"
PLANNER = "planner.ipynb"
TOKEN = "lab-flow-token"
WRONG_01 = "def packed_bytes(shape, bits):\n    return 0  # a wrong answer: the check says NOT YET, with a hint"

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"browser test cannot run in CI: {reason}")
    pytest.skip(reason)


def _served_course(folder: Path) -> None:
    """The files the tests open, laid out as `make lab` serves them: a chapter, the generated labs/, and the
    learner's copies in my-labs/ (lab 00's with a wrong answer to 0.1 and no outputs)."""
    (folder / "notebooks").mkdir(parents=True)
    (folder / "labs").mkdir()
    (folder / "my-labs").mkdir()
    shutil.copy(ROOT / CHAPTER, folder / CHAPTER)
    for lab in (LAB00, LAB02):
        shutil.copy(ROOT / "labs" / lab, folder / "labs" / lab)
        shutil.copy(ROOT / "labs" / lab, folder / "my-labs" / lab)
    mine = json.loads((folder / "my-labs" / LAB00).read_text())
    for cell in mine["cells"]:
        if cell.get("metadata", {}).get("course", {}).get("exercise") == "0.1":
            cell["source"] = WRONG_01
    (folder / "my-labs" / LAB00).write_text(json.dumps(mine, indent=1))
    (folder / PLANNER).write_text(json.dumps(_planner_notebook(), indent=1))


def _planner_notebook() -> dict:
    """One code cell: chapter 09's planner cell as the chapter has it, after the imports it uses (the chapter's
    usable_budget is utils.ledger.plan's: tests/test_ch09_widget.py), so the panel is the chapter's own in seconds."""
    chapter = json.loads((ROOT / PLANNER_CHAPTER).read_text())
    cell = next("".join(c["source"]) for c in chapter["cells"]
                if c["cell_type"] == "code" and "plan_panel = Panel(" in "".join(c["source"]))
    imports = ("import matplotlib.pyplot as plt  # as the chapter's first cell: the inline backend shows figures\n"
               "from ipywidgets import Checkbox\n"
               "from utils.ledger.architectures import ARCHITECTURES, shape_of_model\n"
               "from utils.ledger.budget import CAPABILITY as GPU_CAPABILITY\n"
               "from utils.ledger.gpt import PRESETS\n"
               "from utils.ledger.budget import GIB, REPORTED_GIB, usable_budget\n"
               "from utils.ledger.plan import costs_table, plan\n"
               "from utils.lessons.plan_runs import plan_figure\n"
               "from utils.lessons.tables import show_table\n"
               "from utils.lessons.widgets import Panel, dropdown, log2_slider\n\n")
    return {"cells": [{"cell_type": "code", "execution_count": None, "id": "planner", "metadata": {}, "outputs": [],
                       "source": imports + cell}],
            "metadata": chapter["metadata"], "nbformat": 4, "nbformat_minor": 5}


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Iterator[tuple[str, Any]]:
    """(base URL, a Playwright browser) for JupyterLab serving a copy of the course."""
    if not CHROMIUM.exists():
        _unavailable(f"Debian's Chromium is not at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright for Python is not installed")
    tmp = tmp_path_factory.mktemp("lab_flow")
    served = tmp / "course"
    _served_course(served)
    settings = tmp / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    # every cell in the page (JupyterLab 4 drops cells scrolled out of view), so a chapter's last cell is findable
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    env = lab_environment({**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp / "rt"), "JUPYTER_CONFIG_DIR": str(tmp / "cfg"),
                           "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "ws"),
                           "JUPYTERLAB_SETTINGS_DIR": str(tmp / "settings")})
    # tests/conftest.py's MPLBACKEND=Agg dropped: the kernel draws figures inline, as in `make lab`
    for name in ("COURSE_CHECKS_STRICT", "MPLBACKEND"):
        env.pop(name, None)
    try:
        proc, port = started(lambda port: lab_command(port=port, token=TOKEN, root=served, open_browser=False),
                             f"/api/status?token={TOKEN}", tmp / "lab.log", env=env)
    except RuntimeError as exc:
        pytest.fail(f"JupyterLab: {exc}")
    base = f"http://127.0.0.1:{port}"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
            try:
                yield base, browser
            finally:
                browser.close()
    finally:
        stop_group(proc)


def _open(browser: Any, base: str, path: str, width: int = 1400, height: int = 1000) -> Any:
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(60_000)  # a loaded machine: JupyterLab lays a notebook out for a while
    # a workspace of its own: the default one restores the earlier tests' tabs, and JupyterLab 4 hides an inactive
    # notebook tab without the lm-mod-hidden class, so a selector for "the notebook on show" could match theirs
    page.goto(f"{base}/lab/workspaces/{uuid.uuid4().hex}/tree/{path}?token={TOKEN}")
    page.wait_for_selector(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell", timeout=90_000)
    return page


def _wait_for_idle_kernel(base: str, page: Any, path: str, timeout_s: float = 120) -> None:
    """Until the server has an idle kernel for `path` (two checks in a row, no "Select Kernel" dialog between them),
    then a last look for that dialog: an earlier test's session can make the server answer at once while this page's
    dialog is still to come (seen once on a loaded machine: the dialog then swallowed the Run menu's clicks)."""
    deadline = time.monotonic() + timeout_s
    accept = page.locator(".jp-Dialog .jp-mod-accept")  # "Select Kernel", if JupyterLab asks
    quiet = 0
    while time.monotonic() < deadline:
        if accept.count() and accept.first.is_visible():
            accept.first.click()
            quiet = 0
        with urllib.request.urlopen(f"{base}/api/sessions?token={TOKEN}", timeout=5) as response:
            sessions = json.loads(response.read())
        if any(s.get("path") == path and s.get("kernel", {}).get("execution_state") == "idle" for s in sessions):
            quiet += 1
            if quiet >= 2:
                _accept_late_kernel_dialog(page)
                return
        time.sleep(1)
    raise AssertionError(f"no idle kernel for {path} after {timeout_s:g} s")


def _accept_late_kernel_dialog(page: Any, watch_s: float = 2) -> None:
    """Accept a "Select Kernel" dialog that shows up within `watch_s` seconds, before a click it would swallow."""
    accept = page.locator(".jp-Dialog .jp-mod-accept")
    deadline = time.monotonic() + watch_s
    while time.monotonic() < deadline:
        if accept.count() and accept.first.is_visible():
            accept.first.click()
        time.sleep(0.5)


def _code_cell(page: Any, source: str) -> Any:
    """The first code cell of the open notebook whose text contains `source`."""
    cell = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell", has_text=source).first
    cell.wait_for(timeout=60_000)
    return cell


def _run(page: Any, cell: Any) -> None:
    cell.locator(".jp-InputArea .cm-content").click()  # scrolls it into view once the layout is stable
    page.keyboard.press("Shift+Enter")


def _shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name))


def test_a_check_run_before_the_import_cell_says_which_cell_to_run(lab):
    base, browser = lab
    path = f"my-labs/{LAB00}"
    page = _open(browser, base, path)
    try:
        _wait_for_idle_kernel(base, page, path)
        check = _code_cell(page, "check_saved_state_bytes(")  # 0.2's check, in a fresh kernel: nothing ran yet
        _run(page, check)
        output = check.locator(".jp-OutputArea-output")
        output.first.wait_for(timeout=60_000)
        text = output.first.inner_text()
        assert "`check_saved_state_bytes` is not defined yet: run the lab's first code cell" in text, text
        assert "Run All Above" in text
        assert "NameError" not in check.inner_text() and "Traceback" not in check.inner_text()
        _shot(page, "lab_flow_check_before_import.png")
    except Exception:
        _shot(page, "lab_flow_check_before_import_failure.png")
        raise
    finally:
        page.close()


def test_practise_link_opens_the_learners_copy(lab):
    base, browser = lab
    page = _open(browser, base, CHAPTER)
    try:
        link = page.locator(".jp-RenderedMarkdown a", has_text="lab 02").last
        link.wait_for(timeout=60_000)
        href = link.get_attribute("href")  # JupyterLab resolves it against the chapter's folder
        assert f"/my-labs/{LAB02}" in href and f"/labs/{LAB02}" not in href, href
        link.scroll_into_view_if_needed()
        link.click()
        page.locator(".lm-TabBar-tab.lm-mod-current", has_text=LAB02).wait_for()
        page.wait_for_url(f"**/tree/my-labs/{LAB02}*")  # JupyterLab's address names the open document's path
        _shot(page, "lab_flow_practise_link.png")
    except Exception:
        _shot(page, "lab_flow_practise_link_failure.png")
        raise
    finally:
        page.close()


# The words of an element whose text is split over two lines (a word's glyphs on two different line boxes).
SPLIT_WORDS = """(el) => {
  const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  const split = [];
  let node;
  while ((node = walker.nextNode())) {
    const re = /\\S+/g;
    let m;
    while ((m = re.exec(node.textContent))) {
      const range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const tops = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
      if (tops.size > 1) split.push(m[0]);
    }
  }
  return split;
}"""
LINES = "(el) => Math.round(el.getBoundingClientRect().height / parseFloat(getComputedStyle(el).lineHeight))"


def test_a_verdict_renders_in_the_notebooks_font_without_mid_word_breaks(lab):
    base, browser = lab
    path = f"my-labs/{LAB00}"
    page = _open(browser, base, path, width=900)  # narrow: the verdict's long message must wrap
    try:
        _wait_for_idle_kernel(base, page, path)
        # focus the notebook first: the Run menu acts on the notebook that last had focus
        page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").first.click()
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        verdict = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .course-check", has_text="Exercise 0.1")
        verdict.wait_for(timeout=120_000)
        assert "NOT YET" in verdict.inner_text()
        style = verdict.evaluate("el => { const s = getComputedStyle(el); return [s.fontFamily, s.wordBreak]; }")
        prose = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-RenderedMarkdown p").first
        prose_font = prose.evaluate("el => getComputedStyle(el).fontFamily")
        assert style[0] == prose_font and "monospace" not in style[0].lower(), (style, prose_font)
        assert style[1] == "normal", style
        assert verdict.evaluate(LINES) >= 3, "the message should wrap at this width"
        assert verdict.evaluate(SPLIT_WORDS) == []
        assert not verdict.locator("pre").count()
        _shot(page, "lab_flow_verdict_font.png")
    except Exception:
        _shot(page, "lab_flow_verdict_font_failure.png")
        raise
    finally:
        page.close()


# Each label of a widget whose text does not fit its box (ipywidgets cuts it with an ellipsis): [text, needed, shown].
CUT_LABELS = """(el) => [...el.querySelectorAll('.widget-label, .widget-label-basic')]
  .filter(l => l.textContent.trim() && l.scrollWidth > l.clientWidth)
  .map(l => [l.textContent, l.scrollWidth, l.clientWidth])"""


def _assert_wrapped_at_words(panel: Any) -> None:
    """The panel's printed text wraps in this window, and only between words."""
    texts = panel.locator(".jp-OutputArea-output pre")
    assert texts.count() >= 1
    for i in range(texts.count()):
        assert texts.nth(i).evaluate(SPLIT_WORDS) == [], texts.nth(i).inner_text()
    wrapped = [texts.nth(i).evaluate(LINES) > texts.nth(i).inner_text().strip().count("\n") + 1
               for i in range(texts.count())]
    assert any(wrapped), "the plan text should wrap in this window (else the check above tests nothing)"


def test_the_planner_panel_shows_whole_labels_and_wraps_its_text_at_words(lab):
    """Issue 37 (review item 10): "sequences per step" was cut to "sequences per...", and the plan text broke words
    at the panel's edge ("N / F4", "128 / GiB available"), in a 1,400 x 900 window."""
    base, browser = lab
    page = _open(browser, base, PLANNER, width=1400, height=900)
    try:
        _wait_for_idle_kernel(base, page, PLANNER)
        _run(page, _code_cell(page, "plan_panel = Panel("))
        panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .widget-vbox", has_text="Plan a training run").first
        panel.locator(".jp-OutputArea-output img").first.wait_for(timeout=90_000)
        assert panel.evaluate(CUT_LABELS) == []
        _assert_wrapped_at_words(panel)
        first_text = panel.locator(".jp-OutputArea-output pre").first.inner_text()
        panel.locator("select").first.select_option("Mixtral-8x7B")  # QLoRA: the reviewer's "N / F4"
        page.wait_for_function("([el, old]) => { const q = s => el.querySelector('.jp-OutputArea-output ' + s);"
                               " return q('pre') && q('pre').innerText !== old && q('img'); }",
                               arg=[panel.element_handle(), first_text], timeout=60_000)
        _assert_wrapped_at_words(panel)
        panel.evaluate("el => el.scrollIntoView({block: 'start'})")
        notebook = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer").first
        view = notebook.bounding_box()
        figure = panel.locator(".jp-OutputArea-output img").first.bounding_box()
        controls = panel.locator(".widget-vbox").first.bounding_box()  # the column of controls
        bottom = max(figure["y"] + figure["height"], controls["y"] + controls["height"])
        assert bottom <= view["y"] + view["height"], (figure, controls, view)  # one screen: no scrolling
        _shot(page, "lab_flow_planner_panel.png")
    except Exception:
        _shot(page, "lab_flow_planner_panel_failure.png")
        raise
    finally:
        page.close()
