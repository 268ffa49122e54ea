"""The course as a website: `make book` builds it (Sphinx + myst-nb + sphinx-book-theme, committed outputs, never
executed), and a chapter page opened in headless Chromium shows rendered outputs, working links and search."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from servers import free_port, stop_group

from utils.course import book

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path(os.environ.get("COURSE_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = ROOT / "test-artifacts" / "browser"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


def test_links_to_repository_files_go_to_github() -> None:
    text = "see [lab 05](../labs/05_x.ipynb) and [the glossary](../docs/glossary.md#ulp)"
    out = book._rewrite_links(text, "https://github.com/o/n")
    assert "(https://github.com/o/n/blob/main/labs/05_x.ipynb)" in out and "(../docs/glossary.md#ulp)" in out
    # the learner's own copy exists only in a clone: on the site, the link goes to the lab it copies
    out = book._rewrite_links("**Practise:** [lab 03](../my-labs/lab03_loss_scaling.ipynb), your own copy", "https://g/o/n")
    assert "[lab 03](https://g/o/n/blob/main/labs/lab03_loss_scaling.ipynb)" in out and "my-labs" not in out


def _printed_tables(chapter: Path) -> int:
    """The Markdown tables a chapter's committed outputs print (text/markdown outputs with a header separator)."""
    import json

    count = 0
    for cell in json.loads(chapter.read_text())["cells"]:
        for out in cell.get("outputs", []):
            text = "".join(out.get("data", {}).get("text/markdown", ""))
            count += len(re.findall(r"^\|[-| :]+\|\s*$", text, flags=re.MULTILINE))
    return count


def _need_chromium() -> None:
    """Skip without Debian's Chromium (fail in CI, where .ci/run installs it)."""
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"Debian's Chromium is not at {CHROMIUM}")
        pytest.skip(f"Debian's Chromium is not at {CHROMIUM}")


@contextlib.contextmanager
def _served(site: Path) -> Iterator[str]:
    """`site` served by `python -m http.server` on 127.0.0.1, as a reader's browser would see it: its base URL."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "-d", str(site)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(50):
            try:
                urllib.request.urlopen(base, timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        yield base
    finally:
        stop_group(server)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("book")
    # --working-tree: these tests check the chapters as they are in this checkout (committed or about to be), which
    # they compare with the files themselves; building from HEAD, the default, is tested below on a small repository.
    done = subprocess.run([sys.executable, "-m", "utils.course.book", "--out", str(out), "--working-tree"], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return out / "html"


@pytest.mark.slow
def test_the_site_builds_every_chapter_and_page(site: Path) -> None:
    for chapter in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        page = site / "notebooks" / f"{chapter.stem}.html"
        assert page.exists(), page
    for name in ("glossary", "claims", "claims-ledger", "instructors"):
        assert (site / "docs" / f"{name}.html").exists(), name
    chapter00 = (site / "notebooks" / "00_setup_and_environment.html").read_text()
    assert "VBox(children=" not in chapter00, "a widget shown as its raw text instead of its snapshot"
    assert (site / "searchindex.js").exists()


@pytest.mark.slow
def test_no_page_of_the_site_has_an_id_twice(site: Path) -> None:
    """Review 37c: the glossary page had 39 ids twice (an explicit anchor before each term's heading, and the
    heading's own id), each anchor sitting at the end of the previous term; a link to a term still lands on it."""
    from collections import Counter

    for page in [site / "docs" / "glossary.html", *sorted((site / "docs").glob("*.html"))]:
        ids = Counter(re.findall(r'\bid="([^"]+)"', page.read_text(encoding="utf-8")))
        assert not [i for i, n in ids.items() if n > 1], page.name
    glossary = (site / "docs" / "glossary.html").read_text(encoding="utf-8")
    assert '<section id="lora">' in glossary and '<section id="allocated">' in glossary


def test_an_anchor_is_dropped_only_where_the_heading_carries_its_id() -> None:
    from utils.course.book import _without_heading_twins

    text = '<a id="lora"></a>\n### LoRA\n\n<a id="fp8"></a>\n### FP8 formats\n'
    assert _without_heading_twins(text) == '### LoRA\n\n<a id="fp8"></a>\n### FP8 formats\n'


@pytest.mark.slow
def test_the_site_loads_no_script_or_image_from_another_host_but_mathjax(site: Path) -> None:
    """Offline the pages still render: no widget manager or require.js from a CDN (the widgets are snapshots), no
    badge images; only MathJax (the formulas) comes from jsDelivr, as Sphinx's default."""
    remote = set()
    for page in site.rglob("*.html"):
        remote |= set(re.findall(r"<(?:script|img)[^>]*\bsrc=\"(https?://[^\"]+)\"", page.read_text()))
    assert all("/mathjax@" in url for url in remote), sorted(remote)


@pytest.mark.slow
@pytest.mark.browser
def test_a_chapter_page_in_chromium(site: Path) -> None:
    _need_chromium()
    from playwright.sync_api import sync_playwright

    with _served(site) as base:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            try:
                page.goto(f"{base}/notebooks/02_number_formats.html")
                page.wait_for_selector("div.cell_output", timeout=30_000)
                assert page.locator("div.cell_output").count() > 5, "the chapter's outputs are not rendered"
                assert page.locator("div.cell_output img, div.cell_output table").count() > 0
                page.screenshot(path=str(ARTIFACTS / "book_chapter02.png"))
                page.locator("a.right-next").first.click()  # the footer's link to the next chapter
                page.wait_for_url("**/03_loss_scaling.html", timeout=30_000)
                for chapter in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
                    printed = _printed_tables(chapter)
                    page.goto(f"{base}/notebooks/{chapter.stem}.html")
                    page.wait_for_selector("div.cell_output", timeout=30_000)
                    rendered = page.locator("div.cell_output table").count()
                    raw = page.locator("div.cell_output p", has_text="|---").count()
                    assert rendered >= printed and raw == 0, (
                        f"{chapter.stem}: the chapter prints {printed} Markdown tables, the page renders {rendered} "
                        f"as tables and shows {raw} as a paragraph of pipes")
                # review 37c: printed lines ran past the column (scrolled sideways) and the planner snapshot's table
                # ran its columns together
                page.goto(f"{base}/notebooks/09_capstone_fit_a_model.html")
                page.wait_for_selector("div.cell_output", timeout=30_000)
                cut = page.evaluate("() => [...document.querySelectorAll('div.cell_output pre')]"
                                    ".filter(p => p.scrollWidth > p.clientWidth + 2)"
                                    ".map(p => p.innerText.slice(0, 60))")
                assert cut == [], f"printed lines cut at the column's edge: {cut[:3]}"
                snapshot = page.locator("div.cell_output", has_text="Static snapshot of this panel").first
                assert "19.7 GiB per GPU" in snapshot.inner_text()  # the plan's verdict, in the snapshot
                padding = snapshot.locator("table td").first.evaluate("td => getComputedStyle(td).paddingLeft")
                assert float(padding.removesuffix("px")) > 0, padding
                page.screenshot(path=str(ARTIFACTS / "book_chapter09_snapshot.png"))
                page.goto(f"{base}/search.html?q=binade")
                page.wait_for_selector("#search-results li", timeout=30_000)
                assert page.locator("#search-results li").count() > 0
                page.screenshot(path=str(ARTIFACTS / "book_search.png"))
            finally:
                browser.close()


def test_a_pipe_in_a_header_or_cell_keeps_the_table_a_table() -> None:
    """Chapter 05 printed a header 'mean |running_mean|': unescaped, its pipes made the header 4 columns over a
    3-column separator, and every Markdown renderer showed the table as a paragraph of pipes."""
    from markdown_it import MarkdownIt

    from utils.lessons.tables import format_table

    text = format_table([["plain", 1, "a|b"]], ["after one step", "n", "mean |running_mean|"])
    tokens = [t.type for t in MarkdownIt("commonmark").enable("table").parse(text)]
    assert tokens.count("table_open") == 1 and tokens.count("th_open") == 3


@pytest.mark.slow
def test_make_book_builds_the_committed_versions_and_says_what_it_left_out(tmp_path: Path, monkeypatch) -> None:
    """Issue 37: `make book` built the site from notebooks/ as a learner's run had left them (one build lost the
    planner's figure). In a repository whose chapter was changed after its commit, the default build shows the
    committed chapter and names the change it left out; --working-tree shows the change."""
    import json

    import nbformat

    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    (repo / "docs").mkdir()
    (repo / "results").mkdir()
    chapter = repo / "notebooks" / "00_x.ipynb"

    def write(text: str) -> None:
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_markdown_cell(f"# Chapter\n\n{text}")]
        chapter.write_text(json.dumps(nb))

    write("committed-words")
    (repo / "docs" / "glossary.md").write_text("# Glossary\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "c"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    write("uncommitted-words")
    monkeypatch.setattr(book, "REPO_ROOT", repo)
    index, said = book.build(tmp_path / "site")
    page = (index.parent / "notebooks" / "00_x.html").read_text()
    assert "committed-words" in page and "uncommitted-words" not in page
    assert "Built from the committed versions" in said and "M notebooks/00_x.ipynb" in said and "WORKING_TREE=1" in said
    index, said = book.build(tmp_path / "site", working_tree=True)
    assert "uncommitted-words" in (index.parent / "notebooks" / "00_x.html").read_text()
    assert "working copy" in said


def test_a_build_without_pyodide_has_the_site_and_says_why_the_planner_is_missing(tmp_path: Path, monkeypatch) -> None:
    """Review s12 (16): a first build without the network failed whole; now the planner page says what is missing."""
    from utils.course import planner_page

    def offline() -> bytes:
        raise RuntimeError("could not download Pyodide 314.0.7 from the npm registry (no network)")

    monkeypatch.setattr(planner_page, "pyodide_tarball", offline)
    src = book.prepare(tmp_path / "src", url="https://github.com/o/n")
    page = (src / "docs" / "planner.md").read_text()
    assert "has no planner: could not download Pyodide" in page and "make book" in page
    assert not (src / "_static" / "pyodide").exists() and (src / "notebooks").is_dir()


# Chapter 09's panel and the planner page, on the same inputs: (model, tokens, GPU, batch, host GiB, offload, LoRA,
# chunked loss). The panel's first picture, a GPT stand-in, a 70B model on one GPU, no technique allowed but the
# cheap ones, a T4 (math attention below compute capability 8.0), and a host too small for offload.
PANEL_CASES = [
    ("Llama-3-8B", 4096, "A10G (24 GB)", 32, 128, True, True, True),
    ("GPT 1.3B (stand-in)", 2048, "H100 (80 GB)", 64, 256, True, True, False),
    ("Llama-2-70B", 4096, "A100 (80 GB)", 16, 1024, True, True, True),
    ("Mistral-7B", 8192, "L4 (24 GB)", 8, 64, False, False, True),
    ("Qwen2.5-7B", 1024, "T4 (16 GB)", 4, 32, True, True, False),
    ("Mixtral-8x7B", 2048, "H200 (141 GB)", 128, 512, False, True, True),
]
CONTROLS = ("model", "seq_len", "gpu", "effective_batch", "host_gib", "allow_offload", "allow_lora", "chunked_loss")


def _panel_lines(case: tuple) -> tuple[list[str], list[list[str]]]:
    """What chapter 09's panel function prints for `case` (its lines, and its costs table's rows), run from the
    notebook beside the packaged ledger."""
    import io

    from notebook_lessons import chapter09_panel

    table: list[list[list[str]]] = []
    namespace = chapter09_panel(lambda p, title: None, lambda rows, headers: table.append(rows))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        namespace["plan_report"](*case)
    return printed.getvalue().splitlines(), table[0]


@pytest.mark.slow
@pytest.mark.browser
def test_the_planner_page_gives_the_panels_numbers_offline(site: Path) -> None:
    """Issue 38: the planner page runs the torch-free ledger in the browser (Pyodide, served by the site itself):
    with every request to another host refused, it starts, and for six inputs it prints chapter 09's panel's lines
    and costs, draws one bar per step, and plans what the panel has no control for (8 GPUs, a pasted config)."""
    _need_chromium()
    from playwright.sync_api import sync_playwright

    from utils.ledger.architectures import HF_CONFIGS
    from utils.ledger.report import plan_report

    refused: list[str] = []
    with _served(site) as base:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.route("**/*", lambda route: route.continue_() if route.request.url.startswith(base)
                          else (refused.append(route.request.url), route.abort()))
            page = context.new_page()
            count = "Number(document.getElementById('planner-app').dataset.rendered)"

            def plan_shown(before: int) -> dict:
                """The page's output once it has drawn a plan since its count of plans drawn was `before`."""
                page.wait_for_function(f"{count} > {before}", timeout=90_000)
                rows = page.eval_on_selector_all("#planner-costs tr", "rows => rows.slice(1).map(r => "
                                                 "[...r.children].map(c => c.textContent))")
                return {"lines": page.inner_text("#planner-lines").splitlines(), "rows": rows,
                        "model": page.inner_text("#planner-model"),
                        "shown": page.is_visible("#planner-chart svg"),
                        "bars": page.eval_on_selector_all("#planner-chart svg > rect", "r => r.length"),
                        "status": page.inner_text("#planner-status")}

            try:
                page.goto(f"{base}/docs/planner.html")
                shown = plan_shown(0)  # the first picture, before any control is touched: the panel's defaults
                for case in PANEL_CASES:
                    if case != PANEL_CASES[0]:
                        before = page.evaluate(count)
                        for name, value in zip(CONTROLS, case, strict=True):
                            if name == "seq_len" and page.is_disabled("select[name=seq_len]"):
                                assert case[0].startswith("GPT ")  # a stand-in's length is part of its shape
                                continue
                            if isinstance(value, bool):
                                page.set_checked(f"input[name={name}]", value)
                            else:
                                page.select_option(f"select[name={name}]", str(value))
                        page.dispatch_event("#planner-form", "change")
                        shown = plan_shown(before)
                    lines, rows = _panel_lines(case)
                    assert shown["lines"] == lines, case
                    assert shown["rows"] == rows, case
                    assert shown["bars"] > 0 and not shown["status"] and "billion parameters" in shown["model"], case
                page.screenshot(path=str(ARTIFACTS / "book_planner.png"), full_page=True)
                # what the panel has no control for, against the packaged report the page runs
                before = page.evaluate(count)
                page.select_option("select[name=n_gpus]", "8")
                assert plan_shown(before)["lines"] == plan_report(*PANEL_CASES[-1], n_gpus=8)["lines"]
                config = json.dumps(HF_CONFIGS["Llama-3-8B"] | {"num_hidden_layers": 16})
                page.click("#planner-form summary")  # the config's box is folded under the controls
                before = page.evaluate(count)
                page.fill("textarea[name=config]", config)  # planned as typed, without leaving the box
                shown = plan_shown(before)
                assert shown["lines"] == plan_report(*PANEL_CASES[-1], n_gpus=8, config=config)["lines"]
                assert page.is_disabled("select[name=model]") and "your config: 4.54 billion" in shown["model"]
                before = page.evaluate(count)
                page.fill("textarea[name=config]", "{not json")
                shown = plan_shown(before)
                assert shown["status"].startswith("Not planned: config is not JSON"), shown["status"]
                assert not shown["shown"]  # no earlier plan left beside the error
                before = page.evaluate(count)
                page.fill("textarea[name=config]", json.dumps({**HF_CONFIGS["Llama-3-8B"], "model_type": "phi"}))
                assert "model_type 'phi' is not a family this ledger models" in plan_shown(before)["status"]
            finally:
                browser.close()
    assert not refused, f"the planner page asked another host for: {refused}"
