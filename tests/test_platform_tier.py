"""`make test-platforms` runs the tests `make test` skips as "in make test-platforms": the Makefile's list of them and
the markers in the test files are two places, so this ties them (a marked test missing from the list would run in
neither command)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_test_file_that_defers_to_the_platform_tier_is_in_the_makefiles_list():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    listed = re.search(r"^PLATFORM_TESTS := ((?:.*\\\n)*.*)$", makefile, flags=re.M).group(1)
    named = {Path(item.split("::")[0]).name for item in listed.replace("\\\n", " ").split()}
    deferring = {p.name for p in (ROOT / "tests").glob("test_*.py") if p.name != Path(__file__).name
                 and re.search(r"@only_in_platforms|device_params\(", p.read_text(encoding="utf-8"))}
    assert deferring and deferring <= named, f"marked but not in Makefile's PLATFORM_TESTS: {deferring - named}"
