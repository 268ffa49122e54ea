"""The course website's planner page: chapter 09's planner, run in the reader's browser (`make book` writes it).

The page runs the course's torch-free ledger (utils/ledger/, with utils/validate.py) in Pyodide, CPython compiled to
WebAssembly. Pyodide comes from the npm registry at build time, pinned by version and checked against the registry's
sha512 integrity, and is copied into the site, so the page fetches nothing from another host and works offline. The
tarball is cached under ~/.cache/gpu-memory-course/ (or $XDG_CACHE_HOME), so a second build downloads nothing.

What the page shows for a choice of model (a real architecture, a GPT stand-in, or a Hugging Face config's fields), GPU,
sequence length, batch, GPU count, host RAM and techniques allowed is `utils.ledger.report.plan_report`: chapter 09's
panel's lines, its figure's bars (drawn as SVG by utils/course/planner_page.js, without matplotlib) and its costs table.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import tarfile
import urllib.request
from pathlib import Path

from utils.validate import check_instance, check_str

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
PYODIDE_VERSION = "314.0.7"
PYODIDE_URL = f"https://registry.npmjs.org/pyodide/-/pyodide-{PYODIDE_VERSION}.tgz"
# the npm registry's dist.integrity of it (`npm view pyodide@314.0.7 dist.integrity`)
PYODIDE_INTEGRITY = "sha512-0YvXxEhfEdpLfb/XkM2BFAeMROq0iMUX2bzzH9pOttyMcWkwq+HbE5uyuGD82LN7y2q+SNvi/6V5JEsOlD2R1A=="
# What loadPyodide() fetches from its indexURL for a page that needs no package beyond the standard library
PYODIDE_FILES = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json",
                 "README.md", "package.json")
SCRIPT = HERE / "planner_page.js"

PAGE = """# Plan a training run, in your browser

Chapter 09 builds a planner: a ledger of what one training step keeps on a GPU (weights, gradients, optimizer states,
saved activations, the loss's logits, and what each technique adds or removes), and a search that adds techniques in
order of cost until the step fits the GPU's usable memory. This page runs the same ledger, the course's Python code,
in your browser: nothing is sent anywhere, and nothing is installed. Pick a model (or paste the fields of a Hugging
Face `config.json` of the Llama, Mistral, Qwen2 or Mixtral family, the ones the ledger models), a GPU, a sequence
length, the sequences each GPU trains per optimizer step, the number of GPUs, the RAM of the host (one host holds
every GPU's process) and the techniques you allow. For one GPU and a listed model, the lines printed below are
chapter 09's panel's for the same inputs (a test of the course checks it); more GPUs and pasted configs go beyond
that panel (chapter 10 explains what more GPUs change). They are a model of memory, an upper bound for the course's
GPT, which chapter 09 checks against real steps.

```{{raw}} html
<style>
#planner-form label {{ margin-right: 1em; white-space: nowrap; }}
#planner-form textarea {{ width: 100%; box-sizing: border-box; font-family: monospace; }}
#planner-status {{ font-weight: bold; }}
#planner-chart {{ overflow-x: auto; }}
#planner-chart svg {{ min-width: 640px; }}
#planner-lines {{ white-space: pre-wrap; word-break: normal; overflow-wrap: break-word; }}
#planner-costs {{ margin-bottom: 1.5em; }}
#planner-costs td, #planner-costs th {{ padding: 0.2em 0.7em; }}
#planner-verdict {{ font-weight: bold; margin-top: 1em; }}
#planner-steps {{ font-size: 0.9em; }}
</style>
<div id="planner-app" data-rendered="0">
<form id="planner-form" onsubmit="return false" hidden>
<label>model <select name="model"></select></label>
<label>tokens per sequence <select name="seq_len"></select></label>
<label>GPU <select name="gpu"></select></label>
<label>sequences per GPU per optimizer step <select name="effective_batch"></select></label>
<label>GPUs <select name="n_gpus"></select></label>
<label>host RAM (GiB, for all the GPUs) <select name="host_gib"></select></label>
<label><input type="checkbox" name="allow_offload" checked> allow offload</label>
<label><input type="checkbox" name="allow_lora" checked> allow LoRA</label>
<label><input type="checkbox" name="chunked_loss" checked> chunked loss</label>
<details><summary>or plan a model from its Hugging Face config.json</summary>
<textarea name="config" rows="8" placeholder='{{"model_type": "llama", "hidden_size": 4096, ...}}'></textarea>
<p>Paste the file's text: its fields replace the model chosen above (clear the box to go back). Llama, Mistral, Qwen2
and Mixtral configs are planned; a field the ledger does not model is refused by name.</p></details>
</form>
<p id="planner-status" role="alert" aria-live="assertive">Starting Python in your browser (Pyodide {version}, about
13 MB, then cached)...</p>
<noscript><p>This page runs the planner with JavaScript, which is off in this browser.</p></noscript>
<script>
if (location.protocol === "file:") {{
  document.getElementById("planner-status").textContent = "This page runs Python in your browser, which a page "
    + "opened from a file cannot start: serve the site (python -m http.server -d build/book/html) and open "
    + "http://127.0.0.1:8000/docs/planner.html.";
}}
</script>
<p id="planner-verdict" aria-live="polite"></p>
<p id="planner-model"></p>
<div id="planner-chart"></div>
<p id="planner-steps"></p>
<pre id="planner-lines"></pre>
<table id="planner-costs"></table>
</div>
<script type="module" src="../_static/planner/planner.js"></script>
```

How to read it: each bar is the ledger after one more technique, in the order the planner tried them; the first is
full fine-tuning in FP32 with the whole batch at once, the last the plan. The dashed line is the usable budget (the
memory the GPU reports, less the CUDA context, cuBLAS workspaces and a margin for the allocator's fragmentation:
chapter 07). When the first bars are many times the budget, the left panel draws them at full scale and the right one
zooms to 2.5 times the budget; a bar longer than its panel is cut, its total written at the edge. On a GPU below
compute capability 8.0 (a T4), BF16 attention runs SDPA's math kernel, which keeps the T x T scores (chapter 09),
so the BF16 bar can be longer than the FP32 one; FP16 with loss scaling, the usual choice there, is not one of the
planner's techniques. Chapter 09 explains each line and each technique; chapter 10 what more GPUs change.

Pyodide ([pyodide.org](https://pyodide.org), Mozilla Public License 2.0) version {version}, from the npm registry,
is served with this site. The page needs the site served over HTTP (as GitHub Pages or `python -m http.server`
do); opened from a file it says so.
"""


def cache_dir() -> Path:
    """Where the Pyodide tarball is kept between builds."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpu-memory-course"


def _integrity_ok(data: bytes) -> bool:
    algorithm, digest = PYODIDE_INTEGRITY.split("-", 1)
    return base64.b64encode(hashlib.new(algorithm, data).digest()).decode() == digest


def pyodide_tarball() -> bytes:
    """The pinned Pyodide release's npm tarball: from the cache, else from the npm registry (then cached); its
    sha512 must be the registry's, or RuntimeError."""
    path = cache_dir() / f"pyodide-{PYODIDE_VERSION}.tgz"
    if path.exists() and _integrity_ok(data := path.read_bytes()):
        return data
    try:
        with urllib.request.urlopen(PYODIDE_URL, timeout=120) as response:
            data = response.read()
    except OSError as exc:
        raise RuntimeError(f"could not download Pyodide {PYODIDE_VERSION} from {PYODIDE_URL} ({exc}); the planner "
                           f"page needs it once (it is then cached in {path})") from None
    if not _integrity_ok(data):
        raise RuntimeError(f"{PYODIDE_URL} does not match the registry's integrity {PYODIDE_INTEGRITY[:20]}...")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_bytes(data)
    partial.replace(path)
    return data


def ledger_bundle(root: Path = REPO_ROOT) -> dict[str, str]:
    """The Python the page runs, by path: the torch-free ledger and the argument checks it imports."""
    root = Path(check_instance("root", root, (str, Path)))
    paths = [root / "utils" / "__init__.py", root / "utils" / "validate.py",
             *sorted((root / "utils" / "ledger").glob("*.py"))]
    return {p.relative_to(root).as_posix(): p.read_text(encoding="utf-8") for p in paths}


def write(src: Path) -> Path:
    """Write the page (docs/planner.md), its script, the ledger's sources and Pyodide into a site's sources `src`;
    returns the page's path."""
    src = Path(check_instance("src", src, (str, Path)))
    tarball = pyodide_tarball()  # first: without it nothing of the page is written
    static = src / "_static"
    (static / "planner").mkdir(parents=True, exist_ok=True)
    (static / "planner" / "planner.js").write_text(SCRIPT.read_text(encoding="utf-8"), encoding="utf-8")
    (static / "planner" / "ledger.json").write_text(json.dumps(ledger_bundle()), encoding="utf-8")
    pyodide = static / "pyodide"
    pyodide.mkdir(exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
        for name in PYODIDE_FILES:
            member = tar.extractfile(f"package/{name}")
            if member is None:
                raise RuntimeError(f"Pyodide {PYODIDE_VERSION}'s tarball has no package/{name}")
            (pyodide / name).write_bytes(member.read())
    page = src / "docs" / "planner.md"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(PAGE.format(version=PYODIDE_VERSION), encoding="utf-8")
    return page


def write_without_pyodide(src: Path, reason: str) -> Path:
    """The page, when Pyodide could not be had (no network on a first build): it says why and how to get the planner
    (chapter 09 in JupyterLab, or a build with the network once); the rest of the site builds as usual."""
    src = Path(check_instance("src", src, (str, Path)))
    check_str("reason", reason)
    page = src / "docs" / "planner.md"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text("# Plan a training run, in your browser\n\nThis build of the site has no planner: "
                    f"{reason.rstrip('.')}. Build it once with the network (`make book`: Pyodide is then cached), or "
                    "run chapter 09's planner panel in JupyterLab (`make lab`).\n", encoding="utf-8")
    return page
