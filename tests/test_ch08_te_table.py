"""Chapter 08's Transformer Engine table runs only on an FP8 GPU with TE, which CI has not: this test runs the
cell's reporting part on a recorded-shape result, so its spread columns and its delayed-vs-current verdict are
exercised (issue 36, item 6: a timing without a spread is not a comparison)."""

import types
from pathlib import Path

import nbformat

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "08_fp8_transformer_engine.ipynb"


def _reporting_part() -> str:
    cell = next(c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells
                if c.cell_type == "code" and "def te_compare" in c.source)
    return cell[cell.index("te_results = {}"):]


def _run(results: dict, capsys) -> tuple[str, list]:
    tables = []
    namespace = {
        "info": types.SimpleNamespace(is_cuda=True, gates=types.SimpleNamespace(fp8=True), name="a GPU"),
        "te_status": types.SimpleNamespace(available=True, version="2.9", message=""),
        "te_compare": lambda hidden, tokens: results, "TE_HIDDEN": 1024, "TE_TOKENS": 4096,
        "show_table": lambda rows, headers: tables.append((rows, headers)),
        "run": types.SimpleNamespace(figure=lambda *a, **k: None, chapter="08_fp8_transformer_engine"),
        "reference_results": lambda chapter: []}
    exec(compile(_reporting_part(), str(NOTEBOOK), "exec"), namespace)  # noqa: S102
    return capsys.readouterr().out, tables


def _row(median: float, low: float, high: float) -> dict:
    return {"step_ms": median, "min_ms": low, "max_ms": high, "peak_MiB": 10.0}


def test_the_te_table_shows_each_steps_spread_and_judges_by_it(capsys) -> None:
    layers = {f"{layer} {label}": _row(2.0, 1.9, 2.1) for layer in ("te.Linear", "te.TransformerLayer")
              for label in ("BF16", "FP8 DelayedScaling", "FP8 Float8CurrentScaling")}
    out, tables = _run(layers, capsys)
    assert tables[0][0][0][1] == "2.00 (1.90-2.10)" and "min-max" in tables[0][1][1]
    assert "overlap: no difference this run can show" in out
    layers["te.Linear FP8 DelayedScaling"] = _row(1.0, 0.95, 1.05)
    out, _ = _run(layers, capsys)
    assert "do not overlap: a real difference at this size" in out
    assert "step table: none, so no FP8 training step of this course has been timed on a GPU" in out
