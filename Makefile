# numbatraj: every install step lives here, so a fresh machine with Python 3.11 and pip
# needs nothing else.  `make demo` and `make test` are the quick start.

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
EXTRAS := test,lint,docs,lerobot,remote,hub,importers,cuda,postgres,torch,ray,gym
# the CPU build of torch: what this machine installs without a multi-GB CUDA download
TORCH_PIN := torch==2.13.0
STAMP  := $(VENV)/.installed
# Numba's on-disk kernel cache, kept out of the source tree.  Numba does not notice when a
# kernel's callee in another module changes, so the directory is keyed on a hash of the
# package's sources: any edit starts a fresh cache.
SRC_HASH := $(shell cat $$(find numbatraj -name '*.py' | sort) | sha1sum | cut -c1-12)
export NUMBA_CACHE_DIR ?= $(CURDIR)/build/numba-cache/$(SRC_HASH)

.PHONY: venv demo test test-host test-cuda test-core test-min test-lerobot lint docs bench bench-peers soak clean

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
	$(PY) -m ruff check numbatraj tests bench examples tools
	$(PY) -m mypy numbatraj
# what a user writes against the API: the README example and every example script, strict
	$(PY) tools/readme_example.py > build/readme_example.py
	$(PY) -m mypy --strict --ignore-missing-imports --follow-imports=silent \
	    build/readme_example.py examples

# The API reference (docs/api/, mkdocstrings) and the pages, warnings as errors.
docs: $(STAMP)
	$(PY) -m mkdocs build --strict --site-dir build/site

# `pip install .` with no extras into a fresh venv, then used as a new user would: every
# command's --help, info/validate on a store, StoreReplay, and a command needing an extra
# exits 2 naming it.  numba-cuda must be absent.
CORE_VENV := build/venv-core
test-core:
	rm -rf $(CORE_VENV)
	$(PYTHON) -m venv $(CORE_VENV)
	$(CORE_VENV)/bin/python -m pip install --quiet .
	NUMBA_CACHE_DIR=$(CURDIR)/build/numba-cache-core bash tools/check_core.sh $(CORE_VENV)/bin/python

# The minimum versions: every lower bound in setup.cfg pinned (tools/min_constraints.py),
# then the subset of the host suite marked `min`.
MIN_VENV   := build/venv-min
MIN_EXTRAS := lerobot,hub,importers,remote,gym
test-min:
	rm -rf $(MIN_VENV)
	$(PYTHON) -m venv $(MIN_VENV)
	mkdir -p build && $(PYTHON) tools/min_constraints.py $(MIN_EXTRAS) > build/min-constraints.txt
	$(MIN_VENV)/bin/python -m pip install --quiet -c build/min-constraints.txt \
	    ".[$(MIN_EXTRAS)]" pytest hypothesis
	$(MIN_VENV)/bin/python -m pip check
# The SVT-AV1 tests run too: they encode frames at least 25 pixels wide, since the SVT-AV1
# in av 15.x wheels dies of SIGFPE (16.x and 17.x hang) on narrower frames unless it runs
# single-threaded (docs/install.md).
# The PostgreSQL backend tests stay in the main suite: the postgres extra is not in
# MIN_EXTRAS (and under CI they fail rather than skip without psycopg).
	NUMBA_CACHE_DIR=$(CURDIR)/build/numba-cache-min $(MIN_VENV)/bin/python -m pytest \
	    -m "min and not cuda" -k "not postgres" -p no:cacheprovider -q tests

# Beside LeRobot 0.6.1 in one Python 3.12 environment: numbatraj's lerobot,hub extras go in
# without changing any of LeRobot's versions (constrained to its freeze, then pip check),
# then the LeRobot tests and bench/lerobot_compat_check.py.  Not in CI: it downloads torch.
LEROBOT_PY   ?= $(shell PYENV_VERSION=3.12.1 command -v python3.12 2>/dev/null)
LEROBOT_VENV := build/venv-lerobot
test-lerobot:
	test -f $(LEROBOT_VENV)/.lerobot-installed || { rm -rf $(LEROBOT_VENV) && \
	    PYENV_VERSION=3.12.1 $(LEROBOT_PY) -m venv $(LEROBOT_VENV) && \
	    $(LEROBOT_VENV)/bin/python -m pip install --quiet "lerobot[dataset]==0.6.1" && \
	    touch $(LEROBOT_VENV)/.lerobot-installed; }
	$(LEROBOT_VENV)/bin/python -m pip freeze | grep -v '^numbatraj' > build/lerobot-freeze.txt
	$(LEROBOT_VENV)/bin/python -m pip install --quiet -c build/lerobot-freeze.txt \
	    ".[lerobot,hub]" pytest hypothesis
	$(LEROBOT_VENV)/bin/python -m pip check
	$(LEROBOT_VENV)/bin/python -m pip freeze | grep -v '^numbatraj' \
	    | grep -Fxf - build/lerobot-freeze.txt | cmp -s - build/lerobot-freeze.txt \
	    || { echo "installing numbatraj changed LeRobot's environment"; exit 1; }
	NUMBA_CACHE_DIR=$(CURDIR)/build/numba-cache-lerobot $(LEROBOT_VENV)/bin/python -m pytest \
	    -m "not cuda" -p no:cacheprovider -q tests/lerobot
	$(LEROBOT_VENV)/bin/python bench/lerobot_compat_check.py

# The suite twice, in processes of their own: default threads, then NUMBA_NUM_THREADS=1 (as
# a user who sets it gets; not set_num_threads(1) in-process), each run's idle and loaded
# cases included; then one table and the ratio plots of both (bench/results/ratios.md).
bench: $(STAMP)
	$(PY) -m pip install --quiet -e ".[$(EXTRAS),bench]" || true
	mkdir -p bench/results/default bench/results/threads1
	NUMBATRAJ_BENCH_RESULTS=bench/results/default $(PY) -m pytest bench --benchmark-only \
	    --benchmark-json=bench/results/default/benchmarks.json -s
	NUMBA_NUM_THREADS=1 NUMBATRAJ_BENCH_RESULTS=bench/results/threads1 $(PY) -m pytest bench \
	    --benchmark-only --benchmark-json=bench/results/threads1/benchmarks.json -s
	$(PY) bench/report.py --merge bench/results/default bench/results/threads1

# The peers that need a torch or jax of their own (TorchRL on torch 2.14.1, flashbax on jax,
# CPU): a venv of theirs with numbatraj from this checkout; bench/test_peers.py times them
# beside StoreReplay in one process, bench/torchrl_slice.py writes the SliceSampler figure
# that bench/test_replay.py's sequences table reads.  numbatraj goes in with its torch extra
# (TBB, Numba's threading layer there, as for a user of numbatraj[torch]; torch 2.14.1 stays).
PEERS_VENV := build/torchrl-venv
bench-peers:
	test -f $(PEERS_VENV)/.peers-installed || { rm -rf $(PEERS_VENV) && \
	    python3.11 -m venv $(PEERS_VENV) && \
	    $(PEERS_VENV)/bin/python -m pip install --quiet torch==2.14.1 torchrl flashbax jax && \
	    touch $(PEERS_VENV)/.peers-installed; }
	$(PEERS_VENV)/bin/python -m pip install --quiet -e ".[bench,torch]" pytest pytest-benchmark
	mkdir -p bench/results/peers
	NUMBA_CACHE_DIR=$(CURDIR)/build/numba-cache-peers NUMBATRAJ_BENCH_RESULTS=bench/results/peers \
	    $(PEERS_VENV)/bin/python -m pytest bench/test_peers.py --benchmark-only -s -p no:cacheprovider
	$(PEERS_VENV)/bin/python bench/torchrl_slice.py

# the full integrity sweeps of issue 15: 3,200 bit flips, every injection point, 20 races
soak: $(STAMP)
	NUMBATRAJ_FLIPS=3200 NUMBATRAJ_FAULT_POINTS=all NUMBATRAJ_RACE_TRIALS=20 \
		$(PY) -m pytest tests/integrity -q -s

clean:
	rm -rf build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .benchmarks
