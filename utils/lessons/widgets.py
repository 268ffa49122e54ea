"""The one way chapters build interactive controls: controls -> a plain function -> an Output.

The function is ordinary, tested code; the panel only collects the controls' values, calls it and
shows what comes back (a matplotlib figure, text, a Markdown table, or anything IPython can display).
A ValueError or TypeError from the function is shown as one line, so a learner who drags a slider into
a bad corner sees why, not a traceback; any other exception is a bug and is shown in full.

Seen before anything runs: a panel is displayed as the live widget together with a static HTML snapshot of its
first output (what the function printed and displayed, in order, then its result: the text, the tables, a PNG of the
figure) and the controls' values. JupyterLab shows the widget
(its state is saved with the committed outputs); GitHub, nbviewer and the course's website, which cannot run it,
show the snapshot instead of "VBox(children=...)".
"""

from __future__ import annotations

import base64
import contextlib
import html
import io
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import ipywidgets as widgets
from IPython.display import display

from utils.validate import check_int, check_str

# Text a panel's function prints wraps between words: JupyterLab's output area breaks a line at any character, which
# split words at the panel's edge (chapter 09's planner: "N / F4"). A word longer than a line still breaks.
WORD_WRAP_CSS = ("<style>.course-panel .jp-OutputArea-output pre "
                 "{white-space: pre-wrap; word-break: normal; overflow-wrap: break-word}</style>")
CONTROL_WIDTH = "170px"  # a beside panel's slider or dropdown, right of its label


def _description_width(controls: Mapping[str, widgets.ValueWidget]) -> str:
    """A label column wide enough for the longest description (in `ch`, the width of a digit, wider than most
    letters): no label is cut to "sequences per..."."""
    longest = max((len(getattr(c, "description", "") or "") for c in controls.values()), default=0)
    return f"{longest + 1}ch"


class Panel:
    """Controls that re-run `fn(**values)` on every change and show its result in an Output: the controls in rows
    above it, or with `beside=True` in a column to its left (a tall figure and its controls then fit one screen)."""

    def __init__(self, fn: Callable[..., Any], controls: Mapping[str, widgets.ValueWidget], *,
                 title: str = "", run_now: bool = True, beside: bool = False) -> None:
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        if not isinstance(beside, bool):
            raise TypeError(f"beside must be True or False, got {type(beside).__name__}")
        if not isinstance(controls, Mapping) or not controls:
            raise ValueError("controls must be a non-empty mapping of argument name -> ipywidgets control")
        for name, control in controls.items():
            if not isinstance(control, widgets.ValueWidget):
                raise TypeError(f"controls[{name!r}] must be an ipywidgets control with a value, "
                                f"got {type(control).__name__}")
        self.fn = fn
        self.controls = dict(controls)
        self.output = widgets.Output()
        self.last_result: Any = None
        self.last_error: str = ""
        self.runs = 0
        self.title = title
        self.first_snapshot = ""
        for control in self.controls.values():
            control.observe(lambda _change: self.update(), names="value")
        # the style rides in a hidden widget, so it is on the page wherever the panel is (and applies to it alone)
        header = [widgets.HTML(WORD_WRAP_CSS, layout=widgets.Layout(display="none"))]
        header += [widgets.HTML(f"<b>{title}</b>")] if title else []
        if beside:  # a column of controls left of the output: both in one screen (a 1,400 x 900 window)
            label = _description_width(self.controls)
            for control in self.controls.values():
                control.layout.width = "100%"
                control.style.description_width = label  # a checkbox is indented by as much: the column aligns
            width = f"calc({label} + {CONTROL_WIDTH})"
            column = widgets.VBox(list(self.controls.values()), layout=widgets.Layout(flex=f"0 0 {width}", width=width))
            self.output.layout.flex = "1 1 auto"
            self.widget = widgets.VBox(header + [widgets.HBox([column, self.output],
                                                              layout=widgets.Layout(align_items="flex-start"))])
        else:
            for control in self.controls.values():  # each keeps a usable width; rows wrap instead of squeezing
                control.layout.flex = "1 1 300px"
                control.layout.min_width = "300px"
                control.layout.max_width = "460px"
            row = widgets.HBox(list(self.controls.values()),
                               layout=widgets.Layout(flex_flow="row wrap", align_items="center", width="100%"))
            self.widget = widgets.VBox(header + [row, self.output])
        self.widget.add_class("course-panel")
        if run_now:
            self.update()

    def values(self) -> dict[str, Any]:
        return {name: control.value for name, control in self.controls.items()}

    def update(self) -> Any:
        """Call the function with the controls' values and show the result (or the bad input's message)."""
        import matplotlib.pyplot as plt

        self.runs += 1
        # Not interactive while the function builds its figure and while it is shown: in a control's callback (no
        # cell running) the inline backend's automatic redraws raced with the figure's rendering, which came out
        # blank or half drawn in JupyterLab (chapter 09's planner, seen in headless Chromium)
        with self.output, plt.ioff():
            self.output.clear_output(wait=True)
            first = not self.first_snapshot
            shown: list[tuple[str, Any]] = []
            try:
                with _recording(shown) if first else contextlib.nullcontext():
                    self.last_result, self.last_error = self.fn(**self.values()), ""
            except (ValueError, TypeError) as exc:
                self.last_result, self.last_error = None, f"{type(exc).__name__}: {exc}"
                print(self.last_error)
                return None
            result = self.last_result
            if first:  # what the first run printed and displayed, then its result: what a reader sees before running
                self.first_snapshot = "".join(_shown_html(shown)) + snapshot_html(result)
            if isinstance(result, plt.Figure):
                result.stale_callback = None  # no backend hook redraws it while it is rendered
                display(result)
                plt.close(result)  # shown once, here; not again by the inline backend
            elif isinstance(result, str):
                print(result)
            elif result is not None:
                display(result)
        return self.last_result

    def static_html(self) -> str:
        """What a reader without a kernel sees: the title, the controls' values and the first output."""
        values = ", ".join(f"{getattr(c, 'description', '') or name} = {c.value}" for name, c in self.controls.items())
        head = f"<b>{html.escape(self.title)}</b><br>" if self.title else ""
        note = ("<i>Static snapshot of this panel's first output (" + html.escape(values) + "). Run the notebook to "
                "move the controls.</i>")
        return f"<div>{head}{note}{self.first_snapshot or _pre(self.last_error)}</div>"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle = dict(self.widget._repr_mimebundle_(include=include, exclude=exclude) or {})
        bundle["text/html"] = self.static_html()
        bundle["text/plain"] = f"{self.title or 'Interactive panel'} (run the notebook to use its controls)"
        return bundle


@contextlib.contextmanager
def _recording(shown: list[tuple[str, Any]]) -> Iterator[None]:
    """Append to `shown`, in order, what the code in the block prints ("text", str) and displays ("data", a MIME
    bundle), while it still reaches the panel's output as before."""
    from IPython import get_ipython

    stdout = sys.stdout
    publishing = []  # a display being published: a publisher that writes it to stdout is not printing

    class Tee(io.TextIOBase):
        def write(self, text: str) -> int:
            if not publishing:
                shown.append(("text", text))
            return stdout.write(text)

        def flush(self) -> None:
            stdout.flush()

    shell = get_ipython()
    publisher = getattr(shell, "display_pub", None)
    publish = getattr(publisher, "publish", None)

    def recorded(data: Any, *args: Any, **kwargs: Any) -> Any:
        shown.append(("data", data))
        publishing.append(True)
        try:
            return publish(data, *args, **kwargs)
        finally:
            publishing.pop()

    sys.stdout = Tee()
    if publish is not None:
        publisher.publish = recorded
    try:
        yield
    finally:
        sys.stdout = stdout
        if publish is not None:
            publisher.publish = publish


def _shown_html(shown: list[tuple[str, Any]]) -> Iterator[str]:
    """The recorded output as static HTML: each run of printed text as one <pre>, each display by its richest
    format."""
    text: list[str] = []
    for kind, value in [*shown, ("end", None)]:
        if kind == "text":
            text.append(value)
            continue
        if "".join(text).strip():
            yield _pre("".join(text))
        text = []
        if kind == "data":
            yield _bundle_html(value)


def _pre(text: str) -> str:
    """Printed text as HTML that wraps between words wherever it is shown: JupyterLab breaks a <pre> of rendered HTML
    at any character ("offloaded to t / he host"), and the website does not wrap one at all (a plan's verdict sat
    past the column's edge). Both keep these two inline styles (JupyterLab's sanitizer allows them)."""
    return f'<pre style="white-space: pre-wrap; word-break: normal">{html.escape(text)}</pre>'


def _bundle_html(data: Mapping[str, Any]) -> str:
    """One MIME bundle as HTML: HTML, Markdown, PNG, then plain text."""
    if "text/html" in data:
        return str(data["text/html"])
    if "text/markdown" in data:
        try:  # mistune comes with Jupyter's nbconvert, not with every kernel's environment (the GPU host's had none)
            import mistune
        except ImportError:
            return _pre(data["text/markdown"])  # the Markdown source: a pipe table still reads as a table
        # class "table": the website's theme styles its own tables by it (a bare table ran its columns together)
        return str(mistune.html(data["text/markdown"])).replace("<table>", '<table class="table">')
    if "image/png" in data:
        return f'<img alt="the panel\'s first output" src="data:image/png;base64,{data["image/png"]}">'
    return _pre(str(data.get("text/plain", "")))


def snapshot_html(result: Any) -> str:
    """A static HTML rendering of a panel function's result: a figure as an embedded PNG, a string as
    preformatted text, anything else through IPython's formatters (HTML, Markdown, PNG, then plain text)."""
    import matplotlib.pyplot as plt

    if result is None:
        return ""
    if isinstance(result, plt.Figure):
        buffer = io.BytesIO()
        result.savefig(buffer, format="png", bbox_inches="tight", dpi=80)
        encoded = base64.b64encode(buffer.getvalue()).decode("ascii")
        return f'<img alt="the panel\'s first figure" src="data:image/png;base64,{encoded}">'
    if isinstance(result, str):
        return _pre(result)
    from IPython.core.formatters import format_display_data

    data, _ = format_display_data(result)
    return _bundle_html(data)


def slider(value: int, low: int, high: int, step: int = 1, description: str = "") -> widgets.IntSlider:
    """An integer slider with the course's layout (continuous_update off: one run per release)."""
    for name, v in (("value", value), ("low", low), ("high", high)):
        check_int(name, v)
    check_int("step", step, minimum=1)
    check_str("description", description, non_empty=False)
    if not low <= value <= high:
        raise ValueError(f"value must lie in [low, high] = [{low}, {high}], got {value}")
    return widgets.IntSlider(value=value, min=low, max=high, step=step, description=description,
                             continuous_update=False, style={"description_width": "initial"})


def log2_slider(value: int, low: int, high: int, description: str = "") -> widgets.SelectionSlider:
    """A slider over powers of two from 2**low to 2**high (values are the ints themselves)."""
    check_str("description", description, non_empty=False)
    for name, v in (("value", value), ("low", low), ("high", high)):
        check_int(name, v, minimum=0)
    if not low <= high:
        raise ValueError(f"low must be <= high (exponents), got low={low!r}, high={high!r}")
    options = [2**k for k in range(low, high + 1)]
    if value not in options:
        raise ValueError(f"value must be a power of two between 2**{low} and 2**{high}, got {value!r}")
    return widgets.SelectionSlider(options=options, value=value, description=description,
                                   continuous_update=False, style={"description_width": "initial"})


def dropdown(options: list[Any] | tuple[Any, ...] | dict[str, Any], value: Any = None,
             description: str = "") -> widgets.Dropdown:
    """A dropdown with the course's layout."""
    if not isinstance(options, list | tuple | dict):
        raise TypeError(f"options must be a list, tuple or dict, got {type(options).__name__}")
    if not options:
        raise ValueError("options must not be empty")
    check_str("description", description, non_empty=False)
    choices = list(options.values()) if isinstance(options, dict) else list(options)
    if value is not None and not any(value is c or value == c for c in choices):
        raise ValueError(f"value must be one of the options, got {value!r}")
    first = choices[0]
    return widgets.Dropdown(options=options, value=first if value is None else value, description=description,
                            style={"description_width": "initial"})
