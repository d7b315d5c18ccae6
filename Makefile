# make test   - create .venv if missing, install, run the test suite (simulator unless a GPU is chosen)
# make demo   - run every lesson's versions, check them, print the table
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
EXTRAS ?= cu13,dev

.PHONY: test test-nocuda demo install notebooks plots bench clean mutate

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

install: $(VENV)/.installed

test: $(VENV)/.installed
	$(PY) -m pytest -q -n 2 --timeout 600 tests

# Simulator mode without numba-cuda (as on macOS, where it has no wheels): Numba's built-in simulator only.
# Pins come from pyproject.toml; the package goes in with --no-deps so numba-cuda stays out.
NOCUDA_VENV ?= .venv-nocuda
NOCUDA_PY   := $(NOCUDA_VENV)/bin/python
NOCUDA_DEPS := numba numpy greenlet pytest pytest-timeout

$(NOCUDA_VENV)/.installed: pyproject.toml
	test -x $(NOCUDA_PY) || $(PYTHON) -m venv $(NOCUDA_VENV)
	$(NOCUDA_PY) -m pip install -q --upgrade pip
	$(NOCUDA_PY) -m pip install -q $$($(NOCUDA_PY) -c 'import re, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print(*(d for d in p["dependencies"] + p["optional-dependencies"]["dev"] if re.split("[<>=!~ ;[]", d)[0] in "$(NOCUDA_DEPS)".split()))')
	$(NOCUDA_PY) -m pip install -q --no-deps -e .
	touch $@

test-nocuda: $(NOCUDA_VENV)/.installed
	$(NOCUDA_PY) -c 'import importlib.util as u, sys; sys.exit("numba-cuda is installed in $(NOCUDA_VENV)" if u.find_spec("numba_cuda") else 0)'
	GPUKERNELS_DEVICE=sim $(NOCUDA_PY) -m pytest -q -p no:cacheprovider --timeout 300 tests/test_sim_*.py

demo: $(VENV)/.installed
	$(PY) -m gpukernels demo all

notebooks: $(VENV)/.installed
	$(PY) -m pip install -q -e ".[$(EXTRAS),notebooks]"
	$(VENV)/bin/jupyter lab notebooks

# Every figure of every lesson into docs/figures/ and docs/gallery.md (simulator + compiler, no GPU needed;
# performance figures use the newest benchmarks/results/*.json, or a labelled model without one).
plots: $(VENV)/.installed
	GPUKERNELS_DEVICE=sim $(PY) -m gpukernels plots

bench: $(VENV)/.installed
	$(PY) -m gpukernels bench --json benchmarks/results/latest.json

# Mutation testing (mutmut; setup.cfg's [mutmut] section, tools/mutate.py): a seeded sample of MUTATE_SAMPLE mutants
# per module, scored per module; MUTATE_SAMPLE=all runs every mutant (an hour or more on 2 cores). tests/MUTATION.md.
MUTATE_SAMPLE ?= 40

mutate: $(VENV)/.installed
	$(PY) tools/mutate.py $(if $(filter all,$(MUTATE_SAMPLE)),--all,--sample $(MUTATE_SAMPLE))

clean:
	rm -rf $(VENV) build *.egg-info
