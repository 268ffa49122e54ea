"""Reference results and the claims ledger.

A notebook opens a `Run`, records measured figures and claim verdicts as it goes, and calls `save()`
at the end. Saving writes `results/<device-slug>/<chapter>.json` only for a real full-size run on a GPU
(or when COURSE_RECORD=1 asks for it on purpose); anywhere else it says why nothing was written.
Other machines read those files back with `reference_results()` and show them beside their own numbers.
`python -m utils.course.results --claims` (`make claims`) prints the ledger of every recorded claim.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from utils.lessons.env import DeviceInfo, device_info
from utils.lessons.sizes import experiment_size
from utils.lessons.tables import format_table
from utils.validate import check_instance, check_int

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO_ROOT / "results"
CLAIMS_FILE = REPO_ROOT / "docs" / "claims.md"
RECORD_ENV = "COURSE_RECORD"
VERDICTS = ("holds", "fails", "partly", "depends", "needs GPU", "not measured")
_CHAPTER_RE = re.compile(r"^\d\d_[a-z0-9_]+$")


def load_claims(path: Path = CLAIMS_FILE) -> dict[str, tuple[str, str]]:
    """The claims table: id -> (claim as commonly stated, chapters)."""
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path must be the claims file's path, got {type(path).__name__}")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"path {_shown(Path(path))} cannot be read: {type(exc).__name__}: {exc}") from None
    claims = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"C\d\d", cells[0]):
            claims[cells[0]] = (cells[1], cells[2])
    if not claims:
        raise ValueError(f"path {_shown(Path(path))} holds no claims table (rows '| C01 | claim | chapters |')")
    return claims


def device_slug(name: str) -> str:
    """A folder name for a device: 'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a device name (str), got {type(name).__name__}")
    if not name.strip():
        raise ValueError(f"name must be a non-empty device name, got {name!r}")
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    # A name with no ASCII letters or digits still gets a folder of its own, never results/ itself.
    return slug or "device-" + hashlib.sha1(name.encode("utf-8")).hexdigest()[:10]


def recording_enabled(info: DeviceInfo | None = None) -> tuple[bool, str]:
    """Whether this run may write reference results, and why (or why not)."""
    forced = os.environ.get(RECORD_ENV, "").strip()
    if forced not in ("", "0", "1"):
        raise ValueError(f"{RECORD_ENV} must be '0', '1' or unset, got {forced!r}")
    if forced == "1":
        return True, f"{RECORD_ENV}=1 asks for it"
    if forced == "0":
        return False, f"{RECORD_ENV}=0 forbids it"
    info = info or device_info()
    if not info.is_cuda:
        return False, "reference results are written by full-size GPU runs; this is a CPU run"
    if experiment_size() != "full":
        return False, "reference results are written by full-size runs; this run is quick (COURSE_SIZE)"
    return True, "a full-size run on a GPU"


@dataclass
class Run:
    """The measured figures and claim verdicts of one notebook run."""

    chapter: str
    config: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)
    claims: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.chapter, str) or not _CHAPTER_RE.match(self.chapter):
            raise ValueError(f"chapter must look like '01_where_the_memory_goes', got {self.chapter!r}")
        if not isinstance(self.config, dict):
            raise TypeError(f"config must be a dict, got {type(self.config).__name__}")

    def figure(self, name: str, value: Any, unit: str = "") -> Any:
        """Record a measured figure (JSON-serialisable) and return it unchanged."""
        if not isinstance(name, str):
            raise TypeError(f"name must be a non-empty string, got {type(name).__name__} {name!r}")
        if not name.strip():
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        if not isinstance(unit, str):
            raise TypeError(f"unit must be a string ('' for none), got {type(unit).__name__} {unit!r}")
        try:
            json.dumps(value)  # fail now, not at save time
        except (TypeError, ValueError) as exc:
            raise TypeError(f"value must be JSON-serialisable (numbers, strings, lists, dicts), "
                            f"got {type(value).__name__}: {exc}") from None
        self.figures[name] = {"value": value, "unit": unit}
        return value

    def claim(self, claim_id: str, measured: str, verdict: str, note: str = "") -> str:
        """Record a claim's measured value and verdict; returns one line to show in the notebook."""
        claims = load_claims()
        if not isinstance(claim_id, str):
            raise TypeError(f"claim_id must be a claim id such as 'C01' (str), got {type(claim_id).__name__} "
                            f"{claim_id!r}")
        if not isinstance(note, str):
            raise TypeError(f"note must be a string ('' for none), got {type(note).__name__} {note!r}")
        if claim_id not in claims:
            raise ValueError(f"claim_id must be one of C01..C{len(claims):02d}, got {claim_id!r}")
        if verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {verdict!r}")
        if not isinstance(measured, str):
            raise TypeError(f"measured must be a string with its unit, got {type(measured).__name__}")
        self.claims = [c for c in self.claims if c["id"] != claim_id]
        self.claims.append({"id": claim_id, "measured": measured, "verdict": verdict, "note": note})
        return f"{claim_id} ({claims[claim_id][0]}): measured {measured} -> {verdict}" + (f"; {note}" if note else "")

    def to_json(self, info: DeviceInfo) -> dict[str, Any]:
        return {
            "chapter": self.chapter,
            "device": {"name": info.name, "type": info.device,
                       "capability": None if info.capability is None else list(info.capability)},
            "torch": info.torch_version,
            "date": dt.date.today().isoformat(),
            "size": experiment_size(),
            "config": self.config,
            "figures": self.figures,
            "claims": self.claims,
        }

    def save(self, root: Path | None = None, info: DeviceInfo | None = None) -> Path | None:
        """Write the run's results if recording is enabled (see module doc); print what happened, then this
        run's figures beside the reference results saved from other runs, each labelled with its device."""
        info = info or device_info()
        enabled, why = recording_enabled(info)
        references = reference_results(self.chapter, root)
        comparison = self.compare(references, info)
        path = None
        if not enabled:
            print(f"Not saved as reference results: {why}.")
        else:
            folder = Path(root or RESULTS_DIR) / device_slug(info.name)
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{self.chapter}.json"
            path.write_text(json.dumps(self.to_json(info), indent=1) + "\n", encoding="utf-8")
            print(f"Saved reference results ({why}) to {path.relative_to(path.parents[2])}.")
        if comparison:
            print(comparison)
        return path

    def compare(self, references: list[dict[str, Any]], info: DeviceInfo, limit: int = 15) -> str:
        """A table of this run's scalar figures beside the same figures of saved reference runs."""
        names = [n for n, f in self.figures.items() if isinstance(f["value"], int | float)][:limit]
        if not references or not names:
            return ""
        headers = ["figure", f"this run ({info.name}, {experiment_size()})"] + [
            f"{r['device']['name']} ({'an earlier run of this device, ' if r['device']['name'] == info.name else ''}"
            f"{r['size']}, {r['date']})" for r in references]
        rows = []
        for name in names:
            unit = self.figures[name]["unit"]
            cells = [f"{self.figures[name]['value']:.4g} {unit}".strip()]
            for ref in references:
                other = ref.get("figures", {}).get(name)
                value = other.get("value") if isinstance(other, dict) else None
                cells.append(f"{value:.4g} {unit}".strip() if isinstance(value, int | float) else "-")
            rows.append([name, *cells])
        return "Reference results beside this run:\n" + format_table(rows, headers)


RUN_GLOB = "[0-9][0-9]_*.json"  # chapter runs only: gpu_check.json and gpu_check.md are make gpu-check's summary


def _shown(path: Path) -> str:
    """A file's name as a message shows it: relative to the repository when inside it."""
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _problem(run: object) -> str:
    """What is wrong with a chapter run read from JSON ('' when nothing is)."""
    if not isinstance(run, dict):
        return f"holds a {type(run).__name__}, not a chapter run (a JSON object)"
    for key, kind in (("chapter", str), ("device", dict), ("torch", str), ("size", str), ("date", str)):
        if key not in run:
            return f"has no {key!r} (not a chapter run written by utils.course.results.Run.save)"
        if not isinstance(run[key], kind):
            return f"{key!r} is a {type(run[key]).__name__}, not a {kind.__name__}"
    if not _CHAPTER_RE.match(run["chapter"]):
        return f"'chapter' {run['chapter']!r} is not a chapter such as '01_where_the_memory_goes'"
    name, capability = run["device"].get("name"), run["device"].get("capability")
    if not isinstance(name, str) or not name:
        return "'device' has no 'name' (a non-empty string)"
    if capability is not None and not (isinstance(capability, list) and len(capability) == 2
                                       and all(isinstance(v, int) for v in capability)):
        return f"'device' 'capability' must be null or [major, minor], got {capability!r}"
    if not isinstance(run.get("figures", {}), dict):
        return "'figures' is not an object"
    claims = run.get("claims", [])
    if not isinstance(claims, list) or not all(
            isinstance(c, dict) and all(isinstance(c.get(k), str) for k in ("id", "measured", "verdict"))
            for c in claims):
        return "'claims' is not a list of {'id', 'measured', 'verdict'} objects"
    return ""


def read_run(path: str | os.PathLike) -> dict[str, Any]:
    """One saved chapter run (results/<device>/NN_*.json). Raises ValueError naming the file and what is wrong
    when it is missing, unreadable, not JSON or not a chapter run."""
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path must be a results file path, got {type(path).__name__}")
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"path {_shown(path)} cannot be read: {type(exc).__name__}: {exc}") from None
    try:
        run = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"path {_shown(path)} is not valid JSON ({exc.msg} at line {exc.lineno}, column "
                         f"{exc.colno})") from None
    problem = _problem(run)
    if problem:
        raise ValueError(f"path {_shown(path)} {problem}")
    return run


def _saved_runs(root: Path | None, chapter: str = "[0-9][0-9]_*") -> list[dict[str, Any]]:
    """Every readable chapter run under `root` (of one chapter if given); each damaged file is skipped with one
    printed line naming it and what is wrong (the readers only list references: one bad file must not hide the
    others). Files that are not chapter runs (make gpu-check's gpu_check.json, READMEs) are not read."""
    runs = []
    for path in sorted(Path(root or RESULTS_DIR).glob(f"*/{chapter}.json")):
        try:
            runs.append(read_run(path))
        except ValueError as exc:
            print(f"Skipped a damaged reference file: {str(exc).removeprefix('path ')}")
    return runs


def reference_results(chapter: str, root: Path | None = None) -> list[dict[str, Any]]:
    """Every saved run of `chapter`, one per device folder, sorted by device name (damaged files skipped, each
    with one line)."""
    if not isinstance(chapter, str) or not _CHAPTER_RE.match(chapter):
        raise ValueError(f"chapter must look like '01_where_the_memory_goes', got {chapter!r}")
    _check_root(root)
    runs = [r for r in _saved_runs(root, chapter) if r["chapter"] == chapter]
    return sorted(runs, key=lambda r: r["device"]["name"])


def printed_on_gpu(chapter: str, marker: str, root: Path | None = None) -> list[tuple[str, str]]:
    """(device name, printed text) for each committed GPU run whose executed notebook
    (results/<device>/executed/<chapter>.ipynb, kept by `make gpu-check --keep-notebooks`) printed `marker`: the
    text of the first printed output holding it, from the line holding it on. What the real device printed, for a
    chapter to show beside a CPU run (a model's output is then never the only one a reader sees)."""
    if not isinstance(chapter, str) or not _CHAPTER_RE.match(chapter):
        raise ValueError(f"chapter must look like '07_memory_profiling', got {chapter!r}")
    if not isinstance(marker, str) or not marker:
        raise ValueError(f"marker must be a non-empty string, got {marker!r}")
    _check_root(root)
    found = []
    for run in reference_results(chapter, root):
        path = Path(root or RESULTS_DIR) / device_slug(run["device"]["name"]) / "executed" / f"{chapter}.ipynb"
        if run["device"].get("type") != "cuda" or not path.exists():
            continue
        try:
            cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{_shown(path)} is not a readable notebook: {type(exc).__name__}: {exc}") from None
        texts = ["".join(o.get("text", "")) for c in cells for o in c.get("outputs", [])
                 if o.get("output_type") == "stream"]
        text = next((t for t in texts if marker in t), None)
        if text is not None:
            lines = text.splitlines()
            first = next(i for i, line in enumerate(lines) if marker in line)
            found.append((run["device"]["name"], "\n".join(lines[first:])))
    return found


def _check_root(root: object) -> None:
    if root is not None and not isinstance(root, str | os.PathLike):
        raise TypeError(f"root must be a results folder path or None, got {type(root).__name__}")


def reference_summary(root: Path | None = None) -> list[list[str]]:
    """One row per saved reference run: device, capability, torch, size, date, chapter (for chapter 00).
    Damaged files are skipped, each with one printed line."""
    _check_root(root)
    rows = []
    for run in _saved_runs(root):
        capability = run["device"].get("capability")
        rows.append([run["device"]["name"], "" if capability is None else ".".join(map(str, capability)),
                     run["torch"], run["size"], run["date"], run["chapter"][:2]])
    return rows


def run_label(run: dict[str, Any]) -> str:
    """A saved run's device as the ledger names it, with what kind of run it is: a GPU's `make gpu-check` at full
    size, or one of the course's CPU reference runs (the runs whose outputs the chapters store), at its size."""
    device = run.get("device") if isinstance(run, dict) else None
    if not (isinstance(device, dict) and isinstance(device.get("name"), str)):
        raise TypeError(f"run must be a saved run's dict with a device name, got {run!r:.80}")
    name = run["device"]["name"].split("(")[0].strip()
    kind = "GPU run" if run["device"].get("type") == "cuda" else "a CPU reference run of the course"
    return f"{name} ({kind}, {run.get('size', '?')} size)"


EARLIER = "by an earlier criterion"


def _verdict_shown(rec: dict[str, Any]) -> str:
    """A saved claim's verdict, marked where its note states a criterion that no chapter's verdict function states
    today (utils.course.verdicts): the run was judged by an earlier version of the chapter's cell, so its verdict
    stands beside today's only once that chapter runs again on that device."""
    from utils.course.verdicts import all_judges

    today = [j.criterion for j in all_judges() if j.claim_id == rec["id"]]
    note = str(rec.get("note", ""))
    if any(note.startswith(f"criterion: {c}") for c in today):
        return rec["verdict"]
    return f"{rec['verdict']} ({EARLIER}: chapter {rec['chapter']} judges it otherwise now; re-run it there)"


def claims_ledger(root: Path | None = None) -> str:
    """A Markdown table of every claim: what each saved run measured, where, and the verdict, then one line naming
    the saved runs read (device and chapters); damaged files are skipped, each with one printed line."""
    _check_root(root)
    claims = load_claims()
    records: dict[str, list[tuple[str, dict[str, Any]]]] = {cid: [] for cid in claims}
    runs = _saved_runs(root)
    for run in runs:
        for rec in run.get("claims", []):
            records.setdefault(rec["id"], []).append((run_label(run), rec | {"chapter": run["chapter"][:2]}))
    rows = []
    for cid, (text, chapters) in claims.items():  # the claim in full: the ledger is read, not scanned
        if not records[cid]:
            rows.append([cid, text, chapters, "not yet measured", "", ""])
        for device, rec in records[cid]:
            rows.append([cid, text, rec["chapter"], rec["measured"], device, _verdict_shown(rec)])
    table = format_table(rows, ["id", "claim", "chapter", "measured", "device", "verdict"])
    by_device: dict[str, list[str]] = {}
    for run in runs:
        by_device.setdefault(run_label(run), []).append(run["chapter"][:2])
    read = "; ".join(f"{name} ({', '.join(chs)})" for name, chs in sorted(by_device.items())) or "none"
    return f"{table}\n\nSaved runs read: {read}."


VERDICT_LEGEND = {
    "holds": "the claim is true as stated, by the chapter's stated criterion, on that run",
    "partly": "part of the claim holds (e.g. the mechanism) and part does not (e.g. the figure)",
    "fails": "the measurement contradicts the claim",
    "depends": "true under some conditions the chapter names and false under others",
    "needs GPU": "not measurable on that device (no Tensor Cores, FP8 or caching allocator); the chapter names "
                 "the cell that judges it on a GPU",
    "not measured": "the device could measure it but the measurement failed on that run; the reason is given",
}
LEDGER_DIR = REPO_ROOT / "build" / "claims"


def claims_summary(root: Path | None = None, width: int = 100) -> str:
    """Each claim for a terminal of `width` columns, a legend first: its id and verdicts (with device), then the claim
    in full, both wrapped to `width`."""
    _check_root(root)
    check_int("width", width, minimum=40)
    claims = load_claims()
    verdicts: dict[str, list[str]] = {cid: [] for cid in claims}
    for run in _saved_runs(root):
        for rec in run.get("claims", []):
            shown = _verdict_shown(rec | {"chapter": run["chapter"][:2]})
            verdicts.setdefault(rec["id"], []).append(f"{shown}: {run_label(run)}, ch{run['chapter'][:2]}")
    legend = ["Verdicts: " + "; ".join(f"{k} = {v}" for k, v in VERDICT_LEGEND.items())]
    lines = [textwrap.fill(legend[0], width=width), ""]
    for cid, (text, _) in claims.items():  # the claim in full, wrapped under its verdicts (never cut)
        said = "; ".join(verdicts[cid]) or "not yet measured"
        lines.append(textwrap.fill(said, width=width, initial_indent=f"{cid}  ", subsequent_indent=" " * 5,
                                   break_on_hyphens=False))
        lines.append(textwrap.fill(text, width=width, initial_indent=" " * 5 + "| ", subsequent_indent=" " * 7,
                                   break_on_hyphens=False))
    return "\n".join(lines)


def write_ledger(folder: Path = LEDGER_DIR, root: Path | None = None) -> tuple[Path, Path]:
    """Write the full ledger as Markdown and HTML (with the legend) into `folder`; returns both paths."""
    folder = Path(check_instance("folder", folder, (str, Path)))
    _check_root(root)
    legend = "\n".join(f"- **{k}**: {v}" for k, v in VERDICT_LEGEND.items())
    markdown = f"# Claims ledger\n\nWhat each saved run in results/ measured for each claim.\n\n{legend}\n\n" \
               f"{claims_ledger(root)}\n"
    folder.mkdir(parents=True, exist_ok=True)
    md, html_path = folder / "claims-ledger.md", folder / "claims-ledger.html"
    md.write_text(markdown, encoding="utf-8")
    import mistune

    body = mistune.create_markdown(plugins=["table"])(markdown)
    html_path.write_text("<!doctype html><meta charset='utf-8'><title>Claims ledger</title><style>body{font-family:"
                         "sans-serif;max-width:80em;margin:2em auto}table{border-collapse:collapse}td,th{border:1px "
                         "solid #ccc;padding:4px 6px;vertical-align:top}</style>" + body, encoding="utf-8")
    return md, html_path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Reference results and the claims ledger.")
    parser.add_argument("--claims", action="store_true",
                        help="write the claims ledger (Markdown and HTML) and print a summary that fits the terminal")
    parser.add_argument("--root", type=Path, default=None, help="results folder (default: the course's)")
    parser.add_argument("--out", type=Path, default=LEDGER_DIR, help="where the ledger files go (default build/claims)")
    args = parser.parse_args(argv)
    if args.root is not None and not args.root.is_dir():
        parser.exit(2, f"utils.course.results: --root {args.root} is not a folder\n")
    if args.claims:
        width = max(60, min(shutil.get_terminal_size((100, 24)).columns, 160))
        print(claims_summary(args.root, width=width))
        md, html_path = write_ledger(args.out, args.root)
        print(f"\nThe full ledger (what was measured, where):\n  {md}\n  {html_path}")
    else:
        parser.print_help()


if __name__ == "__main__":
    main()
