"""The course as a website: `make book` builds it (Sphinx + myst-nb + sphinx-book-theme, committed outputs, never
executed), and a chapter page opened in headless Chromium shows rendered outputs, working links and search."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from servers import free_port, stop_group

from utils import book

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


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("book")
    # --working-tree: these tests check the chapters as they are in this checkout (committed or about to be), which
    # they compare with the files themselves; building from HEAD, the default, is tested below on a small repository.
    done = subprocess.run([sys.executable, "-m", "utils.book", "--out", str(out), "--working-tree"], cwd=ROOT,
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
    from utils.book import _without_heading_twins

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
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"Debian's Chromium is not at {CHROMIUM}")
        pytest.skip(f"Debian's Chromium is not at {CHROMIUM}")
    from playwright.sync_api import sync_playwright

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
    finally:
        stop_group(server)


def test_a_pipe_in_a_header_or_cell_keeps_the_table_a_table() -> None:
    """Chapter 05 printed a header 'mean |running_mean|': unescaped, its pipes made the header 4 columns over a
    3-column separator, and every Markdown renderer showed the table as a paragraph of pipes."""
    from markdown_it import MarkdownIt

    from utils.tables import format_table

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
