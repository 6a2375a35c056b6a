# Quick start (Debian 12, as root or with sudo):
#   make bench   # build, then print the CPU timing table (the main job)
#   make test    # build, then run every test (C++, Python, consumer, pip install)
# Each target installs missing Debian packages first (scripts/setup-debian.sh).

PYTHON ?= /usr/bin/python3
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all setup configure build test test-cpp test-python test-pip bench clean

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
	@$(MAKE) --no-print-directory test-cpp test-python test-pip

test-cpp:
	cd $(BUILD) && ctest --output-on-failure

test-python:
	PYTHONPATH=$(CURDIR)/$(BUILD)/python $(PYTHON) -m pytest -q tests/python

# Installs the package with pip into a fresh venv and runs the Python tests
# against that installed copy.
test-pip:
	scripts/check-pip-install.sh $(PYTHON) $(BUILD)/pip-venv

bench: build
	$(BUILD)/syncfree_bench

clean:
	rm -rf $(BUILD)
