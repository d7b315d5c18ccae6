# make test   - create .venv if missing, install, run the test suite (simulator unless a GPU is chosen)
# make demo   - run every lesson's versions, check them, print the table
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
EXTRAS ?= cu13,dev

.PHONY: test demo install notebooks plots bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

install: $(VENV)/.installed

test: $(VENV)/.installed
	$(PY) -m pytest -q -n 2 --timeout 600 tests

demo: $(VENV)/.installed
	$(PY) -m gpukernels demo all

notebooks: $(VENV)/.installed
	$(PY) -m pip install -q -e ".[$(EXTRAS),notebooks]"
	$(VENV)/bin/jupyter lab notebooks

bench: $(VENV)/.installed
	$(PY) -m gpukernels bench --json benchmarks/results/latest.json

clean:
	rm -rf $(VENV) build *.egg-info
