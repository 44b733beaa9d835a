# Two commands do all the set-up on a fresh machine:
#   make demo  — create .venv, install, run the main job on the embedded default (./demo-store)
#   make test  — create .venv, install everything (incl. Ray, llama.cpp, faiss, the embedding model), run the suite
# For maintainers: make test-fast — the suite without Ray, llama.cpp, moto (S3/KMS) or slow tests.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-fast venv venv-full bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Core + dev: enough for the log, the fold with the rules extractor and the demo.
$(VENV)/.core: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

# Everything the test suite exercises. torch==2.13.0 first: a bare torch requirement pulls a multi-GB CUDA build.
# llama-cpp-python compiles llama.cpp here. GGML_NATIVE=OFF builds it for any x86-64 CPU with
# AVX2/FMA/F16C instead of -march=native: on a VM whose CPU advertises AMX, a native build's
# first decode died on an AMX tile load (SIGILL, the whole test run with it), and a natively
# built wheel crashes on any other CPU it is copied to (pip's wheel cache, a cluster's nodes).
$(VENV)/.full: $(VENV)/.core
	$(BIN)/pip install -q "torch==2.13.0"
	CMAKE_ARGS="-DGGML_NATIVE=OFF $(CMAKE_ARGS)" $(BIN)/pip install -q -e ".[dev,ray,llamacpp,openai,search]"
	touch $@

venv: $(VENV)/.core
venv-full: $(VENV)/.full

demo: $(VENV)/.core
	$(BIN)/python -m refold.demo ./demo-store

# Two pytest workers (pytest-xdist), a test module's tests on one worker in file order (its
# module-scoped fixtures, e.g. one store in a bucket, serve them in turn). (--dist loadgroup would
# keep the Ray/moto/llama.cpp tests on one worker, but xdist 3.8 cannot group under pytest 9.2.)
PYTEST := $(BIN)/python -m pytest -q -n 2 --dist loadfile

test: $(VENV)/.full
	$(PYTEST)

# Markers in pyproject.toml; tests/conftest.py marks the tests using the moto, Ray head and llama.cpp fixtures.
test-fast: $(VENV)/.full
	$(PYTEST) -m "not slow and not ray and not llm and not s3"

bench: $(VENV)/.full
	for f in benchmarks/*.py; do $(BIN)/python $$f --quick || exit 1; done

clean:
	rm -rf $(VENV) demo-store .pytest_cache
