# numbatraj: every install step lives here, so a fresh machine with Python 3.11 and pip
# needs nothing else.  `make demo` and `make test` are the quick start.

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
EXTRAS := test,lint,lerobot,remote,hub,importers,cuda,postgres,torch,ray
# the CPU build of torch: what this machine installs without a multi-GB CUDA download
TORCH_PIN := torch==2.13.0
STAMP  := $(VENV)/.installed
# Numba's on-disk kernel cache, kept out of the source tree.  Numba does not notice when a
# kernel's callee in another module changes, so the directory is keyed on a hash of the
# package's sources: any edit starts a fresh cache.
SRC_HASH := $(shell cat $$(find numbatraj -name '*.py' | sort) | sha1sum | cut -c1-12)
export NUMBA_CACHE_DIR ?= $(CURDIR)/build/numba-cache/$(SRC_HASH)

.PHONY: venv demo test test-host test-cuda lint bench soak clean

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_PIN)"
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

# Host tests compile real Numba kernels; device kernels run in a second pytest process under
# the CUDA simulator (the variable must be set before numba is imported).
test: $(STAMP)
	$(PY) -m pytest -m "not cuda" tests
	NUMBA_ENABLE_CUDASIM=1 $(PY) -m pytest -m cuda tests -p no:cacheprovider

lint: $(STAMP)
	$(PY) -m ruff check numbatraj tests bench examples
	$(PY) -m mypy numbatraj

bench: $(STAMP)
	$(PY) -m pip install --quiet -e ".[$(EXTRAS),bench]" || true
	mkdir -p bench/results
	$(PY) -m pytest bench --benchmark-only --benchmark-json=bench/results/benchmarks.json -s

# the full integrity sweeps of issue 15: 3,200 bit flips, every injection point, 20 races
soak: $(STAMP)
	NUMBATRAJ_FLIPS=3200 NUMBATRAJ_FAULT_POINTS=all NUMBATRAJ_RACE_TRIALS=20 \
		$(PY) -m pytest tests/integrity -q -s

clean:
	rm -rf build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .benchmarks
