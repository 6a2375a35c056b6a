# Quick start (Debian 12 or 13, as root or with sudo):
#   make bench   # build against the default torch, then compare syncfree with
#                # the naive and topk samplers and the floor on the CPU: the C++
#                # CLI's headline table, then the same from Python (torch.ops
#                # and the public wrapper, 1 thread and every CPU, fixed cost)
#   make test    # build, C++ tests and the whole Python suite on the default torch
#   make ci      # every leg of tests/legs.txt, then the sanitizers (what CI runs)
# Each target installs what it needs first: Debian packages
# (scripts/setup-debian.sh) and a virtual environment per torch version,
# .venv/torch-<version> (scripts/setup-venv.sh).
#
# One torch at a time: make check TORCH=2.11.0 CUDA=ON WHEEL=1 (build + C++ and
# Python tests, the wheel), make build TORCH=..., make bench-python, make plots,
# make trace. BENCH_ARGS passes flags to the C++ benchmark (see
# bench/syncfree_bench.cpp; in make bench-python and make trace, to
# bench/bench.py), PYBENCH_ARGS to the Python one (bench/bench.py --help) in
# make bench and make bench-python; PYTEST_ARGS to pytest against the build
# tree (make test PYTEST_ARGS='-m "not slow"': its -m replaces the one of TESTS).

# The supported torch versions and what each leg of `make ci` does: one table,
# tests/legs.txt (its first leg is the default torch).
LEGS := tests/legs.txt
leg_field = $(shell awk -v t='$(1)' -v c=$(2) '!/^\#/ && NF && $$1 == t {print $$c}' $(LEGS))
TORCHES := $(shell awk '!/^\#/ && NF {print $$1}' $(LEGS))
DEFAULT_TORCH := $(firstword $(TORCHES))
REHEARSE_TORCH := $(shell awk '!/^\#/ && NF && $$5 == 1 {print $$1}' $(LEGS))
TORCH ?= $(DEFAULT_TORCH)
# Which Python tests (the legs' `tests` column): all, torch (no whole-model
# tests) or fast (no whole-model tests, no slow tests).
TESTS ?= all
MARKERS_all :=
MARKERS_torch := not models
MARKERS_fast := not models and not slow
ifeq ($(filter all torch fast,$(TESTS)),)
$(error TESTS must be all, torch or fast (tests/legs.txt), got '$(TESTS)')
endif
PYTEST_MARKERS = $(MARKERS_$(TESTS))
# pytest's own configuration (markers, flags) is pyproject.toml's; these are
# the run's: two workers, handed one test at a time (the slowest files,
# collected first by tests/python/conftest.py, run side by side on both).
PYTEST_FLAGS := -n 2 --maxschedchunk 1
PYTEST_ARGS ?=
# 1: the torchvision drop-in tests fail instead of skipping without torchvision
# (the default where tests/legs.txt pairs a torchvision with this torch; `make
# ci` sets it for each leg: a value exported by this make would otherwise reach
# every leg's).
SYNCFREE_EXPECT_TORCHVISION ?= $(if $(filter-out -,$(call leg_field,$(TORCH),2)),1,0)
export SYNCFREE_EXPECT_TORCHVISION
VENV ?= .venv/torch-$(TORCH)
PYTHON := $(VENV)/bin/python
# The CUDA operator: OFF (the default: the CPU operator only; nothing here can
# run CUDA code), ON requires it (nvcc, a CUDA build of torch), auto builds it
# when this torch is a CUDA build and nvcc is there.
CUDA ?= OFF
BUILD ?= build/torch-$(TORCH)$(if $(filter OFF,$(CUDA)),,-cuda$(if $(filter auto,$(CUDA)),-auto))
JOBS ?= $(shell nproc)
NVCC ?= /usr/local/cuda/bin/nvcc
NVCC_HOME = $(patsubst %/bin/nvcc,%,$(NVCC))
TORCH_CUDA_ARCH_LIST ?= 9.0
CMAKE_FLAGS ?=
# ccache, where installed when make starts (scripts/setup-debian.sh installs
# it: on a bare machine, `make test`'s first leg does), caches the
# compilations: the wheel check's build (setup.py, the same CMake build)
# reuses the objects of the build tree's, compiled from the same sources with
# the same flags. CMake reads the launchers from the environment when it
# configures a build tree. The GPU check's rehearsal compiles everything all
# the same (CCACHE_RECACHE: its build time stands for a bare GPU machine's)
# and stores the objects: the framework-free CUDA kernels compile with the
# same command against any torch, so the next CUDA leg takes them from the
# cache (not their tests: the rehearsal builds GoogleTest from source, as the
# GPU machine does, and so compiles them with other include paths).
# CCACHE_NOHASHDIR: ccache reads nvcc's -gencode as -g (debug information)
# and so keys each CUDA object by the build directory, which would keep every
# other build tree from its objects; the builds here carry no debug
# information.
ifneq ($(shell command -v ccache 2>/dev/null),)
CMAKE_CXX_COMPILER_LAUNCHER ?= ccache
CMAKE_CUDA_COMPILER_LAUNCHER ?= ccache
CCACHE_NOHASHDIR ?= 1
export CMAKE_CXX_COMPILER_LAUNCHER CMAKE_CUDA_COMPILER_LAUNCHER CCACHE_NOHASHDIR
endif
BENCH_ARGS ?=
PYBENCH_ARGS ?=
FUZZ_SECONDS ?= 60

.PHONY: all setup setup-all configure build check check-cuda-config test ci test-cpp test-python test-wheel test-sanitize \
	rehearse bench bench-python plots trace clean

all: build

setup:
	@scripts/setup-debian.sh
	@scripts/setup-venv.sh $(TORCH) $(VENV)

# The C++ build is configured the LibTorch way: from torch's CMake package
# (CMAKE_PREFIX_PATH), with Python kept out of CMake's search for torch. The
# Python package is staged in $(BUILD)/python all the same, with the Python
# entry syncfree._C compiled for the environment's Python (required here).
$(BUILD)/build.ninja: | setup
	@prefix=$$($(PYTHON) -c 'import torch.utils; print(torch.utils.cmake_prefix_path)') && \
	cuda=$(CUDA) && \
	if [ "$$cuda" = auto ]; then \
	  if $(PYTHON) -c 'import torch, sys; sys.exit(0 if torch.version.cuda else 1)' && [ -x "$(NVCC)" ]; \
	  then cuda=ON; else cuda=OFF; fi; \
	fi && \
	echo "configure: torch $(TORCH), CUDA operator $$cuda" && \
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DCMAKE_PREFIX_PATH="$$prefix" -DCMAKE_DISABLE_FIND_PACKAGE_Python3=ON \
	  -DSYNCFREE_PYTHON_ENTRY=ON -DSYNCFREE_PYTHON="$(abspath $(PYTHON))" \
	  -DSYNCFREE_WITH_CUDA=$$cuda -DCMAKE_CUDA_COMPILER=$(NVCC) \
	  -DTORCH_CUDA_ARCH_LIST="$(TORCH_CUDA_ARCH_LIST)" $(CMAKE_FLAGS)

configure: $(BUILD)/build.ninja

build: configure
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" cmake --build $(BUILD) -j $(JOBS)

# One torch (the default: the first leg of tests/legs.txt): its environment,
# the CPU build, the C++ tests and the whole Python suite against the build
# tree. TESTS=torch or fast (or PYTEST_ARGS) runs fewer tests.
test: setup
	@$(MAKE) --no-print-directory check WHEEL=0
	@echo "make test: torch $(TORCH), passed"

# Every leg of tests/legs.txt (the cuda, wheel, rehearse and tests columns),
# then the sanitizer build of the core. .ci/run runs this.
ci: setup-all
	@set -e; for t in $(TORCHES); do \
	  t0=$$(date +%s); \
	  field() { awk -v t="$$t" -v c="$$1" '!/^#/ && NF && $$1 == t {print $$c}' $(LEGS); }; \
	  cuda=$$(field 3); wheel=$$(field 4); rehearse=$$(field 5); tests=$$(field 6); \
	  vision=$$(if [ "$$(field 2)" = - ]; then echo 0; else echo 1; fi); \
	  echo "=== torch $$t: CUDA operator $$cuda, wheel $$wheel, rehearsal $$rehearse, tests $$tests"; \
	  if [ "$$rehearse" = 1 ]; then \
	    $(MAKE) --no-print-directory rehearse TORCH=$$t || exit 1; \
	    $(MAKE) --no-print-directory test-python TORCH=$$t BUILD=$(REHEARSE_BUILD) TESTS=$$tests \
	      SYNCFREE_EXPECT_TORCHVISION=$$vision || exit 1; \
	  else \
	    $(MAKE) --no-print-directory check TORCH=$$t CUDA=$$cuda WHEEL=$$wheel TESTS=$$tests \
	      SYNCFREE_EXPECT_TORCHVISION=$$vision || exit 1; \
	  fi; \
	  echo "=== torch $$t: passed in $$(( $$(date +%s) - t0 )) s"; \
	done
	@$(MAKE) --no-print-directory test-sanitize

# Every leg's environment first, side by side: mostly downloading and
# unpacking torch, about 1.5 to 2 minutes each one after another on 2 cores.
# Each log is printed once all are done.
setup-all:
	@scripts/setup-debian.sh
	@mkdir -p build; pids=""; for t in $(TORCHES); do \
	  scripts/setup-venv.sh $$t .venv/torch-$$t >build/setup-venv-$$t.log 2>&1 & pids="$$pids $$!"; \
	done; fail=0; for p in $$pids; do wait $$p || fail=1; done; \
	for t in $(TORCHES); do cat build/setup-venv-$$t.log; done; exit $$fail

# One torch: C++ tests (ctest), then the Python tests: with WHEEL=1 against
# the wheel installed in a fresh venv (the same sources and compiled library
# as the build tree's staged package, so the suite runs once, against what
# users install), with WHEEL=0 against the build tree.
WHEEL ?= 0
check: build check-cuda-config
	@$(MAKE) --no-print-directory test-cpp $(if $(filter 1,$(WHEEL)),test-wheel,test-python)

# The GPU check's rehearsal (scripts/device-check.sh --rehearse) on this
# machine, against the GPU machine's torch: tools, GoogleTest from .deps (as
# copied there), configure and build with the CUDA operator, the C++ tests
# that need no GPU; the GPU steps are reported NOT-RUN. Its exit status is
# the verdict; then the script's own bookkeeping (deadline, signals).
REHEARSE_BUILD := build/device-rehearse
REHEARSE_PYTHON := $(CURDIR)/.venv/torch-$(REHEARSE_TORCH)/bin/python
rehearse:
	@$(MAKE) --no-print-directory setup TORCH=$(REHEARSE_TORCH)
	scripts/device-check.sh --prepare
	CCACHE_RECACHE=1 PYTHON=$(REHEARSE_PYTHON) BUILD=$(REHEARSE_BUILD) OUT=$(REHEARSE_BUILD)/out PHASE=all \
	  JOBS=$(JOBS) scripts/device-check.sh --rehearse
	PYTHON=$(REHEARSE_PYTHON) $(REHEARSE_PYTHON) -m pytest -q tests/scripts

# With CUDA=ON (or OFF) the build must be what was asked for: a build
# directory configured otherwise before is an error, not a silent pass.
check-cuda-config: configure
	@built=$$(grep -q '^SYNCFREE_CUDA_OPERATOR:INTERNAL=ON' $(BUILD)/CMakeCache.txt && echo ON || echo OFF); \
	if [ "$(CUDA)" != auto ] && [ "$$built" != "$(CUDA)" ]; then \
	  echo "$(BUILD): CUDA operator $$built, but CUDA=$(CUDA) was asked for: remove $(BUILD) and rerun" >&2; \
	  exit 1; \
	fi

test-cpp:
	cd $(BUILD) && PATH="$(CURDIR)/$(VENV)/bin:$$PATH" ctest --output-on-failure --no-tests=error

# SYNCFREE_EXPECT_CUDA_OPERATOR: the tests fail, instead of skipping, when a
# build that should have the CUDA operator does not register it;
# SYNCFREE_EXPECT_PYTHON_ENTRY=1, when the package lacks its Python entry
# (syncfree._C: required by the build here and by the wheel check).
test-python:
	SYNCFREE_EXPECT_CUDA_OPERATOR=$$(grep -q '^SYNCFREE_CUDA_OPERATOR:INTERNAL=ON' $(BUILD)/CMakeCache.txt && echo 1 || echo 0) \
	SYNCFREE_EXPECT_PYTHON_ENTRY=1 \
	PYTHONPATH=$(CURDIR)/$(BUILD)/python $(PYTHON) -m pytest $(PYTEST_FLAGS) \
	  $(if $(PYTEST_MARKERS),-m "$(PYTEST_MARKERS)") $(PYTEST_ARGS) tests/python

# pip wheel . (with the CUDA operator where this build has it), installed
# into a fresh venv that sees this torch, and the Python tests (PYTEST_MARKERS)
# run against the installed copy. Where this build has the CUDA operator, the wheel is
# built with setup.py's own choice (SYNCFREE_WITH_CUDA unset): it must pick
# the CUDA operator by itself (CUDA torch and nvcc) and register its kernels.
# CUDA_HOME=NVCC_HOME: the toolkit of NVCC, the build tree's (setup.py would otherwise
# take the first nvcc on PATH, and a toolkit path that differs only by a
# symlink, /usr/local/cuda-13.0 for /usr/local/cuda, defeats ccache).
test-wheel:
	cuda=$$(grep -q '^SYNCFREE_CUDA_OPERATOR:INTERNAL=ON' $(BUILD)/CMakeCache.txt && echo 1 || echo 0) && \
	if [ $$cuda = 1 ]; then with_cuda=auto; else with_cuda=0; fi && \
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" SYNCFREE_WITH_CUDA=$$with_cuda SYNCFREE_EXPECT_CUDA_OPERATOR=$$cuda \
	SYNCFREE_PYTHON_ENTRY=1 SYNCFREE_EXPECT_PYTHON_ENTRY=1 \
	CUDA_HOME=$(NVCC_HOME) PYTEST_MARKERS="$(PYTEST_MARKERS)" PYTEST_FLAGS="$(PYTEST_FLAGS)" \
	TORCH_CUDA_ARCH_LIST="$(TORCH_CUDA_ARCH_LIST)" scripts/check-wheel.sh $(VENV) $(BUILD)/wheel

# The core (no torch) under AddressSanitizer + UndefinedBehaviorSanitizer with
# clang, compiled as C++17: its unit tests, the fuzzer over the seed corpus
# (every input once, as regression tests), then FUZZ_SECONDS of fuzzing from a
# copy of the corpus.
SANITIZE_BUILD := build/sanitize
test-sanitize: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" CC=clang CXX=clang++ cmake -S . -B $(SANITIZE_BUILD) -G Ninja \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSYNCFREE_CORE_ONLY=ON -DSYNCFREE_SANITIZE=ON \
	  -DSYNCFREE_FUZZ=ON >/dev/null
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" cmake --build $(SANITIZE_BUILD) -j $(JOBS)
	cd $(SANITIZE_BUILD) && PATH="$(CURDIR)/$(VENV)/bin:$$PATH" ctest --output-on-failure --no-tests=error
	$(SANITIZE_BUILD)/syncfree_fuzz tests/fuzz/corpus/*
	rm -rf $(SANITIZE_BUILD)/corpus && cp -r tests/fuzz/corpus $(SANITIZE_BUILD)/corpus
	$(SANITIZE_BUILD)/syncfree_fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=4096 \
	  -artifact_prefix=$(SANITIZE_BUILD)/ $(SANITIZE_BUILD)/corpus

# bench: first the C++ API, the CLI's headline table (syncfree_bench: a run of
# one to two minutes on 2 CPUs; BENCH_ARGS), then Python, bench/bench.py
# (PYBENCH_ARGS): the same samplers and the floor called from Python, syncfree
# through torch.ops and through the public wrapper, single rows N = 1e3..1e6
# and batches of 32 with N = 1e4, 1e5, on 1 thread and on every CPU, then the
# fixed cost of a call on a tiny input (about a minute on 2 CPUs). bench-full:
# the CLI's whole sweep (syncfree_bench --full: every size and implementation,
# on 1 thread and on every CPU; over ten minutes on 2 CPUs), then the same
# Python run. Results: $(BUILD)/bench-cpu.json, $(BUILD)/bench-python.json.
# The library of the Python package ($(BUILD)/python/syncfree, its .py files
# staged when CMake configures) is the target syncfree, which syncfree_bench
# links; its Python entry, syncfree._C, the target syncfree_python_entry
# (required by this Makefile's builds).
PYBENCH_HEADLINE := --sizes 1e3,1e4,1e5,1e6 --batch-sizes 1e4,1e5 --batch 32 --min-time 0.3
# 1 thread and every CPU (1 alone on one CPU), as syncfree_bench --full.
PYBENCH_THREADS := $(shell n=$$(nproc); if [ "$$n" -gt 1 ]; then echo 1,$$n; else echo 1; fi)
.PHONY: bench-full
bench bench-full: configure
	@echo "=== C++ API (syncfree_bench) ==="
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" cmake --build $(BUILD) -j $(JOBS) --target syncfree syncfree_python_entry syncfree_bench
	$(BUILD)/syncfree_bench $(if $(filter bench-full,$@),--full )--json $(BUILD)/bench-cpu.json $(BENCH_ARGS)
	@echo
	@echo "=== Python (bench/bench.py: torch.ops and the public wrapper) ==="
	PYTHONPATH=$(CURDIR)/$(BUILD)/python $(PYTHON) bench/bench.py $(PYBENCH_HEADLINE) --threads $(PYBENCH_THREADS) \
	  --json $(BUILD)/bench-python.json $(PYBENCH_ARGS)

# The Python benchmark alone, with bench/bench.py's defaults (every
# implementation, torch.compile of the topk sampler included; every CPU).
# PYBENCH_ARGS passes flags to it; BENCH_ARGS too, as before (and as `make
# trace` takes them), before PYBENCH_ARGS.
bench-python: build
	@echo "=== Python (bench/bench.py: torch.ops and the public wrapper) ==="
	PYTHONPATH=$(CURDIR)/$(BUILD)/python $(PYTHON) bench/bench.py \
	  --impls naive,topk,topk-compiled,syncfree,syncfree-python,syncfree-indices,floor,index-select \
	  --json $(BUILD)/bench-python.json $(BENCH_ARGS) $(PYBENCH_ARGS)

# Charts of the last `make bench` run: $(BUILD)/bench-cpu-single.png, -batch.png.
plots: setup
	@test -f $(BUILD)/bench-cpu.json || $(MAKE) --no-print-directory bench
	$(PYTHON) bench/plot.py $(BUILD)/bench-cpu.json $(BUILD)/bench-cpu

# Chrome trace of 3 steps of each sampler at N = 1e5 (open in chrome://tracing or Perfetto).
trace: build
	PYTHONPATH=$(CURDIR)/$(BUILD)/python $(PYTHON) bench/bench.py --trace $(BUILD)/trace.json $(BENCH_ARGS)

clean:
	rm -rf build
