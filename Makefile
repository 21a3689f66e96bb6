# Two-command setup: `make demo` and `make test` each create .venv on first use
# and install the pinned versions from constraints.txt (torch 2.13.0, CPU wheel).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
# Extra arguments for pytest, e.g. `make test PYTEST_ARGS="-k packaging"`.
PYTEST_ARGS ?=
# The part of the suite `make test-sdist` runs from the unpacked sdist.
SDIST_TESTS ?= tests/test_packaging.py tests/test_architecture.py tests/test_core_anomalies.py tests/test_core_counting.py tests/test_core_tracker.py

.PHONY: venv test conformance lint test-sdist test-versions demo bench api-docs clean

venv: $(STAMP)

# The venv is (re)installed whenever pyproject.toml or constraints.txt changes.
# torch goes in first, on its own and pinned, so no resolver path can pick
# another build (an unpinned torch would pull a multi-GB CUDA wheel).
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -c constraints.txt torch==2.13.0
	$(PIP) install -c constraints.txt -e ".[all,test,lint]"
	touch $@

# pytest exits 5 when it collected no tests; that is a failure here, not a pass.
test: $(STAMP)
	@status=0; $(PY) -m pytest -n 2 -q $(PYTEST_ARGS) || status=$$?; \
	if [ $$status -eq 5 ]; then \
		echo "make test: pytest collected no tests (exit 5); failing" >&2; \
		exit 1; \
	fi; \
	exit $$status

# The big parameter matrices (@pytest.mark.matrix) in full; `make test` runs a seeded sample of them.
conformance: $(STAMP)
	TRACKER_MATRIX=full $(PY) -m pytest -m matrix -n 2 -q $(PYTEST_ARGS)

# ruff (lint and format check) on the tree; mypy --strict on the installed wheel, which it
# reads as users get it (a static checker does not follow an editable install's import hook).
# `build` without --wheel makes the sdist, then the wheel from the unpacked sdist: a wheel built
# in the tree would reuse build/lib, where moved or deleted modules linger.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	rm -rf build/lint && $(PY) -m build --no-isolation --outdir build/lint/dist . >/dev/null
	$(PY) -m pip install --no-deps --no-index --target build/lint/site build/lint/dist/*.whl >/dev/null
	cd build/lint/site && MYPYPATH= ../../../$(VENV)/bin/mypy --config-file ../../../pyproject.toml --strict -p tracker_core

# Build the sdist (and the wheel from it), unpack the sdist, and run SDIST_TESTS from there against
# the installed wheel. PYTHONSAFEPATH keeps the unpacked sources off sys.path.
test-sdist: $(STAMP)
	rm -rf build/sdist && $(PY) -m build --no-isolation --outdir build/sdist/dist . >/dev/null
	tar -xzf build/sdist/dist/tracker_core-*.tar.gz -C build/sdist
	$(PY) -m pip install --no-deps --no-index --target build/sdist/site build/sdist/dist/*.whl >/dev/null
	cd build/sdist/tracker_core-*/ && export PYTHONPATH=$(CURDIR)/build/sdist/site PYTHONSAFEPATH=1 && \
		$(CURDIR)/$(PY) -c "import tracker_core; assert tracker_core.__file__.startswith('$(CURDIR)/build/sdist/site/'), tracker_core.__file__" && \
		$(CURDIR)/$(PY) -m pytest -q -p no:cacheprovider $(SDIST_TESTS)

# Each optional dependency's tests at the lowest and highest version of its declared range, one venv
# per version under build/versions (.ci/test_versions.py lists the versions and the tests).
test-versions: $(STAMP)
	$(PY) .ci/test_versions.py

# docs/api/: one reference page per public module, from its docstrings (tests/test_api_reference.py
# fails when a committed page differs from what this writes).
api-docs: $(STAMP)
	cd tests && ../$(PY) -m helpers.api_reference

demo: $(STAMP)
	$(PY) examples/demo.py

bench: $(STAMP)
	@set -e; found=0; \
	for f in benchmarks/*.py; do \
		[ -e "$$f" ] || continue; \
		found=1; echo "== $$f"; $(PY) "$$f"; \
	done; \
	if [ $$found -eq 0 ]; then echo "make bench: no benchmarks/*.py yet"; fi

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build dist *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
