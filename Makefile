# The two commands of the README: `make demo` and `make test`. Each sets up .venv by itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LOOPDYN_CACHE_DIR ?= $(HOME)/.cache/loopdyn/jax

.PHONY: demo test bench lint clean

# uv installs the same wheels as pip, in parallel: a fresh .venv with the test dependencies took
# 17 s against pip's 31 s, both with empty download caches (2026-11-26, this 2-core machine).
# --compile-bytecode as pip does: without it every process imported JAX, Pinocchio and MuJoCo
# from source (4.9 s instead of 2.2 s), and the suite has dozens of processes.
INSTALL = $(BIN)/pip install --quiet --upgrade pip uv && \
  $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(INSTALL) -e '.[dev]'
	touch $(STAMP) $(DEMO_STAMP)

# The demo needs the package and its runtime dependencies only (no Pinocchio, test tools or
# linters): a few hundred MB instead of 1.3 GB. A venv set up for the tests serves it too.
DEMO_STAMP := $(VENV)/.demo
$(DEMO_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(INSTALL) -e .
	touch $(DEMO_STAMP)

# The command line keeps compiled programs in LOOPDYN_CACHE_DIR (default ~/.cache/loopdyn/jax):
# a second `make demo` loads them instead of compiling; `make demo LOOPDYN_CACHE_DIR=off`: none.
demo: $(DEMO_STAMP)
	LOOPDYN_CACHE_DIR=$(LOOPDYN_CACHE_DIR) $(BIN)/python -m loopdyn.cli demo

# One process per long test file or group of files (a long single process that compiled hundreds
# of XLA programs ran out of memory mappings, vm.max_map_count, and aborted inside XLA's compiler;
# tests/conftest.py now drops JAX's caches before that), the short files four to a process (each
# process pays Python's and JAX's start-up, and files share compiled programs: 4 short files took
# 8 s together, 17 s apart; test_forward and test_recursive 100.6 s together, 106.3 s apart),
# JOBS processes at a time (default: one per core). Exit 5 (no test collected) counts as a pass.
# TESTS picks files (one per process). In LONG, "+" joins the files of one process.
# The long processes start first (seconds in a clean-clone `make test` on the 2-core
# machine, 2026-11-27, 9:00 in all: the inverse files 104, forward + recursive 89, the notebooks
# 83, gradients 74, cpp_peer 54, most of it g++), so the last ones to finish are short and the
# two job slots end together.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
LONG := forward+recursive inverse+inverse_motion+inverse_idle cpp_peer gradients \
  notebooks+notebooks_fit+notebooks_montecarlo montecarlo tree quaternion_joints mjcf+mjcf_coverage \
  simulate fit+fit_cli design+actuators cli+compile_cache+sharding kinematics batched_lapack
GROUPS := $(subst +,.py:tests/test_,$(LONG:%=tests/test_%.py))
FIRST := $(subst :, ,$(GROUPS))
SHORT := $(filter-out $(FIRST),$(wildcard tests/test_*.py))
BATCHES = $(if $(TESTS),printf "%s\n" $(TESTS),{ printf "%s\n" $(GROUPS) | tr : " "; printf "%s\n" $(SHORT) | paste -d" " - - - -; })
test: $(STAMP)
	@$(BATCHES) | xargs -P $(JOBS) -I{} sh -c '\
	  out=$$($(BIN)/python -m pytest -p no:cacheprovider {} 2>&1); code=$$?; \
	  [ $$code -eq 5 ] && code=0; printf "== %s (exit %s)\n%s\n" "{}" $$code "$$out"; exit $$code' \
	  || { echo "make test: a test file failed (see its exit code above)"; exit 1; }

bench: $(STAMP)
	$(BIN)/python benchmarks/tree_dynamics.py
	$(BIN)/python benchmarks/closed_loop.py
	$(BIN)/python benchmarks/inverse.py

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

clean:
	rm -rf $(VENV)
