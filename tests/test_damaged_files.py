"""Every reader of a saved file names the file and what is wrong when it is missing, empty or damaged.

Readers that only list what they find (the reference results a chapter shows beside its own figures, the claims
ledger, chapter 00's summary) skip a damaged file with one line (a warning or a printed line) naming it; every
other reader raises an error (ValueError or OSError family, or the module's own error) whose message names the
file. No reader may fail with a raw KeyError, JSONDecodeError without the file, or AttributeError.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from utils.course import glossary, hosted, labs, results

DAMAGES: dict[str, str | None] = {
    "missing": None,
    "empty": "",
    "broken": "{ this is not",
    "wrong shape": "[1, 2, 3]",
    "empty object": "{}",
}


def _write(path: Path, text: str | None) -> Path:
    if text is not None:
        path.write_text(text, encoding="utf-8")
    return path


def _raises_naming(call: Callable[[], Any], path: Path) -> None:
    with pytest.raises(Exception) as info:
        call()
    exc = info.value
    assert not isinstance(exc, KeyError | AttributeError | IndexError), f"raw {type(exc).__name__}: {exc!r}"
    assert path.name in str(exc), f"{type(exc).__name__} does not name {path.name}: {exc}"


# Single-file readers: each takes the file's path and must raise naming it.
SINGLE: dict[str, tuple[str, Callable[[Path], Any]]] = {
    "results.load_claims": ("claims.md", lambda p: results.load_claims(p)),
    "glossary.terms": ("glossary.md", lambda p: glossary.terms(p)),
    "hosted.repository_url": ("pyproject.toml", lambda p: hosted.repository_url(p)),
    "labs.read_notebook": ("lab.ipynb", lambda p: labs.read_notebook(p)),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
@pytest.mark.parametrize("reader", list(SINGLE))
def test_single_file_readers_name_the_file(reader: str, damage: str, tmp_path: Path) -> None:
    filename, call = SINGLE[reader]
    path = _write(tmp_path / filename, DAMAGES[damage])
    if damage == "empty object" and filename.endswith((".md", ".toml")):
        pytest.skip("'{}' is text without entries, not damage, for a Markdown or TOML reader")
    if reader in ("results.load_claims", "glossary.terms") and damage in ("wrong shape",):
        pytest.skip("a Markdown file without a table or headings: covered by 'empty'")
    _raises_naming(lambda: call(path), path)


def _valid_run(chapter: str = "01_where_the_memory_goes") -> dict[str, Any]:
    return {"chapter": chapter, "device": {"name": "NVIDIA T4", "type": "cuda", "capability": [7, 5]},
            "torch": "2.13.0", "date": "2026-11-23", "size": "full", "config": {}, "figures": {}, "claims": []}


LISTERS: dict[str, Callable[[Path], Any]] = {
    "results.reference_results": lambda root: results.reference_results("01_where_the_memory_goes", root),
    "results.reference_summary": lambda root: results.reference_summary(root),
    "results.claims_ledger": lambda root: results.claims_ledger(root),
}


@pytest.mark.parametrize("damage", [d for d in DAMAGES if d != "missing"])
@pytest.mark.parametrize("reader", list(LISTERS))
def test_listing_readers_skip_a_damaged_run_naming_it(reader: str, damage: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A damaged run file beside a good one: the good one is listed, the damaged one skipped with its name."""
    good, bad = tmp_path / "nvidia-t4", tmp_path / "broken-device"
    good.mkdir()
    bad.mkdir()
    (good / "01_where_the_memory_goes.json").write_text(json.dumps(_valid_run()), encoding="utf-8")
    path = _write(bad / "01_where_the_memory_goes.json", DAMAGES[damage])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = LISTERS[reader](tmp_path)
    said = capsys.readouterr().out + capsys.readouterr().err + " ".join(str(w.message) for w in caught)
    assert "broken-device" in said or path.name in said and "broken" in said, (
        f"{reader} skipped {damage} file silently: {said!r}")
    assert "NVIDIA T4" in str(out), f"{reader} lost the good run: {out!r}"
