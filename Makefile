# Two commands do all the set-up on a fresh machine:
#   make demo   - the whole method end to end on a simulated Jetson Nano (bundled data)
#   make test   - lint + the test suite
# Both create .venv and install what they need. torch is a plain range dependency;
# TORCH says which build to put in the venv first (real users bring their own:
# Jetson or CUDA wheels, e.g. `make TORCH=/path/to/torch-*.whl test`).
PY ?= python3
TORCH ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
TEST_STAMP := $(VENV)/.installed-test-stamp
DOCS_STAMP := $(VENV)/.installed-docs-stamp
# make test also installs the integrations, so their tests run instead of skipping
TEST_EXTRAS ?= all,dev,hf,lightning,tensorboard,fleet,ray
DEMO_OUT ?= demo-out

.PHONY: demo docs test test-slow test-jetpack4 test-jetpack5 test-jetpack6 lint format bench clean device-check

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[all,dev]"
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/pip install -q -e ".[$(TEST_EXTRAS)]"
	touch $(TEST_STAMP)

$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/pip install -q -e ".[docs]"
	touch $(DOCS_STAMP)

venv: $(STAMP)

test: $(TEST_STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples
	$(BIN)/vermin -q -t=3.8- --violations --feature union-types --no-tips src/undercap examples
	$(BIN)/vermin -q -t=3.8- --violations --no-tips tests
	UNDERCAP_WHEEL_TORCH="$(TORCH)" $(BIN)/python -m pytest -q

# The floors users run on (CI runs all three): JetPack 4.6 = Python 3.6 + torch 1.10.2 +
# numpy 1.19, the built wheel running the device side's tests (the server side needs
# Python >= 3.8) and a round trip of artifacts with this venv's Python; JetPack 5 =
# Python 3.8 + torch 2.0.1 + numpy 1.x, the default suite; JetPack 6 = Python 3.10 +
# torch 2.1.0, the built wheel running the demo's `run`. Each keeps its own venv
# (.venv-jp4, .venv-jp5, .venv-jp6).
test-jetpack4: $(STAMP)
	bash scripts/ci/jetpack4.sh

test-jetpack5:
	bash scripts/ci/jetpack5.sh

test-jetpack6: $(STAMP)
	bash scripts/ci/jetpack6.sh

test-slow: $(TEST_STAMP)
	$(BIN)/python -m pytest -q -m slow

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples

format: $(STAMP)
	$(BIN)/ruff format src tests benchmarks examples
	$(BIN)/ruff check --fix src tests benchmarks examples

# The documentation site (docs/, mkdocs.yml) into build/site; --strict fails on any
# warning: a broken link or anchor, a page missing from the nav, a docstring mkdocstrings
# cannot read. tests/test_docs_site.py then reads the built pages for what Markdown loses
# silently: lists run into paragraphs, <placeholders> taken for HTML tags, settings
# classes without their fields, words about how the project was built (a few seconds).
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d build/site
	UNDERCAP_DOCS_SITE=build/site $(BIN)/python -m pytest -q tests/test_docs_site.py
	@echo "site: build/site/index.html"

demo: $(STAMP)
	bash scripts/demo.sh $(DEMO_OUT)

# The device check (docs/guides/device-check.md): one CUDA GPU, read-only, about 5 min,
# one results folder. No venv or install step: the GPU machine brings its own torch and the
# check never needs the network. DRY_RUN=1: the CPU rehearsal on a simulated Jetson Nano.
DEVICE_CHECK_OUT ?= device-check-out
DEVICE_CHECK_ARGS ?=
device-check:
	bash scripts/device-check.sh --out "$(DEVICE_CHECK_OUT)" $(if $(filter 1,$(DRY_RUN)),--dry-run) $(DEVICE_CHECK_ARGS)

clean:
	rm -rf $(VENV) .venv-jp4 .venv-jp5 .venv-jp6 build site $(DEMO_OUT) .pytest_cache .ruff_cache
