# The course's commands. `make lab` to learn, `make test` to check everything.
# Override the torch build with e.g. `make lab TORCH="torch==2.11.0"` or a CUDA index:
#   make lab TORCH="torch --index-url https://download.pytorch.org/whl/cu126"
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
PORT ?= 8888
JOBS ?= 2
SUBMISSIONS ?= submissions

PY := $(VENV)/bin/python
STAMP := $(VENV)/.course-installed
TORCH_SPEC := $(VENV)/.torch-spec

.PHONY: lab reset-lab reset-chapter test test-platforms lint labs grade claims report gpu-check outputs book env clean FORCE

env: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

# Re-install when the torch spec changes (the file is rewritten only when it differs).
$(TORCH_SPEC): FORCE | $(PY)
	@echo '$(TORCH)' | cmp -s - $@ || echo '$(TORCH)' > $@

# torch first, so that nothing below pulls a different build of it. --no-compile: pip byte-compiles every module of
# every package it installs, most of which nothing imports; Python compiles what is imported, once, and caches it
# (in .venv and the __pycache__ folders git ignores). Measured on 2 cores: torch and requirements.txt installed in
# 61 s instead of 109. The caching needs PYTHONDONTWRITEBYTECODE unset, so make unsets it for every command below:
# where it is set (as on the machine this course is developed on), every process would compile its imports again
# (670 modules for `import torch, transformers`; make test took 25 minutes instead of 16).
unexport PYTHONDONTWRITEBYTECODE
PIP_INSTALL := $(PY) -m pip install --disable-pip-version-check -q --no-compile
$(STAMP): requirements.txt pyproject.toml $(TORCH_SPEC)
	@echo "Installing $(TORCH) (about 30 s for the CPU wheel, minutes for a CUDA build), then JupyterLab, ipywidgets,"
	@echo "pytest and the course's other packages (requirements.txt): about 2 minutes on a first run, quietly."
	$(PIP_INSTALL) $(TORCH)
	$(PIP_INSTALL) -r requirements.txt
	$(PIP_INSTALL) --no-deps -e .
	@touch $@
	@echo "Environment ready in $(VENV)."

# JupyterLab on 127.0.0.1 only, always with a token (a random one unless TOKEN=... is given), serving the whole
# course (notebooks/, labs/, my-labs/, solutions/, docs/) and opening chapter 00. Labs are copied into my-labs/
# (ignored by git) on the first run: learners work there. Saving a chapter (or any file in notebooks/, labs/,
# solutions/, docs/) writes the learner's copy to my-work/ (ignored by git), never the committed file; JupyterLab
# then opens that copy under the same name. See utils/course/lab_server.py and utils/course/lab_contents.py.
lab: $(STAMP)
	exec $(PY) -m utils.course.lab_server --port=$(PORT) $(if $(TOKEN),--token=$(TOKEN)) $(if $(NO_BROWSER),--no-browser)

# Start one lab over: my-labs/labNN_*.ipynb is replaced by a fresh copy of labs/labNN_*.ipynb (the old one is kept in
# my-labs/.previous/). Usage: make reset-lab N=06
reset-lab: $(STAMP)
	@test -n "$(N)" || (echo "usage: make reset-lab N=06" >&2; exit 2)
	$(PY) -m utils.course.lab_server --reset-lab=$(N)

# Start one chapter over: your saved copy my-work/notebooks/NN_*.ipynb is set aside (in my-work/.previous/), and
# JupyterLab shows the course's committed version again. Usage: make reset-chapter N=09
reset-chapter: $(STAMP)
	@test -n "$(N)" || (echo "usage: make reset-chapter N=09" >&2; exit 2)
	$(PY) -m utils.course.lab_server --reset-chapter=$(N)

lint: $(STAMP)
	$(VENV)/bin/ruff check conftest.py utils tests notebooks solutions

test: $(STAMP) lint
	$(PY) -m utils.course.labs --check
	$(PY) -m pytest -n $(JOBS) --dist loadfile --no-loadscope-reorder --durations=30 $(PYTEST_ARGS)

# What `make test` skips as "in make test-platforms" (tests/platform_tier.py), 32 tests, about 7 minutes of pytest
# on 2 cores: every chapter under the simulated T4 (quick size, figure assertions on) and Apple GPU, the six that read
# the compute capability under the simulated H100 (tiny size), `make gpu-check` under a simulated T4, the Colab/Kaggle
# bootstrap in a fresh venv, nbgrader against `make grade`, and a learner's JupyterLab session in Chromium. `make test`
# runs chapter 00 under the simulated T4 (repeated here); CI (.ci/run) runs this after `make test`. -v names each
# test as it passes.
PLATFORM_TESTS := tests/test_simulated_gpu_t4.py tests/test_simulated_gpu_t4_quick.py tests/test_simulated_gpu_mps.py \
	tests/test_simulated_gpu_h100.py tests/test_gpu_check.py::test_gpu_path_under_a_simulated_t4 \
	tests/test_hosted.py::test_bootstrap_in_a_torch_only_venv_then_chapter_00 \
	tests/test_nbgrader.py::test_nbgrader_scores_equal_make_grade \
	tests/test_browser.py::test_a_learner_who_runs_and_saves_chapters_leaves_git_status_clean
PLATFORM_PYTEST := -n $(JOBS) --dist loadfile --no-loadscope-reorder -v --durations=10
test-platforms: $(STAMP)
	COURSE_TEST_PLATFORMS=1 $(PY) -m pytest $(PLATFORM_PYTEST) $(PLATFORM_TESTS) $(PYTEST_ARGS)

labs: $(STAMP)
	$(PY) -m utils.course.labs $(if $(FORCE_LABS),--force)

# Grading RUNS the submitted notebooks' code: on this machine, with your files and network, unless you run it in a
# container (docs/instructors.md, "Grading in a container"). GRADE_ARGS passes more options (--time-limit ...).
grade: $(STAMP)
	@echo "make grade: this runs the code of every notebook in $(SUBMISSIONS)/ on this machine, as you, with your"
	@echo "  files and network. Submissions are untrusted code: grade in a container (docs/instructors.md shows a"
	@echo "  'docker run --network none' line) or a throwaway account. Ctrl+C within 5 s to stop."
	@sleep 5
	$(PY) -m utils.course.grade $(SUBMISSIONS) --jobs $(JOBS) $(GRADE_ARGS)

# The labs as an nbgrader course folder (nbgrader 0.9: source/<lab>/<lab>.ipynb with solution, locked grade and
# hidden-test cells, and nbgrader_config.py); then `cd build/nbgrader && nbgrader generate_assignment <lab>`.
.PHONY: nbgrader nbgrader-env nbgrader-run
NBGRADER_DIR ?= build/nbgrader
nbgrader: $(STAMP)
	$(PY) -m utils.course.labs --nbgrader $(NBGRADER_DIR)

# nbgrader itself, kept out of the course's venv (installed there, it adds its menus to every learner's JupyterLab):
# pip --target build/nbgrader-site, put on PYTHONPATH (and its `alembic` on PATH) only for nbgrader's commands.
NBGRADER_SITE := $(CURDIR)/build/nbgrader-site
NBGRADER := PYTHONPATH="$(NBGRADER_SITE)" PATH="$(NBGRADER_SITE)/bin:$(CURDIR)/$(VENV)/bin:$$PATH" \
	"$(CURDIR)/$(PY)" -c "from nbgrader.apps.nbgraderapp import main; main()"
nbgrader-env: $(STAMP)
	$(PY) -m pip install -q --disable-pip-version-check --target "$(NBGRADER_SITE)" --no-deps "nbgrader==0.9.*" \
		alembic sqlalchemy mako greenlet rapidfuzz notebook
	@PYTHONPATH="$(NBGRADER_SITE)" $(PY) -c "import nbgrader.apps.nbgraderapp, nbgrader.api" 2>/dev/null || \
		$(PY) -m pip install -q --disable-pip-version-check --target "$(NBGRADER_SITE)" "nbgrader==0.9.*"
	@echo "nbgrader is in build/nbgrader-site (not in the course's venv). Run it with, for example:"
	@echo "  make nbgrader-run ARGS='generate_assignment lab03_loss_scaling'"

# Any nbgrader command, in the course folder $(NBGRADER_DIR): make nbgrader-run ARGS='autograde lab03_loss_scaling'
nbgrader-run:
	@test -n "$(ARGS)" || (echo "usage: make nbgrader-run ARGS='generate_assignment lab03_loss_scaling'" >&2; exit 2)
	@test -d "$(NBGRADER_SITE)/nbgrader" || (echo "run make nbgrader-env first (installs nbgrader outside the venv)" >&2; exit 2)
	@test -f "$(NBGRADER_DIR)/nbgrader_config.py" || (echo "run make nbgrader first (writes $(NBGRADER_DIR))" >&2; exit 2)
	cd "$(NBGRADER_DIR)" && $(NBGRADER) $(ARGS)

# Store the outputs of a real quick-size run in every chapter (and this machine's reference results/);
# ONLY=05 for one chapter. make test fails when a chapter's code changed since its outputs were made.
outputs: $(STAMP)
	$(PY) -m utils.course.outputs $(if $(ONLY),--only $(ONLY))

# The course as a static website (chapters with their committed outputs, glossary, claims, guides, and the planner
# page, which runs the ledger in the browser with Pyodide, fetched once from the npm registry and cached in
# ~/.cache/gpu-memory-course) in build/book/html; see utils/course/book.py and utils/course/planner_page.py.
# .github/workflows/book.yml publishes it to GitHub Pages.
# Built from the committed versions (HEAD) of notebooks/, docs/ and results/; WORKING_TREE=1 builds from the files
# as they are (e.g. new outputs not yet committed).
book: $(STAMP)
	$(PY) -m utils.course.book $(if $(WORKING_TREE),--working-tree)

claims: $(STAMP)
	$(PY) -m utils.course.results --claims

# What each chapter can do where (one block per device, 100 columns), and what the saved reference results say
# about each claim.
report: $(STAMP)
	$(PY) -m utils.course.chapters --by-device
	@echo
	$(PY) -m utils.course.results --claims

# On a GPU host: every chapter at its tier's full size, the estimator against max_memory_allocated,
# results/<device>/ written, and a table of what passed. Without a GPU: one line and a non-zero exit.
gpu-check: $(STAMP)
	$(PY) -m utils.course.gpu_check

clean:
	rm -rf $(VENV) test-artifacts grades
