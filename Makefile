# Quick start (Debian 12, as root or with sudo):
#   make bench   # build, then compare syncfree with the naive and topk samplers on the CPU
#   make test    # build, then run every test (C++, Python, consumer, pip install)
# Each target installs missing Debian packages first (scripts/setup-debian.sh).
# More: make bench-python (adds torch.compile where torch has it), make plots,
# make trace. BENCH_ARGS passes flags to the benchmark (see bench/syncfree_bench.cpp).

PYTHON ?= /usr/bin/python3
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

BENCH_ARGS ?=

NVCC ?= /usr/local/cuda/bin/nvcc
FUZZ_SECONDS ?= 60

.PHONY: all setup configure build test test-cpp test-python test-pip test-cuda-build test-sanitize bench \
	bench-python plots trace clean

all: build

setup:
	@scripts/setup-debian.sh

$(BUILD)/build.ninja:
	@$(MAKE) --no-print-directory setup
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DPython3_EXECUTABLE=$(PYTHON) $(CMAKE_FLAGS)

configure: $(BUILD)/build.ninja

build: setup configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	@$(MAKE) --no-print-directory test-cpp test-sanitize test-cuda-build test-python test-pip

test-cpp:
	cd $(BUILD) && ctest --output-on-failure

test-python:
	PYTHONPATH=$(CURDIR)/$(BUILD)/python $(PYTHON) -m pytest -q tests/python

# Installs the package with pip into a fresh venv and runs the Python tests
# against that installed copy.
test-pip:
	scripts/check-pip-install.sh $(PYTHON) $(BUILD)/pip-venv

# The core (no torch) under AddressSanitizer + UndefinedBehaviorSanitizer with
# clang: its unit tests, the fuzzer over the seed corpus (every input once, as
# regression tests), then FUZZ_SECONDS of fuzzing from a copy of the corpus.
test-sanitize:
	CC=clang CXX=clang++ cmake -S . -B $(BUILD)-sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DSYNCFREE_CORE_ONLY=ON -DSYNCFREE_SANITIZE=ON -DSYNCFREE_FUZZ=ON >/dev/null
	cmake --build $(BUILD)-sanitize -j $(JOBS)
	cd $(BUILD)-sanitize && ctest --output-on-failure
	$(BUILD)-sanitize/syncfree_fuzz tests/fuzz/corpus/*
	rm -rf $(BUILD)-sanitize/corpus && cp -r tests/fuzz/corpus $(BUILD)-sanitize/corpus
	$(BUILD)-sanitize/syncfree_fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=4096 \
	  -artifact_prefix=$(BUILD)-sanitize/ $(BUILD)-sanitize/corpus

# Compiles the framework-free CUDA kernels and their standalone tests with
# nvcc (no GPU or CUDA torch needed) and runs them: without a GPU they skip.
test-cuda-build:
	@if [ -x "$(NVCC)" ]; then \
	  cmake -S . -B $(BUILD)-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=$(PYTHON) \
	    -DSYNCFREE_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER=$(NVCC) >/dev/null && \
	  cmake --build $(BUILD)-cuda -j $(JOBS) --target syncfree_cuda_tests && \
	  $(BUILD)-cuda/tests/syncfree_cuda_tests; \
	else \
	  echo "test-cuda-build: SKIPPED: no CUDA compiler at $(NVCC) (set NVCC=...)"; \
	fi

bench: build
	$(BUILD)/syncfree_bench --json $(BUILD)/bench-cpu.json $(BENCH_ARGS)

bench-python: build
	PYTHONPATH=$(CURDIR)/$(BUILD)/python $(PYTHON) bench/bench.py --json $(BUILD)/bench-python.json $(BENCH_ARGS)

# Charts of the last `make bench` run: $(BUILD)/bench-cpu-single.png, -batch.png.
plots:
	@scripts/setup-debian.sh plots
	@test -f $(BUILD)/bench-cpu.json || $(MAKE) --no-print-directory bench
	$(PYTHON) bench/plot.py $(BUILD)/bench-cpu.json $(BUILD)/bench-cpu

# Chrome trace of 3 steps of each sampler at N = 1e5 (open in chrome://tracing or Perfetto).
trace: build
	PYTHONPATH=$(CURDIR)/$(BUILD)/python $(PYTHON) bench/bench.py --trace $(BUILD)/trace.json $(BENCH_ARGS)

clean:
	rm -rf $(BUILD) $(BUILD)-cuda $(BUILD)-sanitize
