# The two commands a newcomer needs (README.md):  make demo   and   make test
# Everything they need is installed on first use: the project's venv (.venv) and LocalStack's own venv
# (localstack/.venv, kept apart because LocalStack pins its own boto3).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: demo test test-quick install localstack-install bench clean

demo: $(STAMP)
	$(VENV)/bin/mpcommit demo

test: $(STAMP) localstack-install
	$(PY) -m pytest $(PYTEST_ARGS)

# Without LocalStack: the moto backend only, for a fast loop while editing.
test-quick: $(STAMP)
	MPCOMMIT_TEST_BACKENDS=moto $(PY) -m pytest -m "not spark" $(PYTEST_ARGS)

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[spark,test]'
	touch $(STAMP)

localstack-install:
	bash localstack/install.sh

bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) -m bench.run_all

clean:
	rm -rf $(VENV) localstack/.venv localstack/state .pytest_cache
