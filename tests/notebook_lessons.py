"""The lesson functions a chapter writes in its notebook, run outside it: the tests that tie a notebook's lesson
code to its packaged twin in utils/ (chapters 09 and 10) exec these beside the package and compare them."""

import ast
from pathlib import Path

import nbformat


def exec_lesson(notebook: Path, names: tuple[str, ...], namespace: dict) -> dict:
    """Exec the top-level functions `names` of `notebook`'s code cells into `namespace` (which holds what they use)
    and return it; fails when the notebook no longer defines one of them."""
    found = {}
    for cell in nbformat.read(notebook, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:  # a cell with IPython magics holds no lesson function
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in names:
                found[node.name] = ast.get_source_segment(cell.source, node)
    assert set(found) == set(names), f"missing in the notebook: {set(names) - set(found)}"
    for source in found.values():
        exec(compile(source, str(notebook), "exec"), namespace)  # noqa: S102
    return namespace
