"""Issue 34: a learner who reaches each check's reference through the check function itself (its `__globals__`),
and escapes the watch on its calls (a thread, a switched-off profile hook, a renamed copy of the reference's code,
numpy's float16 view for 2.1), scores 0 on every such exercise under `make grade`, and the grade notes name the
answer cells that reach into a check's internals. On the code before issue 34 these answers (tests/escapes.py)
passed public and held-out cases on 26 exercises of labs 01-09 (49 points). Honest answers earning full marks
under the same grader: tests/test_grade.py::test_every_solution_earns_full_marks_and_every_lab_none."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tests.escapes import FUNCTIONS, PREDICTIONS, cheat_source
from utils.course.labs import LABS_DIR, lab_exercises, parse_check_call
from utils.course.labs import course_metadata as _course

ROOT = Path(__file__).resolve().parents[1]


def cheating_notebooks(folder: Path) -> dict[str, list[str]]:
    """One cheating submission per lab 00-09 (its other exercises left as handed out); {lab: cheated exercises}."""
    cheated: dict[str, list[str]] = {}
    for lab_path in sorted(LABS_DIR.glob("lab0[0-9]_*.ipynb")):
        nb = nbformat.read(lab_path, as_version=4)
        checks = {e.id: parse_check_call(e.check)[0] for e in lab_exercises(nb, lab_path.stem) if e.check}
        for cell in nb.cells:
            exercise = _course(cell).get("exercise")
            source = cheat_source(exercise, checks[exercise]) if exercise in checks else None
            if source is not None:
                cell.source = source
                cheated.setdefault(lab_path.stem, []).append(exercise)
        nbformat.write(nb, folder / f"cheater_{lab_path.name}")
    return cheated


def test_the_cheats_cover_every_escape():
    assert {escape for _, _, escape in FUNCTIONS.values()} == {"thread", "off", "copy"}
    assert cheat_source("2.1", "check_decode_fp16") and len(PREDICTIONS) == 8


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_every_escape_scores_zero(tmp_path):
    cheated = cheating_notebooks(tmp_path)
    assert sum(map(len, cheated.values())) >= 28
    out = tmp_path / "grades"
    done = subprocess.run([sys.executable, "-m", "utils.course.grade", str(tmp_path), "--jobs", "1", "--time-limit",
                           "240",
                           "--csv-dir", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=1400)
    assert done.returncode == 0, done.stdout + done.stderr
    for lab, exercises in cheated.items():
        with open(out / f"{lab}.csv", newline="") as f:
            row = next(csv.DictReader(f))
        for exercise in exercises:
            assert row[f"ex {exercise}"] == "0", (lab, exercise, row["notes"])
        assert row["total"] == "0", (lab, row["notes"])
        assert "__globals__" in row["notes"], row["notes"]  # the answer cells that reach into a check, named


def test_the_watch_sees_each_escape_on_one_check(monkeypatch) -> None:
    """Fast: 7.1's reference reached through its check's globals, by each way out of the watch, and 2.1 by numpy."""
    import concurrent.futures
    import types

    from utils.course.checks import ch02, ch07

    monkeypatch.delenv("COURSE_CHECKS_STRICT", raising=False)
    ref = ch07.check_read_run.__globals__["run_truth"]

    def in_a_thread(stats):
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(ref, stats).result()

    def hook_off(stats):
        hook = sys.getprofile()
        sys.setprofile(None)
        try:
            return ref(stats)
        finally:
            sys.setprofile(hook)

    copy = types.FunctionType(ref.__code__.replace(co_name="mine"), ref.__globals__, "mine", ref.__defaults__)
    pool = concurrent.futures.ThreadPoolExecutor(1)
    pool.submit(int).result()  # a pool left running from an earlier cell
    try:
        verdict = ch07.check_read_run(lambda stats: pool.submit(ref, stats).result())
        assert verdict.status == "failed" and "thread of your code" in verdict.message
    finally:
        pool.shutdown()
    for answer, seen in ((in_a_thread, "run_truth"), (hook_off, "sys.setprofile"), (copy, "run_truth")):
        verdict = ch07.check_read_run(answer)
        assert verdict.status == "failed" and seen in verdict.message, verdict
    numpy_decode = cheat_source("2.1", "check_decode_fp16")
    namespace: dict = {}
    exec(numpy_decode, namespace)  # noqa: S102
    verdict = ch02.check_decode_fp16(namespace["decode_fp16"])
    assert verdict.status == "failed" and "numpy" in verdict.message, verdict


def test_answer_cells_reaching_into_the_checks_are_listed_for_the_instructor() -> None:
    from utils.course.grade import internals_used

    cell = nbformat.v4.new_code_cell
    nb = nbformat.v4.new_notebook(cells=[
        cell("prediction = check_x.__globals__['truth']()", metadata={"course": {"exercise": "1.3"}}),
        cell("import importlib.util as u\nm = u.spec_from_file_location('m', 'utils/course/checks/ch01.py')"),
        cell("def f(x):\n    return x + 1"),
    ])
    lines = internals_used(nb)
    assert len(lines) == 2 and "exercise 1.3 uses __globals__" in lines[0], lines
    assert "spec_from_file_location" in lines[1] and "a path into the checks" in lines[1], lines


def test_the_review_34c_dodges_of_the_scan_are_listed() -> None:
    """A4: a check's source read from a path built from `utils.__file__` and run with `builtins.exec`; M2: a check
    module imported by a split string; A5: a fork in the answer. Each is now listed for the instructor."""
    from utils.course.grade import internals_used

    cell = nbformat.v4.new_code_cell
    nb = nbformat.v4.new_notebook(cells=[
        cell("import os, builtins, utils\nsrc = open(os.path.join(os.path.dirname(utils.__file__), 'checks', 'ch' + "
             "'02.py')).read()\nbuiltins.exec(src, {})"),
        cell("import importlib\nm = importlib.import_module('utils.' + 'checks.ch02')"),
        cell("import os\npid = os.fork()"),
    ])
    lines = internals_used(nb)
    assert len(lines) == 3, lines
    assert "exec" in lines[0] and "a path into the checks" in lines[0], lines
    assert "a module imported by a computed name" in lines[1], lines
    assert "fork" in lines[2], lines


def test_the_review_s5_routes_are_listed_and_torch_compile_is_not() -> None:
    """Review s5: exercise 7.6 passed by a helper process started with os.system before the check (F2) and by the
    model's source read through `__file__`, edited and imported (F2b); both are now listed for the instructor.
    torch.compile and re.compile are not code run from a string (F4)."""
    from utils.course.grade import internals_used

    cell = nbformat.v4.new_code_cell
    nb = nbformat.v4.new_notebook(cells=[
        cell("import os, sys\nos.system(f'{sys.executable} server.py &')"),
        cell("import utils.lessons.allocator_model as am\nsrc = open(am.__file__).read()"),
        cell("import re, torch\nf = torch.compile(lambda x: x + 1)\npattern = re.compile('a+')"),
    ])
    lines = internals_used(nb)
    assert len(lines) == 2, lines
    assert "system" in lines[0] and "a module's source file" in lines[1], lines


def test_a_thread_void_is_listed_for_reading_by_hand() -> None:
    """Review s5, F3: an honest solution after a setup cell with torch.compile scored 0/9 once, every exercise voided
    by a library's idle thread pool ("ThreadPoolExecutor-1_0"), and nothing said so to the instructor. The void
    stays (a learner's own pool could run the reference unwatched) but the notebook is now listed."""
    from utils.course.grade import THREAD_VOID

    message = ("a thread of the learner's code (ThreadPoolExecutor-1_0) was still running after the check: its work "
               "is not the answer's")
    assert message.startswith(THREAD_VOID)
    runner = (ROOT / "grading" / "runner.py").read_text()
    assert 'f"a thread of the learner\'s code ({running[0]}) was still running after the "' in runner


def test_an_honest_solution_is_not_listed_to_read_by_hand() -> None:
    """A name an exercise asks for (a saved-tensor hook in 1.2, a storage's address in 0.2 and 0.4) does not list
    its answer cell; anywhere else it still does."""
    from utils.course.grade import internals_used

    for path in sorted((ROOT / "solutions").glob("lab*.ipynb")):
        assert internals_used(nbformat.read(path, as_version=4)) == [], path.name
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "x.untyped_storage().data_ptr()", metadata={"course": {"exercise": "1.3"}})])
    assert "data_ptr" in internals_used(nb)[0]
