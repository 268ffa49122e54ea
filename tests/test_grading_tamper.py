"""Review 34c, A1 and A2: a submission that rewrites a check module or the held-out cases on disk passed every
exercise, and the checkout stayed poisoned for every later submission. The grader reads the files a grade rests on
before any submission runs, puts back whatever a submission changed, added or deleted, and gives that submission no
points (graded again alone first, when several ran at once), naming the files for the instructor."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from tests.test_grade import RIGHT, submission
from utils.course.grade import _forged_caches, _restore_trusted, _trusted_files

ROOT = Path(__file__).resolve().parent.parent
# an answer cell that leaves a process running after its kernel (review 34c, A11), beating every 50 ms
DAEMON = """import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        end = time.time() + 300
        while time.time() < end:
            open({beat!r}, "w").write(str(time.time()))
            time.sleep(0.05)
    os._exit(0)
"""


def test_a_changed_added_deleted_or_relinked_file_is_put_back_and_named(tmp_path):
    root = tmp_path / "checks"
    (root / "sub").mkdir(parents=True)
    for name, text in (("a.py", "A = 1\n"), ("sub/b.py", "B = 2\n"), ("c.py", "C = 3\n"), ("d.py", "D = 4\n")):
        (root / name).write_text(text)
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "a.pyc").write_bytes(b"cache")
    files = _trusted_files([root])
    assert sorted(p.name for p in files) == ["a.py", "b.py", "c.py", "d.py"]  # caches aside
    assert _restore_trusted(files, [root]) == []
    (root / "a.py").write_text("A = 1\nimport os\n")  # rewritten
    (root / "sub" / "b.py").unlink()  # deleted
    (root / "c.py").unlink()
    (root / "c.py").symlink_to(tmp_path / "elsewhere.py")  # replaced by a link to a file of the learner's
    (tmp_path / "elsewhere.py").write_text("C = 0\n")
    (root / "e.py").write_text("E = 5\n")  # added
    (root / "__pycache__" / "a.pyc").write_bytes(b"other")  # the children never read these
    touched = _restore_trusted(files, [root])
    assert sorted(Path(t).name for t in touched) == ["a.py", "b.py", "c.py", "e.py"]
    assert {p.name: p.read_text() for p in files} == {"a.py": "A = 1\n", "b.py": "B = 2\n", "c.py": "C = 3\n",
                                                     "d.py": "D = 4\n"}
    assert not (root / "c.py").is_symlink() and not (root / "e.py").exists()
    assert (tmp_path / "elsewhere.py").read_text() == "C = 0\n"  # nothing written through the link


def test_a_planted_compiled_cache_is_found_and_deleted(tmp_path):
    """Review 34c: a .pyc planted in utils/**/__pycache__ with its source's mtime and size in the header is what
    Python runs; the tamper check skipped caches. Each cache is now compared with its source compiled."""
    import importlib.util
    import py_compile

    root = tmp_path / "checks"
    root.mkdir()
    source = root / "a.py"
    source.write_text("def truth():\n    return 1\n")
    sound = Path(py_compile.compile(str(source), doraise=True))  # what Python writes as it imports
    verified: dict = {}
    assert _forged_caches([root], verified) == [] and sound in verified
    other = tmp_path / "forged.py"
    other.write_text("def truth():\n    return 2\n")
    forged = py_compile.compile(str(other), cfile=importlib.util.cache_from_source(str(source)), doraise=True)
    assert Path(forged) == sound  # the learner's code where Python looks for a.py's
    assert _forged_caches([root], verified) == [str(sound)] and not sound.exists()
    (root / "__pycache__" / f"gone.{sys.implementation.cache_tag}.pyc").write_bytes(b"no source beside it")
    assert len(_forged_caches([root], verified)) == 1


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_submission_that_rewrites_the_held_out_cases_scores_zero_and_the_next_one_is_graded_whole(tmp_path):
    labs, hidden = tmp_path / "labs", tmp_path / "hidden"
    shutil.copytree(ROOT / "labs", labs)
    shutil.copytree(ROOT / "grading" / "hidden", hidden, ignore=shutil.ignore_patterns("__pycache__"))
    before = (hidden / "ch00.py").read_bytes()
    cheat = RIGHT["0.1"] + (f"\nimport pathlib\npathlib.Path({str(hidden / 'ch00.py')!r}).write_text('HIDDEN = {{}}')"
                            "  # no held-out cases for anyone")
    subs = tmp_path / "subs"
    subs.mkdir()
    nbformat.write(submission({**RIGHT, "0.1": cheat}), subs / "a_tamper_lab00_warmup.ipynb")
    nbformat.write(submission(RIGHT), subs / "b_honest_lab00_warmup.ipynb")
    beat = tmp_path / "heartbeat"
    daemon = DAEMON.format(beat=str(beat)) + "def packed_bytes(shape, bits):\n    return 0"
    nbformat.write(submission({**RIGHT, "0.1": daemon}), subs / "c_daemon_lab00_warmup.ipynb")
    out = tmp_path / "grades"
    # ordinary kernels, descendants of the grader as in an instructor's run: a forked kernel's leader
    # (tests/kernel_zygote.py) would stop the daemon itself, and this test would no longer test the grader's stopping
    done = subprocess.run([sys.executable, "-m", "utils.course.grade", str(subs), "--jobs", "1", "--time-limit", "120",
                           "--csv-dir", str(out), "--labs", str(labs), "--hidden", str(hidden)],
                          cwd=ROOT, capture_output=True, text=True, timeout=800,
                          env={**os.environ, "COURSE_KERNEL_ZYGOTE": "0"})
    assert done.returncode == 0, done.stdout + done.stderr
    with open(out / "lab00_warmup.csv", newline="") as f:
        rows = {r["submission"]: r for r in csv.DictReader(f)}
    tamper, honest = rows["a_tamper_lab00_warmup.ipynb"], rows["b_honest_lab00_warmup.ipynb"]
    assert tamper["total"] == "0" and "changed the course's own files" in tamper["notes"], tamper
    assert "ch00.py" in tamper["notes"], tamper["notes"]
    assert honest["total"] == honest["max"] == "5", honest["notes"]  # held-out cases back for the next learner
    assert (hidden / "ch00.py").read_bytes() == before
    # review 34c, A11: a daemon the answer left (double fork, a session of its own) rewrote the score file the
    # grading child wrote; the score now comes through a pipe, and the grader stops what a submission left running
    daemon_row = rows["c_daemon_lab00_warmup.ipynb"]
    assert daemon_row["ex 0.1"] == "0" and daemon_row["total"] == "4", daemon_row["notes"]  # 0.1 wrong, the rest right
    assert beat.exists(), "the daemon never ran"
    last = beat.stat().st_mtime_ns
    time.sleep(1.0)
    assert beat.stat().st_mtime_ns == last, "the daemon outlived the grading run"
