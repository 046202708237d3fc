# Two entry points: `make demo` and `make test`. Both create .venv themselves.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check --quiet

.PHONY: demo wheel test test-fast test-ray lint typecheck bench bench-peer bench-ledger clean rust-test coverage

$(VENV)/.demo-stamp: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -e ".[gymnasium,cli]"
	touch $@

$(VENV)/.test-stamp: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -e ".[dev,all]"
	touch $@ $(VENV)/.demo-stamp

demo: $(VENV)/.demo-stamp
	$(PY) examples/quickstart.py

# A wheel of this project (distribution rlmesh-py, import package rlmesh) into dist/.
wheel: $(VENV)/.demo-stamp
	$(PY) -m pip wheel --no-deps --disable-pip-version-check --quiet -w dist .
	@ls dist/rlmesh_py-*.whl

test: $(VENV)/.test-stamp
	$(PY) -m ruff check src tests benchmarks examples
	$(PY) -m ruff format --check src tests benchmarks examples tools
	$(PY) -m mypy
	$(PY) -m pytest -q --doctest-modules src/rlmesh -W error::DeprecationWarning \
	  -W "ignore:rlmesh.__build__ is deprecated:DeprecationWarning"  # pytest's collector reads every attribute
	$(MAKE) --no-print-directory rust-test
	@# The Ray stage and the main suite both run and report; a failure of either fails `make test`
	@# at the end, so one stage cannot hide the other. The main suite's summary line comes last.
	@ray=0; $(MAKE) --no-print-directory test-ray || ray=$$?; \
	if [ $$ray -ne 0 ]; then echo "make test: the Ray stage failed (rc $$ray, above); the main suite runs anyway and make test fails at the end"; fi; \
	main=0; echo '$(PY) -m pytest -q -m "not ray"'; $(PY) -m pytest -q -m "not ray" || main=$$?; \
	[ $$ray -eq 0 ] && [ $$main -eq 0 ]

# The inner loop: unit tests only (no servers in subprocesses, no Docker, browser or Ray).
test-fast: $(VENV)/.test-stamp
	HYPOTHESIS_PROFILE=fast $(PY) -m pytest -q -x tests/unit -m "not slow and not e2e and not ray"

# Line coverage per rlmesh subpackage: unit + integration tests (no Ray, no e2e), measured in
# this process only (docs/testing.md). `python tools/coverage_report.py --modules serve` details one.
coverage: $(VENV)/.test-stamp
	$(PY) tools/coverage_report.py --run

# Ray tests (env fleets, distributed evaluation) run in a network namespace whose only
# interface is lo: Ray then advertises 127.0.0.1 and no test can reach another address.
# Needs root and util-linux's unshare; skips otherwise (fails under RLMESH_REQUIRE_ALL=1).
test-ray: $(VENV)/.test-stamp
	@if [ "$$(id -u)" = 0 ] && command -v unshare >/dev/null 2>&1 && command -v ip >/dev/null 2>&1; then \
	  RAY_USAGE_STATS_ENABLED=0 unshare -n sh -c 'ip link set lo up && exec $(PY) -m pytest -q -m ray tests'; \
	elif [ "$$RLMESH_REQUIRE_ALL" = "1" ]; then echo "the Ray tests need root, unshare and ip (RLMESH_REQUIRE_ALL=1)"; exit 1; \
	else echo "not root or no unshare/ip: skipping the Ray tests (make test-ray runs them in a loopback-only namespace)"; fi

# The Rust crate (rust/, std only, offline): unit tests, shared golden vectors, fuzzing.
# Skips without cargo, except under RLMESH_REQUIRE_ALL=1 (CI), where it fails.
rust-test:
	@if command -v cargo >/dev/null 2>&1; then cd rust && cargo test --offline --quiet; \
	elif [ "$$RLMESH_REQUIRE_ALL" = "1" ]; then echo "cargo is required to test rust/ (RLMESH_REQUIRE_ALL=1)"; exit 1; \
	else echo "cargo not found: skipping the Rust crate's tests (rust/)"; fi

lint: $(VENV)/.test-stamp
	$(PY) -m ruff check src tests benchmarks examples
	$(PY) -m ruff format --check src tests benchmarks examples tools

typecheck: $(VENV)/.test-stamp
	$(PY) -m mypy

bench: $(VENV)/.test-stamp
	$(PY) benchmarks/run_all.py

# Where each side's CPU per step goes, against the env's own step and a raw-socket floor
# (benchmarks/step_ledger.py; Meta-World is measured when `metaworld` is installed).
bench-ledger: $(VENV)/.test-stamp
	$(PY) benchmarks/step_ledger.py

# Same-run ratios against upstream rlmesh 0.1.0 (installs it into /tmp/peer).
bench-peer: $(VENV)/.test-stamp
	bash ../shared/bench/setup_peer.sh
	$(PYTHON) ../shared/bench/compare.py --run --a peer=/tmp/peer --b ours=$(abspath $(VENV)) --rounds 2

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
