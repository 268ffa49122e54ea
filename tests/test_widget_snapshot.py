"""A panel shows its first output before anything runs: its display bundle carries the live widget, a static HTML
snapshot of the first output (figure as PNG, table, text) for viewers without a kernel, and a readable line
instead of "VBox(children=...)"."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from IPython.display import Markdown  # noqa: E402

from utils.lessons.widgets import Panel, slider, snapshot_html  # noqa: E402


def _figure(n: int) -> plt.Figure:
    fig, ax = plt.subplots()
    ax.plot(range(n))
    return fig


def test_bundle_has_widget_snapshot_and_readable_text() -> None:
    panel = Panel(_figure, {"n": slider(4, 1, 9, description="points")}, title="Curve")
    bundle = panel._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "VBox" not in bundle["text/plain"] and "Curve" in bundle["text/plain"]
    assert "data:image/png;base64," in bundle["text/html"] and "points = 4" in bundle["text/html"]


def test_snapshot_is_the_first_output_not_the_latest() -> None:
    panel = Panel(lambda n: f"n is {n}", {"n": slider(4, 1, 9)})
    panel.controls["n"].value = 7
    assert "n is 4" in panel.static_html() and "n is 7" not in panel.static_html()


def test_snapshot_of_tables_and_errors() -> None:
    assert '<table class="table">' in snapshot_html(Markdown("| a |\n|---|\n| 1 |"))  # the website's table style
    assert snapshot_html(None) == ""

    def bad(n: int) -> str:
        raise ValueError("n must be even")

    panel = Panel(bad, {"n": slider(3, 1, 9)})
    assert "n must be even" in panel.static_html()


def test_markdown_snapshot_without_mistune(monkeypatch) -> None:
    """A kernel without mistune (the H100 host's had none: chapter 04's snapshot came out empty and its assertion
    failed) still shows the table, as its Markdown source."""
    import sys

    monkeypatch.setitem(sys.modules, "mistune", None)  # `import mistune` now raises ImportError
    panel = Panel(lambda n: Markdown(f"| op | calls |\n|---|---|\n| addmm | {n} |"), {"n": slider(4, 1, 9)})
    assert "| addmm | 4 |" in panel.static_html()


def test_snapshot_keeps_what_the_first_run_printed_and_displayed_in_order() -> None:
    """A planner prints its plan, displays a table, then returns its figure: a reader without a kernel sees all
    three, in that order (chapter 09's snapshot once held the figure alone, and the prose quoted the printed plan)."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.display import display

    InteractiveShell.instance()  # a shell with a display publisher, as in a kernel

    def report(n: int) -> plt.Figure:
        print(f"plan: {n} GiB of 19.7 (fits)")
        display(Markdown("| technique | GiB |\n|---|---|\n| offload | 121 |"))
        print("host RAM: 121 GiB")
        return _figure(n)

    panel = Panel(report, {"n": slider(4, 1, 9)})
    page = panel.static_html()
    marks = [page.index(s) for s in ("plan: 4 GiB of 19.7 (fits)", "<table", "host RAM: 121 GiB",
                                      "data:image/png;base64,")]
    assert marks == sorted(marks), marks
    assert "Markdown object" not in page
    panel.controls["n"].value = 7
    assert "plan: 7 GiB" not in panel.static_html()
