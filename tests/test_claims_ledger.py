"""make claims: a summary that fits the terminal with a legend for every verdict, and the full ledger written to
readable Markdown and HTML files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from utils.course.results import VERDICT_LEGEND, VERDICTS, claims_summary, load_claims, write_ledger

ROOT = Path(__file__).resolve().parent.parent


def test_every_verdict_has_a_legend() -> None:
    assert set(VERDICT_LEGEND) == set(VERDICTS)


def test_summary_fits_the_width_and_has_the_legend() -> None:
    text = claims_summary(width=80)
    assert all(len(line) <= 80 for line in text.splitlines())
    flat = " ".join(text.split())  # the legend is wrapped: a two-word verdict may break across lines
    for verdict in VERDICTS:
        assert f"{verdict} =" in flat
    assert sum(line.startswith("C") for line in text.splitlines()) == 30


def test_summary_prints_every_claim_whole() -> None:
    """Issue 37: a claim with two verdicts kept only about 40 characters of its text (the line was cut at the
    terminal's width). Each claim is printed in full, wrapped, after its verdicts."""
    text = claims_summary(width=100)
    flat = " ".join(text.split())
    for cid, (claim, _) in load_claims().items():
        assert " ".join(claim.split()) in flat, f"{cid} is not printed whole"
    assert "..." not in text


def test_ledger_files(tmp_path: Path) -> None:
    md, html = write_ledger(tmp_path)
    assert "| id" in md.read_text() and "**needs GPU**" in md.read_text()
    assert "<table>" in html.read_text() and "<td>C01</td>" in html.read_text()
    longest = max((text for text, _ in load_claims().values()), key=len)  # never cut to fit a column
    assert len(longest) > 100 and longest.split()[-1] in html.read_text() and "..." not in md.read_text()


def test_make_claims_command(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "utils.course.results", "--claims", "--out", str(tmp_path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, env={"COLUMNS": "90", "PATH": ""})
    assert out.returncode == 0, out.stderr
    summary = out.stdout.split("The full ledger")[0].splitlines()
    assert max(len(line) for line in summary) <= 90
    assert (tmp_path / "claims-ledger.html").exists() and "claims-ledger.md" in out.stdout
