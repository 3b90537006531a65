# The two commands of the README: `make demo` and `make test`. Each sets up .venv by itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m loopdyn.cli demo

# One process per test file: a long single process that compiled hundreds of XLA programs
# aborted inside XLA's compiler (each file passes on its own). Exit 5 = all deselected (slow).
test: $(STAMP)
	@status=0; for f in tests/test_*.py; do \
	  $(BIN)/python -m pytest $$f; code=$$?; \
	  if [ $$code -ne 0 ] && [ $$code -ne 5 ]; then status=1; fi; \
	done; exit $$status

bench: $(STAMP)
	$(BIN)/python benchmarks/tree_dynamics.py
	$(BIN)/python benchmarks/closed_loop.py
	$(BIN)/python benchmarks/inverse.py

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

clean:
	rm -rf $(VENV)
