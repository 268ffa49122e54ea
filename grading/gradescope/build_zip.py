"""Build the Gradescope autograder zip: `python grading/gradescope/build_zip.py [autograder.zip]`.

The zip holds, at its root, setup.sh and run_autograder (Gradescope's two required files) and the course files the
grader needs (utils/, labs/, grading/, pyproject.toml, requirements.txt, Makefile); Gradescope unpacks it into
/autograder/source. Put private held-out cases in grading/hidden/ of the checkout you build from.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
COURSE = ["pyproject.toml", "requirements.txt", "Makefile", "utils", "labs", "grading"]


def build(target: Path) -> list[str]:
    names = []
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for script in ("setup.sh", "run_autograder"):
            info = zipfile.ZipInfo(script)
            info.external_attr = 0o755 << 16  # executable
            zf.writestr(info, (HERE / script).read_bytes())
            names.append(script)
        for entry in COURSE:
            path = ROOT / entry
            files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
            for file in files:
                if "__pycache__" in file.parts or ".ipynb_checkpoints" in file.parts:
                    continue
                name = file.relative_to(ROOT).as_posix()
                zf.write(file, name)
                names.append(name)
    return names


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "autograder.zip")
    if out.exists() and out.is_dir():
        print(f"build_zip.py: {out} is a folder; name the zip file to write", file=sys.stderr)
        sys.exit(2)
    names = build(out)
    print(f"wrote {out}: {len(names)} files (setup.sh and run_autograder at its root)")
