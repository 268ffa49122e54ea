"""Chapters committed with the outputs of a real run, so a reader sees them before running anything.

`python -m utils.course.outputs` (make outputs) executes every chapter in a fresh kernel on this machine at the quick
size, with COURSE_RECORD=1 so that the same run writes `results/<device>/` (the course's CPU reference), and
stores the outputs in the notebook together with a hash of its code cells and where they came from
(metadata `course.outputs`: device, torch, size, date). `--check` (run by the tests) exits 1 when a chapter
has no recorded outputs or its code changed since they were made; `--only 05` regenerates one chapter.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat import NotebookNode

from utils.course.kernels import notebook_client_config

REPO_ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
MAX_NOTEBOOK_BYTES = 1_000_000
CELL_TIMEOUT_S = 300


def code_hash(nb: NotebookNode) -> str:
    """sha256 of the notebook's code cells (their sources, in order): what the outputs were made from."""
    digest = hashlib.sha256()
    for cell in nb.cells:
        if cell.cell_type == "code":
            digest.update(cell.source.encode("utf-8") + b"\x00")
    return digest.hexdigest()


def _scrub(value: object, replacements: list[tuple[str, str]]) -> object:
    """Machine paths out of every output string (the repository root becomes '.', home '~')."""
    if isinstance(value, str):
        for old, new in replacements:
            value = value.replace(old, new)
        return value
    if isinstance(value, list):
        return [_scrub(v, replacements) for v in value]
    if isinstance(value, dict):
        return {k: _scrub(v, replacements) for k, v in value.items()}
    return value


def as_a_terminal_shows(text: str) -> str:
    """A stream's text as a terminal leaves it: each line keeps what follows its last carriage return (a tqdm bar's
    last frame), so a stored output, and the website, show one line per bar and not every frame."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))


def collapse_streams(outputs: list) -> list:
    """Consecutive stream outputs of the same stream joined into one, as a terminal shows them."""
    if not isinstance(outputs, list) or not all(isinstance(o, dict) for o in outputs):
        raise TypeError("outputs must be a list of output dicts (a code cell's outputs)")
    merged: list = []
    for out in outputs:
        if (out.get("output_type") == "stream" and merged and merged[-1].get("output_type") == "stream"
                and merged[-1].get("name") == out.get("name")):
            merged[-1]["text"] = merged[-1]["text"] + out["text"]
        else:
            merged.append(out)
    for out in merged:
        if out.get("output_type") == "stream":
            out["text"] = as_a_terminal_shows(out["text"])
    return merged


def execute(path: Path) -> dict[str, object]:
    """Run one chapter at the quick size with reference recording on; store outputs and provenance in it."""
    from utils.lessons.env import device_info  # late: the executing kernel, not this process, does the measuring

    nb = nbformat.read(path, as_version=4)
    env_before = {k: os.environ.get(k) for k in ("COURSE_SIZE", "COURSE_RECORD", "MPLBACKEND")}
    os.environ.update({"COURSE_SIZE": "quick", "COURSE_RECORD": "1"})
    os.environ.pop("MPLBACKEND", None)  # the notebook's own inline backend, so figures are stored
    start = time.perf_counter()
    try:
        NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", config=notebook_client_config(),
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    finally:
        for key, value in env_before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    seconds = time.perf_counter() - start
    replacements = [(str(REPO_ROOT) + "/", ""), (str(REPO_ROOT), "."), (str(Path.home()), "~")]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = collapse_streams([nbformat.from_dict(_scrub(dict(o), replacements))
                                             for o in cell.outputs])
    info = device_info()
    import torch

    nb.metadata.setdefault("course", {})["outputs"] = {
        "code_hash": code_hash(nb), "device": info.name, "torch": torch.__version__, "size": "quick",
        "date": dt.date.today().isoformat(), "seconds": round(seconds, 1)}
    nbformat.write(nb, path)
    size = path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        raise RuntimeError(f"{path.name} is {size:,} bytes with its outputs (limit {MAX_NOTEBOOK_BYTES:,})")
    return {"notebook": path.name, "seconds": round(seconds, 1), "bytes": size}


def problems(path: Path) -> list[str]:
    """Why a chapter's committed outputs are missing or stale (empty when current)."""
    nb = nbformat.read(path, as_version=4)
    meta = nb.metadata.get("course", {}).get("outputs")
    if not isinstance(meta, dict):
        return [f"{path.name}: no recorded outputs (run `make outputs`)"]
    found = []
    if meta.get("code_hash") != code_hash(nb):
        found.append(f"{path.name}: code changed since its outputs were made (run `make outputs ONLY={path.name[:2]}`)")
    if not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"):
        found.append(f"{path.name}: no outputs stored")
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    if errors:
        found.append(f"{path.name}: stored error output ({errors[0].get('ename')})")
    if any(o.output_type == "stream" and "\r" in o.get("text", "") for c in nb.cells if c.cell_type == "code"
           for o in c.get("outputs", [])):
        found.append(f"{path.name}: a stream output stores progress-bar frames "
                     f"(run `make outputs ONLY={path.name[:2]}`)")
    if path.stat().st_size > MAX_NOTEBOOK_BYTES:
        found.append(f"{path.name}: {path.stat().st_size:,} bytes, over {MAX_NOTEBOOK_BYTES:,}")
    return found


def chapters(only: str | None = None) -> list[Path]:
    paths = sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))
    if only is not None:
        paths = [p for p in paths if isinstance(only, str) and len(only) == 2 and p.name.startswith(only)]
        if not paths:
            raise ValueError(f"--only must name a chapter number such as 05, got {only!r}")
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Store real outputs in the chapters, or check they are current.")
    parser.add_argument("--check", action="store_true", help="exit 1 if any chapter's outputs are missing or stale")
    parser.add_argument("--only", default=None, help="one chapter, by number (e.g. 05)")
    args = parser.parse_args(argv)
    try:
        paths = chapters(args.only)
    except ValueError as exc:
        print(f"utils.course.outputs: {exc}", file=sys.stderr)
        return 2
    if args.check:
        found = [msg for p in paths for msg in problems(p)]
        for msg in found:
            print(msg, file=sys.stderr)
        print("every chapter's stored outputs are current" if not found else f"{len(found)} problem(s)")
        return 1 if found else 0
    # Chapter 00 lists the reference results the other chapters write: it runs last, so its listing is of this run.
    for path in sorted(paths, key=lambda p: (p.name.startswith("00_"), p.name)):
        print(json.dumps(execute(path)), flush=True)
    from utils.course import workshop

    print("docs/workshop.md's minutes table " + ("updated" if workshop.write() else "already current"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
