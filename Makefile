# bakery: `make demo` then `make test` on a fresh machine.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
BAKERY  := $(BIN)/bakery
STAMP   := $(VENV)/.setup-stamp

.PHONY: setup demo test test-offline test-network lint bench matrix ports-table mutants mutate clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[kernels,dev]'
	touch $(STAMP)

demo: setup
	$(BAKERY) apply dcp2
	$(BAKERY) verify dcp2 --interpret

test: setup
	$(BIN)/python -m pytest

# what the pull-request workflow runs on each Python: everything but the tests that fetch releases
test-offline: setup
	$(BIN)/python -m pytest -m "not network"

test-network: setup
	$(BIN)/python -m pytest -m network

lint: setup
	$(BIN)/ruff check src tests launcher bench
	$(BIN)/ruff format --check src tests launcher bench
	$(BIN)/mypy
	$(BIN)/zizmor --offline --no-progress .github/workflows

# make bench BASELINE=<rev>: also time the warm bake (history rows) and verify (before/after,
# reuse rows) of the code at <rev>
bench: setup
	$(BIN)/python bench/bench.py $(if $(BASELINE),--baseline-rev $(BASELINE))

# each committed port hidden in turn: what `bakery port` proposes (bench/ports.md)
ports-table: setup
	$(BIN)/python bench/port_table.py

# make mutants [MUTANT_TREE=build/dcp2-0.34.0]: the bundled tests against hand-made mutants
# of the baked kernel (launcher/dcp2/mutants.toml); kill rate and every survivor with why.
MUTANT_TREE ?= build/dcp2-0.30.0
mutants: setup
	test -d $(MUTANT_TREE) || $(BAKERY) apply dcp2 --vllm $(notdir $(subst dcp2-,,$(MUTANT_TREE))) --out $(MUTANT_TREE)
	$(BIN)/python -m bakery.verifying.mutants launcher/dcp2 --tree $(MUTANT_TREE)

# make mutate [MUTATE="expect parse"] [MUTATE_ARGS="--sample 40 --budget 600"]: mutmut over
# bakery's own lifecycle modules (bench/mutate.toml), outside CI: one module at a time, in a
# copy under build/mutate/, against only the tests that cover it; the kill rate per module and
# every survivor's diff in build/mutate/<module>/report.md and build/mutate/summary.json.
mutate: setup
	$(BIN)/python bench/mutate.py $(MUTATE) $(MUTATE_ARGS)

matrix: setup
	$(BAKERY) matrix dcp2 --since 0.30.0 --verify --markdown build/matrix.md --json build/matrix.json

clean:
	rm -rf build .pytest_cache
