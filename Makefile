# make test   - create .venv if missing, install, run the default test tier (simulator unless a GPU is chosen)
# make test-all - the whole suite: the default tier and the long one (notebooks, more seeds, larger shapes, ...)
# make demo   - run every lesson's versions, check them, print the table
# make classroom - every lesson's interactive classroom page into build/classroom/
# make site   - build the course site into build/site (tools/build_site.py), the classroom pages included
# make lab    - JupyterLab and nbconvert in .venv, then JupyterLab on notebooks/ (a student's start)
# make gpu-session - on a GPU machine: the GPU suite, compute-sanitizer, the random-shape check and the benchmark
#                in one command of <= 9 minutes, into one results folder (benchmarks/gpu_session.py)
ifeq ($(OS),Windows_NT)
PYTHON ?= python
BIN    := Scripts
else
PYTHON ?= python3
BIN    := bin
endif
VENV   ?= .venv
PY     := $(VENV)/$(BIN)/python
comma  := ,

# The CUDA extra, from the platform and the driver: none on macOS (numba-cuda has no wheels there: kernels run
# on Numba's simulator); elsewhere the CUDA major version nvidia-smi reports ("CUDA Version: 12.4" -> cu12);
# cu13 without a driver, for the compiler (`gpukernels resources`, the grader's compile gate: no GPU needed).
# Override with `make EXTRAS=cu12,dev test`.
UNAME      := $(shell uname -s 2>/dev/null)
CUDA_MAJOR := $(shell nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\).*/\1/p' | head -n 1)
ifeq ($(UNAME),Darwin)
CUDA_EXTRA :=
else ifeq ($(CUDA_MAJOR),12)
CUDA_EXTRA := cu12
else
CUDA_EXTRA := cu13
endif
EXTRAS ?= $(if $(CUDA_EXTRA),$(CUDA_EXTRA)$(comma))dev
# The install is redone when the extras change (a new driver, a venv made elsewhere); a venv switched between
# cu12 and cu13 keeps the other's wheels: `make clean` first.
STAMP  := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

.PHONY: test test-all test-nocuda demo install extras lab notebooks plots bench clean mutate classroom site gpu-session

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

install: $(STAMP)

extras:
	@echo "platform $(or $(UNAME),unknown), driver CUDA $(or $(CUDA_MAJOR),none) -> pip install -e \".[$(EXTRAS)]\""

# Two tiers (tests/conftest.py): `make test` deselects the tests marked `slow` -- every lesson version at small odd
# shapes, the tracer, the grader against its fixtures, the CLI and bad input, in minutes; `make test-all` runs
# everything. WORKERS: pytest-xdist processes (GPUKERNELS_DEVICE=gpu make test-all WORKERS=16 on a GPU machine).
# The default tier has a budget (tests/_tiers.py): a run over the whole folder that spends more than 9 CPU-minutes
# fails, naming its costliest tests. RECORD=1 writes what a run measured into tests/tiers.json, from which
# `python -m gpukernels.readme` regenerates the README's table of tiers.
WORKERS ?= 2
RECORD  ?=

test: $(STAMP)
	$(PY) -m pytest -q -n $(WORKERS) --dist loadgroup --timeout 600 $(if $(RECORD),--record-tier default) -m "not slow" tests

test-all: $(STAMP)
	$(PY) -m pytest -q -n $(WORKERS) --dist loadgroup --timeout 900 $(if $(RECORD),--record-tier all) tests

# What differs on a Mac: a venv with everything but numba-cuda (so no CUDA compiler), kernels on Numba's built-in
# simulator. The requirements are pyproject.toml's, markers and all, less numba-cuda's lines; the package goes in
# with --no-deps so numba-cuda stays out. What needs the compiler skips, naming it. NOCUDA_TESTS are the tests
# whose answers depend on that: what runs without the compiler (test_no_toolchain: the grader and `resources`),
# the simulator's primitives and errors on Numba's own simulator, every lesson version on it, the tracer, the
# modes, the CLI; the rest of the suite runs the same code on the same simulator as `make test` does.
NOCUDA_TESTS ?= tests/test_no_toolchain.py tests/test_modes.py tests/test_sim_primitives.py tests/test_sim_parity.py \
	tests/test_sim_errors.py tests/test_sim_scheduler.py tests/test_lessons.py tests/test_trace.py \
	tests/test_resources.py tests/test_cli.py tests/test_check.py tests/test_launch_checks.py tests/test_errors.py
NOCUDA_VENV ?= .venv-nocuda
NOCUDA_PY   := $(NOCUDA_VENV)/$(BIN)/python

$(NOCUDA_VENV)/.installed: pyproject.toml
	test -x $(NOCUDA_PY) || $(PYTHON) -m venv $(NOCUDA_VENV)
	$(NOCUDA_PY) -m pip install -q --upgrade pip
	$(NOCUDA_PY) -c 'import importlib, re, sys; toml = importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "pip._vendor.tomli"); p = toml.load(open("pyproject.toml", "rb"))["project"]; reqs = p["dependencies"] + p["optional-dependencies"]["dev"]; open("$(NOCUDA_VENV)/requirements.txt", "w").write("".join(r + "\n" for r in reqs if re.split("[<>=!~ ;[]", r)[0] != "numba-cuda"))'
	$(NOCUDA_PY) -m pip install -q -r $(NOCUDA_VENV)/requirements.txt
	$(NOCUDA_PY) -m pip install -q --no-deps -e .
	touch $@

test-nocuda: $(NOCUDA_VENV)/.installed
	$(NOCUDA_PY) -c 'import importlib.util as u, sys; sys.exit("numba-cuda is installed in $(NOCUDA_VENV)" if u.find_spec("numba_cuda") else 0)'
	GPUKERNELS_DEVICE=sim $(NOCUDA_PY) -m pytest -q -p no:cacheprovider -n $(WORKERS) --timeout 600 -m 'not slow' \
	  $(if $(RECORD),--record-tier nocuda) $(NOCUDA_TESTS)

demo: $(STAMP)
	$(PY) -m gpukernels demo all

# Every lesson's classroom page into build/classroom/ (git-ignored; the course site copies
# build/classroom/*.html): one self-contained HTML file each, traced on the simulator. cbr takes a minute or two
# and ~2 GB: its fused kernel's register arrays are all in the tracer's event log.
classroom: $(STAMP)
	mkdir -p build/classroom
	GPUKERNELS_DEVICE=sim $(PY) -m gpukernels demo all --html build/classroom

# The notebooks' tools in .venv -- JupyterLab (the notebooks extra) and nbconvert (`jupyter nbconvert --execute`, which
# the README's notebook path uses to run one from the command line) -- then JupyterLab on notebooks/.
# `make notebooks` is the same.
LAB_STAMP := $(VENV)/.installed-lab-$(subst $(comma),-,$(EXTRAS))

$(LAB_STAMP): $(STAMP)
	$(PY) -m pip install -q -e ".[$(EXTRAS),notebooks]" "nbconvert>=7.16,<8"
	touch $@

lab: $(LAB_STAMP)
	$(VENV)/$(BIN)/jupyter lab notebooks

notebooks: lab

# Every figure of every lesson into docs/figures/ and docs/gallery.md (simulator + compiler, no GPU needed;
# performance figures use the newest benchmarks/results/*.json, or a labelled model without one).
plots: $(STAMP)
	GPUKERNELS_DEVICE=sim $(PY) -m gpukernels plots

# The course site into build/site (open build/site/index.html): the notebooks with their committed outputs, docs/*.md,
# the exercises' READMEs, and build/classroom/*.html if they were made. Nothing is executed (tools/build_site.py).
site: classroom
	$(PY) tools/build_site.py

# On a GPU machine, with the machine's own Python (nothing installed: no venv, no download; carry missing wheels as
# the README says): everything measured in one call, into $(OUT) if set (the GPU machine's results folder), else
# benchmarks/results/gpu-sessions/DATE-CARD. GPU_SESSION_ARGS: e.g. --bench matmul tensor_core, --skip fuzz.
gpu-session:
	$(PYTHON) benchmarks/gpu_session.py $(if $(OUT),--out $(OUT)) $(GPU_SESSION_ARGS)

bench: $(STAMP)
	$(PY) -m gpukernels bench --json benchmarks/results/latest.json

# Mutation testing (mutmut; setup.cfg's [mutmut] section, tools/mutate.py): a seeded sample of MUTATE_SAMPLE mutants
# per module, scored per module; MUTATE_SAMPLE=all runs every mutant (an hour or more on 2 cores). tests/MUTATION.md.
MUTATE_SAMPLE ?= 40

mutate: $(STAMP)
	$(PY) tools/mutate.py $(if $(filter all,$(MUTATE_SAMPLE)),--all,--sample $(MUTATE_SAMPLE))

clean:
	rm -rf $(VENV) build *.egg-info
